package aggregator

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
)

// Client identifies a client as the edge counts it: its user id when
// authenticated, else its address, or for an IPv6 address the prefix the
// edge counts it under (identity.ipv6_prefix): Bits, when not 0, is that
// prefix's length and Addr its first address.
type Client struct {
	Addr netip.Addr
	User string
	Bits uint8
}

// DefaultIPv6Prefix is the length of the prefix an IPv6 client is counted
// under when none is configured: identity.ipv6_prefix's default.
const DefaultIPv6Prefix = config.DefaultIPv6Prefix

// ClientOf returns d's client as the edge counts it, an IPv6 address by
// its prefix of ipv6Prefix bits (0 takes DefaultIPv6Prefix, 128 keeps
// the address).
func ClientOf(d *decisions.Decision, ipv6Prefix int) Client {
	if d.UserID != "" {
		return Client{User: d.UserID}
	}
	return AddrClient(d.ClientIP, ipv6Prefix)
}

// AddrClient returns the client of the address a, an IPv6 address by its
// prefix of ipv6Prefix bits (0 takes DefaultIPv6Prefix, 128 keeps the
// address). An IPv4 address, IPv4-mapped or not, is its own client: the
// edge counts it per address (it unmaps one before it decides).
func AddrClient(a netip.Addr, ipv6Prefix int) Client {
	bits := v6Bits(ipv6Prefix)
	if !a.Is6() || a.Is4In6() || bits >= 128 {
		return Client{Addr: a}
	}
	p, _ := a.Prefix(bits) // drops a zone; bits is in range
	return Client{Addr: p.Addr(), Bits: uint8(bits)}
}

// v6Bits is the prefix length of a configured ipv6Prefix: 0 (or less)
// takes DefaultIPv6Prefix, more than 128 is 128.
func v6Bits(ipv6Prefix int) int {
	if ipv6Prefix <= 0 {
		return DefaultIPv6Prefix
	}
	return min(ipv6Prefix, 128)
}

// String returns "user:<id>", the address, or the prefix
// ("2001:db8:1:2::/64"): the form the lists take.
func (c Client) String() string {
	if c.User != "" {
		return "user:" + c.User
	}
	if c.Bits != 0 {
		return netip.PrefixFrom(c.Addr, int(c.Bits)).String()
	}
	return c.Addr.String()
}

// CompareClients orders clients: by user, then address, then prefix
// length (an address before its prefixes).
func CompareClients(a, b Client) int {
	return cmp.Or(cmp.Compare(a.User, b.User), a.Addr.Compare(b.Addr), cmp.Compare(a.Bits, b.Bits))
}

// Hitter is one client of a TopK: Count is an upper bound of its true count
// and Count-Err a lower bound.
type Hitter struct {
	Client Client
	Count  uint64
	Err    uint64
}

