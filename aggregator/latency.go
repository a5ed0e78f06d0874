package aggregator

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
	enc "github.com/DataDog/sketches-go/ddsketch/encoding"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
)

// LatencyAccuracy is the relative accuracy of the store-latency quantiles.
const LatencyAccuracy = 0.01

// latencyBins bounds a sketch's memory; with 1 % accuracy, 2048 bins span
// about 17 orders of magnitude, far more than 1 µs to an hour.
const latencyBins = 2048

// Latency is a distribution of latencies, in milliseconds, as a DDSketch:
// any quantile within 1 % relative error, and mergeable. Its Update and
// UpdateColumns add the counter store's latency (UpstreamLatency's, the
// origin's); decisions with no store latency (in-process stores, lists)
// are not in it. The zero value is ready to use; it is not safe for
// concurrent use.
type Latency struct {
	Sketch *ddsketch.DDSketch
}

var latencyMapping = func() mapping.IndexMapping {
	m, err := mapping.NewLogarithmicMapping(LatencyAccuracy)
	if err != nil {
		panic(err)
	}
	return m
}()

func newLatencySketch() *ddsketch.DDSketch {
	return ddsketch.NewDDSketch(latencyMapping, store.NewCollapsingLowestDenseStore(latencyBins),
		store.NewCollapsingLowestDenseStore(latencyBins))
}

// Update adds d's store latency.
func (l *Latency) Update(d *decisions.Decision) {
	if d.Kind == decisions.KindDecision {
		l.Add(d.StoreLatency)
	}
}

// UpdateColumns adds the store latencies of rows [lo, hi) of b.
func (l *Latency) UpdateColumns(b *Batch, lo, hi int) { l.addColumn(b, &b.c.StoreLatency, lo, hi) }

// addColumn adds the latencies of rows [lo, hi) of b's column col, the
// decisions' (the others' are zero). A latency whose bin is within the
// store's range is counted in b's scratch (binCounts) and added per bin
// at the end: within the range the store only adds to a bin and to its
// count, which commute, and integer sums of float64 counts are exact, so
// the sketch is the one adding each in turn makes. One outside the range
// (which may grow or collapse the store) is added in its turn, after what
// was counted.
func (l *Latency) addColumn(b *Batch, col *columnar.Ints, lo, hi int) {
	kinds, idx := b.c.Kind, latencyIndexes()
	for ; l.Sketch == nil && lo < hi; lo++ { // the sketch is made by the first latency
		if decisions.Kind(kinds[lo]) == decisions.KindDecision {
			if v := time.Duration(col.Int(lo)); v > 0 {
				l.add(v, idx)
			} else if v < 0 {
				b.badLatency++
			}
		}
	}
	if l.Sketch == nil {
		return
	}
	st, ok := l.Sketch.GetPositiveValueStore().(*store.CollapsingLowestDenseStore)
	if !ok { // not a sketch of newLatencySketch's
		for i := lo; i < hi; i++ {
			if decisions.Kind(kinds[i]) == decisions.KindDecision {
				if v := time.Duration(col.Int(i)); v > 0 {
					l.add(v, idx)
				} else if v < 0 {
					b.badLatency++
				}
			}
		}
		return
	}
	bins := &b.latency
	bins.reset(st)
	for i := lo; i < hi; i++ {
		if decisions.Kind(kinds[i]) != decisions.KindDecision {
			continue
		}
		v := time.Duration(col.Int(i))
		switch {
		case v == 0:
		case v < 0:
			b.badLatency++
		case v < latencyTableMax:
			if k := idx.index(v); !bins.count(k) {
				bins.flush(st)
				st.Add(k)
				bins.reset(st)
			}
		default:
			bins.flush(st)
			l.Sketch.Add(float64(v) / 1e6)
			bins.reset(st)
		}
	}
	bins.flush(st)
}

// binCounts counts latencies by bin within a store's range [min, max]
// (see Latency.addColumn); the zero value is ready to use.
type binCounts struct {
	min, max int
	n        []uint32 // by bin - min
	touched  []int32
}

// reset makes c count within st's present range; it holds no counts.
func (c *binCounts) reset(st *store.CollapsingLowestDenseStore) {
	lo, err1 := st.MinIndex()
	hi, err2 := st.MaxIndex()
	if err1 != nil || err2 != nil { // empty: no range
		lo, hi = 1, 0
	}
	c.min, c.max = lo, hi
	if w := hi - lo + 1; w > len(c.n) {
		c.n = make([]uint32, w)
	}
}

// count counts bin k if it is within the range, else reports false.
func (c *binCounts) count(k int) bool {
	if k < c.min || k > c.max {
		return false
	}
	x := k - c.min
	if c.n[x] == 0 {
		c.touched = append(c.touched, int32(x))
	}
	c.n[x]++
	return true
}

// flush adds the counts to st and clears them.
func (c *binCounts) flush(st *store.CollapsingLowestDenseStore) {
	for _, x := range c.touched {
		st.AddWithCount(c.min+int(x), float64(c.n[x]))
		c.n[x] = 0
	}
	c.touched = c.touched[:0]
}

