package aggregator

import (
	"context"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/seglog"
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

// benchBatches encodes the generator's events (the same as
// BenchmarkPartialUpdate's) in record batches of 4,096 events.
func benchBatches(b *testing.B, c columnar.Compression) [][]byte {
	ds := decisiontest.NewGenerator(1, t0).Batch(1 << 16)
	enc := columnar.NewEncoder(columnar.Options{Compression: c})
	var out [][]byte
	for i := 0; i < len(ds); i += 4096 {
		data, err := enc.Encode(nil, ds[i:i+4096])
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, data)
	}
	return out
}

// benchColumns runs roll over the batches' columns, one batch of 4,096
// events an iteration, and reports events/s. With inMemory the batches
// are decoded before the timer starts, each by a decoder of its own (the
// columns stay valid until their decoder decodes again), so that what is
// timed is the rollup over decoded columns; otherwise each iteration
// decodes its batch too.
func benchColumns(b *testing.B, c columnar.Compression, inMemory bool, roll func(*Batch)) {
	batches := benchBatches(b, c)
	dec := columnar.NewDecoder()
	var bt Batch
	f := func(c *columnar.Columns) error {
		bt.Prepare(c)
		roll(&bt)
		return nil
	}
	var decoded []*columnar.Columns
	if inMemory {
		for _, data := range batches {
			if err := columnar.NewDecoder().DecodeColumns(data, func(c *columnar.Columns) error {
				decoded = append(decoded, c)
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if inMemory {
			f(decoded[i%len(decoded)])
		} else if err := dec.DecodeColumns(batches[i%len(batches)], f); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)*4096/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N)/4096, "ns/event")
}

// BenchmarkColumnsCounts is the columnar path's counts alone over decoded
// record batches in memory (Batch.Prepare and Counts.UpdateColumns),
// against BenchmarkCountsUpdate.
func BenchmarkColumnsCounts(b *testing.B) {
	var c Counts
	benchColumns(b, columnar.ZstdDict, true, func(bt *Batch) { c.UpdateColumns(bt, 0, bt.Len()) })
}

// BenchmarkColumnsPartial is the columnar path's full rollup over decoded
// record batches in memory (Batch.Prepare and Partial.UpdateColumns),
// against BenchmarkPartialUpdate.
func BenchmarkColumnsPartial(b *testing.B) {
	p := NewPartial(t0, time.Hour, 100)
	benchColumns(b, columnar.ZstdDict, true, func(bt *Batch) { p.UpdateColumns(bt, 0, bt.Len()) })
}

// BenchmarkColumnsFromLog is the whole way from the decision log's records
// (ZstdDict, as the log and the Kinesis sink write them): decompression,
// decoding and either nothing more (decode), the counts, or the full
// rollup.
func BenchmarkColumnsFromLog(b *testing.B) {
	b.Run("decode", func(b *testing.B) { benchColumns(b, columnar.ZstdDict, false, func(*Batch) {}) })
	b.Run("counts", func(b *testing.B) {
		var c Counts
		benchColumns(b, columnar.ZstdDict, false, func(bt *Batch) { c.UpdateColumns(bt, 0, bt.Len()) })
	})
	b.Run("rollup", func(b *testing.B) {
		p := NewPartial(t0, time.Hour, 100)
		benchColumns(b, columnar.ZstdDict, false, func(bt *Batch) { p.UpdateColumns(bt, 0, bt.Len()) })
	})
}

// BenchmarkFromJSONLines is the full rollup from JSON lines (the log's
// other codec): parsing each line, then Partial.Update.
func BenchmarkFromJSONLines(b *testing.B) {
	ds := decisiontest.NewGenerator(1, t0).Batch(1 << 16)
	lines := make([][]byte, len(ds))
	for i := range ds {
		lines[i] = decisions.AppendJSON(nil, &ds[i])
	}
	b.Run("parse", func(b *testing.B) { benchJSON(b, lines, nil) })
	b.Run("rollup", func(b *testing.B) { benchJSON(b, lines, NewPartial(t0, time.Hour, 100)) })
}

func benchJSON(b *testing.B, lines [][]byte, p *Partial) {
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		d, _, err := decisions.ParseJSON(lines[i&(len(lines)-1)])
		if err != nil {
			b.Fatal(err)
		}
		if p != nil {
			p.Update(&d)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkTopKAdd is one top-K list of 100 fed the generator's clients
// one hit at a time (Zipf: most hits evict), the list that took two thirds
// of the rollup on a heap.
func BenchmarkTopKAdd(b *testing.B) {
	ds := decisiontest.NewGenerator(1, t0).Batch(1 << 16)
	cs := make([]Client, len(ds))
	for i := range ds {
		cs[i] = ClientOf(&ds[i])
	}
	t := NewTopK(100)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		t.Add(cs[i&(len(cs)-1)], 1)
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "hits/s")
}

// BenchmarkRunLog is what `ratewarden aggregate --no-follow` does with a
// decision log of 200,000 generator events in records of 1,024 (ZstdDict,
// as the edge writes them at high rates): read, decode, roll up into 1 min
// windows, snapshot the state at every flush and deliver the partials to
// a sink that counts them; by record batch from the columns, or event by
// event (the reader before).
func BenchmarkRunLog(b *testing.B) {
	const total = 200_000
	dir := b.TempDir() + "/log"
	ds := decisiontest.NewGenerator(1, t0).Batch(total)
	l, err := seglog.Open(dir, seglog.Options{})
	if err != nil {
		b.Fatal(err)
	}
	w := decisionlog.NewWriter(l, decisionlog.WriterOptions{})
	for i := 0; i < total; i += 1024 {
		if err := w.WriteBatch(ds[i:min(i+1024, total)]); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	for _, perEvent := range []bool{false, true} {
		name := "records"
		if perEvent {
			name = "events"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink := &countingSink{}
				st, err := RunLog(context.Background(), LogOptions{Dir: dir, StateDir: b.TempDir(), Sinks: []Sink{sink}, perEvent: perEvent})
				if err != nil || st.Rollup.Events != total || sink.events.Load() != total {
					b.Fatalf("%v: %+v, %d events delivered", err, st, sink.events.Load())
				}
			}
			b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
