package aggregator

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/axiomhq/hyperloglog"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// A design for the distinct clients and the lists, measured and not
// adopted (BenchmarkColumnsPartialWindows' -sorted runs; BENCHMARKS.md, "A
// sorted fold at the window's close"): a window
// keeps one 16-byte record a decision (its client's fingerprint, the
// client, tier, rule and outcome) and nothing else of its clients; at its
// close it sorts the records by fingerprint, so that each client's
// decisions lie side by side, and walks them once: each client is counted
// exactly, hashed once, inserted once into each HyperLogLog it belongs
// to, and offered once to each list, kept exactly by a heap of k. Rows
// are read in order and records written in order, where the rollup's
// sketches and lists take a random access each hit.
//
// What adopting it would take is in BENCHMARKS.md: the records in every
// state save, a bound of the records a window keeps, and lists that are
// exact within a window.

// foldRec is one decision of a window in a sortedFold.
type foldRec struct {
	fp   uint64 // the client's fingerprint (fingerprint): equal clients, equal fps
	ref  uint32 // the IPv4 address (kind 0), or the index of the user (1) or address (2)
	rule uint16 // the window's rule id + 1; 0 for none
	tier uint8  // the window's tier id
	oc   uint8  // the outcome, | kind<<6
}

// sortedFold is a window's records, and the names and clients they refer to.
type sortedFold struct {
	recs, tmp      []foldRec
	users          []string
	addrs          []Client // IPv6 addresses or prefixes
	tierIdx        map[string]uint8
	ruleIdx        map[string]uint16
	tiers, rules   []string
	batchT         []uint8  // a batch's tier ids to the window's
	batchR         []uint16 // its rule ids to the window's + 1
	hashes         [][]uint64
	runT, runR     []runCount
	order          []Hitter
	allH, refusedH []uint64
	heaps          []exactTop
	used           int // heaps handed out for the window's close
}

type runCount struct {
	id       uint16
	req, ref uint64
}

func (f *sortedFold) reset() {
	f.recs, f.users, f.addrs = f.recs[:0], f.users[:0], f.addrs[:0]
	clear(f.tierIdx)
	clear(f.ruleIdx)
	f.tiers, f.rules = f.tiers[:0], f.rules[:0]
}

// add keeps rows [lo, hi) of b, whose names foldColumns folded.
func (f *sortedFold) add(b *Batch, lo, hi int) {
	if f.tierIdx == nil {
		f.tierIdx, f.ruleIdx = map[string]uint8{}, map[string]uint16{}
	}
	f.batchT, f.batchR = f.batchT[:0], f.batchR[:0]
	for _, n := range b.tierNames {
		id, ok := f.tierIdx[n]
		if !ok {
			id = uint8(len(f.tiers))
			f.tierIdx[n] = id
			f.tiers = append(f.tiers, n)
		}
		f.batchT = append(f.batchT, id)
	}
	for _, n := range b.ruleNames {
		id, ok := f.ruleIdx[n]
		if !ok && n != "" {
			f.rules = append(f.rules, n)
			id = uint16(len(f.rules))
			f.ruleIdx[n] = id
		}
		f.batchR = append(f.batchR, id)
	}
	c := b.c
	for i := lo; i < hi; i++ {
		if decisions.Kind(c.Kind[i]) != decisions.KindDecision {
			continue
		}
		r := foldRec{tier: f.batchT[b.tier[i]], rule: f.batchR[b.rule[i]], oc: c.Outcome[i]}
		switch u := b.user(i); {
		case u != "":
			r.fp, r.ref, r.oc = userFingerprint(u), uint32(len(f.users)), r.oc|1<<6
			f.users = append(f.users, u)
		case c.ClientIPFamily[i] == 4:
			v4 := binary.BigEndian.Uint32(c.ClientIP[16*i+12 : 16*i+16])
			r.fp, r.ref = v4Fingerprint(v4), v4
		default:
			cl := b.client(i)
			r.fp, r.ref, r.oc = fingerprint(cl), uint32(len(f.addrs)), r.oc|2<<6
			f.addrs = append(f.addrs, cl)
		}
		f.recs = append(f.recs, r)
	}
}

