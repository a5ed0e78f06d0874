package aggregator

import (
	"encoding/binary"
	"hash/maphash"
	"net/netip"
	"strings"
	"unsafe"

	"github.com/axiomhq/hyperloglog"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/internal/hashmix"
	"github.com/ratewarden/ratewarden/internal/sat"
)

// Batch is one record batch's columns (columnar.Columns, from
// Decoder.DecodeColumns) made ready for Partial.UpdateColumns: dictionary
// indices widened once, times summed once, and count cells addressed by
// dictionary ids, so that the work per event is array indexing rather
// than map lookups on strings. A batch of the columnar path and the same
// events given one by one to Partial.Update make partials that encode to
// the same bytes. The zero value is ready to use; reuse one for many
// batches. It is not safe for concurrent use.
//
// A batch may hold only some columns (columnar.Decoder.DecodeColumnSet):
// Prepare widens those decoded, and each aggregate reads the columns it
// names (Summary: SummaryColumns; Partial, Counts, Distinct and Offenders
// every column they read of a Decision).
type Batch struct {
	c     *columnar.Columns
	n     int
	times []int64

	tier, rule, reason, node, respErr []int32
	users                             string // the user column's bytes, as one string, once a client is asked for
	userAt                            []int32
	usersMade                         bool
	identified                        bool
	scratch                           []byte

	// The batch's distinct clients, once identify ran: each decision
	// row's client is clients[cid[row]], hashClient'ed as hashes[cid[row]];
	// each distinct client is made and hashed once a batch. seen holds
	// what Distinct.UpdateColumns inserted of each; slots is the table
	// (open addressing on the clients' fingerprints, linear probing) that
	// finds each.
	cid     []int32
	clients []Client
	hashes  []uint64
	seen    []seenClient
	slots   []idSlot
	used    []int32 // the slots in use, cleared at the next identify
	seenGen uint32
	// v6bits is the prefix length identify counts an IPv6 client under
	// (0: DefaultIPv6Prefix; see Partial.IPv6Prefix), set by
	// countIPv6Under.
	v6bits int

	// Count cells, by dictionary ids: cells[((tier*nRule+rule)*NumOutcomes+outcome)*nReason+reason],
	// byNode[node*NumOutcomes+outcome] and errs[(tier*nRule+rule)*nErr+error],
	// counted per UpdateColumns and then added to the partial's maps;
	// outcomes[(tier*nRule+rule)*NumOutcomes+outcome], likewise for a
	// Summary.
	nRule, nReason, nErr          int
	cells, byNode, errs, outcomes cellCounts
	dense                         bool // the dictionaries are small enough for the arrays

	// The names the aggregates count each dictionary id under: the
	// dictionaries' own after Prepare, those folded past the partial's
	// MaxKeys after Partial.UpdateColumns' foldColumns (tables in fold).
	tierNames, ruleNames, reasonNames, nodeNames []string
	fold                                         [4]foldTable
	foldGen                                      uint32

	// Per UpdateColumns: the partial's sketches and lists of each tier and
	// rule id, looked up on first use.
	tierHLL   []*hyperloglog.Sketch
	tierKnown []*knownHashes
	ruleHLL   []*hyperloglog.Sketch

	// Per Offenders.UpdateColumns: the client ids of each list's hits.
	hits   [4][]int32
	groups rowGroups
	memo   []memoSlot // by client id: its counter in the list of a run of TopK.addIDs

	latency    binCounts // Latency.addColumn's counts by bin
	badLatency uint64    // latencies below 0 addColumn left out (Partial.BadLatency)
}

// memoSlot is what a run of TopK.addIDs stamped gen knows of a client:
// its counter's place + 1, 0 for none.
type memoSlot struct {
	gen uint64
	pos int32
}

// maxCells bounds the cells a batch addresses by dictionary ids; a batch
// whose dictionaries make more combinations is counted through the maps.
const maxCells = 1 << 16

