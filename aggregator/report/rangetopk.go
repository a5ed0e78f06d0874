package report

import (
	"cmp"
	"slices"

	"github.com/ratewarden/ratewarden/aggregator"
)

// rangeTopK merges the top-K lists of a range's windows, in window order,
// into bounds on each listed client's count over the range, as merging the
// lists one into another would (aggregator.TopK.Merge, not disjoint) but
// without cutting the merged list back to k after every window: cheaper
// (no list rebuilt per window) and tighter (no client dropped half-way).
//
// A client's upper bound is the sum, over the windows, of its count where
// listed and of the window's floor (TopK.Floor) where not; its lower bound
// the sum of its counts less their errors where listed. A client enters
// with the bound every unlisted client has at that point ("missing"); the
// floors of the windows since then are summed once for all (floors) and
// those of the windows it was listed in subtracted, so adding a window
// costs its list's length, not the number of clients held. Held clients are
// bounded: past maxHeld the smallest upper bounds are dropped and the
// largest of them raises the bound of every unlisted client, as Space-Saving
// does. It is not safe for concurrent use.
type rangeTopK struct {
	held    map[aggregator.Client]*rangeHitter
	floors  uint64 // sum of the floors of the windows added
	extra   uint64 // what dropping clients added to the unlisted bound, beyond floors
	maxHeld int
}

type rangeHitter struct {
	base    uint64 // the unlisted bound when it entered
	floors0 uint64 // floors when it entered
	count   uint64 // sum of its counts where listed
	err     uint64 // sum of their errors
	listed  uint64 // sum of the floors of the windows it was listed in
}

func newRangeTopK(k int) *rangeTopK {
	return &rangeTopK{held: map[aggregator.Client]*rangeHitter{}, maxHeld: max(16*k, 1024)}
}

// add merges one window's list.
func (r *rangeTopK) add(t *aggregator.TopK) {
	if t == nil {
		return
	}
	f := t.Floor()
	for _, h := range t.Top(t.Len()) {
		e := r.held[h.Client]
		if e == nil {
			e = &rangeHitter{base: r.floors + r.extra, floors0: r.floors}
			r.held[h.Client] = e
		}
		e.count += h.Count
		e.err += h.Err
		e.listed += f
	}
	r.floors += f
	if len(r.held) > r.maxHeld {
		r.prune(r.maxHeld / 2)
	}
}

// upper is e's upper bound now.
func (r *rangeTopK) upper(e *rangeHitter) uint64 {
	return e.base + e.count + (r.floors - e.floors0 - e.listed)
}

// prune keeps the n clients of largest upper bounds.
func (r *rangeTopK) prune(n int) {
	hs := r.top(len(r.held))
	for _, h := range hs[n:] {
		delete(r.held, h.Client)
		if h.Count > r.floors+r.extra {
			r.extra = h.Count - r.floors
		}
	}
}

// top returns up to n clients by upper bound, largest first (then by lower
// bound), as Hitters: Count the upper bound, Count-Err the lower.
func (r *rangeTopK) top(n int) []aggregator.Hitter {
	hs := make([]aggregator.Hitter, 0, len(r.held))
	for c, e := range r.held {
		u := r.upper(e)
		hs = append(hs, aggregator.Hitter{Client: c, Count: u, Err: u - (e.count - e.err)})
	}
	slices.SortFunc(hs, func(a, b aggregator.Hitter) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(b.Count-b.Err, a.Count-a.Err),
			aggregator.CompareClients(a.Client, b.Client))
	})
	return hs[:min(n, len(hs))]
}

// bounds returns c's count over the range as upper and lower bounds, and
// whether c was listed in any window (else its lower bound is 0 and its
// upper the bound of every unlisted client).
func (r *rangeTopK) bounds(c aggregator.Client) (upper, lower uint64, listed bool) {
	e := r.held[c]
	if e == nil {
		return r.floors + r.extra, 0, false
	}
	return r.upper(e), e.count - e.err, true
}
