package syncstore_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/limit/limittest"
	"github.com/ratewarden/ratewarden/edge/syncstore"
)

var _ limittest.Store = (*syncstore.Store)(nil)

// TestConformance runs the store suite through the wrapper wherever it
// must answer as the store does: counting exactly, with the over-limit
// cache on (the suite's MaxCount rules exercise it).
func TestConformance(t *testing.T) {
	all := func(string) bool { return true }
	configs := []struct {
		name string
		opts syncstore.Options
	}{
		{"exact", syncstore.Options{}},
		{"exact_rules", syncstore.Options{MaxError: 0.01, Nodes: 4, Exact: all}},
		// Slack ⌊0.01 × limit ÷ 1000⌋ is 0 for every limit in the suite.
		{"slack_zero", syncstore.Options{MaxError: 0.01, Nodes: 1000, FlushInterval: -1}},
	}
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			limittest.Run(t, func(t *testing.T) limittest.Store {
				opts := c.opts
				opts.Store = newMem(t)
				return newSync(t, opts)
			})
		})
	}
}

func TestNewValidates(t *testing.T) {
	m := newMem(t)
	f := func(opts syncstore.Options, want string) {
		t.Helper()
		s, err := syncstore.New(opts)
		if want == "" {
			if err != nil {
				t.Errorf("New(%+v): %v", opts, err)
				return
			}
			s.Close(context.Background())
			return
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", opts, err, want)
		}
		if err == nil {
			s.Close(context.Background())
		}
	}
	f(syncstore.Options{Store: m}, "")
	f(syncstore.Options{Store: m, MaxError: 1, Nodes: syncstore.MaxNodes, FlushInterval: -1, MaxKeys: 1}, "")
	f(syncstore.Options{}, "Store: nil")
	f(syncstore.Options{Store: m, MaxError: -0.1, Nodes: 1}, "MaxError: -0.1: want 0 to 1")
	f(syncstore.Options{Store: m, MaxError: 1.5, Nodes: 1}, "MaxError: 1.5")
	f(syncstore.Options{Store: m, MaxError: math.NaN(), Nodes: 1}, "MaxError: NaN")
	f(syncstore.Options{Store: m, MaxError: 0.01}, "Nodes: 0: want 1 to 100000 when MaxError is above 0")
	f(syncstore.Options{Store: m, Nodes: -1}, "Nodes: -1")
	f(syncstore.Options{Store: m, Nodes: syncstore.MaxNodes + 1}, "Nodes: 100001")
	f(syncstore.Options{Store: m, FlushInterval: time.Millisecond}, "FlushInterval: 1ms: want 10ms to 1h0m0s")
	f(syncstore.Options{Store: m, FlushInterval: 2 * time.Hour}, "FlushInterval: 2h0m0s")
	f(syncstore.Options{Store: m, MaxKeys: -1}, "MaxKeys: -1")
}

// TestStoreErrorsReturned checks that an error of a call the hit needed is
// the hit's error.
func TestStoreErrorsReturned(t *testing.T) {
	c := newCounting(t)
	s := newSync(t, syncstore.Options{Store: c, MaxError: 0.1, Nodes: 1, FlushInterval: -1})
	r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 1000, Window: time.Minute}
	k := addrKey("r", 1)
	c.fail.Store(true)
	if _, err := s.Take(t.Context(), k, r, base, 1); !errors.Is(err, errDown) {
		t.Fatalf("first hit of a window with the store down: err %v, want %v", err, errDown)
	}
	if _, err := s.Take(t.Context(), k, edgeRule(limit.TokenBucket, 10, time.Minute), base, 1); !errors.Is(err, errDown) {
		t.Fatalf("exact rule with the store down: err %v, want %v", err, errDown)
	}
	if got := s.Stats().Errors; got != 2 {
		t.Errorf("Stats().Errors = %d, want 2", got)
	}
}

// TestRefundDropsTheCache checks that after a refund the key's hits go to
// the store again and see what the store sees.
func TestRefundDropsTheCache(t *testing.T) {
	c := newCounting(t)
	s := newSync(t, syncstore.Options{Store: c, FlushInterval: -1})
	r := edgeRule(limit.FixedWindow, 2, time.Minute) // MaxCount 5
	k := addrKey("r", 1)
	take := func(n int64) limit.Result {
		t.Helper()
		res, err := s.Take(t.Context(), k, r, base.Add(time.Second), n)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for range 6 {
		take(1)
	}
	if got := s.Stats().CacheHits; got != 1 {
		t.Fatalf("after 6 hits, limit 2, MaxCount 5: %d cache hits, want 1", got)
	}
	take(-4) // the store's count: 5 - 4
	if got := take(1); got.Count != 2 {
		t.Errorf("after a refund to 1, a hit saw count %d, want 2 (from the store)", got.Count)
	}
}

// TestMaxKeys checks that the key table stays within MaxKeys and that the
// hits it has no room for still count.
func TestMaxKeys(t *testing.T) {
	c := newCounting(t)
	s := newSync(t, syncstore.Options{Store: c, MaxError: 0.1, Nodes: 1, MaxKeys: 64, FlushInterval: -1})
	r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 1000, Window: time.Minute}
	for i := range 1000 {
		for range 3 {
			if _, err := s.Take(t.Context(), addrKey("r", i), r, base, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := s.Stats()
	if st.Keys > 64 {
		t.Errorf("Stats().Keys = %d, want at most 64", st.Keys)
	}
	if st.Untracked == 0 && st.Evictions == 0 {
		t.Errorf("1000 keys in a table of 64: no untracked hit and no eviction: %+v", st)
	}
	if err := s.Flush(t.Context(), base); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if res, _ := c.inner.Take(t.Context(), addrKey("r", i), r, base, 0); res.Count != 3 {
			t.Fatalf("key %d: store count %d after 3 hits and a flush", i, res.Count)
		}
	}
}
