// Package memstore is the in-process counter store: the edge's default, and
// its local fallback while a distributed store is unavailable.
//
// A Store is a fixed number of shards, each a mutex and an open-addressing
// hash table from a 64-bit hash of the key to the key's limit.State and the
// instant it expires: 32 bytes a slot, at most 3/4 of the slots in use, so
// 43 to 85 bytes of heap a key.
// Keys are hashed with hash/maphash and keyed multiplications, under a
// seed and keys drawn per store, so clients cannot choose keys that
// collide; two keys share a counter only if
// their hashes collide, which among a million keys happens to some pair
// with a chance of about 3 in 100 million. A key's identity is its rule id,
// its rule's algorithm, and its user when User is set, otherwise its
// address (an IPv4 address and the IPv4-mapped IPv6 address differ, and so
// do IPv6 addresses in different zones).
//
// An entry whose Expires has passed is the same as no entry: Take starts it
// from the zero State, Sweep deletes it, and a background goroutine calls
// Sweep every Options.SweepEvery. Concurrency counters with hits in flight
// never expire; they are deleted when the last hit is released.
//
// A Store tracks at most Options.MaxKeys keys, MaxKeys/Shards per shard.
// When a new key arrives at a full shard, the store first deletes that
// shard's expired entries, then, if the shard is still full, samples up to
// 8 of its entries (the run of entries from a random slot) and evicts the
// one that expires first, counting the eviction in Stats. Under a flood
// of distinct keys the counters forgotten first are those nearest their
// expiry, and counters with hits in flight last. Forgetting a counter can
// only under-count: a flood makes the store enforce its limits less
// strictly, never refuse a client that is within them. A full shard is
// scanned for expired entries at most once per MaxKeys/Shards/8 new keys,
// and only once one may have expired, so a flood does not make every new
// key cost a scan.
package memstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/internal/hashmix"
)

// Options configure a Store. The zero value gives the defaults.
type Options struct {
	// MaxKeys bounds the keys tracked at once; default 1,000,000.
	MaxKeys int
	// Shards is the number of independently locked shards, rounded up to
	// a power of two and down to at most MaxKeys; default 64.
	Shards int
	// SweepEvery is how often the background goroutine deletes expired
	// keys; default 10s. A negative value starts no goroutine: expired
	// keys are then deleted by Sweep and to make room.
	SweepEvery time.Duration
}

// Defaults.
const (
	DefaultMaxKeys    = 1_000_000
	DefaultShards     = 64
	DefaultSweepEvery = 10 * time.Second
)

// sample is how many entries a full shard looks at to pick one to evict.
const sample = 8

// Store is the in-process counter store. It is safe for concurrent use.
// The zero Store is not usable; create one with New and stop its sweeper
// with Close.
type Store struct {
	seed     maphash.Seed
	keys     [8]uint64 // random keys of hash's mixing steps
	shards   []shard
	shift    uint // hash >> shift is the shard index
	perShard int  // keys a shard may hold
	scanGap  int  // new keys at a full shard between scans for expired entries

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// shard is one lock's share of the keys.
type shard struct {
	mu sync.Mutex
	t  table
	// minExp is at most the earliest exp in t: no entry has expired before.
	minExp int64
	// credit counts down new keys at the full shard until the next scan.
	credit int

	keys      atomic.Int64
	evictions atomic.Uint64
	expired   atomic.Uint64
}

// entry is one key's counter: 24 bytes, 32 with its hash.
type entry struct {
	limit.State
	exp int64 // unix ns from Result.Expires; the entry is void from then on
}

// New returns a store and starts its sweeper.
func New(opts Options) *Store {
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	if opts.Shards <= 0 {
		opts.Shards = DefaultShards
	}
	if opts.SweepEvery == 0 {
		opts.SweepEvery = DefaultSweepEvery
	}
	// A power of two, so that the shard is the hash's top bits, and no more
	// shards than keys, so that every shard holds at least one.
	lg := bits.Len(uint(opts.Shards - 1))
	for lg > 0 && 1<<lg > opts.MaxKeys {
		lg--
	}
	s := &Store{
		seed:     maphash.MakeSeed(),
		shards:   make([]shard, 1<<lg),
		shift:    uint(64 - lg),
		perShard: opts.MaxKeys >> lg,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	s.scanGap = max(s.perShard/8, 1)
	for i := range s.keys {
		s.keys[i] = rand.Uint64() | 1
	}
	for i := range s.shards {
		s.shards[i].t.slots = make([]slot, minSlots)
		s.shards[i].minExp = math.MaxInt64
	}
	if opts.SweepEvery < 0 {
		close(s.done)
		return s
	}
	go s.sweep(opts.SweepEvery)
	return s
}

func (s *Store) sweep(every time.Duration) {
	defer close(s.done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			s.Sweep(time.Now())
		}
	}
}

// Close stops the sweeper and waits for it to return, or for ctx to be
// done. Take and Sweep still work after Close.
func (s *Store) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { close(s.stop) })
	select {
	case <-s.done:
		return nil
	default:
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close memory store: %w", ctx.Err())
	}
}