// TopK finds the heaviest clients of a stream with Filtered Space-Saving
// (Homem and Carvalho, 2010) in k counters: every client with more than
// n/k of the n hits is in it, and each count is over by at most Err ≤ n/k.
// While it holds fewer than k clients, counts are exact. Two TopKs merge;
// when they count disjoint clients (the edge partitions Kinesis records by
// identity, so shards do) and neither overflowed, the merge is exact. The
// zero value is not usable: use NewTopK. It is not safe for concurrent
// use.
//
// Once the list is full, a client it does not hold counts in a filter: a
// bucket of its hash (filterBuckets of them) keeps a bound of the hits of
// each client of the bucket not held (alpha), and how many clients the
// list holds from it. A newcomer whose bucket's bound and hits exceed the
// least count takes the counter of the least count, with that bound as
// its Err; any other newcomer only adds its hits to the bound. The client
// evicted leaves its count in its bucket's bound (the greater of the two),
// so the bounds stay bounds and never exceed the least count (Floor). On
// traffic of many clients each seen a few times, most hits then cost an
// increment rather than an eviction, and Err is the bucket's bound rather
// than the least count: smaller. A TopK decoded from a partial or merged,
// whose filter is gone, starts its bounds at Floor, which bounds every
// client it does not hold.
//
// A newcomer replaces the counter of the least count that comes first in
// the list's order: the order in which counters were made, a counter
// keeping its place when a newcomer takes it over. That order depends on
// the hits alone, and a state save keeps it (the layout encoding, see
// appendBinary) and the filter (appendFilters), so a TopK restored from a
// save evicts exactly as the one saved would have. A hit on a client held
// is one increment. The counters of the least count are found once that
// count is reached (see collect), in their order, and evictions take them
// in turn, skipping counters whose count has grown since: counts only
// grow, and a newcomer takes more than the least count, so none joins
// them. Choosing among equal counts by place rather than by client needs
// no sort: evicting by client cost a fifth of the rollup's time
// (BENCHMARKS.md).
type TopK struct {
	k     int
	count []uint64 // each counter's count
	slots []slot
	index []cell // open addressing on the client's hash (hashClient), linear probing
	// low holds, when not empty, the counters whose count was lowCount,
	// the least, when it was made, in their order from lowAt on.
	low      []int32
	lowAt    int
	lowCount uint64
	mins     []uint64 // see collect
	// The filter, made when the list is full and a newcomer comes (see
	// TopK), nil before; base is each bucket's bound when it is made: 0,
	// or for a list decoded or merged (reset) its floor then.
	filter []bucket
	base   uint64
	// In a run of addIDs: the counters moved, the batch and the stamp.
	dirty []moved
	run   *Batch
	gen   uint64
}

// slot is one counter but its count.
type slot struct {
	Client Client
	Err    uint64
	hash   uint64
	// In a run of addIDs stamped gen: the client's id in the Batch, and
	// whether the counter took another client (moved == gen), whose id
	// then stands for the client and hash not yet copied.
	cid        int32
	gen, moved uint64
}

// cell is a place of the index: a counter's hash and place + 1, 0 for
// none, side by side so that a probe reads one array.
type cell struct {
	hash uint64
	pos  int32
}

// bucket is one bucket of a TopK's filter: a bound of the hits of each of
// its clients the list does not hold, and how many the list holds.
type bucket struct {
	alpha uint64
	held  uint32
}

// filterBuckets is the number of buckets of a TopK's filter: four per
// counter, a power of two. Each takes 16 bytes: 8 KiB for a list of 100.
func filterBuckets(k int) int {
	n := 64
	for n < 4*k {
		n *= 2
	}
	return n
}

// bucketOf returns the bucket of the hash h in a filter of n buckets, a
// power of two: from h's high bits, as the index takes its low ones.
func bucketOf(h uint64, n int) int {
	return int(h >> (64 - bits.TrailingZeros(uint(n))))
}

// bucketFor returns the bucket of the hash h in t's filter, made.
func (t *TopK) bucketFor(h uint64) *bucket {
	return &t.filter[bucketOf(h, len(t.filter))]
}

// makeFilter makes t's filter: each bucket's bound base, and the clients
// held counted in their buckets.
func (t *TopK) makeFilter() {
	t.filter = make([]bucket, filterBuckets(t.k))
	for i := range t.filter {
		t.filter[i].alpha = t.base
	}
	for p := range t.slots {
		t.bucketFor(t.slots[p].hash).held++
	}
}

// NewTopK returns a TopK of k counters.
func NewTopK(k int) *TopK {
	return &TopK{k: max(k, 1), index: make([]cell, 16)}
}

// hashClient is the hash of c's identity key (identityKey), the one the
// HyperLogLogs insert, so that the rollup hashes each event's client once.
// The key is built on the stack up to 128 bytes; hot paths with longer
// user ids use hashClientInto with a scratch buffer they keep.
func hashClient(c Client) uint64 {
	var buf [128]byte
	return hashKey(appendIdentity(buf[:0], c))
}

// hashClientInto is hashClient building the key in *scratch.
func hashClientInto(c Client, scratch *[]byte) uint64 {
	*scratch = appendIdentity((*scratch)[:0], c)
	return hashKey(*scratch)
}