// Prepare makes b hold c's rows, widening the columns c holds
// (c.Decoded: a column not decoded costs nothing). c must stay valid while
// b is used: use it within the DecodeColumns callback that received c.
func (b *Batch) Prepare(c *columnar.Columns) {
	n := c.Len
	b.c, b.n = c, n
	b.times = c.Times(b.times)
	b.tier = c.Tier.Indices(b.tier, n)
	b.rule = c.Rule.Indices(b.rule, n)
	b.reason = c.Reason.Indices(b.reason, n)
	b.node = c.Node.Indices(b.node, n)
	b.respErr = c.ResponseError.Indices(b.respErr, n)
	b.users, b.userAt, b.usersMade, b.identified = "", nil, false, false
	b.tierNames, b.ruleNames, b.reasonNames, b.nodeNames = c.Tier.Values, c.Rule.Values, c.Reason.Values, c.Node.Values
	nt, nr, nrs := len(c.Tier.Values), len(c.Rule.Values), len(c.Reason.Values)
	b.nRule, b.nReason, b.nErr = nr, nrs, len(c.ResponseError.Values)
	// Dictionaries hold fewer than 2^31 values, so no product below
	// overflows once tier × rule is within maxCells.
	tr := nt * nr
	cells := tr * decisions.NumOutcomes * nrs
	b.dense = tr <= maxCells && cells <= maxCells && tr*b.nErr <= maxCells &&
		len(c.Node.Values)*decisions.NumOutcomes <= maxCells
	if b.dense {
		b.cells.grow(cells)
		b.byNode.grow(len(c.Node.Values) * decisions.NumOutcomes)
		b.errs.grow(nt * nr * b.nErr)
	}
}

// cellCounts counts in cells addressed by ids and remembers the cells it
// touched, so that adding them elsewhere and clearing them costs what was
// counted rather than the size of the array.
type cellCounts struct {
	n       []uint64
	touched []int32
}

// grow makes room for ids below n, all zero beyond the present ones
// (those are kept zero by drain).
func (c *cellCounts) grow(n int) {
	switch {
	case len(c.n) >= n:
	case cap(c.n) >= n:
		c.n = c.n[:n]
	default:
		c.n = append(c.n[:cap(c.n)], make([]uint64, n-cap(c.n))...)
	}
}

// inc adds one to cell k.
func (c *cellCounts) inc(k int) {
	if c.n[k] == 0 {
		c.touched = append(c.touched, int32(k))
	}
	c.n[k]++
}

// drain calls f with each touched cell and its count, and clears them.
func (c *cellCounts) drain(f func(k int, n uint64)) {
	for _, k := range c.touched {
		n := c.n[k]
		c.n[k] = 0
		f(int(k), n)
	}
	c.touched = c.touched[:0]
}

// Len is the number of rows.
func (b *Batch) Len() int { return b.n }

// Times returns each row's time in Unix nanoseconds (columnar.NullTime for
// the zero time); none when the time column was not decoded.
func (b *Batch) Times() []int64 { return b.times }

// refused is Refused by outcome number.
var refused = func() (r [256]bool) {
	for o := range r {
		r[o] = Refused(decisions.Outcome(o))
	}
	return r
}()

// makeUsers makes b.users and b.userAt, once a batch.
func (b *Batch) makeUsers() {
	if !b.usersMade {
		var data []byte
		data, b.userAt = b.c.UserID.Data()
		// A view of the column's bytes, valid while c is: a list that
		// keeps a client copies its user id (keep).
		b.users = unsafe.String(unsafe.SliceData(data), len(data))
		b.usersMade = true
	}
}

// keep returns the client id of b, to be kept past the batch: its user
// id copied out of the column's bytes.
func (b *Batch) keep(id int32) Client {
	c := b.clients[id]
	c.User = strings.Clone(c.User)
	return c
}

// user returns row i's user id, "" for none: a view of the batch's
// bytes (makeUsers).
func (b *Batch) user(i int) string {
	b.makeUsers()
	if at := b.userAt; at != nil && at[i+1] > at[i] {
		base := at[0]
		return b.users[at[i]-base : at[i+1]-base]
	}
	return ""
}

// client returns row i's client, an IPv6 address by its prefix of
// b.v6bits (AddrClient).
func (b *Batch) client(i int) Client {
	if u := b.user(i); u != "" {
		return Client{User: u}
	}
	c := b.c
	switch c.ClientIPFamily[i] {
	case 4:
		a := c.ClientIP[16*i+12 : 16*i+16]
		return Client{Addr: netip.AddrFrom4([4]byte(a))}
	case 6:
		a := netip.AddrFrom16([16]byte(c.ClientIP[16*i : 16*i+16]))
		if v6Bits(b.v6bits) < 128 && !a.Is4In6() {
			return AddrClient(a, b.v6bits) // a prefix, which has no zone
		}
		if z := c.ClientIPZone.Values[c.ClientIPZone.At(i)]; z != "" {
			a = a.WithZone(z)
		}
		return Client{Addr: a}
	}
	return Client{}
}

