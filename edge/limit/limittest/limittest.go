// Package limittest is the conformance suite every counter store runs, as
// testing/slogtest is for slog handlers: the algorithms' observable
// behaviour through the store, key identity and isolation, exactness under
// concurrent hits, and cancelled contexts.
//
// The suite passes explicit instants as now, aligned to a UTC midnight in
// 2030, and expects the store to count at them; most checks stay within one
// window, and those that cross windows say so in their names. Every Run uses
// rule ids with a fresh random prefix, so a store whose counters outlive the
// test (a reused table) does not see an earlier run's counts.
package limittest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/edge/limit"
)

// Store is what the suite needs of a counter store; it is the store
// interface the edge calls.
type Store interface {
	Take(ctx context.Context, key limit.Key, rule limit.Rule, now time.Time, n int64) (limit.Result, error)
}

// base is a UTC midnight, aligned to every window that divides 24 hours.
var base = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	ms = time.Millisecond
	s  = time.Second
	m  = time.Minute
	h  = time.Hour
)

// Run runs the suite on stores made by newStore, which it calls once per
// subtest; newStore registers any cleanup with t.Cleanup.
func Run(t *testing.T, newStore func(t *testing.T) Store) {
	prefix := fmt.Sprintf("limittest-%016x/", rand.Uint64())
	sub := func(name string, f func(t *testing.T, c *checker)) {
		t.Run(name, func(t *testing.T) {
			f(t, &checker{t: t, store: newStore(t), prefix: prefix + name + "/"})
		})
	}
	sub("fixed_window", testFixedWindow)
	sub("fixed_window_rollover", testFixedWindowRollover)
	sub("fixed_window_max_count", testFixedWindowMaxCount)
	sub("sliding_window", testSlidingWindow)
	sub("token_bucket_burst_and_refill", testTokenBucket)
	sub("token_bucket_max_count", testTokenBucketMaxCount)
	sub("concurrency", testConcurrency)
	sub("expired_state_starts_afresh", testExpiry)
	sub("key_isolation", testKeyIsolation)
	sub("user_identifies_over_addr", testUserOverAddr)
	sub("many_keys", testManyKeys)
	sub("concurrent_fixed_window", testConcurrentFixedWindow)
	sub("concurrent_token_bucket", testConcurrentTokenBucket)
	sub("concurrent_concurrency", testConcurrentConcurrency)
	sub("cancelled_context", testCancelledContext)
}

// checker takes hits on one store and compares what they saw.
type checker struct {
	t      *testing.T
	store  Store
	prefix string
}

// key returns a key under the rule id prefixed for this run.
func (c *checker) key(rule string, addr string, user string) limit.Key {
	k := limit.Key{Rule: c.prefix + rule, User: user}
	if addr != "" {
		k.Addr = netip.MustParseAddr(addr)
	}
	return k
}

// take records n hits at base+at and fails the test on an error.
func (c *checker) take(k limit.Key, r limit.Rule, at time.Duration, n int64) limit.Result {
	c.t.Helper()
	res, err := c.store.Take(context.Background(), k, r, base.Add(at), n)
	if err != nil {
		c.t.Fatalf("Take(%+v, %+v, base+%v, %d): %v", k, r, at, n, err)
	}
	return res
}

// step is one Take at base+at and what it must see.
type step struct {
	at      time.Duration
	n       int64
	want    limit.Result
	allowed bool
}

// res is a Result whose Expires is an offset from base.
func res(count, remaining int64, reset, expires time.Duration) limit.Result {
	return limit.Result{Count: count, Remaining: remaining, Reset: reset, Expires: base.Add(expires).UnixNano()}
}

// held is the Result of a concurrency hit that leaves hits in flight.
func held(count, remaining int64) limit.Result {
	return limit.Result{Count: count, Remaining: remaining, Expires: math.MaxInt64}
}

// play takes the steps in order on one key.
func (c *checker) play(k limit.Key, r limit.Rule, steps []step) {
	c.t.Helper()
	for i, sp := range steps {
		got := c.take(k, r, sp.at, sp.n)
		if got != sp.want {
			c.t.Errorf("%s step %d: Take(base+%v, n %d) = %+v, want %+v", r.Algorithm, i, sp.at, sp.n, got, sp.want)
		}
		if a := r.Allowed(got); a != sp.allowed {
			c.t.Errorf("%s step %d: Take(base+%v, n %d): allowed %v, want %v", r.Algorithm, i, sp.at, sp.n, a, sp.allowed)
		}
	}
}

