package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/limit/limittest"
	"github.com/ratewarden/ratewarden/edge/memstore"
	"github.com/ratewarden/ratewarden/edge/redisstore"
)

var _ limittest.Store = (*redisstore.Store)(nil)

// base is a fixed instant at a UTC midnight.
var base = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// newClient returns a client of the redis-server tests/run started.
func newClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: awstest.Endpoint(t, awstest.RedisEnv), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// newStore returns a store on c under a fresh random prefix, whose keys
// are deleted when the test ends.
func newStore(t testing.TB, c *redis.Client, clock redisstore.Clock) *redisstore.Store {
	t.Helper()
	s, _ := newStorePrefix(t, c, clock)
	return s
}

// newStorePrefix is newStore that also returns the prefix.
func newStorePrefix(t testing.TB, c *redis.Client, clock redisstore.Clock) (*redisstore.Store, string) {
	t.Helper()
	prefix := fmt.Sprintf("rwtest-%016x:", rand.Uint64())
	s, err := redisstore.New(redisstore.Options{Client: c, Prefix: prefix, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePrefix(t, c, prefix) })
	return s, prefix
}

// deletePrefix deletes the keys that start with prefix, and nothing else.
func deletePrefix(t testing.TB, c *redis.Client, prefix string) {
	ctx := context.Background()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("scan %s*: %v", prefix, err)
		return
	}
	for len(keys) > 0 {
		k := keys[:min(len(keys), 1000)]
		keys = keys[len(k):]
		if err := c.Unlink(ctx, k...).Err(); err != nil {
			t.Errorf("unlink: %v", err)
		}
	}
}

func TestConformance(t *testing.T) {
	c := newClient(t)
	limittest.Run(t, func(t *testing.T) limittest.Store { return newStore(t, c, redisstore.CallerTime) })
}

// TestMatchesMemstore plays seeded random hits on the Redis store and the
// memory store, which applies package limit directly, and compares every
// result: windows that are not whole seconds, instants centuries apart,
// clocks that step back, refunds and MaxCount.
func TestMatchesMemstore(t *testing.T) {
	c := newClient(t)
	// n is drawn from -2 to 4 times scale.
	rules := []struct {
		limit.Rule
		scale int64
	}{
		{limit.Rule{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Second}, 1},
		{limit.Rule{Algorithm: limit.FixedWindow, Limit: 7, Window: 1500*time.Millisecond + 7, MaxCount: 10}, 1},
		{limit.Rule{Algorithm: limit.FixedWindow, Limit: 1_000_000_000, Window: 24 * time.Hour}, 100_000_000},
		{limit.Rule{Algorithm: limit.SlidingWindow, Limit: 5, Window: time.Second}, 1},
		{limit.Rule{Algorithm: limit.SlidingWindow, Limit: 9, Window: 61*time.Second + 3, MaxCount: 12}, 1},
		// Previous counts near 2³² weighted by up to 2⁴⁷ ns: the product
		// needs 79 bits.
		{limit.Rule{Algorithm: limit.SlidingWindow, Limit: 1_000_000_000, Window: 24*time.Hour - 1}, 300_000_000},
		{limit.Rule{Algorithm: limit.SlidingWindow, Limit: 1_000_000_000, Window: 7*time.Hour + 3, MaxCount: 3_000_000_000}, 1_000_000_007},
		{limit.Rule{Algorithm: limit.TokenBucket, Limit: 3, Window: time.Second}, 1},
		{limit.Rule{Algorithm: limit.TokenBucket, Limit: 7, Window: 10*time.Second + 1, Burst: 4, MaxCount: 9}, 1},
		{limit.Rule{Algorithm: limit.TokenBucket, Limit: 1_000_000_000, Window: time.Second, Burst: 3}, 1000},
		{limit.Rule{Algorithm: limit.TokenBucket, Limit: 1, Window: 24 * time.Hour, MaxCount: 100}, 1},
		// A burst far above the limit and a challenge factor of 100: a
		// backlog of 27 years.
		{limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Window: 24 * time.Hour, Burst: 1000, MaxCount: 100_001}, 1000},
		// Floods without MaxCount saturate the arrival time at the
		// largest int64, as limit does.
		{limit.Rule{Algorithm: limit.TokenBucket, Limit: 1, Window: 24 * time.Hour}, 1 << 40},
		{limit.Rule{Algorithm: limit.TokenBucket, Limit: 1_000_000_000, Window: time.Second}, 1 << 50},
		{limit.Rule{Algorithm: limit.Concurrency, Limit: 4}, 1},
	}
	starts := []time.Time{
		base.Add(123456789),
		time.Date(2261, 6, 1, 0, 0, 0, 987654321, time.UTC), // unix ns near the int64 limit
		time.Date(1971, 2, 3, 4, 5, 6, 7, time.UTC),
	}
	for i, r := range rules {
		for j, start := range starts {
			t.Run(fmt.Sprintf("%v_%v_%d", r.Algorithm, r.Window, j), func(t *testing.T) {
				r, scale := r.Rule, r.scale
				rs := newStore(t, c, redisstore.CallerTime)
				ms := memstore.New(memstore.Options{SweepEvery: -1})
				k := limit.Key{Rule: "r", Addr: netip.MustParseAddr("192.0.2.1")}
				rng := rand.New(rand.NewPCG(uint64(i), uint64(j)))
				now := start
				span := max(int64(r.Window), int64(time.Second))
				for step := range 300 {
					switch x := rng.IntN(10); {
					case x < 5: // the same instant or a little later
						now = now.Add(time.Duration(rng.Int64N(span / 8)))
					case x < 8: // up to two windows later
						now = now.Add(time.Duration(rng.Int64N(2 * span)))
					case x < 9: // a clock a little behind
						now = now.Add(-time.Duration(rng.Int64N(span / 2)))
					}
					n := (rng.Int64N(7) - 2) * scale
					want, _ := ms.Take(context.Background(), k, r, now, n)
					got, err := rs.Take(context.Background(), k, r, now, n)
					if err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
					if got != want {
						t.Fatalf("step %d: Take(%v, n %d) = %+v, limit computes %+v", step, now.Format(time.RFC3339Nano), n, got, want)
					}
				}
			})
		}
	}
}