// v4 returns row i's IPv4 address, when its client is one: no user id,
// an address of family 4.
func (b *Batch) v4(i int) (a [4]byte, ok bool) {
	if b.c.ClientIPFamily[i] != 4 || b.user(i) != "" {
		return a, false
	}
	return [4]byte(b.c.ClientIP[16*i+12 : 16*i+16]), true
}

// countIPv6Under makes identify count an IPv6 client under its prefix of
// ipv6Prefix bits (Partial.IPv6Prefix), identifying the batch again if it
// was identified under another.
func (b *Batch) countIPv6Under(ipv6Prefix int) {
	if b.v6bits != ipv6Prefix {
		b.v6bits, b.identified = ipv6Prefix, false
	}
}

// UpdateColumns counts rows [lo, hi) of b, as Update would count each of
// their events in order.
func (c *Counts) UpdateColumns(b *Batch, lo, hi int) {
	cols := b.c
	for i := lo; i < hi; i++ {
		switch decisions.Kind(cols.Kind[i]) {
		case decisions.KindDecision:
			b.count(c, i, cols.Outcome[i])
		case decisions.KindDrops:
			c.Dropped = sat.Add(c.Dropped, cols.Dropped.Uint(i))
		case decisions.KindFeedback:
			if c.Feedback == nil {
				c.Feedback = map[string]uint64{}
			}
			c.Feedback[cols.List.Values[cols.List.At(i)]+"/"+cols.Action.Values[cols.Action.At(i)]]++
		}
	}
	b.flushCounts(c)
}

// UpdateColumns adds rows [lo, hi) of b, as Update would add each of
// their events in order.
func (p *Partial) UpdateColumns(b *Batch, lo, hi int) {
	b.countIPv6Under(p.IPv6Prefix)
	p.Events += uint64(hi - lo)
	b.foldColumns(p, lo, hi)
	b.badLatency = 0
	for _, a := range p.parts() {
		a.UpdateColumns(b, lo, hi)
	}
	p.BadLatency += b.badLatency
}

// seenClient is what Distinct.UpdateColumns inserted of one distinct
// client in the call stamped gen: into the overall and refused sketches,
// and the last tier and rule sketch (ids + 1). Inserting a hash into a
// HyperLogLog twice changes nothing (the sketch, sparse or dense, and its
// encoding after Estimate depend only on the set of hashes inserted), so
// this only has to skip most repeats, not all.
type seenClient struct {
	gen        uint32
	all, ref   bool
	tier, rule int32
}

// idSlot is a place of Batch's table of clients: a client's fingerprint
// and 1 + its id (0: empty), and whether it is an IPv4 address, whose
// fingerprint is a bijection of the address (v4Fingerprint), so that a
// probe for an address compares the slot alone.
type idSlot struct {
	fp uint64
	id int32
	v4 bool
}

// fingerprintSeed and mixSeed key the fingerprints of clients and the
// places of hashes in tables, per process: clients are the edge's
// untrusted input, and a table whose places an attacker can predict can
// be filled along one probe sequence. Outputs do not depend on them.
var (
	fingerprintSeed = maphash.MakeSeed()
	mixSeed         = maphash.Comparable(fingerprintSeed, uint64(0x72770001))
)

// mix64 is a keyed bijective mix of x (MurmurHash3's finalizer after the
// key), whose low bits depend on all of x's.
func mix64(x uint64) uint64 { return hashmix.Fmix64(x ^ mixSeed) }

// fingerprint returns a cheap 64-bit digest of c, to find its id in a
// batch (equal clients, equal fingerprints; the table compares the
// clients themselves, or for IPv4 addresses the fingerprints, a
// bijection of them). identify computes the same from the columns for
// users and IPv4 addresses.
func fingerprint(c Client) uint64 {
	if c.User != "" {
		return userFingerprint(c.User)
	}
	if c.Addr.Is4() {
		a := c.Addr.As4()
		return v4Fingerprint(binary.BigEndian.Uint32(a[:]))
	}
	a := c.Addr.As16()
	return maphash.Bytes(fingerprintSeed, a[:])
}

