package syncstore

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"

	"github.com/ratewarden/ratewarden/edge/limit"
)

// mapKey identifies a counter as the stores do: the key under one
// algorithm.
type mapKey struct {
	key limit.Key
	alg limit.Algorithm
}

// entry is what a node knows of one key; its shard's lock guards it.
type entry struct {
	rule limit.Rule // the rule the fields below were learned under
	f    frozen     // the over-limit cache

	// Batched counting, in window win.
	win      int64
	known    int64 // the store's count in win, when hasKnown
	hasKnown bool
	pending  int64 // hits admitted locally, not yet sent
	inflight int64 // hits being sent
	lost     int64 // hits of win given up on: still charged to the slack
	stamp    int64 // the latest instant of a pending hit, unix ns
	failures int   // failed sends of pending hits since the last success

	exp int64 // unix ns from which the entry holds nothing of use
}

// deletable reports whether dropping the entry at ns loses no count and no
// charge against the slack.
func (e *entry) deletable(ns int64) bool {
	return e.pending == 0 && e.inflight == 0 && (e.lost == 0 || ns >= e.exp)
}

// shard is one lock's share of the keys.
type shard struct {
	mu sync.RWMutex
	m  map[mapKey]*entry
	// minExp is at most the earliest exp in m.
	minExp int64
	// credit counts down new keys at the full shard until the next scan.
	credit int

	keys        atomic.Int64
	cacheHits   atomic.Uint64
	localAdmits atomic.Uint64
}

// shardFor picks the key's shard by a seeded hash, so that clients cannot
// pile their keys into one shard.
func (s *Store) shardFor(k *limit.Key) *shard {
	h := maphash.String(s.seed, k.Rule)
	if k.User != "" {
		h = h*0x9e3779b97f4a7c15 ^ maphash.String(s.seed, k.User)
	} else {
		a := k.Addr.As16()
		h = h*0x9e3779b97f4a7c15 ^ maphash.Bytes(s.seed, a[:])
	}
	return &s.shards[h&s.mask]
}

// expires moves e's expiry to at least exp; sh.mu is held.
func (sh *shard) expires(e *entry, exp int64) {
	e.exp = max(e.exp, exp)
	sh.minExp = min(sh.minExp, e.exp)
}

// entryFor returns the key's entry, creating it if there is room, or nil;
// an entry learned under another rule (a configuration reload) forgets what
// it learned. sh.mu is held for writing.
func (s *Store) entryFor(sh *shard, mk mapKey, rule *limit.Rule, ns int64) *entry {
	if e := sh.m[mk]; e != nil {
		if e.rule != *rule {
			e.rule, e.f, e.hasKnown = *rule, frozen{}, false
		}
		return e
	}
	if len(sh.m) >= s.perShard && !s.makeRoom(sh, ns) {
		return nil
	}
	e := &entry{rule: *rule, win: math.MinInt64}
	sh.m[mk] = e
	sh.keys.Store(int64(len(sh.m)))
	return e
}

// makeRoom deletes expired entries of the full shard, or evicts one, and
// reports whether there is room; sh.mu is held. A full shard is scanned at
// most once per scanGap new keys, and only once an entry may have expired.
func (s *Store) makeRoom(sh *shard, ns int64) bool {
	if sh.credit <= 0 && ns >= sh.minExp {
		sh.credit = s.scanGap
		s.sweep(sh, ns)
	}
	if len(sh.m) < s.perShard {
		return true
	}
	sh.credit--
	// Map iteration starts at a random entry: a cheap sample.
	var victim mapKey
	found, seen, exp := false, 0, int64(math.MaxInt64)
	for k, e := range sh.m {
		if e.deletable(ns) && e.exp < exp {
			victim, exp, found = k, e.exp, true
		}
		if seen++; seen == sample {
			break
		}
	}
	if !found {
		return false
	}
	delete(sh.m, victim)
	sh.keys.Store(int64(len(sh.m)))
	s.evictions.Add(1)
	return true
}

// sweep deletes the shard's expired entries that hold no count; sh.mu is
// held.
func (s *Store) sweep(sh *shard, ns int64) {
	least := int64(math.MaxInt64)
	for k, e := range sh.m {
		if ns >= e.exp && e.deletable(ns) {
			delete(sh.m, k)
			continue
		}
		least = min(least, e.exp)
	}
	sh.minExp = least
	sh.keys.Store(int64(len(sh.m)))
}
