package backoff

import (
	"context"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"
)

func TestBound(t *testing.T) {
	const ms = time.Millisecond
	cases := []struct {
		base, max time.Duration
		failures  int
		want      time.Duration
	}{
		{50 * ms, 5 * time.Second, 1, 50 * ms},
		{50 * ms, 5 * time.Second, 2, 100 * ms},
		{50 * ms, 5 * time.Second, 7, 3200 * ms},
		{50 * ms, 5 * time.Second, 8, 5 * time.Second}, // 6.4s capped
		{50 * ms, 5 * time.Second, 32, 5 * time.Second},
		{50 * ms, 5 * time.Second, 33, 5 * time.Second}, // past the shift guard
		{50 * ms, 5 * time.Second, 1000, 5 * time.Second},
		{time.Duration(math.MaxInt64 / 2), time.Duration(math.MaxInt64), 3, time.Duration(math.MaxInt64)}, // overflow
		{50 * ms, 5 * time.Second, 0, 50 * ms},                                                            // fewer than one failure counts as one
		{50 * ms, 5 * time.Second, -3, 50 * ms},
		{0, 5 * time.Second, 1, 5 * time.Second}, // no base: the cap
		{50 * ms, 0, 1, 0},
		{50 * ms, -time.Second, 1, 0},
		{0, 0, 4, 0},
	}
	for _, c := range cases {
		if got := Bound(c.base, c.max, c.failures); got != c.want {
			t.Errorf("Bound(%v, %v, %d) = %v, want %v", c.base, c.max, c.failures, got, c.want)
		}
	}
}

func TestFullJitter(t *testing.T) {
	top := func(n int64) int64 { return n }
	bottom := func(int64) int64 { return 0 }
	if got := FullJitter(100*time.Millisecond, time.Second, 3, top); got != 400*time.Millisecond {
		t.Errorf("FullJitter at the top = %v, want 400ms", got)
	}
	if got := FullJitter(100*time.Millisecond, time.Second, 3, bottom); got != 0 {
		t.Errorf("FullJitter at the bottom = %v, want 0", got)
	}
	called := false
	if got := FullJitter(time.Millisecond, 0, 1, func(int64) int64 { called = true; return 1 }); got != 0 || called {
		t.Errorf("FullJitter with no room = %v (jitter called: %v), want 0 without a draw", got, called)
	}
}

func TestUniformStaysInRange(t *testing.T) {
	seen := map[int64]bool{}
	for range 1000 {
		v := Uniform(3)
		if v < 0 || v > 3 {
			t.Fatalf("Uniform(3) = %d, outside [0, 3]", v)
		}
		seen[v] = true
	}
	if len(seen) != 4 {
		t.Errorf("Uniform(3) drew %v in 1000 draws, want each of 0..3", seen)
	}
	if v := Uniform(0); v != 0 {
		t.Errorf("Uniform(0) = %d, want 0", v)
	}
}

func TestFullJitterStaysInBounds(t *testing.T) {
	for failures := range 40 {
		bound := Bound(10*time.Millisecond, 2*time.Second, failures)
		for range 50 {
			if d := FullJitter(10*time.Millisecond, 2*time.Second, failures, Uniform); d < 0 || d > bound {
				t.Fatalf("FullJitter after %d failures = %v, outside [0, %v]", failures, d, bound)
			}
		}
	}
}

func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		if err := Sleep(ctx, 3*time.Second); err != nil || time.Since(start) != 3*time.Second {
			t.Errorf("Sleep(3s) = %v after %v, want nil after 3s", err, time.Since(start))
		}
		start = time.Now()
		if err := Sleep(ctx, 0); err != nil || time.Since(start) != 0 {
			t.Errorf("Sleep(0) = %v after %v, want nil at once", err, time.Since(start))
		}
		time.AfterFunc(time.Second, cancel)
		start = time.Now()
		if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) || time.Since(start) != time.Second {
			t.Errorf("Sleep(1h) cancelled after 1s = %v after %v, want context.Canceled after 1s", err, time.Since(start))
		}
		if err := Sleep(ctx, -time.Second); !errors.Is(err, context.Canceled) {
			t.Errorf("Sleep(-1s) on a done context = %v, want context.Canceled", err)
		}
	})
}