// InProcess reports true: Take never blocks and, given a valid rule, never
// fails, so the caller needs no deadline or circuit breaker around it.
func (s *Store) InProcess() bool { return true }

// Take records n hits of key under rule at now (n < 0 releases concurrency
// hits) and returns what they saw. It never blocks and ignores ctx; it
// fails only for a rule whose Window is not positive, which configuration
// validation rules out.
func (s *Store) Take(_ context.Context, key limit.Key, rule limit.Rule, now time.Time, n int64) (limit.Result, error) {
	return s.TakeRef(&key, &rule, now, n)
}

// TakeRef is Take with the key and the rule passed by reference, for a
// caller that holds the store as a *Store (the edge's limiter): no copy
// of either and no call through an interface. It does not retain them.
func (s *Store) TakeRef(key *limit.Key, rule *limit.Rule, now time.Time, n int64) (limit.Result, error) {
	if rule.Window <= 0 && rule.Algorithm != limit.Concurrency {
		// The algorithms divide by it, and a panic would leave a shard locked.
		return limit.Result{}, fmt.Errorf("take %s: window %v: want a positive window", key.Rule, rule.Window)
	}
	h := s.hash(key, rule.Algorithm)
	sh := &s.shards[h>>s.shift]
	sh.mu.Lock()
	res := s.take(sh, h, rule, now.UnixNano(), n)
	sh.mu.Unlock()
	return res, nil
}

// take is Take on shard sh, whose mutex is held, for the key hashed to h.
func (s *Store) take(sh *shard, h uint64, rule *limit.Rule, now, n int64) limit.Result {
	i, ok := sh.t.find(h)
	if ok {
		e := &sh.t.slots[i].e
		if e.exp <= now {
			e.State = limit.State{}
		}
		res := rule.Take(&e.State, now, n)
		if res.Expires <= now {
			// The state is the zero State again: nothing to keep.
			sh.t.deleteAt(i)
			sh.keys.Store(int64(sh.t.n))
			return res
		}
		e.exp = res.Expires
		sh.minExp = min(sh.minExp, e.exp)
		return res
	}
	var e entry
	res := rule.Take(&e.State, now, n)
	if res.Expires <= now {
		return res
	}
	e.exp = res.Expires
	if sh.t.n >= s.perShard || sh.t.full() {
		s.makeRoom(sh, now)
		i, _ = sh.t.find(h)
	}
	sh.t.put(i, h, e)
	sh.minExp = min(sh.minExp, e.exp)
	sh.keys.Store(int64(sh.t.n))
	return res
}

// Key identity kinds, so that an address, a user and no identity never
// hash alike.
const (
	kindNone byte = iota
	kind4
	kind6
	kindUser
)