func (f *sortedFold) client(r *foldRec) Client {
	switch r.oc >> 6 {
	case 0:
		return Client{Addr: netip.AddrFrom4([4]byte{byte(r.ref >> 24), byte(r.ref >> 16), byte(r.ref >> 8), byte(r.ref)})}
	case 1:
		return Client{User: f.users[r.ref]}
	}
	return f.addrs[r.ref]
}

// sort orders the records by fingerprint: two passes of a radix sort on
// its top 16 bits, then an insertion sort of each run sharing them (a few
// records: the fingerprint is keyed by a secret seed, so no client
// chooses to share them; equal fingerprints, one client's, cost nothing).
func (f *sortedFold) sort() {
	n := len(f.recs)
	if cap(f.tmp) < n {
		f.tmp = make([]foldRec, n)
	}
	src, dst := f.recs, f.tmp[:n]
	for _, shift := range []uint{48, 56} {
		var at [256]int
		for i := range src {
			at[byte(src[i].fp>>shift)]++
		}
		sum := 0
		for b, c := range at {
			at[b], sum = sum, sum+c
		}
		for i := range src {
			b := byte(src[i].fp >> shift)
			dst[at[b]] = src[i]
			at[b]++
		}
		src, dst = dst, src
	}
	r := src // f.recs again
	for i := 1; i < n; i++ {
		if r[i].fp >= r[i-1].fp {
			continue
		}
		x, j := r[i], i-1
		for ; j >= 0 && r[j].fp > x.fp; j-- {
			r[j+1] = r[j]
		}
		r[j+1] = x
	}
}

// exactTop keeps the k largest counts offered, by a min-heap whose root
// is the last by byRank: which clients it keeps does not depend on the
// order they are offered in. A client is its record's place until the
// heap is read.
type exactTop struct {
	k int
	h []ranked
}

// worse reports whether a goes after b by byRank.
func (f *sortedFold) worse(a, b *ranked) bool { return byRank(*a, *b, f.clientAt) > 0 }

// clientAt returns the client of record p.
func (f *sortedFold) clientAt(p int32) Client { return f.client(&f.recs[p]) }

func (f *sortedFold) sortKey(r *foldRec) uint64 {
	if r.oc>>6 == 0 {
		return sortKeyV4(r.ref)
	}
	return sortKey(f.client(r))
}

