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
	label string // the command, before the bar
	total uint64 // bytes of the log's segments when reading started (or the units of work)
	every time.Duration
	last  time.Time
}

// newProgressBar returns a bar for the log in dir drawn on w, or nil when
// w is not a terminal (a file or a pipe gets the plain progress lines) or
// the log is empty.
func newProgressBar(w io.Writer, dir string) *progressBar {
	if !isTerminal(w) {
		return nil
	}
	return newBar(w, "aggregate", logBytes(dir))
}

// newBar returns a bar labelled label for total units of work drawn on w,
// or nil when w is not a terminal or total is 0.
func newBar(w io.Writer, label string, total uint64) *progressBar {
	if total == 0 || !isTerminal(w) {
		return nil
	}
	return &progressBar{w: w, label: label, total: total, every: 200 * time.Millisecond}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
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
	if p == nil {
		return
	}
	p.draw(now, read, done, func() string { return eventsAndWatermark(events, watermark) })
}

// draw redraws the bar at most every 200 ms, with detail after it; done
// draws it a last time and ends the line.
func (p *progressBar) draw(now time.Time, read uint64, done bool, detail func() string) {
	if p == nil || (!done && now.Sub(p.last) < p.every) {
		return
	}
	p.last = now
	if done {
		read = p.total
	}
	fmt.Fprint(p.w, "\r"+renderBar(p.label, read, p.total, 30)+" "+detail())
	if done {
		fmt.Fprintln(p.w)
	}
}

// renderProgress is the bar's text: read of total bytes as a bar of width
// cells and a percentage (read counts payloads, so it stays a little under
// the segments' size; the last drawing says 100 %), the events rolled up and
// the watermark.
func renderProgress(read, total, events uint64, watermark time.Time, width int) string {
	return renderBar("aggregate", read, total, width) + " " + eventsAndWatermark(events, watermark)
}

// renderBar is label, read of total as a bar of width cells, and a
// percentage.
func renderBar(label string, read, total uint64, width int) string {
	frac := 1.0
	if total > 0 && read < total {
		frac = float64(read) / float64(total)
	}
	full := int(frac * float64(width))
	return fmt.Sprintf("%s: [%s%s] %3.0f%%", label, strings.Repeat("#", full), strings.Repeat(".", width-full), 100*frac)
}

func eventsAndWatermark(events uint64, watermark time.Time) string {
	wm := "-"
	if !watermark.IsZero() {
		wm = watermark.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%d events, watermark %s", events, wm)
}