// hash returns the key's 64-bit hash, never 0 (the empty slot). The rule
// id, and the user or the address zone if any, are hashed with maphash
// under the store's seed, straight from their memory; the algorithm, the
// kind and the address words (4 bytes, or 16) are folded in by mix under
// the store's random keys. No bytes are gathered into a buffer first: a
// hash read back from a buffer just written waits for the stores.
func (s *Store) hash(k *limit.Key, alg limit.Algorithm) uint64 {
	h := maphash.String(s.seed, k.Rule)
	tag := uint64(alg) << 8
	var hi, lo uint64
	zoned := false
	switch {
	case k.User != "":
		tag |= uint64(kindUser)
		lo = maphash.String(s.seed, k.User)
	case k.Addr.Is4():
		tag |= uint64(kind4)
		a := k.Addr.As4()
		lo = uint64(binary.BigEndian.Uint32(a[:]))
	case k.Addr.IsValid():
		tag |= uint64(kind6)
		a := k.Addr.As16()
		hi, lo = binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(a[8:])
		zoned = k.Addr.Zone() != ""
	}
	h = mix(h^s.keys[0], tag^s.keys[1])
	h = mix(h^s.keys[2], hi^s.keys[3])
	h = mix(h^s.keys[4], lo^s.keys[5])
	if zoned {
		h = mix(h^s.keys[6], maphash.String(s.seed, k.Addr.Zone())^s.keys[7])
	}
	// mix alone leaves the low bits, which pick a key's slot, uneven over
	// runs of neighbouring addresses (TestHashSpread).
	return max(hashmix.Fmix64(h), 1)
}

// mix folds a and b into 64 bits: the two halves of their 128-bit
// product, xored (wyhash's mixing step). With a and b xored with random
// keys first, a client that does not know the keys cannot choose inputs
// that collide.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// makeRoom makes room in sh for one more key: at the shard's share of keys
// it deletes expired entries or evicts one, and it grows a table that one
// more key would fill past 3/4; sh.mu is held.
func (s *Store) makeRoom(sh *shard, now int64) {
	if sh.t.n >= s.perShard && sh.credit <= 0 && now >= sh.minExp {
		sh.credit = s.scanGap
		s.deleteExpired(sh, now)
	}
	if sh.t.n >= s.perShard {
		sh.credit--
		s.evict(sh, now)
	}
	if sh.t.full() {
		sh.t.resize(2 * len(sh.t.slots))
	}
}

// evict deletes the entry that expires first among up to sample entries
// from a random slot on; sh.mu is held and the shard is not empty.
func (s *Store) evict(sh *shard, now int64) {
	slots := sh.t.slots
	mask := len(slots) - 1
	victim, exp := -1, int64(math.MaxInt64)
	for i, seen := int(rand.Uint64())&mask, 0; seen < min(sample, sh.t.n); i = (i + 1) & mask {
		if slots[i].h == 0 {
			continue
		}
		if victim < 0 || slots[i].e.exp < exp {
			victim, exp = i, slots[i].e.exp
		}
		seen++
	}
	sh.t.deleteAt(victim)
	if exp <= now {
		sh.expired.Add(1)
	} else {
		sh.evictions.Add(1)
	}
}

// deleteExpired deletes the shard's expired entries and returns how many,
// then halves its table while at most 1/8 of it is in use; sh.mu is held.
func (s *Store) deleteExpired(sh *shard, now int64) int {
	least := int64(math.MaxInt64)
	deleted := sh.t.deleteIf(func(e *entry) bool {
		if e.exp <= now {
			return true
		}
		least = min(least, e.exp)
		return false
	})
	sh.minExp = least
	size := len(sh.t.slots)
	for size > minSlots && sh.t.n <= size/8 {
		size /= 2
	}
	if size != len(sh.t.slots) {
		sh.t.resize(size)
	}
	sh.expired.Add(uint64(deleted))
	sh.keys.Store(int64(sh.t.n))
	return deleted
}

// Sweep deletes the keys expired at now and returns how many it deleted.
// The background sweeper calls it with time.Now(); tests call it with
// fixed instants.
func (s *Store) Sweep(now time.Time) int {
	ns := now.UnixNano()
	deleted := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		if ns >= sh.minExp {
			deleted += s.deleteExpired(sh, ns)
		}
		sh.mu.Unlock()
	}
	return deleted
}

// Stats are a store's counters.
type Stats struct {
	Keys      int64  // keys tracked now, expired or not
	Evictions uint64 // live keys forgotten to make room for new ones
	Expired   uint64 // expired keys deleted, by Sweep or to make room
}

// Stats returns the store's counters without taking its locks; under
// concurrent Takes the fields are each current but not a snapshot together.
func (s *Store) Stats() Stats {
	var st Stats
	for i := range s.shards {
		sh := &s.shards[i]
		st.Keys += sh.keys.Load()
		st.Evictions += sh.evictions.Load()
		st.Expired += sh.expired.Load()
	}
	return st
}
