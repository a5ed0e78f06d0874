// Package syncstore wraps a distributed counter store so that an edge node
// writes to it orders of magnitude less often, with a stated bound on the
// error. Each edge node wraps the shared store in its own Store; two
// mechanisms cut the writes.
//
// # Over-limit cache
//
// As envoyproxy/ratelimit does, a Store remembers keys that the store has
// put beyond the point where every further hit is refused at the block
// level, and answers their hits without a store call until the instant the
// store could answer differently. A key is cached when its recorded count
// has reached its rule's MaxCount (the record ceiling: the edge sets it to
// the challenge ceiling + 1), because from then on no hit of any node is
// recorded and the store's state is frozen:
//
//   - fixed window: until the window ends. The cached Result is the one the
//     store would return, field for field: the wrapper replays limit.Rule.Take
//     on the frozen state.
//   - token bucket: until the bucket has drained to MaxCount-1 hits, from the
//     Result's Expires (the theoretical arrival time): again field for field.
//   - sliding window: the previous window's weighted share decays while the
//     state is frozen, so the wrapper caches only until the share may have
//     lost one hit (Window ÷ MaxCount, the previous count being at most
//     MaxCount) and never past the window's end. In that span the store
//     would record at most one hit, at count MaxCount, and so would answer
//     block as the cache does; the cached Count may exceed the store's by
//     one, and a flood that stops inside the span leaves the store one hit
//     lower than it would have been.
//
// Only rules whose MaxCount exceeds their capacity are cached, and only
// refusals. A rule without MaxCount counts refused hits without bound, so
// the wrapper cannot tell a challenge from a block and never caches it.
// A negative n (a refund) goes to the store and drops the key's cached
// answer on this node; a refund made on another node is not seen by this
// node's cache until its entry expires.
//
// # Batched counting
//
// For fixed and sliding window rules, a Store may admit hits of a key
// locally and send the store their count later, as one delta. With Nodes
// edge nodes and MaxError e, a rule of capacity L has the per-node slack
//
//	s = ⌊⌊e·L⌋ ÷ Nodes⌋
//
// and a node admits a hit of a key locally only when, in the current
// window, it knows the store's count K (learned from a store answer in this
// window), its own unrecorded hits u (pending, being sent, or given up on)
// satisfy
//
//	u + n ≤ s   and   K + u + n ≤ L − Nodes·s.
//
// Every other hit goes to the store synchronously, after this node's
// pending hits. Pending hits are sent when they reach s, when the key's
// window rolls (stamped in their own window), on every Flush (the
// background flusher calls it every FlushInterval) and on Close. A rule
// with s = 0 (a small limit or e = 0), a rule for which Options.Exact
// reports true, and every rule once the Store is closed are counted exactly:
// every hit goes to the store. Concurrency rules, token buckets, n ≤ 0 and
// rules whose MaxCount is at most their capacity are never batched.
//
// The bound: in any window, the hits admitted across all nodes number at
// most L + Nodes·s ≤ L + e·L, so at most a fraction e of the limit is
// over-admitted; for a sliding window, the previous window's weighted share
// at any instant plus the hits admitted in the current window so far are
// at most L + Nodes·s. Sketch, for a fixed window: let z be the node whose
// last store answer before its last local admission in the window came
// last, at instant τ, reporting count C(τ). Hits admitted in the window fall
// into three sets. Those recorded by τ number at most C(τ). Those of any
// node j that were unrecorded at τ or admitted locally after τ are all
// counted in j's u, which no store answer to j reduced after τ, so they
// number at most s per node, Nodes·s in all. Those admitted synchronously
// after τ each saw a count ≤ L that includes C(τ) and every earlier one of
// them, so they number at most L − C(τ). The sum is at most L + Nodes·s. For
// a sliding window the same sum holds with the weighted share, which only
// shrinks within a window. The bound needs every node's Nodes to be the real
// number of nodes (more nodes: Nodes·s grows with them), no refunds, and a
// store that records every synchronous hit below MaxCount.
//
// The sketch does not use the near-limit rule K + u + n ≤ L − Nodes·s: the
// bound holds without it. The rule makes the store, not a node's estimate,
// decide every hit once a node sees the key within Nodes·s of its limit,
// and makes the node send its pending hits then; in the tests it halves the
// over-admission seen (see TestBoundInterleaved) and gives the hits near
// the limit the store's Count and Remaining.
//
// The lower bound: a hit is refused only by a store answer above L (or the
// cache of one), and the store counts every hit of this window that has
// been sent to it, so a window admits at least L hits when at least L arrive
// — less only the pending hits of the window before that a node sent late
// (at most Nodes·s; the store counts a hit stamped in the window before in
// the current one) and hits that were dropped (see Stats).
//
// A locally admitted hit's Result has the Reset and Expires the store would
// give and the node's estimate K + u + n as its Count.
//
// # Clocks
//
// The cache and the windows of batched counting run on the store's clock,
// which is not the caller's when the store reads its own (Redis under the
// server clock): a Store learns the offset from every answer (the instant
// the answer was computed at, Expires less Reset, against the now it
// passed) and adds it to the now of every hit and Flush. An answer is
// computed after the call starts, so the offset is too large by up to a
// round trip, never too small: cached answers end early, never late. A
// store that counts by the caller's clock shows an offset of 0.
package syncstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/edge/limit"
)

