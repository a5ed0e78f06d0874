package syncstore_test

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/syncstore"
)

// TestScraper plays a scraper blocked by a limit of 10 a minute at 800 hits
// a second for 60 s of simulated time, across a window boundary, on a bare
// store and through the wrapper over another, and compares every answer:
// field for field where the cache replays the store's state (fixed window,
// token bucket), and as the edge grades it for the sliding window.
func TestScraper(t *testing.T) {
	const rate, seconds = 800, 60
	cases := []struct {
		name  string
		rule  limit.Rule
		exact bool // the cached Results equal the store's field for field
		opts  syncstore.Options
	}{
		{"fixed_window", edgeRule(limit.FixedWindow, 10, time.Minute), true, syncstore.Options{}},
		{"fixed_window_batched", edgeRule(limit.FixedWindow, 10, time.Minute), true, syncstore.Options{MaxError: 0.5, Nodes: 1}},
		{"token_bucket", edgeRule(limit.TokenBucket, 10, time.Minute), true, syncstore.Options{}},
		{"sliding_window", edgeRule(limit.SlidingWindow, 10, time.Minute), false, syncstore.Options{}},
		{"sliding_window_batched", edgeRule(limit.SlidingWindow, 10, time.Minute), false, syncstore.Options{MaxError: 0.5, Nodes: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bare := newMem(t)
			shared := newCounting(t)
			opts := c.opts
			opts.Store, opts.FlushInterval = shared, -1
			s := newSync(t, opts)
			k := addrKey("anonymous:/search", 7)
			start := base.Add(30 * time.Second)
			var outcomes [3]int
			for i := range rate * seconds {
				now := start.Add(time.Duration(i) * time.Second / rate)
				want, _ := bare.Take(t.Context(), k, c.rule, now, 1)
				got, err := s.Take(t.Context(), k, c.rule, now, 1)
				if err != nil {
					t.Fatalf("hit %d: %v", i, err)
				}
				if g, w := grade(c.rule, got), grade(c.rule, want); g != w {
					t.Fatalf("hit %d at +%v: graded %d (%+v), the bare store %d (%+v)", i, now.Sub(start), g, got, w, want)
				}
				if c.exact && got != want {
					t.Fatalf("hit %d at +%v: %+v, the bare store %+v", i, now.Sub(start), got, want)
				}
				outcomes[grade(c.rule, want)]++
			}
			hits := float64(rate * seconds)
			perHit := float64(shared.writes.Load()) / hits
			st := s.Stats()
			t.Logf("%d hits (allow %d, challenge %d, block %d): %d store writes, %.5f a hit; %d cache hits",
				rate*seconds, outcomes[allow], outcomes[challenge], outcomes[block], shared.writes.Load(), perHit, st.CacheHits)
			if perHit > 0.05 {
				t.Errorf("%.4f store writes a hit, want at most 0.05", perHit)
			}
			if outcomes[block] == 0 {
				t.Errorf("the scraper was never blocked: the scenario tests nothing")
			}
		})
	}
}

// TestNoCacheWithoutMaxCount checks that a rule whose refused hits count
// without bound is never cached: the wrapper cannot tell a challenge from a
// block.
func TestNoCacheWithoutMaxCount(t *testing.T) {
	shared := newCounting(t)
	s := newSync(t, syncstore.Options{Store: shared, FlushInterval: -1})
	r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Minute}
	for i := range 100 {
		if _, err := s.Take(t.Context(), addrKey("r", 1), r, base.Add(time.Duration(i)*time.Millisecond), 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := shared.writes.Load(); got != 100 {
		t.Errorf("100 hits, no MaxCount: %d store writes, want 100", got)
	}
}
