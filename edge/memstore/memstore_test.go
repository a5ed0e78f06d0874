package memstore_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/limit/limittest"
	"github.com/ratewarden/ratewarden/edge/memstore"
)

var _ limittest.Store = (*memstore.Store)(nil)

// base is a fixed instant at a UTC midnight.
var base = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func newStore(t *testing.T, opts memstore.Options) *memstore.Store {
	t.Helper()
	s := memstore.New(opts)
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	configs := []struct {
		name string
		opts memstore.Options
	}{
		{"defaults", memstore.Options{}},
		{"one_shard", memstore.Options{Shards: 1, SweepEvery: -1}},
	}
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			limittest.Run(t, func(t *testing.T) limittest.Store { return newStore(t, c.opts) })
		})
	}
}

// take records n hits at base+at; the memory store never fails.
func take(s *memstore.Store, k limit.Key, r limit.Rule, at time.Duration, n int64) limit.Result {
	res, _ := s.Take(context.Background(), k, r, base.Add(at), n)
	return res
}

func addrKey(rule string, i int) limit.Key {
	return limit.Key{Rule: rule, Addr: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})}
}

var (
	perSecond = limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Second}
	perMinute = limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Minute}
	perHour   = limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Hour}
	perDay    = limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Window: 24 * time.Hour}
	inFlight  = limit.Rule{Algorithm: limit.Concurrency, Limit: 10}
)

func TestSweep(t *testing.T) {
	s := newStore(t, memstore.Options{SweepEvery: -1})
	for i := range 10 {
		take(s, addrKey("second", i), perSecond, 0, 1) // expires at 1s
		take(s, addrKey("minute", i), perMinute, 0, 1) // at 1m
		take(s, addrKey("flight", i), inFlight, 0, 1)  // never
	}
	steps := []struct {
		at      time.Duration
		deleted int
		keys    int64
	}{
		{999 * time.Millisecond, 0, 30},
		{1 * time.Second, 10, 20},
		{1 * time.Second, 0, 20},
		{time.Minute, 10, 10},
		{1000 * time.Hour, 0, 10}, // hits in flight never expire
	}
	for _, st := range steps {
		if got := s.Sweep(base.Add(st.at)); got != st.deleted {
			t.Errorf("Sweep(base+%v) = %d, want %d", st.at, got, st.deleted)
		}
		if got := s.Stats().Keys; got != st.keys {
			t.Errorf("after Sweep(base+%v): %d keys, want %d", st.at, got, st.keys)
		}
	}
	if got := s.Stats(); got.Expired != 20 || got.Evictions != 0 {
		t.Errorf("Stats() = %+v, want 20 expired, no evictions", got)
	}
}

func TestExpiredEntryStartsAfresh(t *testing.T) {
	s := newStore(t, memstore.Options{SweepEvery: -1})
	k := addrKey("r", 1)
	bucket := limit.Rule{Algorithm: limit.TokenBucket, Limit: 1, Window: time.Hour, Burst: 1}
	steps := []struct {
		rule  limit.Rule
		at    time.Duration
		count int64
	}{
		{perMinute, 0, 1},
		{perMinute, 30 * time.Second, 2},
		{perMinute, 2 * time.Minute, 1}, // expired at 1m; unswept, but void
		{bucket, 0, 1},
		{bucket, 59 * time.Minute, 2},
		{bucket, 3 * time.Hour, 1}, // the refused hit was recorded: full again at 2h
	}
	for _, st := range steps {
		if got := take(s, k, st.rule, st.at, 1); got.Count != st.count {
			t.Errorf("%v at base+%v: count %d, want %d", st.rule.Algorithm, st.at, got.Count, st.count)
		}
	}
	if got := s.Stats().Keys; got != 2 {
		t.Errorf("%d keys, want 2 (one per algorithm)", got)
	}
}

func TestConcurrencyEntriesLeaveWhenReleased(t *testing.T) {
	s := newStore(t, memstore.Options{SweepEvery: -1})
	k := limit.Key{Rule: "r", User: "alice"}
	keys := func(want int64) {
		t.Helper()
		if got := s.Stats().Keys; got != want {
			t.Errorf("%d keys, want %d", got, want)
		}
	}
	take(s, k, inFlight, 0, 2)
	keys(1)
	s.Sweep(base.Add(1000 * time.Hour))
	keys(1)
	take(s, k, inFlight, 1000*time.Hour, -1)
	keys(1)
	if got := take(s, k, inFlight, 1000*time.Hour, -1); got.Count != 0 {
		t.Errorf("after releasing both: %d in flight", got.Count)
	}
	keys(0)
	take(s, k, inFlight, 1000*time.Hour, -1) // a release of nothing stores nothing
	keys(0)
}

