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
	names  []string // each group's name, in order of first row
	start  []int32  // group g's rows are rows[start[g]:start[g+1]]
	rows   []int32
	gid    []int32 // per dictionary id: its group + 1, 0 not yet seen
	byName map[string]int32
}

// group makes g hold the decision rows of [lo, hi) of b by ids[row]'s name
// in names.
func (g *rowGroups) group(b *Batch, ids []int32, names []string, lo, hi int) {
	kind := b.c.Kind
	g.gid = growTo(g.gid, len(names))
	clear(g.gid)
	if g.byName == nil {
		g.byName = map[string]int32{}
	}
	clear(g.byName)
	g.names, g.start = g.names[:0], g.start[:0]
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
			}
			x = y + 1
			g.gid[id] = x
		}
		g.start[x-1]++
	}
	// Counts to ends, then each row placed before its group's end, from
	// the last row back, so that the rows of a group keep their order.
	var n int32
	for k, c := range g.start {
		n += c
		g.start[k] = n
	}
	g.start = append(g.start, n)
	g.rows = growTo(g.rows, int(n))
	for i := hi - 1; i >= lo; i-- {
		if decisions.Kind(kind[i]) != decisions.KindDecision {
			continue
		}
		x := g.gid[ids[i]] - 1
		g.start[x]--
		g.rows[g.start[x]] = int32(i)
	}
}

// len is the number of groups.
func (g *rowGroups) len() int { return len(g.names) }

// of returns group k's rows.
func (g *rowGroups) of(k int) []int32 { return g.rows[g.start[k]:g.start[k+1]] }
