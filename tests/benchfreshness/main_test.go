package main

import (
	"testing"
	"time"
)

// A decision is timed by the first document of its partition's window
// that holds its position: the window's own, else the correction that
// carried it; one in no document, or in another partition's, is missing.
func TestWritten(t *testing.T) {
	t0 := time.Unix(100, 0)
	w := window{"shardId-000000000001", t0.UnixNano()}
	other := window{"shardId-000000000002", t0.UnixNano()}
	docs := map[window][]doc{
		w:     {{to: offset(9), seen: t0.Add(2 * time.Second)}, {to: offset(14), seen: t0.Add(5 * time.Second)}},
		other: {{to: offset(30), seen: t0.Add(time.Second)}},
	}
	for _, c := range []struct {
		w    window
		pos  uint64
		want time.Duration // after t0; -1: missing
	}{
		{w, 0, 2 * time.Second},
		{w, 9, 2 * time.Second},
		{w, 10, 5 * time.Second}, // late: the correction
		{w, 14, 5 * time.Second},
		{w, 15, -1}, // in no document yet
		{window{w.partition, t0.Add(time.Second).UnixNano()}, 3, -1},
		{other, 12, time.Second},
	} {
		seen, ok := written(docs, c.w, c.pos)
		if got := seen.Sub(t0); ok != (c.want >= 0) || ok && got != c.want {
			t.Errorf("written(%v, %d) = %v after t0, %v; want %v", c.w, c.pos, got, ok, c.want)
		}
	}
}

// quantiles takes the p50 and p99 by rank, whatever the order given.
func TestQuantiles(t *testing.T) {
	var lat []time.Duration
	for i := 200; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	if got, want := quantiles(lat), "p50 101ms, p99 199ms, max 200ms (200 decisions)"; got != want {
		t.Errorf("quantiles = %q, want %q", got, want)
	}
	if lat[0] != 200*time.Millisecond {
		t.Error("quantiles sorted its argument in place")
	}
	if got := quantiles(nil); got != "none" {
		t.Errorf("quantiles(nil) = %q", got)
	}
}
