package syncstore_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/memstore"
	"github.com/ratewarden/ratewarden/edge/syncstore"
)

// base is a UTC midnight, aligned to every window that divides 24 hours.
var base = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

var errDown = errors.New("store down")

// call is one Take a counting store saw.
type call struct {
	at time.Duration // from base
	n  int64
}

// counting wraps the memory store that stands for the shared store: it
// counts the calls that write (n ≠ 0), can be made to fail, and can keep a
// log of its calls.
type counting struct {
	inner  *memstore.Store
	writes atomic.Int64
	fail   atomic.Bool

	mu      sync.Mutex
	log     []call // kept while logging is set
	logging bool
}

func (c *counting) Take(ctx context.Context, key limit.Key, rule limit.Rule, now time.Time, n int64) (limit.Result, error) {
	if c.fail.Load() {
		return limit.Result{}, errDown
	}
	if n != 0 {
		c.writes.Add(1)
	}
	c.mu.Lock()
	if c.logging {
		c.log = append(c.log, call{now.Sub(base), n})
	}
	c.mu.Unlock()
	return c.inner.Take(ctx, key, rule, now, n)
}

// newMem returns a memory store closed when the test ends.
func newMem(t testing.TB) *memstore.Store {
	m := memstore.New(memstore.Options{SweepEvery: -1})
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// newCounting returns a counting store over a fresh memory store.
func newCounting(t testing.TB) *counting { return &counting{inner: newMem(t)} }

// newSync returns a Store closed when the test ends.
func newSync(t testing.TB, opts syncstore.Options) *syncstore.Store {
	t.Helper()
	s, err := syncstore.New(opts)
	if err != nil {
		t.Fatalf("New(%+v): %v", opts, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// nodes returns n Stores over one shared store, as n edge nodes.
func nodes(t testing.TB, n int, opts syncstore.Options) []*syncstore.Store {
	out := make([]*syncstore.Store, n)
	for i := range out {
		out[i] = newSync(t, opts)
	}
	return out
}

func addrKey(rule string, i int) limit.Key {
	return limit.Key{Rule: rule, Addr: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})}
}

// Severity levels, as the edge grades a result with a challenge factor of 2.
const (
	allow = iota
	challenge
	block
)

// grade grades res as the edge does for a rule whose challenge ceiling is
// twice its capacity.
func grade(r limit.Rule, res limit.Result) int {
	switch c := r.Capacity(); {
	case res.Count <= c:
		return allow
	case res.Count <= 2*c:
		return challenge
	}
	return block
}

// edgeRule is a rule as the edge builds it with challenges on and a factor
// of 2: counts are recorded up to the ceiling + 1.
func edgeRule(alg limit.Algorithm, lim int64, w time.Duration) limit.Rule {
	r := limit.Rule{Algorithm: alg, Limit: lim, Window: w}
	r.MaxCount = 2*r.Capacity() + 1
	return r
}
