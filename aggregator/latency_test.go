package aggregator

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/store"

	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// TestLatencyIndexTable: the table gives every latency the bin the
// sketch's logarithm gives it: each value up to 2^20 ns, each bin's first
// value and its neighbours, and a million values drawn from every power of
// two below the table's bound; and a sketch filled through Add encodes to
// the bytes of one filled through the library's Add.
func TestLatencyIndexTable(t *testing.T) {
	tab := latencyIndexes()
	check := func(v int64) {
		if v <= 0 || v >= latencyTableMax {
			return
		}
		if got, want := tab.index(time.Duration(v)), latencyIndex(time.Duration(v)); got != want {
			t.Fatalf("latency %d ns: bin %d, want %d", v, got, want)
		}
	}
	for v := int64(1); v <= 1<<20; v++ {
		check(v)
	}
	for _, f := range tab.first {
		for d := int64(-3); d <= 3; d++ {
			check(f + d)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		e := 1 + r.IntN(39)
		check(int64(1)<<e | r.Int64N(int64(1)<<e))
	}

	var table, lib Latency
	lib.Sketch = newLatencySketch()
	for range 100_000 {
		v := time.Duration(r.Int64N(1 << 42))
		table.Add(v)
		if v > 0 {
			lib.Sketch.Add(float64(v) / 1e6)
		}
	}
	got, _ := table.AppendBinary(nil)
	want, _ := lib.AppendBinary(nil)
	if string(got) != string(want) {
		t.Errorf("the sketches encode to %d and %d bytes that differ", len(got), len(want))
	}
}

// TestColumnsLatencyRangeChanges: the columnar path counts latencies within
// the store's range per bin and adds the others in their turn; latencies
// that grow the range down and up, past the table (latencyTableMax) and
// past the store's bins (so that it collapses its lowest), among ones
// within it, give the bytes of adding each in turn, in batches of one size
// and another.
func TestColumnsLatencyRangeChanges(t *testing.T) {
	t.Parallel()
	steps := []time.Duration{time.Millisecond, 3 * time.Millisecond, time.Microsecond, 2 * time.Millisecond,
		1 << 62, 5 * time.Millisecond, 1, latencyTableMax, latencyTableMax - 1, 7 * time.Millisecond,
		time.Hour, 1 << 50, 0, -time.Second, 40 * time.Nanosecond, 900 * time.Microsecond}
	if lo, hi := latencyIndex(1), latencyMapping.Index(float64(1<<62)/1e6); hi-lo < latencyBins {
		t.Fatalf("the latencies span %d bins, fewer than a store's %d: nothing collapses", hi-lo, latencyBins)
	}
	ds := decisiontest.NewGenerator(21, t0).Batch(20_000)
	for i := range ds {
		ds[i].StoreLatency = steps[i%len(steps)] + time.Duration(i%5)*time.Microsecond
		ds[i].UpstreamLatency = steps[(i/3)%len(steps)]
	}
	checkOnePartial(t, ds, 4096, nil)
	checkOnePartial(t, ds, 333, nil)
}

// TestColumnsLatencyNoneMakesNoSketch: as Add, the columnar path makes the
// sketch at the first latency recorded, not for a batch without any.
func TestColumnsLatencyNoneMakesNoSketch(t *testing.T) {
	ds := decisiontest.NewGenerator(22, t0).Batch(500)
	for i := range ds {
		ds[i].StoreLatency = 0
	}
	var l Latency
	roll := func(b *Batch) { l.UpdateColumns(b, 0, b.Len()) }
	eachBatch(t, ds, 100, roll)
	if l.Sketch != nil {
		t.Fatalf("no latency made a sketch of %d values", l.Count())
	}
	ds[250].StoreLatency = time.Millisecond
	eachBatch(t, ds, 100, roll)
	if l.Count() != 1 {
		t.Fatalf("one latency counted %d times", l.Count())
	}
}

// TestDecodeLatencyChecksBins: a store-latency sketch is decoded only with
// bins a latency falls in and counts that are whole numbers; anything
// else in a partial's bytes is an error, never a panic or a wrong count.
func TestDecodeLatencyChecksBins(t *testing.T) {
	encode := func(edit func(pos, neg store.Store, sk *ddsketch.DDSketch)) []byte {
		sk := ddsketch.NewDDSketch(latencyMapping, store.NewSparseStore(), store.NewSparseStore())
		sk.Add(12.5) // one good latency beside
		edit(sk.GetPositiveValueStore(), sk.GetNegativeValueStore(), sk)
		var b []byte
		sk.Encode(&b, true)
		return b
	}
	for name, c := range map[string]struct {
		edit func(pos, neg store.Store, sk *ddsketch.DDSketch)
		err  string
	}{
		"good":                  {func(pos, _ store.Store, _ *ddsketch.DDSketch) { pos.AddWithCount(latencyIndexMax, 3) }, ""},
		"least bin":             {func(pos, _ store.Store, _ *ddsketch.DDSketch) { pos.AddWithCount(latencyIndexMin, 1) }, ""},
		"bin 2^32":              {func(pos, _ store.Store, _ *ddsketch.DDSketch) { pos.AddWithCount(1<<32, 1) }, "bin 4294967296"},
		"bin -2^32":             {func(pos, _ store.Store, _ *ddsketch.DDSketch) { pos.AddWithCount(-1<<32, 1) }, "bin -4294967296"},
		"bin past the greatest": {func(pos, _ store.Store, _ *ddsketch.DDSketch) { pos.AddWithCount(latencyIndexMax+1, 1) }, "want"},
		"negative count":        {func(pos, _ store.Store, _ *ddsketch.DDSketch) { pos.AddWithCount(100, -5) }, "counts -5"},
		"fractional count":      {func(pos, _ store.Store, _ *ddsketch.DDSketch) { pos.AddWithCount(100, 0.5) }, "counts 0.5"},
		"NaN count":             {func(pos, _ store.Store, _ *ddsketch.DDSketch) { pos.AddWithCount(100, math.NaN()) }, "NaN"},
		"infinite count":        {func(pos, _ store.Store, _ *ddsketch.DDSketch) { pos.AddWithCount(100, math.Inf(1)) }, "Inf"},
		"negative latency":      {func(_, neg store.Store, _ *ddsketch.DDSketch) { neg.AddWithCount(100, 1) }, "negative values"},
		"zero latency":          {func(_, _ store.Store, sk *ddsketch.DDSketch) { sk.Add(0) }, "zero count"},
	} {
		sk, err := decodeLatencySketch(encode(c.edit))
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case c.err == "" && sk.GetCount() < 2:
			t.Errorf("%s: count %v, want the bins added", name, sk.GetCount())
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one saying %q", name, err, c.err)
		}
	}
}

