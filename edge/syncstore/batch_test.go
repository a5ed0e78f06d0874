package syncstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/syncstore"
)

// boundCase is one key hammered by hits on several nodes, with MaxError 0.01:
// at most limit + 1 % of it may be admitted in the window, and at least the
// limit.
type boundCase struct {
	name  string
	rule  limit.Rule
	nodes int
}

var boundCases = []boundCase{
	{"fixed_4_nodes", limit.Rule{Algorithm: limit.FixedWindow, Limit: 10_000, Window: time.Minute}, 4},
	{"fixed_4_nodes_max_count", edgeRule(limit.FixedWindow, 10_000, time.Minute), 4},
	{"fixed_16_nodes", limit.Rule{Algorithm: limit.FixedWindow, Limit: 10_000, Window: time.Minute}, 16},
	{"sliding_4_nodes", limit.Rule{Algorithm: limit.SlidingWindow, Limit: 10_000, Window: time.Minute}, 4},
}

// slackOf is the documented per-node slack ⌊⌊e·L⌋ ÷ N⌋.
func slackOf(maxError float64, r limit.Rule, n int) int64 {
	return int64(maxError*float64(r.Limit)) / int64(n)
}

// checkBound checks the admitted count against [L, L + N·s] and logs the
// writes a hit.
func checkBound(t *testing.T, c boundCase, admitted, hits, writes int64) {
	t.Helper()
	s := slackOf(0.01, c.rule, c.nodes)
	hi := c.rule.Limit + int64(c.nodes)*s
	t.Logf("%d hits on %d nodes: %d admitted (limit %d, bound %d, over %d); %d store writes, %.3f a hit",
		hits, c.nodes, admitted, c.rule.Limit, hi, admitted-c.rule.Limit, writes, float64(writes)/float64(hits))
	if admitted > hi || admitted < c.rule.Limit {
		t.Errorf("%d admitted, want %d to %d", admitted, c.rule.Limit, hi)
	}
}

// TestBoundInterleaved plays the hits of the nodes in seeded random orders,
// with flushes at random, in one goroutine: each node's known count goes
// stale while the others move on.
func TestBoundInterleaved(t *testing.T) {
	for _, c := range boundCases {
		t.Run(c.name, func(t *testing.T) {
			for seed := range uint64(4) {
				shared := newCounting(t)
				ns := nodes(t, c.nodes, syncstore.Options{Store: shared, MaxError: 0.01, Nodes: c.nodes, FlushInterval: -1})
				rng := rand.New(rand.NewPCG(seed, 1))
				k := addrKey("r", 1)
				now := base.Add(10 * time.Second)
				const hits = 3 * 10_000
				var admitted, writesBelow int64
				for i := range hits {
					// Skewed: node 0 takes half of the hits.
					node := ns[0]
					if rng.IntN(2) == 0 {
						node = ns[rng.IntN(len(ns))]
					}
					res, err := node.Take(t.Context(), k, c.rule, now.Add(time.Duration(i)*time.Microsecond), 1)
					if err != nil {
						t.Fatal(err)
					}
					if c.rule.Allowed(res) {
						admitted++
					} else if writesBelow == 0 {
						writesBelow = shared.writes.Load()
						t.Logf("up to the first refusal: %d hits, %d store writes, %.4f a hit", i+1, writesBelow, float64(writesBelow)/float64(i+1))
					}
					if rng.IntN(300) == 0 {
						if err := ns[rng.IntN(len(ns))].Flush(t.Context(), now); err != nil {
							t.Fatal(err)
						}
					}
				}
				checkBound(t, c, admitted, hits, shared.writes.Load())
			}
		})
	}
}