// appendIdentity appends c's identity key: 'u' and the user id, 'a' and
// the 16-byte address, or 'p', the prefix length and the 16-byte first
// address of the prefix.
func appendIdentity(b []byte, c Client) []byte {
	if c.User != "" {
		return append(append(b, 'u'), c.User...)
	}
	a := c.Addr.As16()
	if c.Bits != 0 {
		return append(append(b, 'p', c.Bits), a[:]...)
	}
	return append(append(b, 'a'), a[:]...)
}

// sortKey maps clients to integers in the order of CompareClients, except
// that clients with the same key may differ (compare them then): addresses
// before users; among addresses the zero Addr, IPv4 (exactly, by value),
// then IPv6 (by its first 61 bits); users by their first 7 bytes.
func sortKey(c Client) uint64 {
	if c.User != "" {
		var k uint64
		for i := range 7 {
			k <<= 8
			if i < len(c.User) {
				k |= uint64(c.User[i])
			}
		}
		return 1<<63 | k
	}
	switch {
	case c.Addr.Is4():
		a := c.Addr.As4()
		return sortKeyV4(binary.BigEndian.Uint32(a[:]))
	case c.Addr.Is6():
		a := c.Addr.As16()
		hi := uint64(a[0])<<56 | uint64(a[1])<<48 | uint64(a[2])<<40 | uint64(a[3])<<32 |
			uint64(a[4])<<24 | uint64(a[5])<<16 | uint64(a[6])<<8 | uint64(a[7])
		return 2<<61 | hi>>3
	}
	return 0
}

// sortKeyV4 is sortKey of the IPv4 address a (big-endian).
func sortKeyV4(a uint32) uint64 { return 1<<61 | uint64(a) }

// Add counts n hits of c.
func (t *TopK) Add(c Client, n uint64) { t.add(c, hashClient(c), n) }

// add counts n hits of c, whose hashClient is h.
func (t *TopK) add(c Client, h uint64, n uint64) {
	if t.filter == nil {
		if p := t.lookup(h, c); p >= 0 {
			t.count[p] += n
			return
		}
		if len(t.slots) < t.k {
			t.slots = append(t.slots, slot{Client: c, hash: h})
			t.count = append(t.count, n)
			t.link(int32(len(t.slots) - 1))
			return
		}
		t.makeFilter()
	}
	f := t.bucketFor(h)
	if f.held > 0 {
		if p := t.lookup(h, c); p >= 0 {
			t.count[p] += n
			return
		}
	}
	a := f.alpha
	if !t.admits(f, n) {
		return
	}
	// Replace the counter lowest picks: the newcomer's bucket bounds its
	// hits before these, which is what Err bounds.
	p := t.lowest()
	old := t.slots[p].hash
	t.evicted(old, t.count[p])
	t.unlinkAt(p, old)
	s := &t.slots[p]
	s.Client, s.Err, s.hash = c, a, h
	t.count[p] = a + n
	f.held++
	t.put(p)
}

// admits reports whether a newcomer of n hits, whose bucket is f, takes
// the counter of the least count: when its bucket's bound and its hits
// exceed that count. Otherwise its hits raise the bound. t is full.
func (t *TopK) admits(f *bucket, n uint64) bool {
	if f.alpha+n > t.least() {
		return true
	}
	f.alpha += n
	return false
}

// evicted leaves the count of a client whose hash is h, evicted, in its
// bucket.
func (t *TopK) evicted(h, count uint64) {
	e := t.bucketFor(h)
	e.held--
	e.alpha = max(e.alpha, count)
}