func userFingerprint(u string) uint64 { return maphash.String(fingerprintSeed, u) }

// v4Fingerprint is the fingerprint of the IPv4 address a (big-endian):
// mix64 is a bijection, so two addresses have two fingerprints.
func v4Fingerprint(a uint32) uint64 { return mix64(uint64(a)) }

// identify makes b.cid, b.clients and b.hashes: the batch's distinct
// clients, each made and hashed once, and each decision row's client id.
// A row of a user or of an IPv4 address is looked up from its column's
// bytes, without making its client.
func (b *Batch) identify() {
	if b.identified {
		return
	}
	n := b.n
	if cap(b.cid) < n {
		b.cid = make([]int32, n)
	}
	b.cid = b.cid[:n]
	if len(b.slots) < 2*n {
		size := 16
		for size < 2*n {
			size *= 2
		}
		b.slots = make([]idSlot, size)
	} else {
		for _, i := range b.used {
			b.slots[i] = idSlot{}
		}
	}
	b.used, b.clients, b.hashes = b.used[:0], b.clients[:0], b.hashes[:0]
	b.makeUsers()
	mask := uint64(len(b.slots) - 1)
	c := b.c
	for i, k := range c.Kind {
		if decisions.Kind(k) != decisions.KindDecision {
			continue
		}
		// The row's user, or IPv4 address (v4ok), or else its client.
		var (
			u    = b.user(i)
			v4   uint32
			v4b  [4]byte
			v4ok bool
			cl   Client
			fp   uint64
		)
		switch {
		case u != "":
			fp = userFingerprint(u)
		case c.ClientIPFamily[i] == 4:
			v4b, v4ok = [4]byte(c.ClientIP[16*i+12:16*i+16]), true
			v4 = binary.BigEndian.Uint32(v4b[:])
			fp = v4Fingerprint(v4)
		default:
			cl = b.client(i)
			fp = fingerprint(cl)
		}
		j := fp & mask
		for {
			slot := &b.slots[j]
			if slot.id == 0 {
				switch {
				case u != "":
					cl = Client{User: u}
				case v4ok:
					cl = Client{Addr: netip.AddrFrom4(v4b)}
				}
				id := int32(len(b.clients))
				*slot = idSlot{fp: fp, id: id + 1, v4: v4ok}
				b.used = append(b.used, int32(j))
				b.clients = append(b.clients, cl)
				if v4ok {
					b.hashes = append(b.hashes, hashV4(v4))
				} else {
					b.hashes = append(b.hashes, hashClientInto(cl, &b.scratch))
				}
				b.cid[i] = id
				break
			}
			if slot.fp == fp && slot.v4 == v4ok {
				id := slot.id - 1
				var same bool
				switch {
				case v4ok:
					same = true // one fingerprint, one address
				case u != "":
					same = b.clients[id].User == u
				default:
					same = b.clients[id] == cl
				}
				if same {
					b.cid[i] = id
					break
				}
			}
			j = (j + 1) & mask
		}
	}
	if cap(b.seen) < len(b.clients) {
		b.seen = make([]seenClient, len(b.clients), cap(b.cid))
	}
	b.seen = b.seen[:len(b.clients)]
	clear(b.seen)
	b.seenGen = 0
	b.identified = true
}

// nextGen returns the stamp of a new call inserting clients into
// sketches (see seenClient).
func (b *Batch) nextGen() uint32 {
	b.seenGen++
	return b.seenGen
}

// seenIn returns what the call stamped gen inserted of the client id so
// far.
func (b *Batch) seenIn(gen uint32, id int32) *seenClient {
	seen := &b.seen[id]
	if seen.gen != gen {
		*seen = seenClient{gen: gen}
	}
	return seen
}