func testFixedWindow(t *testing.T, c *checker) {
	r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 3, Window: m}
	c.play(c.key("r", "192.0.2.1", ""), r, []step{
		{10 * s, 1, res(1, 2, 50*s, 60*s), true},
		{20 * s, 1, res(2, 1, 40*s, 60*s), true},
		{20 * s, 0, res(2, 1, 40*s, 60*s), true}, // n = 0 looks without counting
		{30 * s, 1, res(3, 0, 30*s, 60*s), true},
		{40 * s, 1, res(4, 0, 20*s, 60*s), false},
		{50 * s, 2, res(6, 0, 10*s, 60*s), false}, // refused hits are recorded
	})
}

func testFixedWindowRollover(t *testing.T, c *checker) {
	minute := limit.Rule{Algorithm: limit.FixedWindow, Limit: 2, Window: m}
	c.play(c.key("minute", "192.0.2.1", ""), minute, []step{
		{0, 3, res(3, 0, 60*s, 60*s), false},
		{60*s - 1, 1, res(4, 0, 1, 60*s), false},
		{60 * s, 1, res(1, 1, 60*s, 120*s), true},
		{179 * s, 1, res(1, 1, 1*s, 180*s), true}, // a window with no hits between
	})
	second := limit.Rule{Algorithm: limit.FixedWindow, Limit: 1, Window: s}
	c.play(c.key("second", "192.0.2.1", ""), second, []step{
		{0, 1, res(1, 0, 1*s, 1*s), true},
		{999 * ms, 1, res(2, 0, 1*ms, 1*s), false},
		{1 * s, 1, res(1, 0, 1*s, 2*s), true},
	})
	day := limit.Rule{Algorithm: limit.FixedWindow, Limit: 2, Window: 24 * h}
	c.play(c.key("day", "192.0.2.1", ""), day, []step{
		{1 * h, 2, res(2, 0, 23*h, 24*h), true},
		{24*h - 1*s, 1, res(3, 0, 1*s, 24*h), false},
		{24 * h, 1, res(1, 1, 24*h, 48*h), true},
	})
}

func testFixedWindowMaxCount(t *testing.T, c *checker) {
	r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 2, Window: m, MaxCount: 3}
	c.play(c.key("r", "192.0.2.1", ""), r, []step{
		{0, 3, res(3, 0, 60*s, 60*s), false},
		{1 * s, 1, res(4, 0, 59*s, 60*s), false}, // beyond MaxCount: not recorded
		{2 * s, 0, res(3, 0, 58*s, 60*s), false},
	})
}

func testSlidingWindow(t *testing.T, c *checker) {
	r := limit.Rule{Algorithm: limit.SlidingWindow, Limit: 10, Window: m}
	c.play(c.key("r", "192.0.2.1", ""), r, []step{
		{10 * s, 8, res(8, 2, 50*s, 120*s), true},
		// 15 s into the next window the previous one weighs 45/60:
		// ⌈8 × 0.75⌉ = 6.
		{75 * s, 1, res(7, 3, 45*s, 180*s), true},
		{75 * s, 4, res(11, 0, 45*s, 180*s), false},
		{90 * s, 0, res(9, 1, 30*s, 180*s), true},  // ⌈8 × 0.5⌉ + 5
		{120 * s, 0, res(5, 5, 60*s, 240*s), true}, // the current 5 becomes the previous, whole
		{240 * s, 1, res(1, 9, 60*s, 360*s), true}, // two windows later: nothing left
	})
	second := limit.Rule{Algorithm: limit.SlidingWindow, Limit: 4, Window: s}
	c.play(c.key("second", "192.0.2.1", ""), second, []step{
		{0, 4, res(4, 0, 1*s, 2*s), true},
		{1*s + 250*ms, 1, res(4, 0, 750*ms, 3*s), true}, // ⌈4 × 0.75⌉ + 1
		{1*s + 750*ms, 0, res(2, 2, 250*ms, 3*s), true}, // ⌈4 × 0.25⌉ + 1
	})
}