// addIDs counts one hit of each client of b whose id (Batch.cid) ids
// holds, in order, as add would one by one. A run of hits finds a client
// it met before by its id (Batch.memo) rather than by the index, and
// leaves the index as it was while it evicts: a client the index holds
// that the run has not met is either where the index says, or evicted
// (its counter then moved, which the probe tells apart). A counter that
// takes a client in the run holds its id only, its client
// and hash copied from b once, at the end, with the index set right. The
// filter's counts of clients held are kept right at every step, so a
// client whose bucket holds none is not looked up.
func (t *TopK) addIDs(b *Batch, ids []int32) {
	if len(ids) == 0 {
		return
	}
	gen := runGen.Add(1)
	b.memo = growTo(b.memo, len(b.clients))
	memo := b.memo
	t.run, t.gen = b, gen
	for _, id := range ids {
		m := &memo[id]
		if m.gen != gen {
			m.gen, m.pos = gen, 0
			if h := b.hashes[id]; t.filter == nil || t.bucketFor(h).held > 0 {
				if p := t.lookupStale(h, &b.clients[id], gen); p >= 0 {
					m.pos = p + 1
					s := &t.slots[p]
					s.cid, s.gen = id, gen
				}
			}
		}
		if m.pos > 0 {
			t.count[m.pos-1]++
			continue
		}
		h := b.hashes[id]
		if len(t.slots) < t.k { // before any eviction: the index is right
			t.add(b.keep(id), h, 1)
			p := int32(len(t.slots) - 1)
			m.pos = p + 1
			s := &t.slots[p]
			s.cid, s.gen = id, gen
			continue
		}
		if t.filter == nil {
			t.makeFilter()
		}
		f := t.bucketFor(h)
		a := f.alpha
		if !t.admits(f, 1) {
			continue
		}
		p := t.lowest()
		s := &t.slots[p]
		old := s.hash
		if s.moved == gen {
			old = b.hashes[s.cid]
		}
		t.evicted(old, t.count[p])
		if s.gen == gen {
			memo[s.cid].pos = 0
		}
		if s.moved != gen {
			s.moved = gen
			t.dirty = append(t.dirty, moved{p, s.hash})
		}
		s.Err, s.cid, s.gen = a, id, gen
		t.count[p] = a + 1
		f.held++
		m.pos = p + 1
	}
	for _, d := range t.dirty {
		s := &t.slots[d.pos]
		s.Client, s.hash = b.keep(s.cid), b.hashes[s.cid]
	}
	t.reindex()
	t.run = nil
}

// moved is a counter that took another client during a run of addIDs,
// and the hash under which the index holds it.
type moved struct {
	pos  int32
	hash uint64
}

// runGen stamps each run of addIDs, unique in the process, so that a
// stamp found on a counter or in Batch.memo is this run's only if it was
// made by this run, whatever Batch and TopK made the others.
var runGen atomic.Uint64

// lookupStale returns the counter of c, whose hash is h, or -1, through
// an index that may still hold counters under clients they held before
// the run stamped gen moved them (see addIDs).
func (t *TopK) lookupStale(h uint64, c *Client, gen uint64) int32 {
	mask := uint64(len(t.index) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		x := t.index[i]
		if x.pos == 0 {
			return -1
		}
		if x.hash == h {
			if s := &t.slots[x.pos-1]; s.moved != gen && s.Client == *c {
				return x.pos - 1
			}
		}
	}
}

// reindex puts the counters that took other clients in a run of addIDs
// under their new hashes: one by one when they are few, else by making
// the index anew.
func (t *TopK) reindex() {
	if len(t.dirty) == 0 {
		return
	}
	if 4*len(t.dirty) > len(t.slots) {
		clear(t.index)
		for p := range t.slots {
			t.put(int32(p))
		}
	} else {
		for _, d := range t.dirty {
			t.unlinkAt(d.pos, d.hash)
		}
		for _, d := range t.dirty {
			t.put(d.pos)
		}
	}
	t.dirty = t.dirty[:0]
}

// find returns c's counter, or -1.
func (t *TopK) find(c Client) int32 { return t.lookup(hashClient(c), c) }

// lookup returns the counter of c, whose hash is h, or -1.
func (t *TopK) lookup(h uint64, c Client) int32 {
	mask := uint64(len(t.index) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		x := t.index[i]
		if x.pos == 0 {
			return -1
		}
		if x.hash == h && t.slots[x.pos-1].Client == c {
			return x.pos - 1
		}
	}
}

// link adds counter p to the index, which it keeps at most a quarter
// full.
func (t *TopK) link(p int32) {
	if 4*len(t.slots) > len(t.index) && len(t.index) < 4*t.k {
		t.index = make([]cell, 2*len(t.index))
		for q := range t.slots {
			if int32(q) != p {
				t.put(int32(q))
			}
		}
	}
	t.put(p)
}