func (f *sortedFold) offer(t *exactTop, rec int32, n uint64) {
	h := t.h
	if len(h) == t.k && n < h[0].count {
		return
	}
	x := ranked{count: n, key: f.sortKey(&f.recs[rec]), pos: rec}
	if len(h) < t.k {
		h = append(h, x)
		for i := len(h) - 1; i > 0; {
			p := (i - 1) / 2
			if !f.worse(&h[i], &h[p]) {
				break
			}
			h[p], h[i] = h[i], h[p]
			i = p
		}
		t.h = h
		return
	}
	if !f.worse(&h[0], &x) {
		return
	}
	h[0] = x
	for i := 0; ; {
		m := 2*i + 1
		if m >= len(h) {
			break
		}
		if r := m + 1; r < len(h) && f.worse(&h[r], &h[m]) {
			m = r
		}
		if !f.worse(&h[m], &h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// tops returns n empty heaps of k, reusing the last window's.
func (f *sortedFold) tops(n, k int) []exactTop {
	for len(f.heaps) < n {
		f.heaps = append(f.heaps, exactTop{h: make([]ranked, 0, k)})
	}
	t := f.heaps[f.used : f.used+n]
	f.used += n
	for i := range t {
		t[i].k, t[i].h = k, t[i].h[:0]
	}
	return t
}

// close sorts the records and folds them into p's distinct clients and
// lists, both empty before.
func (f *sortedFold) close(p *Partial) {
	f.sort()
	k := p.Offenders.k
	nt, nr := len(f.tiers), len(f.rules)+1
	f.used = 0
	all := f.tops(4+2*nt+2*nr, k)
	req, ref, chal, pass := &all[0], &all[1], &all[2], &all[3]
	reqT, refT, reqR, refR := all[4:4+nt], all[4+nt:4+2*nt], all[4+2*nt:4+2*nt+nr], all[4+2*nt+nr:]
	for len(f.hashes) < len(f.tiers) {
		f.hashes = append(f.hashes, nil)
	}
	for i := range f.hashes {
		f.hashes[i] = f.hashes[i][:0]
	}
	f.allH, f.refusedH = f.allH[:0], f.refusedH[:0]
	ruleHLL := make([]*hyperloglog.Sketch, len(f.rules)+1)
	for q, name := range f.rules {
		ruleHLL[q+1] = p.Clients.rule(name)
	}
	r := f.recs
	for i := 0; i < len(r); {
		j := i + 1
		for j < len(r) && r[j].fp == r[i].fp {
			j++
		}
		first, at := &r[i], int32(i)
		var h uint64
		if first.oc>>6 == 0 {
			h = hashV4(first.ref)
		} else {
			h = hashClient(f.client(first))
		}
		var nReq, nRef, nChal, nPass uint64
		ts, rs := f.runT[:0], f.runR[:0]
		for x := i; x < j; x++ {
			e := &r[x]
			oc := e.oc & 63
			var rf uint64
			if refused[oc] {
				rf = 1
			}
			nReq++
			nRef += rf
			switch decisions.Outcome(oc) {
			case decisions.Challenge:
				nChal++
			case decisions.TokenPass:
				nPass++
			}
			t := 0
			for t < len(ts) && ts[t].id != uint16(e.tier) {
				t++
			}
			if t == len(ts) {
				ts = append(ts, runCount{id: uint16(e.tier)})
			}
			ts[t].req++
			ts[t].ref += rf
			if e.rule != 0 {
				q := 0
				for q < len(rs) && rs[q].id != e.rule {
					q++
				}
				if q == len(rs) {
					rs = append(rs, runCount{id: e.rule})
				}
				rs[q].req++
				rs[q].ref += rf
			}
		}
		f.runT, f.runR = ts, rs
		f.offer(req, at, nReq)
		f.allH = append(f.allH, h)
		if nRef > 0 {
			f.offer(ref, at, nRef)
			f.refusedH = append(f.refusedH, h)
		}
		if nChal > 0 {
			f.offer(chal, at, nChal)
		}
		if nPass > 0 {
			f.offer(pass, at, nPass)
		}
		for _, t := range ts {
			f.offer(&reqT[t.id], at, t.req)
			f.hashes[t.id] = append(f.hashes[t.id], h)
			if t.ref > 0 {
				f.offer(&refT[t.id], at, t.ref)
			}
		}
		for _, q := range rs {
			f.offer(&reqR[q.id], at, q.req)
			ruleHLL[q.id].InsertHash(h)
			if q.ref > 0 {
				f.offer(&refR[q.id], at, q.ref)
			}
		}
		i = j
	}
	// The sketches, in the form the rollup gives them (see sparseMax).
	c := &p.Clients
	fill := func(sk **hyperloglog.Sketch, hs []uint64) {
		if len(hs) == 0 {
			return
		}
		if len(hs) > sparseMax {
			*sk = hyperloglog.NewNoSparse()
			for _, h := range hs {
				(*sk).InsertHash(h)
			}
			return
		}
		if *sk == nil {
			*sk = hyperloglog.New14()
		}
		kh := knownHashes{pending: hs}
		kh.flush(*sk)
	}
	fill(&c.All, f.allH)
	fill(&c.Refused, f.refusedH)
	for t, name := range f.tiers {
		sk := c.ByTier[name]
		fill(&sk, f.hashes[t])
		if sk != nil {
			if c.ByTier == nil {
				c.ByTier = map[string]*hyperloglog.Sketch{}
			}
			c.ByTier[name] = sk
		}
	}
	// The lists, each from its heap.
	o := p.Offenders
	list := func(t *TopK, e *exactTop) {
		f.order = f.order[:0]
		for _, x := range e.h {
			f.order = append(f.order, Hitter{Client: f.clientAt(x.pos), Count: x.count})
		}
		sortHitters(f.order)
		t.reset(f.order)
	}
	list(o.Requests, req)
	list(o.Refusals, ref)
	list(o.Challenged, chal)
	list(o.TokenPassed, pass)
	for t, name := range f.tiers {
		if len(reqT[t].h) > 0 {
			list(o.topk(o.RequestsByTier, name), &reqT[t])
		}
		if len(refT[t].h) > 0 {
			list(o.topk(o.RefusalsByTier, name), &refT[t])
		}
	}
	for q, name := range f.rules {
		if len(reqR[q+1].h) > 0 {
			list(o.topk(o.RequestsByRule, name), &reqR[q+1])
		}
		if len(refR[q+1].h) > 0 {
			list(o.topk(o.RefusalsByRule, name), &refR[q+1])
		}
	}
}

// withoutClients is Partial.UpdateColumns without the distinct clients
// and the lists (nor identify, which only they use).
func withoutClients(p *Partial, b *Batch, lo, hi int) {
	p.Events += uint64(hi - lo)
	b.foldColumns(p, lo, hi)
	parts := p.parts()
	for _, a := range parts[:len(parts)-1] { // the lists are last
		if a != &p.Clients {
			a.UpdateColumns(b, lo, hi)
		}
	}
}

// TestSortedFold: over windows of the generator's traffic, the sorted
// fold's distinct clients encode to the bytes the rollup's do (one set of
// hashes, one form), and its lists are the exact k heaviest clients
// (counted here one by one), ties by client.
func TestSortedFold(t *testing.T) {
	t.Parallel()
	ds := decisiontest.NewGenerator(1, t0).Batch(1 << 18) // a first window of 171,500 events, 32,000 clients
	windows, _ := windowRanges(t, ds, time.Minute)
	var b Batch
	var f sortedFold
	const k = 100
	for wi, win := range windows[:1] {
		rollup, folded := NewPartial(t0, time.Minute, k), NewPartial(t0, time.Minute, k)
		f.reset()
		requests, refusals := map[Client]uint64{}, map[Client]uint64{}
		for _, rr := range win {
			b.Prepare(rr.c)
			rollup.UpdateColumns(&b, rr.lo, rr.hi)
			withoutClients(folded, &b, rr.lo, rr.hi)
			f.add(&b, rr.lo, rr.hi)
			for i := rr.lo; i < rr.hi; i++ {
				if decisions.Kind(rr.c.Kind[i]) == decisions.KindDecision {
					requests[b.client(i)]++
					if refused[rr.c.Outcome[i]] {
						refusals[b.client(i)]++
					}
				}
			}
		}
		f.close(folded)
		want, err := rollup.Clients.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := folded.Clients.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("window %d: the distinct clients encode to %d bytes, the rollup's to %d", wi, len(got), len(want))
		}
		for name, c := range map[string]struct {
			list  *TopK
			count map[Client]uint64
		}{"requests": {folded.Offenders.Requests, requests}, "refusals": {folded.Offenders.Refusals, refusals}} {
			var all []Hitter
			for cl, n := range c.count {
				all = append(all, Hitter{Client: cl, Count: n})
			}
			sortHitters(all)
			if len(all) < 2*k {
				t.Fatalf("window %d %s: %d clients, too few to test a list of %d", wi, name, len(all), k)
			}
			if got, want := c.list.Top(k), all[:k]; !slices.Equal(got, want) {
				t.Errorf("window %d %s:\n got %v\nwant %v", wi, name, got, want)
			}
		}
	}
}