// UpdateColumns counts the clients of rows [lo, hi) of b, as Update
// would count each of their events.
func (s *Distinct) UpdateColumns(b *Batch, lo, hi int) {
	c := b.c
	b.identify()
	b.tierHLL = resetSlice(b.tierHLL, len(c.Tier.Values))
	b.ruleHLL = resetSlice(b.ruleHLL, len(c.Rule.Values))
	b.tierKnown = resetSlice(b.tierKnown, len(c.Tier.Values))
	gen := b.nextGen()
	var allKnown, refKnown *knownHashes
	for i := lo; i < hi; i++ {
		if decisions.Kind(c.Kind[i]) != decisions.KindDecision {
			continue
		}
		t, r := b.tier[i], b.rule[i]
		hll := b.tierHLL[t]
		if hll == nil {
			hll = s.tier(b.tierNames[t])
			b.tierHLL[t], b.tierKnown[t] = hll, s.knownOf(hll)
		}
		rh := b.ruleHLL[r]
		if rh == nil {
			rh = s.rule(b.ruleNames[r]) // nil again for the empty rule: cheap
			b.ruleHLL[r] = rh
		}
		// Each distinct client once per sketch (see seenClient).
		id := b.cid[i]
		h, seen := b.hashes[id], b.seenIn(gen, id)
		if rh != nil && seen.rule != r+1 {
			rh.InsertHash(h)
			seen.rule = r + 1
		}
		if !seen.all {
			if allKnown == nil {
				if s.All == nil {
					s.All = hyperloglog.New14()
				}
				allKnown = s.knownOf(s.All)
			}
			allKnown.add(s.All, h)
			seen.all = true
		}
		if refused[c.Outcome[i]] && !seen.ref {
			if refKnown == nil {
				if s.Refused == nil {
					s.Refused = hyperloglog.New14()
				}
				refKnown = s.knownOf(s.Refused)
			}
			refKnown.add(s.Refused, h)
			seen.ref = true
		}
		if seen.tier != t+1 {
			b.tierKnown[t].add(hll, h)
			seen.tier = t + 1
		}
	}
	if allKnown != nil {
		allKnown.flush(s.All)
	}
	if refKnown != nil {
		refKnown.flush(s.Refused)
	}
	for t, k := range b.tierKnown {
		if k != nil {
			k.flush(b.tierHLL[t])
		}
	}
}

// UpdateColumns counts the clients of rows [lo, hi) of b, as Update
// would count each of their events: each list takes its hits in their
// order, one list after another (see rowGroups).
func (o *Offenders) UpdateColumns(b *Batch, lo, hi int) {
	c := b.c
	b.identify()
	all, ref, chal, tok := b.hits[0][:0], b.hits[1][:0], b.hits[2][:0], b.hits[3][:0]
	for i := lo; i < hi; i++ {
		if decisions.Kind(c.Kind[i]) != decisions.KindDecision {
			continue
		}
		id := b.cid[i]
		all = append(all, id)
		oc := c.Outcome[i]
		if refused[oc] {
			ref = append(ref, id)
		}
		switch decisions.Outcome(oc) {
		case decisions.Challenge:
			chal = append(chal, id)
		case decisions.TokenPass:
			tok = append(tok, id)
		}
	}
	b.hits[0], b.hits[1], b.hits[2], b.hits[3] = all, ref, chal, tok
	o.Requests.addIDs(b, all)
	o.Refusals.addIDs(b, ref)
	o.Challenged.addIDs(b, chal)
	o.TokenPassed.addIDs(b, tok)
	g := &b.groups
	g.group(b, b.tier, b.tierNames, lo, hi)
	for k := range g.len() {
		name := g.names[k]
		o.topk(o.RequestsByTier, name).addIDs(b, g.of(k))
		if ids := g.refusedOf(k); len(ids) > 0 {
			o.topk(o.RefusalsByTier, name).addIDs(b, ids)
		}
	}
	g.group(b, b.rule, b.ruleNames, lo, hi)
	for k := range g.len() {
		name := g.names[k]
		if name != "" {
			o.topk(o.RequestsByRule, name).addIDs(b, g.of(k))
		}
		if ids := g.refusedOf(k); len(ids) > 0 {
			o.topk(o.RefusalsByRule, name).addIDs(b, ids)
		}
	}
}