// UpstreamLatency is the distribution of the origin's latencies, to its
// response headers: a Latency updated from Decision.UpstreamLatency. The
// zero value is ready to use; it is not safe for concurrent use.
type UpstreamLatency struct {
	Latency
}

// Update adds d's upstream latency.
func (l *UpstreamLatency) Update(d *decisions.Decision) {
	if d.Kind == decisions.KindDecision {
		l.Add(d.UpstreamLatency)
	}
}

// UpdateColumns adds the upstream latencies of rows [lo, hi) of b.
func (l *UpstreamLatency) UpdateColumns(b *Batch, lo, hi int) {
	l.addColumn(b, &b.c.UpstreamLatency, lo, hi)
}

// Merge adds o's values to l.
func (l *UpstreamLatency) Merge(o *UpstreamLatency, m MergeMode) error {
	return l.Latency.Merge(&o.Latency, m)
}

// Add adds one latency; zero and negative ones (nothing was waited for)
// are not recorded.
func (l *Latency) Add(v time.Duration) {
	if v > 0 {
		l.add(v, latencyIndexes())
	}
}

// add is Add of a positive v with the table of latencyIndexes, which a
// batch looks up once.
func (l *Latency) add(v time.Duration, t *indexTable) {
	if l.Sketch == nil {
		l.Sketch = newLatencySketch()
	}
	if v < latencyTableMax {
		// What Sketch.Add does, its logarithm looked up.
		l.Sketch.GetPositiveValueStore().Add(t.index(v))
		return
	}
	l.Sketch.Add(float64(v) / 1e6)
}

// latencyTableMax bounds the latencies whose bin latencyIndexes looks up
// (about 18 minutes); larger ones take the logarithm.
const latencyTableMax = 1 << 40

// latencyIndex is the sketch's bin of a latency: the index its mapping
// gives the value Add adds, in milliseconds.
func latencyIndex(v time.Duration) int { return latencyMapping.Index(float64(v) / 1e6) }

// indexTable finds latencyIndex(v) for 0 < v < latencyTableMax without a
// logarithm. latencyIndex is non-decreasing in v, a step function whose
// steps (bins) are 2 % wide; first[k-lowest] is the least v in bin k.
// cells holds, for each 1/64 of each power of two (v < 64: each v), ranges
// narrower than a bin, so holding at most one step: the bin of the
// range's least value, less lowest, in the low 16 bits, and above them the
// offset from that value at which the next bin starts (the range's width
// when it does not start within it); one read an event. The table is
// checked when made, and TestLatencyIndexTable checks it against
// latencyIndex.
type indexTable struct {
	lowest int
	first  []int64
	cells  [64 * 64]uint64 // [bits.Len64(v)-1][the 6 bits after the leading one]; v < 64 directly
}

// latencyIndexes is the table, made on first use (about a millisecond).
var latencyIndexes = sync.OnceValue(func() *indexTable {
	t := &indexTable{lowest: latencyIndex(1)}
	top := latencyIndex(latencyTableMax - 1)
	t.first = make([]int64, top-t.lowest+3)
	t.first[0] = 1
	for k := t.lowest + 1; k <= top; k++ {
		// The least v in [first of k-1, latencyTableMax) whose bin is k or more.
		lo, hi := t.first[k-1-t.lowest], int64(latencyTableMax)
		for lo < hi {
			m := lo + (hi-lo)/2
			if latencyIndex(time.Duration(m)) >= k {
				hi = m
			} else {
				lo = m + 1
			}
		}
		t.first[k-t.lowest] = lo
	}
	t.first[top+1-t.lowest], t.first[top+2-t.lowest] = latencyTableMax, latencyTableMax
	for e := range 40 {
		for sub := range 64 {
			base, width := int64(sub), int64(1)
			if e >= 6 {
				base, width = int64(1)<<e|int64(sub)<<(e-6), int64(1)<<(e-6)
			} else if e > 0 || base == 0 {
				continue // row 0 holds v < 64
			}
			k := latencyIndex(time.Duration(base)) - t.lowest
			next := min(t.first[k+1]-base, width)
			if k >= 1<<16 || t.first[k+2] < base+width {
				panic("aggregator: a latency table cell holds more than one step")
			}
			t.cells[e*64+sub] = uint64(next)<<16 | uint64(k)
		}
	}
	return t
})

// index returns latencyIndex(v) for 0 < v < latencyTableMax.
func (t *indexTable) index(v time.Duration) int {
	x := uint64(v)
	i, base := int(x), x
	if x >= 64 {
		e := bits.Len64(x) - 1
		sub := x >> (e - 6) & 63
		i, base = e*64+int(sub), 1<<e|sub<<(e-6)
	}
	c := t.cells[i]
	k := int(c & (1<<16 - 1))
	if x-base >= c>>16 {
		k++
	}
	return k + t.lowest
}