// put puts counter p in the index at the first free cell from its place.
func (t *TopK) put(p int32) {
	h := t.slots[p].hash
	mask := uint64(len(t.index) - 1)
	i := h & mask
	for t.index[i].pos != 0 {
		i = (i + 1) & mask
	}
	t.index[i] = cell{h, p + 1}
}

// unlinkAt takes counter p, which the index holds under the hash h, out
// of the index, shifting back the counters after it that may then sit
// nearer their place.
func (t *TopK) unlinkAt(p int32, h uint64) {
	mask := uint64(len(t.index) - 1)
	i := h & mask
	for t.index[i].pos != p+1 {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; t.index[j].pos != 0; j = (j + 1) & mask {
		// The counter at j may move to i if i lies on its probe path.
		if home := t.index[j].hash & mask; (j-home)&mask >= (j-i)&mask {
			t.index[i] = t.index[j]
			i = j
		}
	}
	t.index[i] = cell{}
}

// lowest returns the counter to evict: the first, in the list's order,
// of the least count. t is full.
func (t *TopK) lowest() int32 {
	t.least()
	p := t.low[t.lowAt]
	t.lowAt++
	return p
}

// least returns the least count, leaving t.low[t.lowAt] the first
// counter of it in the list's order. t is full.
func (t *TopK) least() uint64 {
	for {
		for ; t.lowAt < len(t.low); t.lowAt++ {
			if t.count[t.low[t.lowAt]] == t.lowCount {
				return t.lowCount
			}
		}
		// Those of the least count have all gone or grown: the next.
		t.low, t.lowAt = t.low[:0], 0
		if len(t.mins) == 0 {
			nb := 1
			for nb*lowBlock < len(t.count) {
				nb *= 2
			}
			t.mins = make([]uint64, 2*nb) // 0: a bound of any count
		}
		for {
			m := t.mins[1]
			t.collect(1, m)
			if len(t.low) > 0 {
				t.lowCount = m
				break
			}
		}
	}
}

// lowBlock is the number of counters under one leaf of TopK.mins.
const lowBlock = 16

// collect appends to t.low, in their order, the counters under node i of
// t.mins whose count is m, where no count is less than m, and returns the node's least count
// (or a bound of it). t.mins is a tree of lower bounds of the least count
// under each node (node 1 the root, i's children 2i and 2i+1, the leaves
// blocks of lowBlock counters): counts only grow, so a bound stays a
// bound without being told of each hit, and collect makes the bounds it
// passes exact. A node whose bound exceeds m is passed over: so finding
// the next least count reads the counters that changed since it was last
// found (amortized), not all k, whatever order of hits an attacker
// chooses.
func (t *TopK) collect(i int, m uint64) uint64 {
	if t.mins[i] > m {
		return t.mins[i]
	}
	least := ^uint64(0)
	if nb := len(t.mins) / 2; i >= nb {
		lo := (i - nb) * lowBlock
		for p := lo; p < min(lo+lowBlock, len(t.count)); p++ {
			c := t.count[p]
			if c == m {
				t.low = append(t.low, int32(p))
			}
			least = min(least, c)
		}
	} else {
		least = min(t.collect(2*i, m), t.collect(2*i+1, m))
	}
	t.mins[i] = least
	return least
}

// Floor bounds the count of any client t does not hold: 0 while it holds
// fewer than k clients (counts are exact then), else its lowest count.
func (t *TopK) Floor() uint64 {
	if len(t.slots) < t.k {
		return 0
	}
	return slices.Min(t.count)
}

// Merge adds o's counts to t. Unless the two counted disjoint clients, a
// client missing from one side may have counted up to that side's floor
// there: it is added to the count and to Err, so counts stay upper bounds.
// With disjoint clients (two Kinesis shards) nothing is added: each
// client's count comes whole from one side.
func (t *TopK) Merge(o *TopK, disjoint bool) {
	tf, of := t.Floor(), o.Floor()
	if disjoint {
		tf, of = 0, 0
	}
	merged := make(map[Client]Hitter, len(t.slots)+len(o.slots))
	for p := range t.slots {
		merged[t.slots[p].Client] = t.hitter(p)
	}
	for p := range o.slots {
		h := o.hitter(p)
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
	for p := range t.slots {
		if c := t.slots[p].Client; of > 0 && o.find(c) < 0 {
			m := merged[c]
			m.Count += of
			m.Err += of
			merged[c] = m
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

// hitter returns counter p.
func (t *TopK) hitter(p int) Hitter {
	s := &t.slots[p]
	return Hitter{Client: s.Client, Count: t.count[p], Err: s.Err}
}

// reset makes t hold hs.
func (t *TopK) reset(hs []Hitter) {
	n := 16 // the index link would grow to for hs, at once
	for 4*len(hs) > n && n < 4*t.k {
		n *= 2
	}
	t.index = make([]cell, n)
	t.slots, t.count, t.low, t.lowAt = t.slots[:0], t.count[:0], t.low[:0], 0
	clear(t.mins) // counts may be lower: 0 bounds them all
	t.filter = nil
	for _, h := range hs {
		t.slots = append(t.slots, slot{Client: h.Client, Err: h.Err, hash: hashClient(h.Client)})
		t.count = append(t.count, h.Count)
		t.link(int32(len(t.slots) - 1))
	}
	t.base = t.Floor() // bounds every client not held (see Floor)
}

// sortHitters orders by count, largest first, then by client, so that the
// order (and the encoding) does not depend on arrival order.
func sortHitters(hs []Hitter) {
	slices.SortFunc(hs, func(a, b Hitter) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), CompareClients(a.Client, b.Client))
	})
}

// ranked is a counter's count, sortKey and place in TopK.slots, side by
// side so that ordering the counters compares integers first.
type ranked struct {
	count, key uint64
	pos        int32
}

// rank returns t's counters in r's array, in the order of sortHitters:
// by count, largest first, then by client (by sortKey, then the rare
// equal keys by CompareClients), a total order, so the order of the
// encoding does not depend on the sort.
func (t *TopK) rank(r []ranked) []ranked {
	r = r[:0]
	for p := range t.slots {
		r = append(r, ranked{t.count[p], sortKey(t.slots[p].Client), int32(p)})
	}
	slices.SortFunc(r, func(a, b ranked) int { return byRank(a, b, t.clientAt) })
	return r
}

// clientAt returns counter p's client.
func (t *TopK) clientAt(p int32) Client { return t.slots[p].Client }

// byRank orders heaviest first: by count, largest first, then by client
// (sortKey, and CompareClients of the clients client returns for two
// places when their keys tie), the order a list encodes its counters in.
func byRank(a, b ranked, client func(pos int32) Client) int {
	if a.count != b.count {
		return cmp.Compare(b.count, a.count)
	}
	if a.key != b.key {
		return cmp.Compare(a.key, b.key)
	}
	return CompareClients(client(a.pos), client(b.pos))
}

// Top returns up to n clients, heaviest first.
func (t *TopK) Top(n int) []Hitter {
	r := t.rank(make([]ranked, 0, len(t.slots)))
	hs := make([]Hitter, min(n, len(r)))
	for i := range hs {
		hs[i] = t.hitter(int(r[i].pos))
	}
	return hs
}

// Len is the number of clients held.
func (t *TopK) Len() int { return len(t.slots) }

// appendBinary appends t's encoding: its clients in Top order (ordering
// the counters in *order, scratch that the caller keeps: a state save
// encodes every open window's lists, so it allocates nothing else), or,
// with layout, in the list's own order, which decodeTopK keeps, for a
// state save (see TopK). Either decodes to the same clients and counts.
func (t *TopK) appendBinary(b []byte, order *[]ranked, layout bool) []byte {
	b = appendUvarint(b, uint64(t.k))
	b = appendUvarint(b, uint64(len(t.slots)))
	if layout {
		for p := range t.slots {
			b = t.appendCounter(b, p, t.count[p])
		}
		return b
	}
	*order = t.rank(*order)
	for _, r := range *order {
		b = t.appendCounter(b, int(r.pos), r.count)
	}
	return b
}

// appendCounter appends counter p, whose count is n: its client (user,
// address and, since partial encoding version 6, prefix length), count
// and error.
func (t *TopK) appendCounter(b []byte, p int, n uint64) []byte {
	s := &t.slots[p]
	b = appendString(b, s.Client.User)
	b = appendAddr(b, s.Client.Addr)
	b = append(b, s.Client.Bits)
	b = appendUvarint(b, n)
	return appendUvarint(b, s.Err)
}

// appendAddr appends a's MarshalBinary bytes as appendBytes does, without
// making them apart: 0, 4 or 16 bytes and the IPv6 zone.
func appendAddr(b []byte, a netip.Addr) []byte {
	b = appendUvarint(b, uint64(a.BitLen()/8+len(a.Zone())))
	b, _ = a.AppendBinary(b) // it returns no error
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
	seen := make(map[Client]struct{}, n)
	for range n {
		var h Hitter
		h.Client.User = r.string()
		a := r.bytes()
		if !r.addrsOnly {
			h.Client.Bits = r.byte()
		}
		h.Count, h.Err = r.uvarint(), r.uvarint()
		if r.err != nil {
			return nil, fmt.Errorf("decode top-k: %w", r.err)
		}
		if err := h.Client.Addr.UnmarshalBinary(a); err != nil {
			r.fail(err)
			return nil, fmt.Errorf("decode top-k: %w", err)
		}
		if err := checkPrefix(h.Client); err != nil {
			r.fail(err)
			return nil, fmt.Errorf("decode top-k: %w", err)
		}
		if _, dup := seen[h.Client]; dup {
			r.fail(fmt.Errorf("client %s twice", h.Client))
			return nil, fmt.Errorf("decode top-k: %w", r.err)
		}
		seen[h.Client] = struct{}{}
		hs = append(hs, h)
	}
	t.reset(hs) // in the encoding's order: a state save's is the list's own
	return t, nil
}

// checkPrefix refuses a client of a prefix length (Bits) that is not an
// IPv6 prefix's first address, as AddrClient makes them.
func checkPrefix(c Client) error {
	if c.Bits == 0 {
		return nil
	}
	if c.User != "" || !c.Addr.Is6() || c.Addr.Is4In6() || c.Addr.Zone() != "" || c.Bits >= 128 {
		return fmt.Errorf("client %q with a prefix length of %d", c.Addr, c.Bits)
	}
	if p, _ := c.Addr.Prefix(int(c.Bits)); p.Addr() != c.Addr {
		return fmt.Errorf("client %s/%d is not a prefix's first address", c.Addr, c.Bits)
	}
	return nil
}

// appendFilter appends what a state save keeps of t beside its layout
// encoding so that a TopK restored evicts as t would: its bound base and
// its filter's bounds (none before the filter is made). The counts of
// clients held are made again from the clients.
func (t *TopK) appendFilter(b []byte) []byte {
	b = appendUvarint(b, t.base)
	b = appendUvarint(b, uint64(len(t.filter)))
	for _, f := range t.filter {
		b = appendUvarint(b, f.alpha)
	}
	return b
}

// decodeFilter reads what appendFilter wrote into t, decoded from its
// layout encoding.
func (t *TopK) decodeFilter(r *reader) error {
	base := r.uvarint()
	n := r.count(1)
	switch {
	case r.err != nil:
	case n != 0 && (n != uint64(filterBuckets(t.k)) || len(t.slots) < t.k):
		r.fail(fmt.Errorf("a filter of %d buckets for a list of %d holding %d", n, t.k, len(t.slots)))
	case base > t.Floor(): // counts only grow: the floor it was taken at is no more
		r.fail(fmt.Errorf("a bound of %d above the list's floor %d", base, t.Floor()))
	}
	if r.err != nil {
		return fmt.Errorf("decode top-k filter: %w", r.err)
	}
	t.base, t.filter = base, nil
	if n == 0 {
		return nil
	}
	t.makeFilter()
	for i := range t.filter {
		t.filter[i].alpha = r.uvarint()
	}
	if r.err != nil {
		return fmt.Errorf("decode top-k filter: %w", r.err)
	}
	return nil
}
