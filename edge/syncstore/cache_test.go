package syncstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/memstore"
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

// serverClock is a shared store that counts by its own clock, as Redis
// under the server clock does: it ignores the now it is given and counts
// at that now plus skew. It counts its calls.
type serverClock struct {
	inner *memstore.Store
	skew  time.Duration
	calls atomic.Int64
}

func (s *serverClock) Take(ctx context.Context, key limit.Key, rule limit.Rule, now time.Time, n int64) (limit.Result, error) {
	s.calls.Add(1)
	return s.inner.Take(ctx, key, rule, now.Add(s.skew), n)
}

// TestServerClock plays a scraper through the wrapper over a store whose
// clock is ahead of the caller's or behind it, and grades every answer
// against a bare store at the server's clock: the cache follows the
// store's windows, not the caller's. It also checks that TakeRemote says
// which answers came from the store.
func TestServerClock(t *testing.T) {
	const rate, seconds = 50, 20
	rules := []limit.Rule{
		edgeRule(limit.FixedWindow, 10, 5*time.Second),
		edgeRule(limit.SlidingWindow, 10, 5*time.Second),
		edgeRule(limit.TokenBucket, 10, 5*time.Second),
	}
	for _, skew := range []time.Duration{2 * time.Second, -2 * time.Second, 1500 * time.Millisecond} {
		for _, r := range rules {
			for _, opts := range []syncstore.Options{{}, {MaxError: 0.5, Nodes: 1}} {
				t.Run(fmt.Sprintf("%v_%v_%v", skew, r.Algorithm, opts.MaxError), func(t *testing.T) {
					bare := newMem(t)
					shared := &serverClock{inner: newMem(t), skew: skew}
					opts.Store, opts.FlushInterval = shared, -1
					s := newSync(t, opts)
					k := addrKey("anonymous:/search", 7)
					start := base.Add(300 * time.Millisecond)
					cached := 0
					for i := range rate * seconds {
						now := start.Add(time.Duration(i) * time.Second / rate)
						want, _ := bare.Take(t.Context(), k, r, now.Add(skew), 1)
						calls := shared.calls.Load()
						got, remote, err := s.TakeRemote(t.Context(), k, r, now, 1)
						if err != nil {
							t.Fatalf("hit %d: %v", i, err)
						}
						if g, w := grade(r, got), grade(r, want); g != w {
							t.Fatalf("hit %d at +%v (server +%v): graded %d (%+v), the bare store at the server's clock %d (%+v)",
								i, now.Sub(start), now.Add(skew).Sub(start), g, got, w, want)
						}
						if called := shared.calls.Load() > calls; remote != called {
							t.Fatalf("hit %d: TakeRemote says remote %v, the store was called: %v", i, remote, called)
						}
						if !remote {
							cached++
						}
					}
					if cached == 0 {
						t.Errorf("no hit answered without the store: the scenario tests nothing")
					}
				})
			}
		}
	}
}
