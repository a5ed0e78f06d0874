package aggregator

import "github.com/ratewarden/ratewarden/decisions"

// DefaultMaxKeys is Partial.MaxKeys's default: distinct tiers, rules, nodes
// and reasons a window keeps apart, each. A configuration has a few dozen
// rules, a fleet a few hundred nodes, the edge a dozen reasons; 4,096 of
// each is beyond any of them, and bounds what hostile names (each record
// can carry its own, within decisions.FieldCaps) make a window hold: a
// top-K list, a sketch and count cells per tier and rule.
const DefaultMaxKeys = 4096

// OtherKey is the name the tiers, rules, nodes and reasons past a window's
// MaxKeys are counted under, folded together; the same as the EMF
// documents' OtherRule.
const OtherKey = OtherRule

// keySets are the tiers, rules, nodes and reasons a partial holds, to
// fold new ones past its cap. A name is admitted when an event stores it:
// the tier, rule and reason of a decision in Counts.Cells, its node in
// Counts.ByNode. So the sets are those of the count
// maps, and a decoded partial rebuilds them from its counts: a restored
// rollup folds the same names as one that never stopped.
type keySets struct {
	tiers, rules, nodes, reasons map[string]struct{}
}

// keys returns p's key sets, built from its counts when needed.
func (p *Partial) keys() *keySets {
	if p.keySets != nil {
		return p.keySets
	}
	k := &keySets{tiers: map[string]struct{}{}, rules: map[string]struct{}{}, nodes: map[string]struct{}{}, reasons: map[string]struct{}{}}
	for c := range p.Counts.Cells {
		k.tiers[c.Tier], k.rules[c.Rule], k.reasons[c.Reason] = struct{}{}, struct{}{}, struct{}{}
	}
	for n := range p.Counts.ByNode {
		k.nodes[n] = struct{}{}
	}
	p.keySets = k
	return k
}

func (p *Partial) maxKeys() int {
	if p.MaxKeys > 0 {
		return p.MaxKeys
	}
	return DefaultMaxKeys
}

// admit returns name, admitted to set if there is room, or OtherKey.
func admit(set map[string]struct{}, name string, max int) (string, bool) {
	if _, ok := set[name]; ok {
		return name, false
	}
	if len(set) >= max {
		return OtherKey, name != OtherKey // a name of OtherKey is not folded
	}
	set[name] = struct{}{}
	return name, false
}

// foldDecision returns d, or a copy of it in p's scratch event with the
// names past the window's cap folded into OtherKey, counting it in
// p.Folded. d must be a decision (KindDecision).
func (p *Partial) foldDecision(d *decisions.Decision) *decisions.Decision {
	k, max := p.keys(), p.maxKeys()
	tier, f1 := admit(k.tiers, d.Tier, max)
	rule, f2 := admit(k.rules, d.Rule, max)
	reason, f3 := admit(k.reasons, d.Reason, max)
	node, f4 := admit(k.nodes, d.Node, max)
	if !(f1 || f2 || f3 || f4) {
		return d
	}
	p.Folded++
	p.scratch = *d
	p.scratch.Tier, p.scratch.Rule, p.scratch.Reason, p.scratch.Node = tier, rule, reason, node
	return &p.scratch
}

// foldTable is a Batch's table of one dimension's names after folding, by
// dictionary id, the call (Batch.foldGen) that decided each, and whether
// each was folded (worked out once per id, not compared per row).
type foldTable struct {
	names  []string
	seen   []uint32
	folded []bool
}

// foldDim is one dimension foldColumns folds: the partial's set, the
// dictionary, the rows' ids, and b's table of names after folding (names,
// pointed at t.names when some id may fold).
type foldDim struct {
	set   map[string]struct{}
	vals  []string
	ids   []int32
	names *[]string
	t     *foldTable
}

