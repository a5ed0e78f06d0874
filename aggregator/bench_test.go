package aggregator

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// BenchmarkPartialUpdate is the full rollup of decoded decisions on one
// core: counts, distinct clients, store latency and top-K offenders, over
// the generator's day of traffic (100,000 addresses, 20,000 users, Zipf).
func BenchmarkPartialUpdate(b *testing.B) {
	ds := decisiontest.NewGenerator(1, t0).Batch(1 << 16)
	p := NewPartial(t0, time.Hour, 100)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p.Update(&ds[i&(len(ds)-1)])
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkCountsUpdate is the counts alone.
func BenchmarkCountsUpdate(b *testing.B) {
	ds := decisiontest.NewGenerator(1, t0).Batch(1 << 16)
	var c Counts
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c.Update(&ds[i&(len(ds)-1)])
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
