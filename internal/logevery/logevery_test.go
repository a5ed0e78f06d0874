package logevery

import (
	"testing"
	"time"
)

// TestGate passes the first line of each interval with the count held
// back before it.
func TestGate(t *testing.T) {
	g := New(10 * time.Second)
	t0 := time.Unix(1_000_000, 0)
	for i, c := range []struct {
		at         time.Duration
		ok         bool
		suppressed uint64
	}{
		{0, true, 0},
		{time.Second, false, 0},
		{9 * time.Second, false, 0},
		{10 * time.Second, true, 2},
		{11 * time.Second, false, 0},
		{25 * time.Second, true, 1},
	} {
		if ok, n := g.Allow(t0.Add(c.at)); ok != c.ok || n != c.suppressed {
			t.Errorf("line %d at +%v: %v, %d; want %v, %d", i, c.at, ok, n, c.ok, c.suppressed)
		}
	}
}
