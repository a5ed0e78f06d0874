package main

import (
	"bytes"
	"testing"
	"time"
)

func TestRenderProgress(t *testing.T) {
	wm := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	cases := []struct {
		read, total uint64
		want        string
	}{
		{0, 100, "aggregate: [..........]   0% 7 events, watermark 2026-12-01T03:00:00Z"},
		{45, 100, "aggregate: [####......]  45% 7 events, watermark 2026-12-01T03:00:00Z"},
		{150, 100, "aggregate: [##########] 100% 7 events, watermark 2026-12-01T03:00:00Z"},
	}
	for _, c := range cases {
		if got := renderProgress(c.read, c.total, 7, wm, 10); got != c.want {
			t.Errorf("%d of %d:\n got %q\nwant %q", c.read, c.total, got, c.want)
		}
	}
}

// TestProgressBarNotOnAPipe: output that is not a terminal gets no bar.
func TestProgressBarNotOnAPipe(t *testing.T) {
	if p := newProgressBar(&bytes.Buffer{}, t.TempDir()); p != nil {
		t.Fatal("a bar on a buffer")
	}
	var p *progressBar
	p.update(time.Now(), 1, 1, time.Time{}, true) // a nil bar draws nothing
}
