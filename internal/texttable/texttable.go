// Package texttable lines up the columns of a table for people reading
// it on a terminal, as text/tabwriter does, but by the columns each cell
// takes on screen (uniseg.StringWidth: a CJK character or an emoji takes
// two, a combining mark none) rather than by its characters, so that a
// user id or a path in any script cannot shift the columns after it.
//
// Write a table as lines of cells, each cell but a line's last ended by a
// tab; Flush writes it with each column as wide as its widest cell plus
// the padding, the last cell of each line as it is. A column keeps the
// width of the flushes before, widening when a wider cell comes, so that
// a table written in parts (followed as it grows, or too long to hold
// whole) stays lined up as far as its parts allow. Cells must hold no
// tab, newline or other control character (quote or escape them first):
// those are not drawn as their width says.
package texttable

import (
	"bytes"
	"io"
	"strings"

	"github.com/rivo/uniseg"
)

// Writer buffers a table until Flush. It is not safe for concurrent use.
type Writer struct {
	w       io.Writer
	padding int
	buf     []byte
	widths  []int // of each column, so far
}

// NewWriter returns a Writer that writes to w, with padding spaces after
// the widest cell of each column.
func NewWriter(w io.Writer, padding int) *Writer {
	return &Writer{w: w, padding: padding}
}

// Write adds p to the table. It never fails.
func (t *Writer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	return len(p), nil
}

// Flush writes the table added since the last Flush, its columns lined up.
func (t *Writer) Flush() error {
	if len(t.buf) == 0 {
		return nil
	}
	var rows [][]string
	widths := t.widths
	for line := range strings.Lines(string(t.buf)) {
		cells := strings.Split(line, "\t")
		for i, c := range cells[:len(cells)-1] { // the last cell is no column's
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], uniseg.StringWidth(c))
		}
		rows = append(rows, cells)
	}
	t.buf, t.widths = t.buf[:0], widths
	var out bytes.Buffer
	for _, cells := range rows {
		last := len(cells) - 1
		for i, c := range cells[:last] {
			out.WriteString(c)
			out.WriteString(strings.Repeat(" ", widths[i]-uniseg.StringWidth(c)+t.padding))
		}
		out.WriteString(cells[last])
	}
	_, err := t.w.Write(out.Bytes())
	return err
}