// TestConcurrentExact hammers one key from 4 stores, each with its own
// client, 64 goroutines each: exactly Limit hits are allowed, each seeing
// a different count.
func TestConcurrentExact(t *testing.T) {
	const stores, workers, hits = 4, 64, 12
	rules := []limit.Rule{
		{Algorithm: limit.FixedWindow, Limit: 1000, Window: time.Minute},
		{Algorithm: limit.TokenBucket, Limit: 1000, Window: time.Minute, MaxCount: 2000},
		{Algorithm: limit.TokenBucket, Limit: 500, Window: time.Minute, Burst: 1000},
	}
	for _, r := range rules {
		t.Run(r.Algorithm.String(), func(t *testing.T) {
			prefix := fmt.Sprintf("rwtest-%016x:", rand.Uint64())
			ss := make([]*redisstore.Store, stores)
			for i := range ss {
				c := newClient(t)
				s, err := redisstore.New(redisstore.Options{Client: c, Prefix: prefix, Clock: redisstore.CallerTime})
				if err != nil {
					t.Fatal(err)
				}
				ss[i] = s
				if i == 0 {
					t.Cleanup(func() { deletePrefix(t, c, prefix) })
				}
			}
			k := limit.Key{Rule: "r", User: "alice"}
			now := base.Add(10 * time.Second)
			allowed := make([]atomic.Int32, r.Capacity()+1) // by count
			var failed, refused atomic.Int64
			var wg sync.WaitGroup
			for _, s := range ss {
				for range workers {
					wg.Go(func() {
						for range hits {
							res, err := s.Take(context.Background(), k, r, now, 1)
							switch {
							case err != nil:
								failed.Add(1)
							case !r.Allowed(res):
								refused.Add(1)
							case res.Count < 1:
								t.Errorf("an allowed hit saw count %d", res.Count)
							default:
								allowed[res.Count].Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			if n := failed.Load(); n != 0 {
				t.Fatalf("%d hits failed", n)
			}
			// Counts are unique, so an over-admission shows as a count
			// seen twice.
			for count := 1; count < len(allowed); count++ {
				if v := allowed[count].Load(); v != 1 {
					t.Errorf("%d allowed hits saw count %d, want 1", v, count)
				}
			}
			if got, want := refused.Load(), int64(stores*workers*hits)-r.Capacity(); got != want {
				t.Errorf("%d hits refused, want %d", got, want)
			}
			var calls, takes, reloads uint64
			for _, s := range ss {
				st := s.Stats()
				calls, takes, reloads = calls+st.Calls, takes+st.Takes, reloads+st.Reloads
			}
			if calls != takes+reloads || takes != stores*workers*hits {
				t.Errorf("stats: %d takes, %d calls, %d reloads; want %d takes and a call each, plus one per reload", takes, calls, reloads, stores*workers*hits)
			}
			t.Logf("%d round trips for %d takes", calls, takes)
			if r.Algorithm == limit.FixedWindow {
				if res, err := ss[0].Take(context.Background(), k, r, now, 0); err != nil || res.Count != stores*workers*hits {
					t.Errorf("after %d hits: count %d (error %v)", stores*workers*hits, res.Count, err)
				}
			}
		})
	}
}

// serverTime returns the server's clock in unix ns, to the microsecond.
func serverTime(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixNano()
}

// TestServerTime checks that under ServerTime a store counts at the
// server's time, whatever now it is given: the instant every result was
// computed at (Expires - Reset) lies between two reads of the server's
// clock, a limit of N admits exactly N hits per window, and a token
// bucket's results are package limit's at the server's instants, however
// long the hits took.
func TestServerTime(t *testing.T) {
	c := newClient(t)
	bogus := []time.Time{{}, time.Unix(0, 0), base, time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)}
	windows := []time.Duration{time.Second, 7 * time.Second, 1500 * time.Millisecond, time.Second + time.Microsecond, 24 * time.Hour}
	algs := []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket}
	const limitN = 10
	const hits = 2 * limitN
	for _, alg := range algs {
		for _, w := range windows {
			t.Run(fmt.Sprintf("%v_%v", alg, w), func(t *testing.T) {
				s := newStore(t, c, redisstore.ServerTime)
				r := limit.Rule{Algorithm: alg, Limit: limitN, Window: w, MaxCount: 2 * limitN}
				k := limit.Key{Rule: "r", User: "alice"}
				before := serverTime(t, c)
				results := make([]limit.Result, hits)
				for i := range results {
					res, err := s.Take(context.Background(), k, r, bogus[i%len(bogus)], 1)
					if err != nil {
						t.Fatal(err)
					}
					results[i] = res
				}
				after := serverTime(t, c)
				var prev int64
				for i, res := range results {
					at := res.Expires - int64(res.Reset)
					if alg == limit.SlidingWindow {
						at -= int64(w) // Expires is a window after the reset
					}
					if at < before || at > after || at < prev {
						t.Errorf("hit %d computed at %d, want between the server's %d and %d, after %d", i, at, before, after, prev)
					}
					prev = at
					if alg != limit.TokenBucket && res.Expires%int64(w) != 0 {
						t.Errorf("hit %d: expires at %d, want the end of a window of %v", i, res.Expires, w)
					}
				}
				// The bucket refills while the hits are sent, by as much as
				// the server's clock moved: replay package limit at the
				// instants the server counted at, which the results tell,
				// and compare every field, however slow the machine.
				if alg == limit.TokenBucket {
					var st limit.State
					for i, res := range results {
						if want := r.Take(&st, res.Expires-int64(res.Reset), 1); res != want {
							t.Errorf("hit %d: %+v, limit computes %+v at the server's instant", i, res, want)
						}
					}
					return
				}
				// Group the hits by window (a window may end during the
				// test): each admits its first N hits and no more.
				start := 0
				for i := 1; i <= len(results); i++ {
					if i == len(results) || results[i].Expires != results[start].Expires {
						checkAdmitted(t, r, results[start:i])
						start = i
					}
				}
			})
		}
	}
	t.Run("concurrency", func(t *testing.T) {
		s := newStore(t, c, redisstore.ServerTime)
		r := limit.Rule{Algorithm: limit.Concurrency, Limit: 2}
		k := limit.Key{Rule: "r", User: "alice"}
		for _, n := range []int64{1, 1, 1} {
			if _, err := s.Take(context.Background(), k, r, base, n); err != nil {
				t.Fatal(err)
			}
		}
		before := serverTime(t, c)
		res, err := s.Take(context.Background(), k, r, base, -2)
		if err != nil {
			t.Fatal(err)
		}
		after := serverTime(t, c)
		if res.Count != 0 || res.Expires < before || res.Expires > after {
			t.Errorf("release of every hit = %+v, want count 0 and Expires the server's now, between %d and %d", res, before, after)
		}
	})
	t.Run("window_not_whole_microseconds", func(t *testing.T) {
		s := newStore(t, c, redisstore.ServerTime)
		r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 2, Window: time.Second + 1}
		if _, err := s.Take(context.Background(), limit.Key{Rule: "r"}, r, base, 1); err == nil {
			t.Errorf("Take with a window of %v under the server clock: no error", r.Window)
		}
	})
}

// checkAdmitted checks that hits of one n within one window saw counts 1,
// 2, ... and that the first Capacity of them were allowed.
func checkAdmitted(t *testing.T, r limit.Rule, results []limit.Result) {
	t.Helper()
	admitted := 0
	for i, res := range results {
		if r.Allowed(res) {
			admitted++
		}
		if r.Algorithm != limit.SlidingWindow && res.Count != int64(i+1) {
			t.Errorf("hit %d of a window saw count %d", i+1, res.Count)
		}
	}
	if want := min(len(results), int(r.Capacity())); admitted != want && (r.Algorithm != limit.SlidingWindow || admitted > want) {
		t.Errorf("%d of %d hits admitted in a window, want %d", admitted, len(results), want)
	}
}

func TestScriptFlush(t *testing.T) {
	c := newClient(t)
	s := newStore(t, c, redisstore.CallerTime)
	ctx := context.Background()
	algs := []limit.Rule{
		{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute},
		{Algorithm: limit.SlidingWindow, Limit: 5, Window: time.Minute},
		{Algorithm: limit.TokenBucket, Limit: 5, Window: time.Minute},
		{Algorithm: limit.Concurrency, Limit: 5},
	}
	k := limit.Key{Rule: "r", User: "alice"}
	for _, r := range algs {
		if _, err := s.Take(ctx, k, r, base, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before := s.Stats()
	for _, r := range algs {
		res, err := s.Take(ctx, k, r, base, 1)
		if err != nil {
			t.Fatalf("%v after SCRIPT FLUSH: %v", r.Algorithm, err)
		}
		if res.Count != 2 {
			t.Errorf("%v after SCRIPT FLUSH: count %d, want 2", r.Algorithm, res.Count)
		}
	}
	after := s.Stats()
	if got, want := after.Reloads-before.Reloads, uint64(len(algs)); got != want {
		t.Errorf("%d reloads after SCRIPT FLUSH, want %d (one a script)", got, want)
	}
	if got, want := after.Calls-before.Calls, 2*uint64(len(algs)); got != want {
		t.Errorf("%d round trips after SCRIPT FLUSH, want %d", got, want)
	}
	// Reloaded: one round trip again.
	before = s.Stats()
	for _, r := range algs {
		if _, err := s.Take(ctx, k, r, base, 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Stats().Calls - before.Calls; got != uint64(len(algs)) {
		t.Errorf("%d round trips for %d takes after the reload, want one each", got, len(algs))
	}
}

func TestContextCancelled(t *testing.T) {
	c := newClient(t)
	s := newStore(t, c, redisstore.CallerTime)
	r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute}
	k := limit.Key{Rule: "r", User: "alice"}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancel2()
	cases := []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"cancelled", cancelled, context.Canceled},
		{"deadline_passed", expired, context.DeadlineExceeded},
	}
	for _, tc := range cases {
		_, err := s.Take(tc.ctx, k, r, base, 1)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: Take error %v, want %v", tc.name, err, tc.want)
		}
	}
	if st := s.Stats(); st.Errors != uint64(len(cases)) {
		t.Errorf("stats %+v: want %d errors", st, len(cases))
	}
	res, err := s.Take(context.Background(), k, r, base, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Count < 1 || res.Count > 1+int64(len(cases)) {
		t.Errorf("count %d after failed takes", res.Count)
	}
}

// TestDeadlineOnStalledServer checks that the context's deadline, not the
// client's read timeout, bounds a call to a server that never answers.
func TestDeadlineOnStalledServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ContextTimeoutEnabled: true,
		ReadTimeout: time.Hour, WriteTimeout: time.Hour, DialTimeout: time.Hour, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(redisstore.Options{Client: c, Clock: redisstore.CallerTime})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = s.Take(ctx, limit.Key{Rule: "r"}, limit.Rule{Algorithm: limit.FixedWindow, Limit: 1, Window: time.Second}, base, 1)
	var ne net.Error
	if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
		t.Errorf("Take on a stalled server: %v, want the context's deadline", err)
	}
}

func TestNew(t *testing.T) {
	noDeadlines := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer noDeadlines.Close()
	ok := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer ok.Close()
	cases := []struct {
		name string
		opts redisstore.Options
		err  string
	}{
		{"defaults", redisstore.Options{Client: ok}, ""},
		{"no_client", redisstore.Options{}, "no client"},
		{"brace_in_prefix", redisstore.Options{Client: ok, Prefix: "a{b"}, `prefix "a{b"`},
		{"bad_clock", redisstore.Options{Client: ok, Clock: 7}, "clock 7"},
		{"negative_skew", redisstore.Options{Client: ok, ClockSkew: -1}, "clock skew -1ns"},
		{"skew_too_large", redisstore.Options{Client: ok, ClockSkew: 2 * time.Hour}, "clock skew 2h0m0s"},
		{"no_context_timeouts", redisstore.Options{Client: noDeadlines}, "ContextTimeoutEnabled"},
	}
	for _, tc := range cases {
		_, err := redisstore.New(tc.opts)
		if got := fmt.Sprint(err); (tc.err == "") != (err == nil) || !strings.Contains(got, tc.err) {
			t.Errorf("%s: New error %v, want one containing %q", tc.name, err, tc.err)
		}
	}
}

func TestInvalidRule(t *testing.T) {
	c := newClient(t)
	s := newStore(t, c, redisstore.CallerTime)
	rules := []limit.Rule{
		{Algorithm: 0, Limit: 1, Window: time.Second},
		{Algorithm: limit.FixedWindow, Limit: 1},
		{Algorithm: limit.SlidingWindow, Limit: 1, Window: -time.Second},
		{Algorithm: limit.TokenBucket, Limit: 1},
	}
	for _, r := range rules {
		if res, err := s.Take(context.Background(), limit.Key{Rule: "r"}, r, base, 1); err == nil {
			t.Errorf("Take(%+v) = %+v, want an error", r, res)
		}
	}
	if st := s.Stats(); st.Calls != 0 || st.Errors != uint64(len(rules)) {
		t.Errorf("stats %+v: want no calls and %d errors", st, len(rules))
	}
}

// TestKeys checks the keys' names: one hash tag holding the whole
// identity, and the escaping that keeps it whole.
func TestKeys(t *testing.T) {
	c := newClient(t)
	s, prefix := newStorePrefix(t, c, redisstore.CallerTime)
	ctx := context.Background()
	r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Minute}
	keys := []struct {
		key  limit.Key
		want string
	}{
		{limit.Key{Rule: "anonymous./api", Addr: netip.MustParseAddr("192.0.2.1")}, "{fw:14:anonymous./api:4:192.0.2.1}"},
		{limit.Key{Rule: "r", Addr: netip.MustParseAddr("::ffff:192.0.2.1")}, "{fw:1:r:6:::ffff:192.0.2.1}"},
		{limit.Key{Rule: "r", Addr: netip.MustParseAddr("fe80::1%e}0")}, "{fw:1:r:6:fe80::1%25e%7D0}"},
		{limit.Key{Rule: "r}", User: "a%b}c"}, "{fw:2:r%7D:u:a%25b%7Dc}"},
		{limit.Key{Rule: "r"}, "{fw:1:r:-:}"},
	}
	for _, k := range keys {
		if _, err := s.Take(ctx, k.key, r, base, 1); err != nil {
			t.Fatal(err)
		}
		name := prefix + k.want
		if n, err := c.Exists(ctx, name).Result(); err != nil || n != 1 {
			t.Errorf("%+v: key %q exists: %d (error %v)", k.key, name, n, err)
		}
		// The hash tag is the whole braced part.
		if strings.IndexByte(name, '}') != len(name)-1 {
			t.Errorf("key %q: the hash tag ends before the key does", name)
		}
	}
}

// TestTTL checks that keys expire when their results do, and that a key
// whose state is the zero State is deleted.
func TestTTL(t *testing.T) {
	c := newClient(t)
	s, prefix := newStorePrefix(t, c, redisstore.CallerTime)
	ctx := context.Background()
	cases := []struct {
		r     limit.Rule
		n     int64
		alive bool
	}{
		{limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Minute}, 1, true},
		{limit.Rule{Algorithm: limit.SlidingWindow, Limit: 10, Window: time.Minute}, 1, true},
		{limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Window: time.Minute}, 3, true},
		{limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Window: time.Minute}, 0, false},
		{limit.Rule{Algorithm: limit.Concurrency, Limit: 10}, 1, true},
		{limit.Rule{Algorithm: limit.Concurrency, Limit: 10}, 0, false},
	}
	codes := map[limit.Algorithm]string{limit.FixedWindow: "fw", limit.SlidingWindow: "sw", limit.TokenBucket: "tb", limit.Concurrency: "cc"}
	at := base.Add(15*time.Second + 300*time.Microsecond)
	for i, tc := range cases {
		k := limit.Key{Rule: fmt.Sprint("r", i)}
		res, err := s.Take(ctx, k, tc.r, at, tc.n)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("%s{%s:2:r%d:-:}", prefix, codes[tc.r.Algorithm], i)
		ttl, err := c.PTTL(ctx, name).Result()
		if err != nil {
			t.Fatal(err)
		}
		// PTTL is -2 for no key, -1 for a key without expiry.
		var want time.Duration
		switch {
		case !tc.alive:
			want = -2
		case res.Expires == math.MaxInt64:
			want = -1
		default:
			ns := res.Expires - at.UnixNano()
			want = time.Duration((ns+999_999)/1e6*1e6) + redisstore.DefaultClockSkew
		}
		// Time passes between the write and PTTL.
		if ttl > want || ttl < want-time.Second || (want < 0 && ttl != want) {
			t.Errorf("%v n %d: PTTL %v, want %v (Expires - now, rounded up)", tc.r.Algorithm, tc.n, ttl, want)
		}
	}
}

// TestTokenBucketSaturation takes hits right at the boundary where limit
// saturates a bucket's arrival time at the largest int64, and compares
// with the memory store.
func TestTokenBucketSaturation(t *testing.T) {
	c := newClient(t)
	rs := newStore(t, c, redisstore.CallerTime)
	ms := memstore.New(memstore.Options{SweepEvery: -1})
	ctx := context.Background()
	now := base.Add(123456789)
	for _, w := range []time.Duration{24 * time.Hour, time.Second + 7} {
		r := limit.Rule{Algorithm: limit.TokenBucket, Limit: 1, Window: w}
		room := (math.MaxInt64 - now.UnixNano()) / int64(w)
		for _, first := range []int64{0, 5} {
			for _, n := range []int64{room - first - 1, room - first, room - first + 1} {
				k := limit.Key{Rule: fmt.Sprint(w, first, n)}
				for _, n := range []int64{first, n, 0, -1, 1} {
					want, _ := ms.Take(ctx, k, r, now, n)
					got, err := rs.Take(ctx, k, r, now, n)
					if err != nil {
						t.Fatal(err)
					}
					if got != want {
						t.Errorf("window %v, n %d: %+v, limit computes %+v", w, n, got, want)
					}
				}
			}
		}
	}
}
