package aggregator

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/axiomhq/hyperloglog"

	"github.com/ratewarden/ratewarden/decisions/columnar"
)

// BenchmarkColumnsParts is parts of the full rollup apart, over the decoded
// record batches of BenchmarkColumnsPartial: folding names past the key
// cap (foldColumns), the store latencies (a DDSketch), the top-K lists
// (after folding, as the rollup calls them), the distinct clients, and
// everything the full rollup does but the lists (no-lists: how fast any
// top-K algorithm could make it at most).
func BenchmarkColumnsParts(b *testing.B) {
	b.Run("fold", func(b *testing.B) {
		p := NewPartial(t0, time.Hour, 100)
		benchColumns(b, columnar.ZstdDict, true, func(bt *Batch) { bt.foldColumns(p, 0, bt.Len()) })
	})
	b.Run("latency", func(b *testing.B) {
		var l Latency
		benchColumns(b, columnar.ZstdDict, true, func(bt *Batch) { l.UpdateColumns(bt, 0, bt.Len()) })
	})
	b.Run("offenders", func(b *testing.B) {
		p := NewPartial(t0, time.Hour, 100)
		benchColumns(b, columnar.ZstdDict, true, func(bt *Batch) {
			bt.foldColumns(p, 0, bt.Len())
			p.Offenders.UpdateColumns(bt, 0, bt.Len())
		})
	})
	b.Run("no-lists", func(b *testing.B) {
		p := NewPartial(t0, time.Hour, 100)
		benchColumns(b, columnar.ZstdDict, true, func(bt *Batch) {
			p.Events += uint64(bt.Len())
			bt.foldColumns(p, 0, bt.Len())
			parts := p.parts()
			for _, a := range parts[:len(parts)-1] { // the lists are last
				a.UpdateColumns(bt, 0, bt.Len())
			}
		})
	})
	b.Run("distinct", func(b *testing.B) {
		p := NewPartial(t0, time.Hour, 100)
		benchColumns(b, columnar.ZstdDict, true, func(bt *Batch) {
			bt.foldColumns(p, 0, bt.Len())
			p.Clients.UpdateColumns(bt, 0, bt.Len())
		})
	})
}

// BenchmarkKnownHashes is one insert through knownHashes into a sparse
// precision-14 sketch, as the columnar path inserts into the sketches by
// tier: hashes drawn from 12,000 distinct ones (a sketch that stays
// sparse, and a set near its largest), most of them held already; a new
// sketch and set every 65,536 inserts.
func BenchmarkKnownHashes(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	distinct := make([]uint64, 12_000)
	for i := range distinct {
		distinct[i] = r.Uint64()
	}
	z := rand.NewZipf(r, 1.1, 1, uint64(len(distinct)-1))
	seq := make([]uint64, 1<<16)
	for i := range seq {
		seq[i] = distinct[z.Uint64()]
	}
	var sk *hyperloglog.Sketch
	var k *knownHashes
	i := 0
	for b.Loop() {
		if i%len(seq) == 0 {
			sk, k = hyperloglog.New14(), &knownHashes{}
		}
		k.insert(sk, seq[i%len(seq)])
		i++
	}
}

// BenchmarkSketchFill is a new window's sketch meeting its clients: n
// distinct hashes into an empty precision-14 sketch, one by one
// (InsertHash: a sparse sketch merges its new keys into its list every
// 163 inserts, and stays sparse to about 11,700 keys), as the columnar
// path does (knownHashes.add, flushed every 1,200 hashes: a batch's new
// clients early in a window; dense past sparseMax keys), or into a sketch
// dense from the start, for reference.
func BenchmarkSketchFill(b *testing.B) {
	for _, n := range []int{2000, 5000, 35_000} {
		r := rand.New(rand.NewPCG(1, 2))
		hs := make([]uint64, n)
		for i := range hs {
			hs[i] = r.Uint64()
		}
		fill := func(name string, fill func()) {
			b.Run(fmt.Sprintf("%d/%s", n, name), func(b *testing.B) {
				for b.Loop() {
					fill()
				}
				b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N*n), "ns/hash")
			})
		}
		insertAll := func(sk *hyperloglog.Sketch) {
			for _, h := range hs {
				sk.InsertHash(h)
			}
		}
		fill("one-by-one", func() { insertAll(hyperloglog.New14()) })
		fill("deferred", func() {
			sk, k := hyperloglog.New14(), &knownHashes{}
			for i, h := range hs {
				k.add(sk, h)
				if (i+1)%1200 == 0 {
					k.flush(sk)
				}
			}
			k.flush(sk)
		})
		fill("dense", func() { insertAll(hyperloglog.NewNoSparse()) })
	}
}

// BenchmarkSettle is what the columnar path pays once a call for a sketch
// whose set holds more than sparseMax hashes but which stays sparse, as
// hashes chosen to share their keys keep it (TestSettle): a settle of a
// sparse sketch of sparseMax keys.
func BenchmarkSettle(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	sk := hyperloglog.New14()
	for range sparseMax {
		sk.InsertHash(r.Uint64())
	}
	var scratch []byte
	for b.Loop() {
		var dense bool
		if scratch, dense = settle(sk, scratch); dense {
			b.Fatal("a sketch of sparseMax keys settled dense")
		}
	}
}
