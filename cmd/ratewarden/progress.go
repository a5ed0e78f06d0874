package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// progressBar draws one line on a terminal, redrawn in place, while a
// backlog is read: the share of the log's bytes read so far, events and the
// watermark. It is not safe for concurrent use.
type progressBar struct {
	w     io.Writer
	total uint64 // bytes of the log's segments when reading started
	every time.Duration
	last  time.Time
}

// newProgressBar returns a bar for the log in dir drawn on w, or nil when
// w is not a terminal (a file or a pipe gets the plain progress lines) or
// the log is empty.
func newProgressBar(w io.Writer, dir string) *progressBar {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return nil
	}
	total := logBytes(dir)
	if total == 0 {
		return nil
	}
	return &progressBar{w: w, total: total, every: 200 * time.Millisecond}
}

// logBytes is the size of the segment files in dir.
func logBytes(dir string) uint64 {
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	var n uint64
	for _, s := range segs {
		if fi, err := os.Stat(s); err == nil {
			n += uint64(fi.Size())
		}
	}
	return n
}

// update redraws the bar at most every 200 ms; done draws it a last time
// and ends the line.
func (p *progressBar) update(now time.Time, read, events uint64, watermark time.Time, done bool) {
	if p == nil || (!done && now.Sub(p.last) < p.every) {
		return
	}
	p.last = now
	if done {
		read = p.total
	}
	fmt.Fprint(p.w, "\r"+renderProgress(read, p.total, events, watermark, 30))
	if done {
		fmt.Fprintln(p.w)
	}
}

// renderProgress is the bar's text: read of total bytes as a bar of width
// cells and a percentage (read counts payloads, so it stays a little under
// the segments' size; the last drawing says 100 %), the events rolled up and
// the watermark.
func renderProgress(read, total, events uint64, watermark time.Time, width int) string {
	frac := 1.0
	if total > 0 && read < total {
		frac = float64(read) / float64(total)
	}
	full := int(frac * float64(width))
	wm := "-"
	if !watermark.IsZero() {
		wm = watermark.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("aggregate: [%s%s] %3.0f%% %d events, watermark %s",
		strings.Repeat("#", full), strings.Repeat(".", width-full), 100*frac, events, wm)
}