// Backend is the counter store a Store wraps, shared by the edge nodes: the
// edge's store interface, as the DynamoDB, Redis and memory stores provide.
type Backend interface {
	Take(ctx context.Context, key limit.Key, rule limit.Rule, now time.Time, n int64) (limit.Result, error)
}

var _ Backend = (*Store)(nil)

// Options configure a Store.
type Options struct {
	// Store is the counter store shared by the edge nodes. Required.
	Store Backend
	// MaxError is the over-admission allowed per window, as a fraction of a
	// rule's limit, across all Nodes: 0 to 1. 0 counts every rule exactly.
	MaxError float64
	// Nodes is the number of edge nodes sharing Store, each with its own
	// Store: 1 to MaxNodes, required when MaxError is above 0.
	Nodes int
	// FlushInterval is how often the background flusher sends pending
	// counts: from MinFlushInterval to MaxFlushInterval; 0 means
	// DefaultFlushInterval, and a negative value starts no flusher (the
	// caller calls Flush).
	FlushInterval time.Duration
	// MaxKeys bounds the keys tracked at once: 0 means DefaultMaxKeys.
	MaxKeys int
	// Exact reports the rule ids to count exactly, every hit at the store,
	// whatever MaxError; nil means none.
	Exact func(rule string) bool
}

// Defaults and ranges.
const (
	DefaultFlushInterval = time.Second
	MinFlushInterval     = 10 * time.Millisecond
	MaxFlushInterval     = time.Hour
	DefaultMaxKeys       = 100_000
	MaxNodes             = 100_000
)

const (
	numShards = 64
	// maxAttempts bounds how often a node sends one pending delta before it
	// gives the delta up.
	maxAttempts = 4
	// maxFill bounds the calls that record what fits of a delta the store
	// refused whole because it would pass MaxCount.
	maxFill = 3
	// flushWorkers bounds the store calls one Flush makes at once.
	flushWorkers = 8
	// sample is how many entries a full shard looks at to pick one to evict.
	sample = 8
)

// Store is a counter store that batches and caches hits in front of a
// shared Backend. It is safe for concurrent use. The zero Store is not
// usable; create one with New and stop it with Close.
type Store struct {
	backend  Backend
	maxError float64
	nodes    int64
	exact    func(string) bool
	every    time.Duration

	seed     maphash.Seed
	shards   []shard
	mask     uint64
	perShard int
	scanGap  int

	// offset is the store's clock minus the caller's, in ns, as the last
	// answer showed it: 0 for stores that count by the caller's clock.
	offset atomic.Int64

	closed    atomic.Bool
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	storeCalls  atomic.Uint64
	errors      atomic.Uint64
	flushes     atomic.Uint64
	flushedHits atomic.Uint64
	dropped     atomic.Uint64
	untracked   atomic.Uint64
	evictions   atomic.Uint64
}