// foldColumns makes b's name tables (b.tierNames and the others) hold, for
// each dictionary id that a decision row of [lo, hi) uses, its name or
// OtherKey past p's cap, admitting names in row order as foldDecision
// does event by event; it counts the rows folded in p.Folded.
func (b *Batch) foldColumns(p *Partial, lo, hi int) {
	c := b.c
	k, max := p.keys(), p.maxKeys()
	b.foldGen++
	dims := [...]foldDim{
		{k.tiers, c.Tier.Values, b.tier, &b.tierNames, &b.fold[0]},
		{k.rules, c.Rule.Values, b.rule, &b.ruleNames, &b.fold[1]},
		{k.reasons, c.Reason.Values, b.reason, &b.reasonNames, &b.fold[2]},
		{k.nodes, c.Node.Values, b.node, &b.nodeNames, &b.fold[3]},
	}
	for i := range dims {
		if len(dims[i].set)+len(dims[i].vals) > max {
			b.foldRows(p, &dims, max, lo, hi)
			return
		}
	}
	b.admitRows(&dims, lo, hi)
}

// admitRows is foldColumns where no dimension can reach the cap however
// many of the dictionary's names the rows admit: no row folds, each
// dimension's names are the dictionary's, and the order of admission does
// not matter. A dimension whose names the set holds already (checked when
// the dictionary is no longer than the rows, so that a call costs what its
// rows do) needs no pass over the rows.
func (b *Batch) admitRows(dims *[4]foldDim, lo, hi int) {
	c, gen := b.c, b.foldGen
	var mark [4]bool
	marking := false
	for j := range dims {
		d := &dims[j]
		*d.names = d.vals
		if len(d.vals) <= hi-lo && holdsAll(d.set, d.vals) {
			continue
		}
		d.t.seen = growTo(d.t.seen, len(d.vals))
		mark[j], marking = true, true
	}
	if !marking {
		return
	}
	// A pass over the rows per dimension: the dictionaries hold names
	// that only other kinds of events use (a feedback event's reason and
	// node), which decision rows never admit, so most batches mark.
	kinds := c.Kind[lo:hi]
	for j := range dims {
		if !mark[j] {
			continue
		}
		seen, ids := dims[j].t.seen, dims[j].ids[lo:hi]
		ids = ids[:len(kinds)] // one length: ids[i] needs no bounds check
		for i, k := range kinds {
			if decisions.Kind(k) == decisions.KindDecision {
				seen[ids[i]] = gen
			}
		}
	}
	for j := range dims {
		if d := &dims[j]; mark[j] {
			for id, g := range d.t.seen {
				if g == gen {
					d.set[d.vals[id]] = struct{}{}
				}
			}
		}
	}
}

// holdsAll reports whether set holds every name of vals.
func holdsAll(set map[string]struct{}, vals []string) bool {
	for _, v := range vals {
		if _, ok := set[v]; !ok {
			return false
		}
	}
	return true
}

// foldRows is foldColumns where a dimension may reach the cap: each id is
// decided at its first decision row, in row order.
func (b *Batch) foldRows(p *Partial, dims *[4]foldDim, max, lo, hi int) {
	c, gen := b.c, b.foldGen
	for i := range dims {
		d := &dims[i]
		d.t.names = growTo(d.t.names, len(d.vals))
		d.t.seen = growTo(d.t.seen, len(d.vals))
		d.t.folded = growTo(d.t.folded, len(d.vals))
		*d.names = d.t.names
	}
	for i := lo; i < hi; i++ {
		if decisions.Kind(c.Kind[i]) != decisions.KindDecision {
			continue
		}
		folded := false
		for j := range dims {
			d := &dims[j]
			id := d.ids[i]
			t := d.t
			if t.seen[id] == gen {
				folded = folded || t.folded[id]
				continue
			}
			name, f := admit(d.set, d.vals[id], max)
			t.names[id], t.folded[id] = name, f
			t.seen[id] = gen
			folded = folded || f
		}
		if folded {
			p.Folded++
		}
	}
}

// growTo returns s with n elements, reusing its array.
func growTo[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
