package memstore

// table is an open-addressing hash table from a key's 64-bit hash to its
// entry, with linear probing and backward-shift deletion (no tombstones).
// Against a Go map it finds and updates an entry with one probe instead of a
// lookup and an assignment, and puts the entry in the same 32 bytes as its
// key, so a key costs one cache miss. Hash 0 marks an empty slot; the store
// never passes it. It is not safe for concurrent use; its shard's mutex
// guards it.
type table struct {
	slots []slot // a power of two long, at most 3/4 full
	n     int    // occupied slots
}

type slot struct {
	h uint64 // the key's hash; 0: empty
	e entry
}

// minSlots is a table's smallest size.
const minSlots = 16

// find returns the index of h's slot and true, or the index of the empty
// slot where h would go and false.
func (t *table) find(h uint64) (int, bool) {
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch t.slots[i].h {
		case h:
			return int(i), true
		case 0:
			return int(i), false
		}
	}
}

// full reports whether one more key would need a larger table.
func (t *table) full() bool { return t.n+1 > len(t.slots)-len(t.slots)/4 }

// put stores h's entry in the empty slot i that find returned.
func (t *table) put(i int, h uint64, e entry) {
	t.slots[i] = slot{h: h, e: e}
	t.n++
}

// deleteAt empties slot i, shifting back the entries after it that probed
// past it so that every entry stays reachable from its home slot.
func (t *table) deleteAt(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].h != 0; j = (j + 1) & mask {
		home := int(t.slots[j].h) & mask
		// The entry at j may move to i if i lies on its probe path, that
		// is no further from j than its home is.
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot{}
	t.n--
}

// resize moves every entry into a table of size slots.
func (t *table) resize(size int) {
	old := t.slots
	t.slots = make([]slot, size)
	t.n = 0
	for _, s := range old {
		if s.h != 0 {
			i, _ := t.find(s.h)
			t.put(i, s.h, s.e)
		}
	}
}

// deleteIf deletes the entries for which drop reports true and returns how
// many it deleted. After a deletion it looks at the same index again: the
// backward shift may have moved an entry there, and only from an index
// already passed when the cluster wraps around the end.
func (t *table) deleteIf(drop func(e *entry) bool) int {
	deleted := 0
	for i := 0; i < len(t.slots); {
		if t.slots[i].h != 0 && drop(&t.slots[i].e) {
			t.deleteAt(i)
			deleted++
			continue
		}
		i++
	}
	return deleted
}
