package dynamostore

import (
	"hash/maphash"
	"math/bits"
	"sync/atomic"
)

// hints remembers the last state this store saw of recently used sliding
// window and token bucket keys, so that the first UpdateItem of a Take can
// carry the condition that most likely holds: the previous window's count
// of a sliding window, or whether a bucket is busy. A hint is only a guess:
// a wrong one costs a failed condition, which returns the item, and one
// more UpdateItem; it never changes a result.
//
// It is a direct-mapped table of fixed size: a key's slot is its hash's low
// bits, and a new key overwrites whatever the slot held. Fields are
// separate atomics; a slot written by two Takes at once may mix their
// values, which is as harmless as any other wrong guess.
type hints struct {
	seed  maphash.Seed
	slots []hintSlot
	mask  uint64
}

type hintSlot struct {
	h    atomic.Uint64 // the key's hash; 0 is an empty slot
	a, b atomic.Int64  // the key's limit.State
}

// newHints returns a table of at least n slots, rounded up to a power of
// two, or nil for n ≤ 0.
func newHints(n int) *hints {
	if n <= 0 {
		return nil
	}
	size := 1 << bits.Len(uint(n-1))
	return &hints{seed: maphash.MakeSeed(), slots: make([]hintSlot, size), mask: uint64(size - 1)}
}

// hash returns key's hash, never 0; a nil table hashes nothing.
func (hs *hints) hash(key []byte) uint64 {
	if hs == nil {
		return 0
	}
	return max(maphash.Bytes(hs.seed, key), 1)
}

// get returns the state last put for the key hashed to h.
func (hs *hints) get(h uint64) (a, b int64, ok bool) {
	if hs == nil {
		return 0, 0, false
	}
	s := &hs.slots[h&hs.mask]
	if s.h.Load() != h {
		return 0, 0, false
	}
	return s.a.Load(), s.b.Load(), true
}

// put remembers a state of the key hashed to h.
func (hs *hints) put(h uint64, a, b int64) {
	if hs == nil {
		return
	}
	s := &hs.slots[h&hs.mask]
	s.h.Store(0)
	s.a.Store(a)
	s.b.Store(b)
	s.h.Store(h)
}
