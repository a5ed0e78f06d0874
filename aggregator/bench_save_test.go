package aggregator

import (
	"testing"

	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// BenchmarkSaveEncode is what each state save encodes, the rest of a save
// being the file's write and sync: the Rollup's snapshot, here of one open
// 1 min window holding 100,000 generator events (about 35 s of its
// traffic; K = 100), into a buffer reused from save to save as
// partitionRun.save reuses it ("snapshot"), and that window's partial
// alone ("partial"). Every save encodes every open window's sketches and
// top-K lists; B/op and allocs/op are what a save allocates for them.
func BenchmarkSaveEncode(b *testing.B) {
	ds := decisiontest.NewGenerator(1, t0).Batch(100_000)
	r := NewRollup(Options{})
	for i := range ds {
		r.Add(&ds[i], uint64(i))
	}
	if len(r.open) != 1 {
		b.Fatalf("%d windows open, want 1", len(r.open))
	}
	var p *Partial
	for _, w := range r.open {
		p = w.p
	}
	for _, c := range []struct {
		name   string
		encode func([]byte) ([]byte, error)
	}{{"snapshot", r.AppendSnapshot}, {"partial", p.AppendBinary}} {
		b.Run(c.name, func(b *testing.B) {
			buf, err := c.encode(nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if buf, err = c.encode(buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(buf))/1024, "KiB")
		})
	}
}