// count counts decision row i, of outcome o, in the cells.
func (b *Batch) count(counts *Counts, i int, o uint8) {
	c := b.c
	t, r := int(b.tier[i]), int(b.rule[i])
	if !b.dense || int(o) >= decisions.NumOutcomes {
		k := CountKey{Tier: b.tierNames[t], Rule: b.ruleNames[r], Outcome: decisions.Outcome(o), Reason: b.reasonNames[b.reason[i]]}
		counts.add(k, b.nodeNames[b.node[i]], 1)
		if e := c.ResponseError.Values[b.respErr[i]]; e != "" {
			if counts.Errors == nil {
				counts.Errors = map[ErrorKey]uint64{}
			}
			counts.Errors[ErrorKey{k.Tier, k.Rule, e}]++
		}
		return
	}
	tr := t*b.nRule + r
	b.cells.inc((tr*decisions.NumOutcomes+int(o))*b.nReason + int(b.reason[i]))
	b.byNode.inc(int(b.node[i])*decisions.NumOutcomes + int(o))
	if e := b.respErr[i]; c.ResponseError.Values[e] != "" {
		b.errs.inc(tr*b.nErr + int(e))
	}
}

// flushCounts adds the counted cells to c and clears them.
func (b *Batch) flushCounts(c *Counts) {
	cols := b.c
	b.cells.drain(func(k int, n uint64) {
		rs := k % b.nReason
		o := k / b.nReason % decisions.NumOutcomes
		tr := k / b.nReason / decisions.NumOutcomes
		key := CountKey{Tier: b.tierNames[tr/b.nRule], Rule: b.ruleNames[tr%b.nRule],
			Outcome: decisions.Outcome(o), Reason: b.reasonNames[rs]}
		if c.Cells == nil {
			c.Cells = map[CountKey]uint64{}
			c.ByNode = map[string]*[decisions.NumOutcomes]uint64{}
		}
		c.Cells[key] += n
	})
	b.byNode.drain(func(k int, n uint64) {
		node := b.nodeNames[k/decisions.NumOutcomes]
		byOutcome := c.ByNode[node]
		if byOutcome == nil {
			byOutcome = new([decisions.NumOutcomes]uint64)
			c.ByNode[node] = byOutcome
		}
		byOutcome[k%decisions.NumOutcomes] += n
	})
	b.errs.drain(func(k int, n uint64) {
		tr := k / b.nErr
		if c.Errors == nil {
			c.Errors = map[ErrorKey]uint64{}
		}
		c.Errors[ErrorKey{b.tierNames[tr/b.nRule], b.ruleNames[tr%b.nRule], cols.ResponseError.Values[k%b.nErr]}] += n
	})
}