// Merge adds o's values to l. Sketches merge alike whatever m says.
func (l *Latency) Merge(o *Latency, _ MergeMode) error {
	if o.Sketch == nil {
		return nil
	}
	if l.Sketch == nil {
		l.Sketch = newLatencySketch()
	}
	if err := l.Sketch.MergeWith(o.Sketch); err != nil {
		return fmt.Errorf("merge store latency: %w", err)
	}
	return nil
}

// Count is the number of latencies recorded.
func (l *Latency) Count() uint64 {
	if l.Sketch == nil {
		return 0
	}
	return uint64(l.Sketch.GetCount() + 0.5)
}

// Quantile returns the q-quantile in milliseconds (0 when empty).
func (l *Latency) Quantile(q float64) float64 {
	if l.Sketch == nil || l.Sketch.IsEmpty() {
		return 0
	}
	v, err := l.Sketch.GetValueAtQuantile(q)
	if err != nil {
		return 0
	}
	return v
}

// Bins calls f with each bin's representative value (milliseconds) and
// count, smallest value first: the Values/Counts form of a CloudWatch
// metric.
func (l *Latency) Bins(f func(value, count float64)) {
	if l.Sketch == nil {
		return
	}
	l.Sketch.ForEach(func(v, c float64) bool { f(v, c); return false })
}

// AppendBinary appends l's encoding. It returns no error.
func (l *Latency) AppendBinary(b []byte) ([]byte, error) {
	if l.Sketch == nil || l.Sketch.IsEmpty() {
		return appendUvarint(b, 0), nil
	}
	b, at := openFrame(b)
	l.Sketch.Encode(&b, true)
	return closeFrame(b, at), nil
}

// decode reads what AppendBinary wrote into l.
func (l *Latency) decode(r *reader) error {
	p := r.bytes()
	if r.err != nil || len(p) == 0 {
		return r.err
	}
	sk, err := decodeLatencySketch(p)
	if err != nil {
		r.fail(err)
		return fmt.Errorf("decode store latency: %w", err)
	}
	l.Sketch = sk
	return nil
}

// The bins a latency can fall in: of 1 ns to math.MaxInt64 ns, the only
// values Add takes (a sketch of newLatencySketch's has no zero count and
// no negative values either).
var latencyIndexMin, latencyIndexMax = latencyIndex(1), latencyIndex(math.MaxInt64)

// decodeLatencySketch decodes a sketch AppendBinary encoded: into a sparse
// store first, which takes any bin, then bin by bin, in order, into a
// sketch of newLatencySketch's once each is checked to be one a latency
// can fall in, with a count that is a whole number. The partial is
// untrusted bytes (a file, a table's item), and the dense store would
// index out of its range, a panic, on a bin far from the others; a
// negative, fractional or NaN count would make Count and the quantiles
// wrong. Such a sketch is an error instead.
//
// It reads the encoding's fields itself, with the library's decoders of
// each (what Encode writes, with the index mapping omitted): the
// library's own DecodeDDSketch drops a store's decode error, so a store
// cut short or claiming more bins than it holds would be read as the bins
// before the damage, a wrong count, without a word.
func decodeLatencySketch(p []byte) (*ddsketch.DDSketch, error) {
	pos, neg := store.NewSparseStore(), store.NewSparseStore()
	for b := &p; len(*b) > 0; {
		field := (*b)[0]
		flag, err := enc.DecodeFlag(b) // never fails on a byte
		switch {
		case flag.Type() == enc.FlagTypePositiveStore:
			err = store.DecodeAndMergeWith(pos, b, flag.SubFlag())
		case flag.Type() == enc.FlagTypeNegativeStore:
			err = store.DecodeAndMergeWith(neg, b, flag.SubFlag())
		case flag == enc.FlagZeroCountVarFloat:
			var n float64
			if n, err = enc.DecodeVarfloat64(b); err == nil && n != 0 {
				return nil, fmt.Errorf("a zero count of %v, want none", n)
			}
		default:
			return nil, fmt.Errorf("field %#02x, want only stores and a zero count", field)
		}
		if err != nil {
			return nil, fmt.Errorf("field %#02x: %w", field, err)
		}
	}
	if !neg.IsEmpty() {
		return nil, errors.New("negative values")
	}
	type bin struct {
		k int
		n float64
	}
	var bins []bin
	pos.ForEach(func(k int, n float64) bool {
		bins = append(bins, bin{k, n})
		return false
	})
	slices.SortFunc(bins, func(a, b bin) int { return cmp.Compare(a.k, b.k) })
	sk := newLatencySketch()
	st := sk.GetPositiveValueStore()
	for _, b := range bins {
		k, n := b.k, b.n
		switch {
		case k < latencyIndexMin || k > latencyIndexMax:
			return nil, fmt.Errorf("bin %d, want %d to %d", k, latencyIndexMin, latencyIndexMax)
		case !(n >= 1 && n <= 1<<53) || n != math.Trunc(n):
			return nil, fmt.Errorf("bin %d counts %v, want a whole number from 1 to 2^53", k, n)
		}
		st.AddWithCount(k, n)
	}
	return sk, nil
}