func testTokenBucket(t *testing.T, c *checker) {
	// One hit refills per second, up to 5 at once.
	r := limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Window: 10 * s, Burst: 5, MaxCount: 5}
	c.play(c.key("r", "192.0.2.1", ""), r, []step{
		{0, 5, res(5, 0, 5*s, 5*s), true},
		{0, 1, res(6, 0, 5*s, 5*s), false},
		{1 * s, 1, res(5, 0, 5*s, 6*s), true},
		{1 * s, 1, res(6, 0, 5*s, 6*s), false},
		{1500 * ms, 1, res(6, 0, 4500*ms, 6*s), false},
		{2 * s, 1, res(5, 0, 5*s, 7*s), true},
		{5 * s, 0, res(2, 3, 2*s, 7*s), true},
		{7 * s, 1, res(1, 4, 1*s, 8*s), true}, // refilled
	})
	day := limit.Rule{Algorithm: limit.TokenBucket, Limit: 24, Window: 24 * h, Burst: 2}
	c.play(c.key("day", "192.0.2.1", ""), day, []step{
		{0, 2, res(2, 0, 2*h, 2*h), true},
		{1 * h, 1, res(2, 0, 2*h, 3*h), true},
		{1 * h, 1, res(3, 0, 3*h, 4*h), false},
	})
}

func testTokenBucketMaxCount(t *testing.T, c *checker) {
	// Without MaxCount refused hits push the refill back; with it a flood
	// is recorded only up to MaxCount, so recovery takes MaxCount intervals.
	unbounded := limit.Rule{Algorithm: limit.TokenBucket, Limit: 1, Window: m}
	bounded := unbounded
	bounded.MaxCount = 3
	c.play(c.key("unbounded", "192.0.2.1", ""), unbounded, []step{
		{0, 1, res(1, 0, 1*m, 1*m), true},
		{0, 9, res(10, 0, 10*m, 10*m), false},
		{3 * m, 1, res(8, 0, 8*m, 11*m), false},
	})
	c.play(c.key("bounded", "192.0.2.1", ""), bounded, []step{
		{0, 1, res(1, 0, 1*m, 1*m), true},
		{0, 2, res(3, 0, 3*m, 3*m), false},
		{0, 9, res(12, 0, 3*m, 3*m), false},
		{3 * m, 1, res(1, 0, 1*m, 4*m), true},
	})
}

func testConcurrency(t *testing.T, c *checker) {
	r := limit.Rule{Algorithm: limit.Concurrency, Limit: 3}
	c.play(c.key("r", "192.0.2.1", ""), r, []step{
		{0, 1, held(1, 2), true},
		{0, 2, held(3, 0), true},
		{1 * s, 1, held(4, 0), false}, // refused: not recorded
		{2 * s, -1, held(2, 1), true},
		{3 * s, 1, held(3, 0), true},
		{48 * h, 0, held(3, 0), true}, // in flight does not expire
		{48 * h, -3, res(0, 3, 0, 48*h), true},
		{48 * h, -1, res(0, 3, 0, 48*h), true}, // never below 0
		{48 * h, 1, held(1, 2), true},
	})
}

// testExpiry checks that from a result's Expires on, the key's state is
// equivalent to a key never seen.
func testExpiry(t *testing.T, c *checker) {
	rules := []limit.Rule{
		{Algorithm: limit.FixedWindow, Limit: 3, Window: s},
		{Algorithm: limit.FixedWindow, Limit: 3, Window: 24 * h},
		{Algorithm: limit.SlidingWindow, Limit: 3, Window: s},
		{Algorithm: limit.SlidingWindow, Limit: 3, Window: 24 * h},
		{Algorithm: limit.TokenBucket, Limit: 3, Window: s, Burst: 2},
		{Algorithm: limit.TokenBucket, Limit: 3, Window: 24 * h, MaxCount: 6},
		{Algorithm: limit.Concurrency, Limit: 3},
	}
	for i, r := range rules {
		k := c.key(fmt.Sprint("seen-", i), "192.0.2.1", "")
		at := r.Window / 3
		var last limit.Result
		for _, n := range []int64{2, 5, 1, -1, -2} {
			last = c.take(k, r, at, n)
		}
		exp := time.Duration(last.Expires - base.UnixNano())
		got := c.take(k, r, exp, 1)
		want := c.take(c.key(fmt.Sprint("fresh-", i), "192.0.2.1", ""), r, exp, 1)
		if got != want {
			t.Errorf("%v %v: at Expires (base+%v) a used key saw %+v, a fresh key %+v", r.Algorithm, r.Window, exp, got, want)
		}
	}
}