// resetSlice returns s with n nil elements.
func resetSlice[T any](s []*T, n int) []*T {
	if cap(s) < n {
		return make([]*T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// AddBatch adds the rows of a record batch, numbered from seq in order, as
// Add would add each of their events with no Flush between them. A caller
// that closes windows at the exact event (Due after every Add, as
// RunKinesis does) and wants the same outputs must not add a batch in
// which a window becomes due before its last row.
func (r *Rollup) AddBatch(c *columnar.Columns, seq uint64) {
	if c.Len == 0 {
		return
	}
	r.batch.Prepare(c)
	r.addPrepared(&r.batch, seq, 0, c.Len)
}

// addPrepared adds rows [lo, hi) of the prepared batch b, row i numbered
// seq+i, as Add would add each of their events with no Flush between them.
func (r *Rollup) addPrepared(b *Batch, seq uint64, lo, hi int) {
	if lo >= hi {
		return
	}
	r.next = max(r.next, seq+uint64(hi))
	r.active = true
	r.stats.Events += uint64(hi - lo)
	size := int64(r.o.Window)
	closedNs, anyClosed := r.closed.UnixNano(), !r.closed.IsZero()
	old, seen := r.latestNs()
	latest, skew, ceil := old, int64(r.o.MaxSkew), r.ceil
	var future uint64
	times := b.times
	for i := lo; i < hi; {
		start, ok := windowOf(times[i], size)
		if !ok {
			r.stats.BadTime++
			i++
			continue
		}
		// start+size <= closedNs, without the sum wrapping at the end of
		// time (Add compares times, which do not wrap).
		late := anyClosed && closedNs > start && uint64(closedNs-start) >= uint64(size) || r.emittedAheadHas(start)
		m := r.open
		if late {
			m = r.late
		}
		w := m[start]
		// The window's rows are [i, j); those before first were refused
		// (see refuses), one by one as Add would, until the window opened.
		j, first := i, i
		opens := w == nil && !(late && r.o.Late == LateDrop)
		for span := uint64(windowSpanNs(start, size)); j < hi && inRun(times[j], start, span); j++ {
			t := times[j]
			if t <= ceil && seen && r.ahead.n == 0 && !aheadOf(t, latest, skew) {
				latest = max(latest, t) // the present, nothing held ahead
			} else {
				var f uint64
				latest, seen, f = r.ahead.observe(latest, seen, t, skew, ceil)
				future += f
			}
			if opens {
				if w = r.openWindow(late, start, seq+uint64(j), latest, seen); w == nil {
					first = j + 1
					continue
				}
				opens = false
			}
		}
		if late {
			r.stats.Late += uint64(j - i)
			if r.o.Late == LateDrop {
				r.stats.LateDropped += uint64(j - i)
				i = j
				continue
			}
		}
		if first < j {
			folded, bad := w.p.Folded, w.p.BadLatency
			w.p.UpdateColumns(b, first, j)
			r.stats.Folded += w.p.Folded - folded
			r.stats.BadLatency += w.p.BadLatency - bad
			w.from, w.to = min(w.from, seq+uint64(first)), max(w.to, seq+uint64(j-1))
		}
		i = j
	}
	r.stats.Future += future
	if latest != old || r.latest.IsZero() {
		r.setLatest(latest, seen)
	}
}

// addDecoded adds rows lo on of a decoded record (columnar.Rows: columns,
// or events), row i numbered seq+i, leaving out those skip marks (skip may
// be nil), in runs: each from the next row kept to limit(b, i, j), where
// j is the end of the rows kept from i on and b the prepared batch (nil
// for events); after is called with the number of rows of each run once
// it is added. Columns go through addPrepared without an event made of
// each row; events through Add.
func (r *Rollup) addDecoded(rows columnar.Rows, lo int, seq uint64, skip []bool, limit func(b *Batch, lo, hi int) int, after func(n int) error) error {
	n := rows.Len()
	var b *Batch
	if rows.Columns != nil {
		b = &r.batch
		b.Prepare(rows.Columns)
	}
	for i := lo; i < n; {
		for i < n && skip != nil && skip[i] {
			i++
		}
		j := i
		for j < n && (skip == nil || !skip[j]) {
			j++
		}
		if j == i {
			break
		}
		j = max(min(limit(b, i, j), j), i+1)
		if b != nil {
			r.addPrepared(b, seq, i, j)
		} else {
			for k := i; k < j; k++ {
				r.Add(&rows.Events[k], seq+uint64(k))
			}
		}
		if err := after(j - i); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// dueEnd returns the least j in (lo, hi] such that adding rows [lo, j) of
// the prepared batch b makes the Rollup Due, or hi: where a caller that
// checks Due after every event (RunKinesis) must stop to close windows
// at the event that passes them, as Add and Due would. Past MaxAhead it
// may return an earlier j, never a later one: a window the rows before j
// would have refused (see refuses) only because of windows they opened
// themselves is taken as open. Stopping there and finding Flush has
// nothing to emit changes no output.
func (r *Rollup) dueEnd(b *Batch, lo, hi int) int {
	size, lateness := int64(r.o.Window), int64(r.o.Lateness)
	oldest, open := r.oldestOpen()
	closedNs, anyClosed := r.closed.UnixNano(), !r.closed.IsZero()
	latest, seen := r.latestNs()
	ahead, skew := r.ahead, int64(r.o.MaxSkew) // a copy: only simulated
	for i := lo; i < hi; i++ {
		t := b.times[i]
		start, ok := windowOf(t, size)
		if !ok {
			continue // skipped (BadTime)
		}
		latest, seen, _ = ahead.observe(latest, seen, t, skew, r.ceil)
		if (!anyClosed || start+size > closedNs) && !r.emittedAheadHas(start) {
			// A window refused with the windows open before the batch is
			// refused (the windows the batch opens only add to them).
			if (!open || start < oldest) && (r.open[start] != nil || !r.refuses(false, start, latest, seen)) {
				oldest, open = start, true
			}
		}
		if open && seen && oldest+size <= latest-lateness {
			return i + 1
		}
	}
	return hi
}
