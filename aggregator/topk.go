package aggregator

import (
	"cmp"
	"container/heap"
	"fmt"
	"net/netip"
	"slices"

	"github.com/ratewarden/ratewarden/decisions"
)

// Client identifies a client as the edge counts it: its user id when
// authenticated, else its address.
type Client struct {
	Addr netip.Addr
	User string
}

// ClientOf returns d's client.
func ClientOf(d *decisions.Decision) Client {
	if d.UserID != "" {
		return Client{User: d.UserID}
	}
	return Client{Addr: d.ClientIP}
}

// String returns "user:<id>" or the address, the form the lists take.
func (c Client) String() string {
	if c.User != "" {
		return "user:" + c.User
	}
	return c.Addr.String()
}

func compareClients(a, b Client) int {
	return cmp.Or(cmp.Compare(a.User, b.User), a.Addr.Compare(b.Addr))
}

// Hitter is one client of a TopK: Count is an upper bound of its true count
// and Count-Err a lower bound.
type Hitter struct {
	Client Client
	Count  uint64
	Err    uint64
}

// TopK finds the heaviest clients of a stream with the Space-Saving
// algorithm in k counters: every client with more than n/k of the n hits is
// in it, and each count is over by at most Err ≤ n/k. While it holds fewer
// than k clients, counts are exact. Two TopKs merge; when they count
// disjoint clients (the edge partitions Kinesis records by identity, so
// shards do) and neither overflowed, the merge is exact. The zero value is
// not usable: use NewTopK. It is not safe for concurrent use.
type TopK struct {
	k     int
	h     hitterHeap // min-heap on Count
	index map[Client]*slot
}

// slot is a counter and its place in the heap: the heap moves pointers and
// updates pos, so that moving a counter writes no map.
type slot struct {
	Hitter
	pos int
}

// NewTopK returns a TopK of k counters.
func NewTopK(k int) *TopK {
	return &TopK{k: max(k, 1), index: make(map[Client]*slot, min(k, 1024))}
}

// Add counts n hits of c.
func (t *TopK) Add(c Client, n uint64) {
	if s, ok := t.index[c]; ok {
		s.Count += n
		heap.Fix(&t.h, s.pos)
		return
	}
	if len(t.h.items) < t.k {
		s := &slot{Hitter: Hitter{Client: c, Count: n}}
		t.index[c] = s
		heap.Push(&t.h, s)
		return
	}
	// Replace the smallest counter: the newcomer may have been counted
	// there before it was evicted, which is what Err bounds.
	low := t.h.items[0]
	delete(t.index, low.Client)
	low.Hitter = Hitter{Client: c, Count: low.Count + n, Err: low.Count}
	t.index[c] = low
	heap.Fix(&t.h, 0)
}

// full reports whether t has evicted or may evict: its floor then bounds the
// count of any client it does not hold.
func (t *TopK) floor() uint64 {
	if len(t.h.items) < t.k {
		return 0
	}
	return t.h.items[0].Count
}

// Merge adds o's counts to t. Unless the two counted disjoint clients, a
// client missing from one side may have counted up to that side's floor
// there: it is added to the count and to Err, so counts stay upper bounds.
// With disjoint clients (two Kinesis shards) nothing is added: each
// client's count comes whole from one side.
func (t *TopK) Merge(o *TopK, disjoint bool) {
	tf, of := t.floor(), o.floor()
	if disjoint {
		tf, of = 0, 0
	}
	merged := make(map[Client]Hitter, len(t.h.items)+len(o.h.items))
	for _, s := range t.h.items {
		merged[s.Client] = s.Hitter
	}
	for _, s := range o.h.items {
		h := s.Hitter
		if m, ok := merged[h.Client]; ok {
			m.Count += h.Count
			m.Err += h.Err
			merged[h.Client] = m
		} else {
			h.Count += tf
			h.Err += tf
			merged[h.Client] = h
		}
	}
	for _, h := range t.h.items {
		if _, ok := o.index[h.Client]; !ok && of > 0 {
			m := merged[h.Client]
			m.Count += of
			m.Err += of
			merged[h.Client] = m
		}
	}
	all := make([]Hitter, 0, len(merged))
	for _, h := range merged {
		all = append(all, h)
	}
	sortHitters(all)
	if len(all) > t.k {
		all = all[:t.k]
	}
	t.reset(all)
}