// testKeyIsolation checks pairs of keys that must not share a counter.
func testKeyIsolation(t *testing.T, c *checker) {
	r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Window: m}
	pairs := []struct {
		name string
		a, b limit.Key
	}{
		{"addr_under_two_rules", c.key("a", "192.0.2.1", ""), c.key("b", "192.0.2.1", "")},
		{"user_under_two_rules", c.key("a", "", "alice"), c.key("b", "", "alice")},
		{"two_ipv4_addrs", c.key("r", "192.0.2.1", ""), c.key("r", "192.0.2.2", "")},
		{"two_ipv6_addrs", c.key("r", "2001:db8::1", ""), c.key("r", "2001:db8::2", "")},
		{"ipv4_and_ipv4_mapped_ipv6", c.key("r", "192.0.2.1", ""), c.key("r", "::ffff:192.0.2.1", "")},
		{"ipv4_and_ipv4_compatible_ipv6", c.key("r", "0.0.0.1", ""), c.key("r", "::1", "")},
		{"no_addr_and_unspecified_ipv4", c.key("r", "", ""), c.key("r", "0.0.0.0", "")},
		{"no_addr_and_unspecified_ipv6", c.key("r", "", ""), c.key("r", "::", "")},
		{"two_users", c.key("r", "", "alice"), c.key("r", "", "bob")},
		{"user_and_addr_with_the_same_text_v4", c.key("r", "", "192.0.2.1"), c.key("r", "192.0.2.1", "")},
		{"user_and_addr_with_the_same_text_v6", c.key("r", "", "2001:db8::1"), c.key("r", "2001:db8::1", "")},
		{"empty_user_and_no_addr", c.key("r", "", ""), c.key("r", "", "\x00")},
		{"rule_and_user_boundary", c.key("ab", "", "c"), c.key("a", "", "bc")},
		{"rule_and_user_boundary_nul", c.key("a\x00", "", "b"), c.key("a", "", "\x00b")},
		{"user_prefix", c.key("r", "", "alice"), c.key("r", "", "alice2")},
	}
	for _, p := range pairs {
		c.take(p.a, r, 0, 3)
		if got := c.take(p.b, r, 0, 1); got.Count != 1 {
			t.Errorf("%s: %+v then %+v: the second saw count %d, want 1", p.name, p.a, p.b, got.Count)
		}
		if got := c.take(p.a, r, 0, 0); got.Count != 3 {
			t.Errorf("%s: %+v then %+v: the first saw count %d, want 3", p.name, p.a, p.b, got.Count)
		}
		// Clear both for the next pair that reuses one of them.
		c.take(p.a, r, 0, -3)
		c.take(p.b, r, 0, -1)
	}
}

// testUserOverAddr checks the Key's contract that User, when set, is the
// identity: the address an authenticated user comes from does not split
// its counter.
func testUserOverAddr(t *testing.T, c *checker) {
	r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Window: m}
	c.take(c.key("r", "192.0.2.1", "alice"), r, 0, 2)
	c.take(c.key("r", "2001:db8::1", "alice"), r, 0, 1)
	if got := c.take(c.key("r", "", "alice"), r, 0, 1); got.Count != 4 {
		t.Errorf("alice from three addresses: count %d, want 4", got.Count)
	}
	if got := c.take(c.key("r", "192.0.2.1", ""), r, 0, 1); got.Count != 1 {
		t.Errorf("alice's address, anonymous: count %d, want 1", got.Count)
	}
}