// New validates opts, fills in the defaults and returns a Store whose
// flusher is running.
func New(opts Options) (*Store, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.FlushInterval == 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.MaxKeys == 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	shards := numShards
	for shards > 1 && shards > opts.MaxKeys {
		shards /= 2
	}
	s := &Store{
		backend:  opts.Store,
		maxError: opts.MaxError,
		nodes:    int64(max(opts.Nodes, 1)),
		exact:    opts.Exact,
		every:    opts.FlushInterval,
		seed:     maphash.MakeSeed(),
		shards:   make([]shard, shards),
		mask:     uint64(shards - 1),
		perShard: opts.MaxKeys / shards,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	s.scanGap = max(s.perShard/8, 1)
	for i := range s.shards {
		s.shards[i].m = make(map[mapKey]*entry)
		s.shards[i].minExp = math.MaxInt64
	}
	if opts.FlushInterval < 0 {
		close(s.done)
		return s, nil
	}
	go s.run(opts.FlushInterval)
	return s, nil
}

func (o *Options) validate() error {
	var errs []error
	if o.Store == nil {
		errs = append(errs, errors.New("Store: nil: want a counter store"))
	}
	if !(o.MaxError >= 0 && o.MaxError <= 1) { // also NaN
		errs = append(errs, fmt.Errorf("MaxError: %v: want 0 to 1", o.MaxError))
	}
	switch {
	case o.Nodes < 0 || o.Nodes > MaxNodes:
		errs = append(errs, fmt.Errorf("Nodes: %d: want 1 to %d", o.Nodes, MaxNodes))
	case o.Nodes == 0 && o.MaxError > 0:
		errs = append(errs, fmt.Errorf("Nodes: 0: want 1 to %d when MaxError is above 0", MaxNodes))
	}
	if o.FlushInterval > 0 && (o.FlushInterval < MinFlushInterval || o.FlushInterval > MaxFlushInterval) {
		errs = append(errs, fmt.Errorf("FlushInterval: %v: want %v to %v, 0 for %v, or negative for no flusher",
			o.FlushInterval, MinFlushInterval, MaxFlushInterval, DefaultFlushInterval))
	}
	if o.MaxKeys < 0 {
		errs = append(errs, fmt.Errorf("MaxKeys: %d: want at least 1, or 0 for %d", o.MaxKeys, DefaultMaxKeys))
	}
	if len(errs) > 0 {
		return fmt.Errorf("new sync store: %w", errors.Join(errs...))
	}
	return nil
}

// run is the background flusher. Each pass has one interval to finish: a
// pass that takes longer would only delay the next.
func (s *Store) run(every time.Duration) {
	defer close(s.done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), every)
			s.Flush(ctx, time.Now()) // errors are counted in Stats
			cancel()
		}
	}
}

// Close stops the flusher, waits for it (or for ctx), and sends every
// pending count. From then on every hit goes to the store (the over-limit
// cache still answers). Call it once requests have stopped: a send that a
// request started and that fails after Close is not retried.
func (s *Store) Close(ctx context.Context) error {
	s.closed.Store(true)
	s.closeOnce.Do(func() { close(s.stop) })
	select {
	case <-s.done:
	case <-ctx.Done():
		return fmt.Errorf("close sync store: %w", ctx.Err())
	}
	if err := s.Flush(ctx, time.Now()); err != nil {
		return fmt.Errorf("close sync store: %w", err)
	}
	return nil
}

// Take records n hits of key under rule at now and returns what they saw:
// the store's answer, the cached answer of a key over the limit, or a local
// admission. It returns the store's error when it had to ask the store;
// errors of sends in the background are counted in Stats instead.
func (s *Store) Take(ctx context.Context, key limit.Key, rule limit.Rule, now time.Time, n int64) (limit.Result, error) {
	res, _, err := s.TakeRemote(ctx, key, rule, now, n)
	return res, err
}

// TakeRemote is Take that also reports whether the wrapped store answered
// the call: false for the over-limit cache's answers and local admissions,
// which say nothing of the store's health. A returned error is always the
// store's.
func (s *Store) TakeRemote(ctx context.Context, key limit.Key, rule limit.Rule, now time.Time, n int64) (limit.Result, bool, error) {
	if n <= 0 || rule.Algorithm == limit.Concurrency || rule.Window <= 0 {
		res, err := s.call(ctx, key, rule, now, n)
		if n < 0 && err == nil && rule.Algorithm != limit.Concurrency {
			s.forget(&key, &rule)
		}
		return res, true, err
	}
	if slack := s.slack(&key, &rule); slack > 0 {
		return s.takeBatched(ctx, key, &rule, now, n, slack)
	}
	return s.takeExact(ctx, key, &rule, now, n)
}

// slack is the rule's per-node slack s, 0 for rules counted exactly.
func (s *Store) slack(key *limit.Key, rule *limit.Rule) int64 {
	switch {
	case s.maxError == 0,
		rule.Algorithm != limit.FixedWindow && rule.Algorithm != limit.SlidingWindow,
		rule.MaxCount > 0 && rule.MaxCount <= rule.Limit,
		s.closed.Load(),
		s.exact != nil && s.exact(key.Rule):
		return 0
	}
	return int64(s.maxError*float64(rule.Limit)) / s.nodes
}

// call takes hits at the store, counting the call and its error, and
// learns the store's clock from the answer.
func (s *Store) call(ctx context.Context, key limit.Key, rule limit.Rule, now time.Time, n int64) (limit.Result, error) {
	s.storeCalls.Add(1)
	res, err := s.backend.Take(ctx, key, rule, now, n)
	if err != nil {
		s.errors.Add(1)
		return res, err
	}
	if at, ok := answeredAt(&rule, res); ok {
		s.offset.Store(at - now.UnixNano())
	}
	return res, nil
}

// storeNow is now on the store's clock, as far as its last answer tells:
// the cache and the windows of batched counting follow the clock the
// store counts by, which is not the caller's when the store reads its own
// (Redis under the server clock).
func (s *Store) storeNow(now time.Time) int64 { return now.UnixNano() + s.offset.Load() }