func TestEvictsTheEarliestExpiry(t *testing.T) {
	// One shard of 4: a sample of 8 sees every entry, so the pick is exact.
	s := newStore(t, memstore.Options{MaxKeys: 4, Shards: 1, SweepEvery: -1})
	rules := []limit.Rule{perDay, perSecond, perHour, perMinute}
	for i, r := range rules {
		take(s, addrKey("r", i), r, 0, 3)
	}
	take(s, addrKey("r", 9), perDay, 0, 1)
	if got := s.Stats(); got != (memstore.Stats{Keys: 4, Evictions: 1}) {
		t.Errorf("Stats() = %+v, want 4 keys, 1 eviction", got)
	}
	// The kept keys first: taking the evicted one back evicts another.
	for _, i := range []int{0, 2, 3} {
		if got := take(s, addrKey("r", i), rules[i], 0, 0); got.Count != 3 {
			t.Errorf("key %d (%v window): count %d, want 3", i, rules[i].Window, got.Count)
		}
	}
	if got := take(s, addrKey("r", 1), perSecond, 0, 0); got.Count != 0 {
		t.Errorf("the evicted key (1s window): count %d, want 0", got.Count)
	}
}

func TestDeletesExpiredBeforeEvicting(t *testing.T) {
	s := newStore(t, memstore.Options{MaxKeys: 4, Shards: 1, SweepEvery: -1})
	for i, r := range []limit.Rule{perSecond, perSecond, perHour, perHour} {
		take(s, addrKey("r", i), r, 0, 1)
	}
	take(s, addrKey("r", 9), perHour, 2*time.Second, 1)
	if got := s.Stats(); got != (memstore.Stats{Keys: 3, Expired: 2}) {
		t.Errorf("Stats() = %+v, want 3 keys, 2 expired, no evictions", got)
	}
}

func TestEvictsHitsInFlightLast(t *testing.T) {
	s := newStore(t, memstore.Options{MaxKeys: 8, Shards: 1, SweepEvery: -1})
	for i := range 7 {
		take(s, addrKey("flight", i), inFlight, 0, 1)
	}
	take(s, addrKey("day", 0), perDay, 0, 1)
	take(s, addrKey("day", 1), perDay, 0, 1)
	for i := range 7 {
		if got := take(s, addrKey("flight", i), inFlight, 0, 0); got.Count != 1 {
			t.Errorf("concurrency key %d: %d in flight, want 1", i, got.Count)
		}
	}
	if got := s.Stats(); got != (memstore.Stats{Keys: 8, Evictions: 1}) {
		t.Errorf("Stats() = %+v, want 8 keys, 1 eviction", got)
	}
}

// TestFloodIsBounded floods a small store with distinct keys: it never holds
// more than MaxKeys, and every new key is still counted from one.
func TestFloodIsBounded(t *testing.T) {
	const maxKeys = 64
	s := newStore(t, memstore.Options{MaxKeys: maxKeys, Shards: 4, SweepEvery: -1})
	for i := range 10_000 {
		at := time.Duration(i) * time.Millisecond // keys start expiring after 1s
		if got := take(s, addrKey("r", i), perSecond, at, 1); got.Count != 1 {
			t.Fatalf("new key %d: count %d", i, got.Count)
		}
		if keys := s.Stats().Keys; keys > maxKeys {
			t.Fatalf("after %d keys the store holds %d, more than %d", i+1, keys, maxKeys)
		}
	}
	st := s.Stats()
	if st.Keys+int64(st.Evictions)+int64(st.Expired) != 10_000 {
		t.Errorf("Stats() = %+v: keys, evictions and expired do not add up to the 10000 keys taken", st)
	}
}

func TestMaxKeysBelowShards(t *testing.T) {
	s := newStore(t, memstore.Options{MaxKeys: 3, Shards: 64, SweepEvery: -1})
	for i := range 100 {
		take(s, addrKey("r", i), perDay, 0, 1)
	}
	if got := s.Stats().Keys; got > 3 || got == 0 {
		t.Errorf("%d keys held, want 1 to 3", got)
	}
}

