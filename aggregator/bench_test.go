package aggregator

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
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

// BenchmarkPartialMemory10MClients fills one window with 10 million
// distinct clients (one decision each) and reports the live heap the
// partial holds: bounded by the sketches, whatever the number of clients.
func BenchmarkPartialMemory10MClients(b *testing.B) {
	const clients = 10_000_000
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		p := NewPartial(t0, time.Minute, 100)
		d := decisions.Decision{Time: t0, Tier: "anonymous", Rule: "anonymous:global", Outcome: decisions.Allow, StoreLatency: time.Millisecond}
		for i := range clients {
			d.ClientIP = netip.AddrFrom4([4]byte{byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)})
			if i%10 == 0 {
				d.Outcome = decisions.Block
			} else {
				d.Outcome = decisions.Allow
			}
			p.Update(&d)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		enc, _ := p.AppendBinary(nil)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MB")
		b.ReportMetric(float64(len(enc))/1024, "encoded-KiB")
		runtime.KeepAlive(p)
	}
}