// callerTime turns an instant of the store's clock back into the caller's.
func (s *Store) callerTime(ns int64) time.Time { return time.Unix(0, ns-s.offset.Load()) }

// answeredAt returns the instant, on the store's clock, that the store
// computed res at: a store that counts by the caller's clock answers at
// the now it was given, one that reads its own clock at its own now. The
// sample is late by up to the call's round trip, never early, so the
// offset it gives moves the cache's expiries earlier, not later.
func answeredAt(rule *limit.Rule, res limit.Result) (int64, bool) {
	if rule.Window <= 0 {
		return 0, false
	}
	switch rule.Algorithm {
	case limit.FixedWindow, limit.TokenBucket:
		return res.Expires - int64(res.Reset), true
	case limit.SlidingWindow:
		return res.Expires - int64(rule.Window) - int64(res.Reset), true
	}
	return 0, false
}

// cacheable reports whether the rule's refusals can be cached: its count
// stops being recorded above its capacity.
func cacheable(rule *limit.Rule) bool {
	return rule.MaxCount > rule.Capacity() && rule.Algorithm != limit.Concurrency
}

// takeExact sends the hits to the store unless the key is cached over the
// limit.
func (s *Store) takeExact(ctx context.Context, key limit.Key, rule *limit.Rule, now time.Time, n int64) (limit.Result, bool, error) {
	if !cacheable(rule) {
		res, err := s.call(ctx, key, *rule, now, n)
		return res, true, err
	}
	ns := s.storeNow(now)
	sh := s.shardFor(&key)
	mk := mapKey{key, rule.Algorithm}
	sh.mu.RLock()
	if e := sh.m[mk]; e != nil {
		if res, ok := e.cached(rule, ns, n); ok {
			sh.mu.RUnlock()
			sh.cacheHits.Add(1)
			return res, false, nil
		}
	}
	sh.mu.RUnlock()
	res, err := s.call(ctx, key, *rule, now, n)
	if err != nil {
		return res, true, err
	}
	ns = s.storeNow(now)
	if f, ok := freeze(rule, res, ns, n); ok {
		sh.mu.Lock()
		if e := s.entryFor(sh, mk, rule, ns); e != nil {
			e.f = f
			sh.expires(e, f.until)
		}
		sh.mu.Unlock()
	}
	return res, true, nil
}

// forget drops what this node knows of the key after a refund.
func (s *Store) forget(key *limit.Key, rule *limit.Rule) {
	sh := s.shardFor(key)
	sh.mu.Lock()
	if e := sh.m[mapKey{*key, rule.Algorithm}]; e != nil {
		e.f = frozen{}
		e.hasKnown = false
	}
	sh.mu.Unlock()
}

// Stats are a Store's counters.
type Stats struct {
	StoreCalls  uint64 // calls to the wrapped store, synchronous and sends of pending hits
	CacheHits   uint64 // hits answered by the over-limit cache
	LocalAdmits uint64 // hits admitted locally, to be sent later
	Flushes     uint64 // deltas of pending hits the store accepted
	FlushedHits uint64 // hits those deltas carried
	Errors      uint64 // failed calls to the wrapped store
	// Dropped counts locally admitted hits the store never recorded: given
	// up after maxAttempts failed sends, sent after their window had
	// passed and failed, or refused because the store was at MaxCount.
	Dropped   uint64
	Untracked uint64 // hits sent straight to the store because the key table was full
	Keys      int64  // keys tracked now
	Evictions uint64 // live keys forgotten to make room
}

// Stats returns the counters; under concurrent use each is current but
// they are not a snapshot together.
func (s *Store) Stats() Stats {
	st := Stats{
		StoreCalls:  s.storeCalls.Load(),
		Flushes:     s.flushes.Load(),
		FlushedHits: s.flushedHits.Load(),
		Errors:      s.errors.Load(),
		Dropped:     s.dropped.Load(),
		Untracked:   s.untracked.Load(),
		Evictions:   s.evictions.Load(),
	}
	for i := range s.shards {
		sh := &s.shards[i]
		st.CacheHits += sh.cacheHits.Load()
		st.LocalAdmits += sh.localAdmits.Load()
		st.Keys += sh.keys.Load()
	}
	return st
}

// ceilDiv returns ⌈a/b⌉ for b > 0 and 0 for a ≤ 0, without overflow.
func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a-1)/b + 1
}

// interval is the token bucket's emission interval, as package limit
// computes it.
func interval(r *limit.Rule) int64 { return max(int64(r.Window)/max(r.Limit, 1), 1) }

// lo32 bounds a sliding window's current count in limit.State.
const lo32 = 1<<32 - 1
