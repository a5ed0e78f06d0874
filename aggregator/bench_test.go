package aggregator

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"runtime/debug"
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
// BenchmarkPartialUpdate's) in record batches of size events (the last
// shorter).
func benchBatches(b *testing.B, c columnar.Compression, size int) [][]byte {
	return encodeBatchesWith(b, c, decisiontest.NewGenerator(1, t0).Batch(1<<16), size)
}

// benchColumns runs roll over the batches' columns, one batch of 4,096
// events an iteration (size events, from the log; the columns of set,
// decoded by DecodeColumnSet), and reports events/s.
// With inMemory the batches
// are decoded before the timer starts, each by a decoder of its own (the
// columns stay valid until their decoder decodes again), so that what is
// timed is the rollup over decoded columns; otherwise each iteration
// decodes its batch too.
func benchColumns(b *testing.B, c columnar.Compression, inMemory bool, roll func(*Batch)) {
	benchColumnsOf(b, c, 4096, columnar.AllColumns, inMemory, roll)
}

func benchColumnsOf(b *testing.B, c columnar.Compression, size int, set columnar.ColumnSet, inMemory bool, roll func(*Batch)) {
	benchColumnsOfBatches(b, benchBatches(b, c, size), set, inMemory, roll)
}

// benchColumnsOfBatches is benchColumnsOf over the record batches given.
func benchColumnsOfBatches(b *testing.B, batches [][]byte, set columnar.ColumnSet, inMemory bool, roll func(*Batch)) {
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
			if err := columnar.NewDecoder().DecodeColumnSet(data, set, func(c *columnar.Columns) error {
				decoded = append(decoded, c)
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportAllocs()
	i, events := 0, 0
	for b.Loop() {
		if inMemory {
			f(decoded[i%len(decoded)])
		} else if err := dec.DecodeColumnSet(batches[i%len(batches)], set, f); err != nil {
			b.Fatal(err)
		}
		events += bt.Len()
		i++
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(events), "ns/event")
}

// BenchmarkColumnsCounts is the columnar path's counts alone over decoded
// record batches in memory (Batch.Prepare and Counts.UpdateColumns),
// against BenchmarkCountsUpdate.
func BenchmarkColumnsCounts(b *testing.B) {
	var c Counts
	benchColumns(b, columnar.ZstdDict, true, func(bt *Batch) { c.UpdateColumns(bt, 0, bt.Len()) })
}

// BenchmarkColumnsCountsDistinct is the aggregator's leg of
// tests/bench-aggregate, over decoded record batches in memory: the counts
// and the distinct clients (Counts.UpdateColumns and Distinct.UpdateColumns).
func BenchmarkColumnsCountsDistinct(b *testing.B) {
	p := NewPartial(t0, time.Hour, 1)
	benchColumns(b, columnar.ZstdDict, true, func(bt *Batch) {
		p.Counts.UpdateColumns(bt, 0, bt.Len())
		p.Clients.UpdateColumns(bt, 0, bt.Len())
	})
}

// BenchmarkColumnsSummary is what tests/bench-aggregate times against
// DuckDB as its like-for-like query, over record batches decoded in
// memory with SummaryColumns alone: counts by tier, rule and outcome and
// one count of distinct clients (Summary.UpdateColumns).
func BenchmarkColumnsSummary(b *testing.B) {
	var s Summary
	benchColumnsOf(b, columnar.ZstdDict, 4096, SummaryColumns, true, func(bt *Batch) { s.UpdateColumns(bt, 0, bt.Len()) })
}

// BenchmarkColumnsPartial is the columnar path's full rollup over decoded
// record batches in memory (Batch.Prepare and Partial.UpdateColumns),
// against BenchmarkPartialUpdate.
func BenchmarkColumnsPartial(b *testing.B) {
	p := NewPartial(t0, time.Hour, 100)
	benchColumns(b, columnar.ZstdDict, true, func(bt *Batch) { p.UpdateColumns(bt, 0, bt.Len()) })
}

// BenchmarkColumnsPartialScrape is BenchmarkColumnsPartial under the
// seed's attack: one anonymous address scraping at 800 requests a second,
// blocked past its limit (one in forty of its requests challenged),
// beside 200 a second of the generator's traffic
// (four events in five the scraper's, in record batches of 4,096): the
// rollup's cost depends on how many distinct clients a batch holds.
func BenchmarkColumnsPartialScrape(b *testing.B) {
	p := NewPartial(t0, time.Hour, 100)
	batches := encodeBatches(b, scrapeDecisions(1<<16), 4096)
	benchColumnsOfBatches(b, batches, columnar.AllColumns, true, func(bt *Batch) { p.UpdateColumns(bt, 0, bt.Len()) })
}

// scrapeDecisions is n of the generator's events under the seed's attack
// (see BenchmarkColumnsPartialScrape).
func scrapeDecisions(n int) []decisions.Decision {
	ds := decisiontest.NewGenerator(1, t0).Batch(n)
	scraper := netip.MustParseAddr("203.0.113.80")
	for i := range ds {
		d := &ds[i]
		if i%5 == 0 || d.Kind != decisions.KindDecision {
			continue
		}
		d.ClientIP, d.UserID, d.Plan, d.Tier, d.Rule = scraper, "", "", "anonymous", "anonymous:global"
		d.Outcome, d.Reason = decisions.Block, "over the limit"
		if i%50 == 1 {
			d.Outcome, d.Reason = decisions.Challenge, "over the challenge ceiling"
		}
	}
	return ds
}

// BenchmarkColumnsPartialWindows is the full rollup as a running
// aggregator does it, window after window: 2^20 events (six minutes of
// the generator's traffic at about 2,900 a second; or the same under the
// seed's scrape, four events in five the scraper's) in record batches of
// 4,096 decoded in memory, cut into 1 min windows of about 171,500 events
// and 32,000 distinct clients (10,700 under the scrape), each a new
// Partial (lists of 100) encoded when its last event is added. Unlike
// BenchmarkColumnsPartial, whose one window of an hour is fed the same
// 65,536 events over and over, each window here starts with empty lists
// and sketches and meets each of its clients for the first time.
//
// The -without-clients runs are the full rollup without its distinct
// clients and lists: the batch's preparation, folding names, the counts
// and both latencies, each window encoded alike; what any layout of the
// clients' aggregates adds to. The -floor runs add finding each row's
// client among the batch's (identify, which the rollup's distinct
// clients and lists share): what the rollup pays before any sketch or
// list. The -sorted runs are a layout measured and not adopted (see
// sortedFold): records of each decision, sorted and folded at the
// window's close.
//
// The windows are timed with the heap a running aggregator has: a few
// tens of MB allocated between two cycles of the collector, in pages it
// reuses. The decisions the batches were encoded from are collected
// first, and the collector runs at benchGCPercent. Before, the decisions
// stayed live beside the batches (1.2 GB), the collector's next cycle was
// hundreds of MB away, and each window's sketches and lists were made in
// pages the process had never touched: about 7,000 page faults a pass
// that the aggregator does not pay (BENCHMARKS.md, "Page faults in the
// fresh-window benchmark").
func BenchmarkColumnsPartialWindows(b *testing.B) {
	floor := func(p *Partial, bt *Batch, lo, hi int) {
		withoutClients(p, bt, lo, hi)
		bt.identify()
	}
	var f sortedFold
	sorted := func(p *Partial, bt *Batch, lo, hi int) {
		withoutClients(p, bt, lo, hi)
		f.add(bt, lo, hi)
	}
	full := func(p *Partial, bt *Batch, lo, hi int) { p.UpdateColumns(bt, lo, hi) }
	for _, c := range []struct {
		name string
		ds   func() []decisions.Decision
	}{
		{"generator", func() []decisions.Decision { return decisiontest.NewGenerator(1, t0).Batch(1 << 20) }},
		{"scrape", func() []decisions.Decision { return scrapeDecisions(1 << 20) }},
	} {
		windows, events := windowRanges(b, c.ds(), time.Minute)
		for _, r := range []struct {
			suffix string
			update func(p *Partial, bt *Batch, lo, hi int)
			close  func(p *Partial) // at the window's end, before it is encoded
		}{{"", full, nil}, {"-floor", floor, nil}, {"-sorted", sorted, f.close}, {"-without-clients", withoutClients, nil}} {
			b.Run(c.name+r.suffix, func(b *testing.B) {
				var bt Batch
				var out []byte
				runtime.GC()
				defer debug.SetGCPercent(debug.SetGCPercent(benchGCPercent))
				b.ReportAllocs()
				for b.Loop() {
					for _, w := range windows {
						p := NewPartial(t0, time.Minute, 100)
						f.reset()
						for _, rr := range w {
							bt.Prepare(rr.c)
							r.update(p, &bt, rr.lo, rr.hi)
						}
						if r.close != nil {
							r.close(p)
						}
						var err error
						if out, err = p.AppendBinary(out[:0]); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(events*b.N)/b.Elapsed().Seconds(), "events/s")
				b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(events*b.N), "ns/event")
			})
		}
	}
}

// benchGCPercent is the collector's setting while the fresh-window
// benchmark is timed: a tenth of its decoded batches (320 MB, held live
// only by the benchmark) is about what a running aggregator, holding its
// open windows and one record batch, allocates between two cycles at the
// default 100.
const benchGCPercent = 10

// rowRange is rows [lo, hi) of decoded record batch columns.
type rowRange struct {
	c      *columnar.Columns
	lo, hi int
}

// windowRanges encodes ds (in time order) in record batches of 4,096,
// decodes them, and cuts their rows where windows of size end: each
// window's row ranges, in order.
func windowRanges(tb testing.TB, ds []decisions.Decision, size time.Duration) (windows [][]rowRange, events int) {
	var cur []rowRange
	curStart := int64(-1)
	for _, data := range encodeBatches(tb, ds, 4096) {
		if err := columnar.NewDecoder().DecodeColumnSet(data, columnar.AllColumns, func(c *columnar.Columns) error {
			times := c.Times(nil)
			for lo := 0; lo < c.Len; {
				start := windowStartNs(times[lo], int64(size))
				if start != curStart && cur != nil {
					windows, cur = append(windows, cur), nil
				}
				curStart = start
				hi := lo
				for hi < c.Len && windowStartNs(times[hi], int64(size)) == start {
					hi++
				}
				cur = append(cur, rowRange{c, lo, hi})
				events += hi - lo
				lo = hi
			}
			return nil
		}); err != nil {
			tb.Fatal(err)
		}
	}
	return append(windows, cur), events
}

// BenchmarkColumnsFromLog is the whole way from the decision log's records
// (records of 3,072 events as the log writes them at high rates, zstd per
// buffer; and records of 1,024 in a zstd frame with the dictionary, as the
// log wrote them before and the Kinesis sink writes them): decompression,
// decoding and either nothing more (decode), the counts, the counts and
// distinct clients, a Summary (decoding SummaryColumns alone; and over
// the seed's scrape, where most rows repeat one client), or the full
// rollup.
func BenchmarkColumnsFromLog(b *testing.B) {
	for _, size := range []int{3072, 1024} {
		c := decisionlog.Compression(size)
		b.Run(fmt.Sprintf("%v-%d/decode", c, size), func(b *testing.B) { benchColumnsOf(b, c, size, columnar.AllColumns, false, func(*Batch) {}) })
		b.Run(fmt.Sprintf("%v-%d/counts", c, size), func(b *testing.B) {
			var n Counts
			benchColumnsOf(b, c, size, columnar.AllColumns, false, func(bt *Batch) { n.UpdateColumns(bt, 0, bt.Len()) })
		})
		b.Run(fmt.Sprintf("%v-%d/counts+distinct", c, size), func(b *testing.B) {
			p := NewPartial(t0, time.Hour, 1)
			benchColumnsOf(b, c, size, columnar.AllColumns, false, func(bt *Batch) {
				p.Counts.UpdateColumns(bt, 0, bt.Len())
				p.Clients.UpdateColumns(bt, 0, bt.Len())
			})
		})
		b.Run(fmt.Sprintf("%v-%d/summary", c, size), func(b *testing.B) {
			var s Summary
			benchColumnsOf(b, c, size, SummaryColumns, false, func(bt *Batch) { s.UpdateColumns(bt, 0, bt.Len()) })
		})
		b.Run(fmt.Sprintf("%v-%d/summary-scrape", c, size), func(b *testing.B) {
			var s Summary
			batches := encodeBatchesWith(b, c, scrapeDecisions(1<<16), size)
			benchColumnsOfBatches(b, batches, SummaryColumns, false, func(bt *Batch) { s.UpdateColumns(bt, 0, bt.Len()) })
		})
		b.Run(fmt.Sprintf("%v-%d/rollup", c, size), func(b *testing.B) {
			p := NewPartial(t0, time.Hour, 100)
			benchColumnsOf(b, c, size, columnar.AllColumns, false, func(bt *Batch) { p.UpdateColumns(bt, 0, bt.Len()) })
		})
	}
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
		cs[i] = ClientOf(&ds[i], 0)
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

// BenchmarkTopKAddIDs is one top-K list of 100 fed the generator's
// clients as the columnar path feeds it: by runs of a record batch's
// client ids (addIDs), 4,096 hits a run, a new list every 65,536 hits:
// the cost of a hit where most come from clients the list does not hold.
func BenchmarkTopKAddIDs(b *testing.B) {
	cs := genClients(1 << 16)
	var batches []*Batch
	var runs [][]int32
	for lo := 0; lo < len(cs); lo += 4096 {
		bt, ids := idBatch(cs[lo : lo+4096])
		batches, runs = append(batches, bt), append(runs, ids)
	}
	b.ReportAllocs()
	hits := 0
	for b.Loop() {
		t := NewTopK(100)
		for j := range batches {
			t.addIDs(batches[j], runs[j])
			hits += len(runs[j])
		}
	}
	b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(hits), "ns/hit")
}

// BenchmarkRunLog is what `ratewarden aggregate --no-follow` does with a
// decision log of 200,000 generator events in records of 1,024 (ZstdDict,
// as the edge writes them at high rates): read, decode, roll up into 1 min
// windows, snapshot the state at every flush and deliver the partials to
// a sink that counts them; by record batch from the columns, or event by
// event (the reader before); flushing, and so saving the state (an fsync),
// every 4,096, 16,384 or 65,536 events, by default
// (decisionlog.DefaultBatchEvents), or once at the end (what the reading
// and rolling up cost without the state's writes; 262,144 and over are
// this for a log of 200,000).
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
	for _, c := range []struct {
		name     string
		perEvent bool
		flush    int
	}{{"records/flush=4096", false, 4096}, {"records/flush=16384", false, 16 << 10}, {"records/flush=65536", false, 64 << 10},
		{"records/flush=default", false, 0}, {"events/flush=4096", true, 4096}, {"records/flush=end", false, total}, {"events/flush=end", true, total}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink := &countingSink{}
				st, err := RunLog(context.Background(), LogOptions{Dir: dir, StateDir: b.TempDir(), Sinks: []Sink{sink}, perEvent: c.perEvent, FlushEvery: c.flush})
				if err != nil || st.Rollup.Events != total || sink.events.Load() != total {
					b.Fatalf("%v: %+v, %d events delivered", err, st, sink.events.Load())
				}
			}
			b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkRunLinesMemory is `aggregate --stdin` over 20,000 one-second
// windows of 5 events each, delivered to a sink that keeps nothing:
// peak-heap-MB is the most live heap, sampled every 1,000 outputs and at
// every flush; it includes the input, held in memory (input-MB). The
// collections it forces make its time no measure of speed. "at-end" flushes only at the end of the input (every window in
// memory at once, as before Lines flushed closed windows); "closed" is the
// default, flushing closed windows every 4,096 lines.
func BenchmarkRunLinesMemory(b *testing.B) {
	const windows, per = 20_000, 5
	var in bytes.Buffer
	g := decisiontest.NewGenerator(1, t0)
	for w := range windows {
		for i := range per {
			d := g.Next()
			d.Time = t0.Add(time.Duration(w)*time.Second + time.Duration(i)*100*time.Millisecond)
			in.Write(decisions.AppendJSON(nil, &d))
			in.WriteByte('\n')
		}
	}
	for _, c := range []struct {
		name  string
		every int
	}{{"at-end", 1 << 40}, {"closed", 0}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var peak uint64
			for b.Loop() {
				runtime.GC()
				s := &peakSink{}
				l := &Lines{Rollup: Options{Window: time.Second}, Sinks: []Sink{s}, FlushEvery: c.every,
					Now: standing, Tick: time.Hour}
				if _, err := l.Run(context.Background(), bytes.NewReader(in.Bytes())); err != nil {
					b.Fatal(err)
				}
				peak = max(peak, s.peak)
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
			b.ReportMetric(float64(in.Len())/(1<<20), "input-MB")
		})
	}
}

// peakSink samples the live heap (after a collection) every 1,000 outputs
// and at Flush.
type peakSink struct {
	n    int
	peak uint64
}

func (s *peakSink) Write(context.Context, string, Output) error {
	if s.n++; s.n%1000 == 0 {
		s.sample()
	}
	return nil
}

func (s *peakSink) Flush(context.Context) error { s.sample(); return nil }

func (s *peakSink) sample() {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	s.peak = max(s.peak, m.HeapAlloc)
}

// BenchmarkRunLines is `aggregate --stdin` over 100,000 JSON lines of the
// generator's traffic (one-minute windows) into a sink that keeps
// nothing: parsing, the rollup and the source's batching together.
func BenchmarkRunLines(b *testing.B) {
	var in bytes.Buffer
	for _, d := range decisiontest.NewGenerator(1, t0).Batch(100_000) {
		in.Write(decisions.AppendJSON(nil, &d))
		in.WriteByte('\n')
	}
	b.ReportAllocs()
	b.SetBytes(int64(in.Len()))
	for b.Loop() {
		l := &Lines{Rollup: Options{Window: time.Minute}, Sinks: []Sink{&countingSink{}}, Now: standing, Tick: time.Hour}
		if _, err := l.Run(context.Background(), bytes.NewReader(in.Bytes())); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*100_000/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkPartialHeapHeld is the live heap a window's partial holds once
// a fresh 1 min window of the generator's traffic (about 171,500 events,
// 32,000 clients, lists of 100) is rolled up from decoded record batches,
// as the aggregator holds an open window: its sketches and lists, and
// whatever its lists' clients keep alive.
func BenchmarkPartialHeapHeld(b *testing.B) {
	windows, _ := windowRanges(b, decisiontest.NewGenerator(1, t0).Batch(1<<20), time.Minute)
	w := windows[1] // a whole window
	for b.Loop() {
		var before, after runtime.MemStats
		var bt Batch
		runtime.GC()
		runtime.ReadMemStats(&before)
		p := NewPartial(t0, time.Minute, 100)
		for _, r := range w {
			bt.Prepare(r.c)
			p.UpdateColumns(&bt, r.lo, r.hi)
		}
		bt = Batch{}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MB")
		runtime.KeepAlive(p)
	}
}
