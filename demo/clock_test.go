package demo

import (
	"testing"
	"time"
)

// TestStoryClock: story time runs speed times as fast from start; at
// speed 1 it is the wall clock itself.
func TestStoryClock(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	wall := start
	clock := StoryClock(start, 10, func() time.Time { return wall })
	for _, el := range []time.Duration{0, 100 * time.Millisecond, 6 * time.Second} {
		wall = start.Add(el)
		if got, want := clock().Sub(start), 10*el; got != want {
			t.Errorf("%v of wall time: %v of story time, want %v", el, got, want)
		}
	}
	wall = start.Add(3 * time.Second)
	if got := StoryClock(start, 1, func() time.Time { return wall })(); !got.Equal(wall) {
		t.Errorf("speed 1: %v, want the wall clock's %v", got, wall)
	}
}