// TestKeyIdentity covers what the conformance suite cannot see: the
// algorithm is part of the key, and long rule ids and users are told
// apart.
func TestKeyIdentity(t *testing.T) {
	s := newStore(t, memstore.Options{SweepEvery: -1})
	sliding := perMinute
	sliding.Algorithm = limit.SlidingWindow
	long := strings.Repeat("r", 200)
	cases := []struct {
		name   string
		a, b   limit.Key
		ra, rb limit.Rule
	}{
		{"algorithm_changed_under_one_rule_id", addrKey("r", 1), addrKey("r", 1), perMinute, sliding},
		{"long_rule_ids", addrKey(long+"a", 1), addrKey(long+"b", 1), perMinute, perMinute},
		{"long_users", limit.Key{Rule: "r", User: long + "a"}, limit.Key{Rule: "r", User: long + "b"}, perMinute, perMinute},
		{"long_rule_and_user_boundary", limit.Key{Rule: long + "a", User: "b"}, limit.Key{Rule: long, User: "ab"}, perMinute, perMinute},
	}
	for _, c := range cases {
		take(s, c.a, c.ra, 0, 3)
		if got := take(s, c.b, c.rb, 0, 1); got.Count != 1 {
			t.Errorf("%s: the second key saw count %d, want 1", c.name, got.Count)
		}
		if got := take(s, c.a, c.ra, 0, 0); got.Count != 3 {
			t.Errorf("%s: the first key saw count %d, want 3", c.name, got.Count)
		}
	}
}

func TestTakeDoesNotAllocate(t *testing.T) {
	s := newStore(t, memstore.Options{SweepEvery: -1})
	keys := []limit.Key{
		addrKey("anonymous./api", 1),
		{Rule: "anonymous./api", Addr: netip.MustParseAddr("2001:db8::1")},
		{Rule: "authenticated./api", User: "6f1c2a9e-4b1d-4f5e-9a7c-3d2e1f0a9b8c"},
		{Rule: strings.Repeat("r", 200), User: "long"},
	}
	for _, k := range keys {
		take(s, k, perMinute, 0, 1)
		allocs := testing.AllocsPerRun(1000, func() { take(s, k, perMinute, 0, 1) })
		if allocs != 0 {
			t.Errorf("Take(%q %v %q) on an existing key: %v allocs", k.Rule, k.Addr, k.User, allocs)
		}
	}
}

// TestSweeperRunsUntilClose runs the real sweeper on the fake clock of a
// synctest bubble, which also fails the test if the goroutine outlives it.
func TestSweeperRunsUntilClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.Options{SweepEvery: 10 * time.Second})
		start := time.Now() // midnight: a 1s window ends at start+1s
		if _, err := s.Take(t.Context(), addrKey("r", 1), perSecond, start, 1); err != nil {
			t.Fatal(err)
		}
		<-time.After(9 * time.Second) // the bubble's clock, not the wall clock
		synctest.Wait()
		if got := s.Stats(); got.Keys != 1 {
			t.Fatalf("before the first sweep: Stats() = %+v, want 1 key", got)
		}
		<-time.After(1 * time.Second)
		synctest.Wait()
		if got := s.Stats(); got.Keys != 0 || got.Expired != 1 {
			t.Fatalf("after the first sweep: Stats() = %+v, want 0 keys, 1 expired", got)
		}
		if err := s.Close(t.Context()); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := s.Close(t.Context()); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
}

func TestCloseWithoutSweeper(t *testing.T) {
	s := memstore.New(memstore.Options{SweepEvery: -1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Nothing to wait for: a done context does not make Close fail.
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestInProcess(t *testing.T) {
	var s interface{ InProcess() bool } = memstore.New(memstore.Options{SweepEvery: -1})
	if !s.InProcess() {
		t.Fatal("InProcess() = false")
	}
}

func TestRejectsANonPositiveWindow(t *testing.T) {
	s := newStore(t, memstore.Options{SweepEvery: -1})
	k := addrKey("r", 1)
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
		r := limit.Rule{Algorithm: alg, Limit: 1}
		if res, err := s.Take(context.Background(), k, r, base, 1); err == nil {
			t.Errorf("%v with no window: %+v, no error", alg, res)
		}
	}
	// The store still counts, and concurrency limits need no window.
	if got := take(s, k, inFlight, 0, 1); got.Count != 1 {
		t.Errorf("concurrency after the refusals: count %d, want 1", got.Count)
	}
}