func (t *TopK) reset(hs []Hitter) {
	clear(t.index)
	t.h.items = t.h.items[:0]
	for i, h := range hs {
		s := &slot{Hitter: h, pos: i}
		t.h.items = append(t.h.items, s)
		t.index[h.Client] = s
	}
	heap.Init(&t.h)
}

// sortHitters orders by count, largest first, then by client, so that the
// order (and the encoding) does not depend on arrival order.
func sortHitters(hs []Hitter) {
	slices.SortFunc(hs, func(a, b Hitter) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), compareClients(a.Client, b.Client))
	})
}

// Top returns up to n clients, heaviest first.
func (t *TopK) Top(n int) []Hitter {
	hs := make([]Hitter, len(t.h.items))
	for i, s := range t.h.items {
		hs[i] = s.Hitter
	}
	sortHitters(hs)
	return hs[:min(n, len(hs))]
}

// Len is the number of clients held.
func (t *TopK) Len() int { return len(t.h.items) }

// AppendBinary appends t's encoding, clients in Top order.
func (t *TopK) AppendBinary(b []byte) []byte {
	hs := t.Top(len(t.h.items))
	b = appendUvarint(b, uint64(t.k))
	b = appendUvarint(b, uint64(len(hs)))
	for _, h := range hs {
		b = appendString(b, h.Client.User)
		a, _ := h.Client.Addr.MarshalBinary()
		b = appendBytes(b, a)
		b = appendUvarint(b, h.Count)
		b = appendUvarint(b, h.Err)
	}
	return b
}

func decodeTopK(r *reader) (*TopK, error) {
	k := r.uvarint()
	n := r.count(4)
	if r.err == nil && (k == 0 || n > k || k > 1<<20) {
		r.fail(fmt.Errorf("top-k of %d holds %d", k, n))
	}
	if r.err != nil {
		return nil, fmt.Errorf("decode top-k: %w", r.err)
	}
	t := NewTopK(int(k))
	hs := make([]Hitter, 0, n)
	for range n {
		var h Hitter
		h.Client.User = r.string()
		a := r.bytes()
		h.Count, h.Err = r.uvarint(), r.uvarint()
		if r.err != nil {
			return nil, fmt.Errorf("decode top-k: %w", r.err)
		}
		if err := h.Client.Addr.UnmarshalBinary(a); err != nil {
			r.fail(err)
			return nil, fmt.Errorf("decode top-k: %w", err)
		}
		if _, dup := t.index[h.Client]; dup {
			r.fail(fmt.Errorf("client %s twice", h.Client))
			return nil, fmt.Errorf("decode top-k: %w", r.err)
		}
		t.index[h.Client] = nil // a placeholder until reset, to find duplicates
		hs = append(hs, h)
	}
	t.reset(hs)
	return t, nil
}

// hitterHeap is a min-heap of counters on Count that keeps their pos in
// step.
type hitterHeap struct {
	items []*slot
}

func (h *hitterHeap) Len() int { return len(h.items) }

// Less orders by count, then by client: a total order, so the client evicted
// among equal counts does not depend on the heap's layout, and a TopK
// decoded from its encoding evicts exactly as the one encoded would have.
func (h *hitterHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if a.Count != b.Count {
		return a.Count < b.Count
	}
	return compareClients(a.Client, b.Client) < 0
}

func (h *hitterHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].pos, h.items[j].pos = i, j
}

func (h *hitterHeap) Push(x any) {
	s := x.(*slot)
	s.pos = len(h.items)
	h.items = append(h.items, s)
}

func (h *hitterHeap) Pop() any {
	s := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return s
}