func testManyKeys(t *testing.T, c *checker) {
	r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Window: m}
	const keys = 256
	addr := func(i int) string { return netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}).String() }
	for pass := int64(1); pass <= 2; pass++ {
		for i := range keys {
			if got := c.take(c.key("r", addr(i), ""), r, 0, 1); got.Count != pass {
				t.Fatalf("pass %d, key %d: count %d, want %d", pass, i, got.Count, pass)
			}
		}
	}
}

// hammer runs workers goroutines that each call f hits times.
func hammer(workers, hits int, f func(worker, hit int)) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range hits {
				f(w, i)
			}
		})
	}
	wg.Wait()
}

func testConcurrentFixedWindow(t *testing.T, c *checker) {
	const workers, hits = 32, 200
	r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 1000, Window: m}
	k := c.key("r", "192.0.2.1", "")
	var allowed, failed atomic.Int64
	hammer(workers, hits, func(_, _ int) {
		res, err := c.store.Take(context.Background(), k, r, base.Add(10*s), 1)
		switch {
		case err != nil:
			failed.Add(1)
		case r.Allowed(res):
			allowed.Add(1)
		}
	})
	if failed.Load() != 0 {
		t.Fatalf("%d of %d concurrent hits failed", failed.Load(), workers*hits)
	}
	if got := allowed.Load(); got != r.Limit {
		t.Errorf("%d of %d concurrent hits allowed, want %d", got, workers*hits, r.Limit)
	}
	if got := c.take(k, r, 10*s, 0); got.Count != workers*hits {
		t.Errorf("after %d concurrent hits the count is %d", workers*hits, got.Count)
	}
}

func testConcurrentTokenBucket(t *testing.T, c *checker) {
	const workers, hits = 32, 50
	r := limit.Rule{Algorithm: limit.TokenBucket, Limit: 100, Window: m, MaxCount: 100}
	k := c.key("r", "2001:db8::1", "")
	var allowed atomic.Int64
	hammer(workers, hits, func(_, _ int) {
		res, err := c.store.Take(context.Background(), k, r, base.Add(10*s), 1)
		if err != nil {
			t.Errorf("Take: %v", err)
			return
		}
		if r.Allowed(res) {
			allowed.Add(1)
		}
	})
	if got := allowed.Load(); got != r.Limit {
		t.Errorf("%d of %d concurrent hits allowed, want the burst %d", got, workers*hits, r.Limit)
	}
}

func testConcurrentConcurrency(t *testing.T, c *checker) {
	const workers, hits = 32, 100
	r := limit.Rule{Algorithm: limit.Concurrency, Limit: 8}
	k := c.key("r", "", "alice")
	var inFlight, peak, allowed atomic.Int64
	hammer(workers, hits, func(_, _ int) {
		ctx := context.Background()
		res, err := c.store.Take(ctx, k, r, base, 1)
		if err != nil {
			t.Errorf("acquire: %v", err)
			return
		}
		if !r.Allowed(res) {
			return
		}
		allowed.Add(1)
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		inFlight.Add(-1)
		if _, err := c.store.Take(ctx, k, r, base, -1); err != nil {
			t.Errorf("release: %v", err)
		}
	})
	if p := peak.Load(); p > r.Limit {
		t.Errorf("%d requests in flight at once, limit %d", p, r.Limit)
	}
	if allowed.Load() == 0 {
		t.Errorf("no request was allowed")
	}
	if got := c.take(k, r, 0, 0); got.Count != 0 {
		t.Errorf("after every release %d are in flight", got.Count)
	}
}

// testCancelledContext checks that a store given a cancelled context
// returns an error or a correct result, never a wrong one, and that either
// way the count stays consistent.
func testCancelledContext(t *testing.T, c *checker) {
	r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 5, Window: m}
	k := c.key("r", "192.0.2.1", "")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got, err := c.store.Take(ctx, k, r, base.Add(10*s), 1)
	if want := res(1, 4, 50*s, 60*s); err == nil && got != want {
		t.Errorf("Take with a cancelled context = %+v, nil; want %+v or an error", got, want)
	}
	// After an error the hit may or may not have been recorded.
	next := c.take(k, r, 10*s, 1)
	if ok := next.Count == 2 || (err != nil && next.Count == 1); !ok {
		t.Errorf("after Take with a cancelled context (err %v), the next hit saw count %d", err, next.Count)
	}
}