// TestDecodeLatencyRefusesDamage: a store-latency sketch whose bytes are
// cut short anywhere, or whose store claims more bins than it holds, is an
// error, not the bins before the damage (which the library's own decoder
// would return without a word: a wrong count).
func TestDecodeLatencyRefusesDamage(t *testing.T) {
	sk := newLatencySketch()
	for _, v := range []float64{1.5, 12.5, 900} {
		sk.Add(v)
	}
	var good []byte
	sk.Encode(&good, true)
	if got, err := decodeLatencySketch(good); err != nil || got.GetCount() != 3 {
		t.Fatalf("the sketch as encoded: %v, %v; want 3 latencies", got, err)
	}
	for n := 1; n < len(good); n++ {
		if got, err := decodeLatencySketch(good[:n]); err == nil {
			t.Errorf("cut to %d of %d bytes: read %v latencies, want an error", n, len(good), got.GetCount())
		}
	}
	more := slices.Clone(good)
	more[1]++ // the positive store's count of bins, after its field byte
	if got, err := decodeLatencySketch(more); err == nil {
		t.Errorf("one bin more claimed than held: read %v latencies, want an error", got.GetCount())
	}
	if _, err := decodeLatencySketch(append([]byte{0x02}, good...)); err == nil || !strings.Contains(err.Error(), "field 0x02") {
		t.Errorf("an index mapping field: %v, want an error naming it", err)
	}
}
