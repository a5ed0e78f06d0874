package aggregator

import "github.com/ratewarden/ratewarden/decisions"

// rowGroups orders the decision rows of a batch by the name their
// dictionary id counts under (a tier or a rule, after folding), keeping
// the rows of one name in their order: each top-K list then takes its
// hits in one run, its counters and index hot in cache, rather than one
// hit in turn with every other list's. A list's result depends only on
// the order of its own hits, which the grouping keeps, so the outputs are
// those of the rows in order. Ids that fold to one name (OtherKey) make
// one group, as they count into one list. The zero value is ready to use.
type rowGroups struct {
	names []string // each group's name, in order of first row
	start []int32  // group g's rows' client ids are ids[start[g]:start[g+1]]
	ids   []int32
	// The refused rows alike: group g's are refIDs[refStart[g]:refStart[g+1]].
	refStart []int32
	refIDs   []int32
	gid      []int32 // per dictionary id: its group + 1, 0 not yet seen
	byName   map[string]int32
}

// group makes g hold the client ids (b.cid, made by identify) of the
// decision rows of [lo, hi) of b by ids[row]'s name in names, all and the
// refused apart: the lists by requests and by refusals read them in place.
func (g *rowGroups) group(b *Batch, ids []int32, names []string, lo, hi int) {
	kind, outcome, cid := b.c.Kind, b.c.Outcome, b.cid
	g.gid = growTo(g.gid, len(names))
	clear(g.gid)
	if g.byName == nil {
		g.byName = map[string]int32{}
	}
	clear(g.byName)
	g.names, g.start, g.refStart = g.names[:0], g.start[:0], g.refStart[:0]
	for i := lo; i < hi; i++ {
		if decisions.Kind(kind[i]) != decisions.KindDecision {
			continue
		}
		id := ids[i]
		x := g.gid[id]
		if x == 0 {
			name := names[id]
			y, ok := g.byName[name]
			if !ok {
				y = int32(len(g.names))
				g.byName[name] = y
				g.names = append(g.names, name)
				g.start = append(g.start, 0)
				g.refStart = append(g.refStart, 0)
			}
			x = y + 1
			g.gid[id] = x
		}
		g.start[x-1]++
		if refused[outcome[i]] {
			g.refStart[x-1]++
		}
	}
	// Counts to ends, then each row placed before its group's end, from
	// the last row back, so that the rows of a group keep their order.
	n, nr := ends(g.start), ends(g.refStart)
	g.start, g.refStart = append(g.start, n), append(g.refStart, nr)
	g.ids, g.refIDs = growTo(g.ids, int(n)), growTo(g.refIDs, int(nr))
	for i := hi - 1; i >= lo; i-- {
		if decisions.Kind(kind[i]) != decisions.KindDecision {
			continue
		}
		x := g.gid[ids[i]] - 1
		g.start[x]--
		g.ids[g.start[x]] = cid[i]
		if refused[outcome[i]] {
			g.refStart[x]--
			g.refIDs[g.refStart[x]] = cid[i]
		}
	}
}

// ends turns counts into running sums (each group's end) and returns the
// total.
func ends(counts []int32) int32 {
	var n int32
	for k, c := range counts {
		n += c
		counts[k] = n
	}
	return n
}

// len is the number of groups.
func (g *rowGroups) len() int { return len(g.names) }

// of returns the client ids of group k's rows.
func (g *rowGroups) of(k int) []int32 { return g.ids[g.start[k]:g.start[k+1]] }

// refusedOf returns the client ids of group k's refused rows.
func (g *rowGroups) refusedOf(k int) []int32 { return g.refIDs[g.refStart[k]:g.refStart[k+1]] }