// TestBoundConcurrent hammers one key from many goroutines on each node.
func TestBoundConcurrent(t *testing.T) {
	for _, c := range boundCases {
		t.Run(c.name, func(t *testing.T) {
			shared := newCounting(t)
			ns := nodes(t, c.nodes, syncstore.Options{Store: shared, MaxError: 0.01, Nodes: c.nodes, FlushInterval: -1})
			k := addrKey("r", 1)
			now := base.Add(10 * time.Second)
			const total, workers = 30_000, 4
			perWorker := total / (workers * c.nodes)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for _, node := range ns {
				for range workers {
					wg.Go(func() {
						for range perWorker {
							res, err := node.Take(context.Background(), k, c.rule, now, 1)
							if err != nil {
								t.Error(err)
								return
							}
							if c.rule.Allowed(res) {
								admitted.Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			hits := int64(perWorker * workers * c.nodes)
			checkBound(t, c, admitted.Load(), hits, shared.writes.Load())
			var dropped uint64
			for _, node := range ns {
				if err := node.Flush(t.Context(), now); err != nil {
					t.Fatal(err)
				}
				dropped += node.Stats().Dropped
			}
			// Every hit reached the store, up to MaxCount.
			want := hits
			if c.rule.MaxCount > 0 {
				want = min(hits, c.rule.MaxCount)
			}
			if res, _ := shared.inner.Take(t.Context(), k, c.rule, now, 0); res.Count != want {
				t.Errorf("after the last flush the store counts %d, want %d (dropped %d)", res.Count, want, dropped)
			}
		})
	}
}

// TestBoundStaleNodes builds the sequential worst case: every node but one
// holds s-1 hits admitted against a count learned at the window's start,
// while the last node takes the key to its limit at the store. The stale
// nodes' hits are over-admitted: (N-1)(s-1), within the bound N·s.
func TestBoundStaleNodes(t *testing.T) {
	const nNodes = 4
	rule := limit.Rule{Algorithm: limit.FixedWindow, Limit: 10_000, Window: time.Minute}
	s := slackOf(0.01, rule, nNodes)
	shared := newCounting(t)
	ns := nodes(t, nNodes, syncstore.Options{Store: shared, MaxError: 0.01, Nodes: nNodes, FlushInterval: -1})
	k := addrKey("r", 1)
	var admitted int64
	take := func(node *syncstore.Store) {
		t.Helper()
		res, err := node.Take(t.Context(), k, rule, base, 1)
		if err != nil {
			t.Fatal(err)
		}
		if rule.Allowed(res) {
			admitted++
		}
	}
	for _, node := range ns[1:] {
		for range s { // one at the store, s-1 pending
			take(node)
		}
	}
	for range 2 * rule.Limit {
		take(ns[0])
	}
	want := rule.Limit + (nNodes-1)*(s-1)
	if admitted != want || admitted > rule.Limit+nNodes*s {
		t.Errorf("%d admitted, want %d (bound %d)", admitted, want, rule.Limit+nNodes*s)
	}
}

// TestExactRules checks that rules counted exactly admit exactly the limit:
// by Options.Exact, and by a slack of 0.
func TestExactRules(t *testing.T) {
	cases := []struct {
		name string
		rule limit.Rule
		key  string
	}{
		{"exact_func", limit.Rule{Algorithm: limit.FixedWindow, Limit: 10_000, Window: time.Minute}, "exact"},
		{"slack_zero", limit.Rule{Algorithm: limit.FixedWindow, Limit: 399, Window: time.Minute}, "batched"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			shared := newCounting(t)
			ns := nodes(t, 4, syncstore.Options{Store: shared, MaxError: 0.01, Nodes: 4, FlushInterval: -1,
				Exact: func(rule string) bool { return rule == "exact" }})
			k := limit.Key{Rule: c.key, User: "alice"}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			hits := 2 * c.rule.Limit
			for _, node := range ns {
				for range 4 {
					wg.Go(func() {
						for range hits / 16 {
							res, err := node.Take(context.Background(), k, c.rule, base, 1)
							if err != nil {
								t.Error(err)
								return
							}
							if c.rule.Allowed(res) {
								admitted.Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			if got := admitted.Load(); got != c.rule.Limit {
				t.Errorf("%d admitted, want exactly %d", got, c.rule.Limit)
			}
			for _, node := range ns {
				if st := node.Stats(); st.LocalAdmits != 0 {
					t.Errorf("an exact rule was admitted locally: %+v", st)
				}
			}
		})
	}
}

// TestUniformTraffic plays keys far below their limit on 4 nodes, flushing
// every simulated second, and checks that few hits write and that every
// hit reaches the store in its own window.
func TestUniformTraffic(t *testing.T) {
	const (
		keys    = 50
		perKey  = 100 // hits a second, over all nodes
		seconds = 120
		nNodes  = 4
	)
	rule := limit.Rule{Algorithm: limit.FixedWindow, Limit: 10_000, Window: time.Minute}
	shared := newCounting(t)
	ns := nodes(t, nNodes, syncstore.Options{Store: shared, MaxError: 0.01, Nodes: nNodes, FlushInterval: -1})
	admitted, hits := 0, 0
	for sec := range seconds {
		for i := range perKey {
			now := base.Add(time.Duration(sec)*time.Second + time.Duration(i)*time.Second/perKey)
			for k := range keys {
				res, err := ns[(i+k)%nNodes].Take(t.Context(), addrKey("r", k), rule, now, 1)
				if err != nil {
					t.Fatal(err)
				}
				hits++
				if rule.Allowed(res) {
					admitted++
				}
			}
		}
		for _, node := range ns {
			if err := node.Flush(t.Context(), base.Add(time.Duration(sec+1)*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
	}
	perHit := float64(shared.writes.Load()) / float64(hits)
	t.Logf("%d keys × %d hits/s × %d s on %d nodes: %d store writes, %.4f a hit", keys, perKey, seconds, nNodes, shared.writes.Load(), perHit)
	if admitted != hits {
		t.Errorf("%d of %d hits far below the limit admitted", admitted, hits)
	}
	if perHit > 0.1 {
		t.Errorf("%.4f store writes a hit, want at most 0.1", perHit)
	}
	last := base.Add((seconds - 1) * time.Second)
	for k := range keys {
		if res, _ := shared.inner.Take(t.Context(), addrKey("r", k), rule, last, 0); res.Count != 60*perKey {
			t.Errorf("key %d: the store counts %d in the last window, want %d", k, res.Count, 60*perKey)
		}
	}
}

// TestWindowRollSendsPendingFirst checks that a key's pending hits are sent
// stamped in their own window before the first hit of the next.
func TestWindowRollSendsPendingFirst(t *testing.T) {
	shared := newCounting(t)
	shared.logging = true
	s := newSync(t, syncstore.Options{Store: shared, MaxError: 0.1, Nodes: 1, FlushInterval: -1})
	r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 1000, Window: time.Minute}
	k := addrKey("r", 1)
	for _, at := range []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, 61 * time.Second} {
		if _, err := s.Take(t.Context(), k, r, base.Add(at), 1); err != nil {
			t.Fatal(err)
		}
	}
	want := []call{{10 * time.Second, 1}, {30 * time.Second, 2}, {61 * time.Second, 1}}
	if fmt.Sprint(shared.log) != fmt.Sprint(want) {
		t.Errorf("store calls %v, want %v", shared.log, want)
	}
}

// TestFlushRetriesThenDrops checks that a delta whose send fails is sent
// again by the next flushes, and given up on, and counted, after
// maxAttempts failures.
func TestFlushRetriesThenDrops(t *testing.T) {
	r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 1000, Window: time.Minute}
	k := addrKey("r", 1)
	setup := func(t *testing.T) (*counting, *syncstore.Store) {
		shared := newCounting(t)
		s := newSync(t, syncstore.Options{Store: shared, MaxError: 0.1, Nodes: 1, FlushInterval: -1})
		for range 5 { // one at the store, four pending
			if _, err := s.Take(t.Context(), k, r, base, 1); err != nil {
				t.Fatal(err)
			}
		}
		shared.fail.Store(true)
		return shared, s
	}
	t.Run("recovers", func(t *testing.T) {
		shared, s := setup(t)
		if err := s.Flush(t.Context(), base); !errors.Is(err, errDown) {
			t.Fatalf("Flush with the store down: %v", err)
		}
		shared.fail.Store(false)
		if err := s.Flush(t.Context(), base); err != nil {
			t.Fatal(err)
		}
		if res, _ := shared.inner.Take(t.Context(), k, r, base, 0); res.Count != 5 {
			t.Errorf("store count %d, want 5", res.Count)
		}
		if st := s.Stats(); st.Dropped != 0 || st.FlushedHits != 4 || st.Errors != 1 {
			t.Errorf("Stats() = %+v, want 0 dropped, 4 flushed hits, 1 error", st)
		}
	})
	t.Run("gives_up", func(t *testing.T) {
		shared, s := setup(t)
		for range 4 {
			if err := s.Flush(t.Context(), base); !errors.Is(err, errDown) {
				t.Fatalf("Flush with the store down: %v", err)
			}
		}
		shared.fail.Store(false)
		if err := s.Flush(t.Context(), base); err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st.Dropped != 4 || st.Errors != 4 || st.FlushedHits != 0 {
			t.Errorf("Stats() = %+v, want 4 dropped, 4 errors, 0 flushed hits", st)
		}
	})
}

// TestFlusherRunsUntilClose runs the real flusher on the fake clock of a
// synctest bubble.
func TestFlusherRunsUntilClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := newCounting(t)
		s, err := syncstore.New(syncstore.Options{Store: shared, MaxError: 0.1, Nodes: 1, FlushInterval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 1000, Window: time.Hour}
		k := addrKey("r", 1)
		count := func() int64 {
			res, _ := shared.inner.Take(t.Context(), k, r, time.Now(), 0)
			return res.Count
		}
		for range 3 {
			if _, err := s.Take(t.Context(), k, r, time.Now(), 1); err != nil {
				t.Fatal(err)
			}
		}
		if got := count(); got != 1 {
			t.Fatalf("before the first flush the store counts %d, want 1", got)
		}
		<-time.After(time.Second) // the bubble's clock
		synctest.Wait()
		if got := count(); got != 3 {
			t.Fatalf("after the first flush the store counts %d, want 3", got)
		}
		for range 2 {
			if _, err := s.Take(t.Context(), k, r, time.Now(), 1); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := count(); got != 5 {
			t.Fatalf("after Close the store counts %d, want 5", got)
		}
		// After Close every hit goes to the store.
		if _, err := s.Take(t.Context(), k, r, time.Now(), 1); err != nil {
			t.Fatal(err)
		}
		if got := count(); got != 6 {
			t.Fatalf("a hit after Close: the store counts %d, want 6", got)
		}
	})
}
