package decisionlog_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/seglog"
	"github.com/ratewarden/ratewarden/decisions/sinktest"
)

// logSink is a Writer over a fresh log, read back through a Reader.
type logSink struct {
	*decisionlog.Writer
	dir string
}

func (s logSink) ReadBack() ([]decisions.Decision, error) {
	return readAll(s.dir, decisionlog.Filter{})
}

func readAll(dir string, f decisionlog.Filter) ([]decisions.Decision, error) {
	r, err := decisionlog.Open(dir, f)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []decisions.Decision
	for {
		d, _, err := r.Next(context.Background(), false)
		if decisionlog.IsEnd(err) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, d)
	}
}

// flipMiddle corrupts the 16 bytes in the middle of the file at path.
func flipMiddle(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 2; i < len(b)/2+16; i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func openLog(t *testing.T, dir string) *seglog.Log {
	t.Helper()
	l, err := seglog.Open(dir, seglog.Options{SegmentBytes: 256 << 10, Sync: seglog.SyncPolicy{Mode: seglog.SyncNever}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestConformance(t *testing.T) {
	for _, codec := range []columnar.Codec{columnar.CodecArrow, columnar.CodecJSON} {
		t.Run(codec.String(), func(t *testing.T) {
			sinktest.Run(t, func(t *testing.T) sinktest.Sink {
				dir := t.TempDir()
				return logSink{decisionlog.NewWriter(openLog(t, dir), decisionlog.WriterOptions{Codec: codec}), dir}
			})
		})
	}
}

// TestFilters reads from an offset and within a time range, and twice
// alike (replay).
func TestFilters(t *testing.T) {
	dir := t.TempDir()
	w := decisionlog.NewWriter(openLog(t, dir), decisionlog.WriterOptions{})
	start := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	g := decisiontest.NewGenerator(7, start)
	var all []decisions.Decision
	for range 20 {
		b := g.Batch(500)
		all = append(all, b...)
		if err := w.WriteBatch(append([]decisions.Decision(nil), b...)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := readAll(dir, decisionlog.Filter{From: 1234})
	if err != nil || len(got) != len(all)-1234 || !decisiontest.Equal(got[0], all[1234]) {
		t.Fatalf("from 1234: %d events (%v), first equal %v", len(got), err, len(got) > 0 && decisiontest.Equal(got[0], all[1234]))
	}
	since, until := all[3000].Time, all[7000].Time
	var want int
	for _, d := range all {
		if !d.Time.Before(since) && d.Time.Before(until) {
			want++
		}
	}
	got, err = readAll(dir, decisionlog.Filter{Since: since, Until: until})
	if err != nil || len(got) != want {
		t.Fatalf("since/until: %d events, want %d (%v)", len(got), want, err)
	}
	for _, d := range got {
		if d.Time.Before(since) || !d.Time.Before(until) {
			t.Fatalf("event at %v outside [%v, %v)", d.Time, since, until)
		}
	}
	again, _ := readAll(dir, decisionlog.Filter{Since: since, Until: until})
	for i := range got {
		if !decisiontest.Equal(got[i], again[i]) {
			t.Fatalf("replay differs at %d", i)
		}
	}
}

// TestCorruptRecordLosesOnlyItself flips bytes inside one record's payload
// in the middle of a segment: the records before and after are read, and
// the loss is counted and reported with the segment.
func TestCorruptRecordLosesOnlyItself(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	w := decisionlog.NewWriter(l, decisionlog.WriterOptions{})
	g := decisiontest.NewGenerator(9, time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	for range 10 {
		if err := w.WriteBatch(g.Batch(100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segs) != 1 {
		t.Fatalf("%d segments, want 1", len(segs))
	}
	flipMiddle(t, segs[0])
	r, err := decisionlog.Open(dir, decisionlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := 0
	for {
		_, _, err := r.Next(context.Background(), false)
		if decisionlog.IsEnd(err) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 900 {
		t.Errorf("read %d events, want 900 (one record of 100 lost)", n)
	}
	problems := r.Problems()
	if len(problems) == 0 {
		t.Fatal("no problem reported")
	}
	if msg := problems[0].Error(); !strings.Contains(msg, filepath.Base(segs[0])) {
		t.Errorf("problem %q does not name the segment", msg)
	}
	var lost uint64
	for _, p := range r.Corrupt() {
		lost += p.Events
	}
	if lost+r.Stats().BadEvents != 100 {
		t.Errorf("%d events counted lost (%+v), want 100", lost+r.Stats().BadEvents, r.Corrupt())
	}
}

// TestReadsEveryArrowFraming: a log written before the dictionary (Arrow
// body compression, or one plain zstd frame) reads as before, beside
// records of the current writer.
func TestReadsEveryArrowFraming(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	g := decisiontest.NewGenerator(12, time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	var want []decisions.Decision
	for _, c := range []columnar.Compression{columnar.Zstd, columnar.ZstdStream, columnar.LZ4, columnar.None, columnar.ZstdDict} {
		ds := g.Batch(7)
		b, err := columnar.Encode(nil, ds, columnar.Options{Compression: c})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(seglog.Record{Count: 7, MinTime: ds[0].Time, MaxTime: ds[6].Time, Codec: uint8(columnar.CodecArrow), Payload: b}); err != nil {
			t.Fatal(err)
		}
		want = append(want, ds...)
	}
	w := decisionlog.NewWriter(l, decisionlog.WriterOptions{})
	ds := g.Batch(7)
	if err := w.WriteBatch(ds); err != nil {
		t.Fatal(err)
	}
	checkReadsBack(t, dir, append(want, ds...))
}

// checkReadsBack checks that the log in dir holds want.
func checkReadsBack(t *testing.T, dir string, want []decisions.Decision) {
	t.Helper()
	got, err := readAll(dir, decisionlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d events, want %d", len(got), len(want))
	}
	for i := range want {
		if diff := decisiontest.Diff(got[i], want[i]); diff != "" {
			t.Fatalf("event %d:\n%s", i, diff)
		}
	}
}

// TestWriterCompressionBySize: records below PerBufferFrom events are
// written in one zstd frame with the dictionary, records of PerBufferFrom
// or more compressed per buffer, and both read back as the events
// written.
func TestWriterCompressionBySize(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	ds := decisiontest.NewGenerator(5, time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)).Batch(2*decisionlog.PerBufferFrom + 1)
	small, large := ds[:decisionlog.PerBufferFrom-1], ds[decisionlog.PerBufferFrom-1:]
	w := decisionlog.NewWriter(l, decisionlog.WriterOptions{})
	for _, b := range [][]decisions.Decision{small, large} {
		if err := w.WriteBatch(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := seglog.OpenReader(dir, 0, seglog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, c := range []struct {
		ds []decisions.Decision
		cp columnar.Compression
	}{{small, columnar.ZstdDict}, {large, columnar.Zstd}} {
		rec, err := r.Next(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		want, err := columnar.Encode(nil, c.ds, columnar.Options{Compression: c.cp})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(rec.Payload, want) || rec.Codec != uint8(columnar.CodecArrow) {
			t.Errorf("a record of %d events is not %v (codec %d, %d bytes, want %d)", len(c.ds), c.cp, rec.Codec, len(rec.Payload), len(want))
		}
	}
	checkReadsBack(t, dir, ds)
}

// TestPerBufferFrom reports, in Markdown for BENCHMARKS.md, the bytes per
// event of the generator's events in records of 1,024 to 8,192 events
// compressed per buffer and in a zstd frame with the dictionary, and
// holds the threshold the Writer uses: from PerBufferFrom events a record
// per buffer is at most 1 % larger (at 3,072 and 4,096), and below it the
// dictionary is smaller (1,024). Sizes are deterministic.
func TestPerBufferFrom(t *testing.T) {
	ds := decisiontest.NewGenerator(1, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)).Batch(1 << 16)
	perEvent := func(c columnar.Compression, n int) float64 {
		enc := columnar.NewEncoder(columnar.Options{Compression: c})
		size := 0
		for i := 0; i+n <= len(ds); i += n {
			b, err := enc.Encode(nil, ds[i:i+n])
			if err != nil {
				t.Fatal(err)
			}
			size += len(b)
		}
		return float64(size) / float64(len(ds)/n*n)
	}
	t.Log("| events a record | zstd per buffer | ZstdDict |")
	t.Log("| --- | --- | --- |")
	for _, n := range []int{1024, 2048, 3072, 4096, 8192} {
		buf, dict := perEvent(columnar.Zstd, n), perEvent(columnar.ZstdDict, n)
		t.Logf("| %d | %.1f B | %.1f B |", n, buf, dict)
		switch {
		case n < decisionlog.PerBufferFrom && dict >= buf:
			t.Errorf("%d events a record: the dictionary (%.1f B/event) is not smaller than per buffer (%.1f)", n, dict, buf)
		case n >= decisionlog.PerBufferFrom && n <= 4096 && buf > dict*1.01:
			t.Errorf("%d events a record: per buffer (%.1f B/event) is over 1 %% larger than the dictionary (%.1f)", n, buf, dict)
		}
	}
}

// TestLogBytes reports, in Markdown for BENCHMARKS.md, the log's bytes on
// disk per event (segment files, record framing included) by events per
// record and at 10 decisions a second as the emitter batches them, and
// holds the targets: never larger than JSON lines, at least 5 times
// smaller at 20 events a record and 10 times at 200. Sizes are
// deterministic.
func TestLogBytes(t *testing.T) {
	ds := decisiontest.NewGenerator(13, time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)).Batch(20_000)
	// perEvent writes batches of the given sizes and returns the bytes on
	// disk per event; codec 0 appends Arrow records with Arrow's buffer
	// compression, as the writer did before the dictionary.
	perEvent := func(codec columnar.Codec, batches []int) float64 {
		dir := t.TempDir()
		l := openLog(t, dir)
		w := decisionlog.NewWriter(l, decisionlog.WriterOptions{Codec: codec})
		before := columnar.NewEncoder(columnar.Options{Compression: columnar.Zstd})
		n := 0
		for _, b := range batches {
			if n+b > len(ds) {
				break
			}
			batch := ds[n : n+b]
			var err error
			if codec == 0 {
				var p []byte
				if p, err = before.Encode(nil, batch); err == nil {
					_, err = l.Append(seglog.Record{Count: uint32(b), MinTime: batch[0].Time, MaxTime: batch[b-1].Time, Codec: uint8(columnar.CodecArrow), Payload: p})
				}
			} else {
				err = w.WriteBatch(batch)
			}
			if err != nil {
				t.Fatal(err)
			}
			n += b
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
		size := int64(0)
		for _, s := range segs {
			fi, err := os.Stat(s)
			if err != nil {
				t.Fatal(err)
			}
			size += fi.Size()
		}
		return float64(size) / float64(n)
	}
	repeat := func(size int) []int {
		out := make([]int, min(len(ds)/size, 500))
		for i := range out {
			out[i] = size
		}
		return out
	}
	row := func(name string, b, json float64) { t.Logf("| %s | %.1f | %.1f× |", name, b, json/b) }
	t.Log("| records | B/event on disk | JSON lines ÷ this |")
	t.Log("| --- | --- | --- |")
	for _, n := range []int{1, 4, 20, 200, 1024, 3072, 4096} {
		json := perEvent(columnar.CodecJSON, repeat(n))
		old := perEvent(0, repeat(n))
		now := perEvent(columnar.CodecArrow, repeat(n))
		row(fmt.Sprintf("%d events a record, JSON lines", n), json, json)
		row(fmt.Sprintf("%d events a record, Arrow + zstd buffers (before)", n), old, json)
		writes := "Arrow in a zstd frame with the dictionary"
		if n >= decisionlog.PerBufferFrom {
			writes = "Arrow + zstd buffers, as the writer writes records this large"
		}
		row(fmt.Sprintf("**%d events a record, %s**", n, writes), now, json)
		target := map[int]float64{20: 5, 200: 10, 1024: 10, 3072: 10, 4096: 10}[n]
		if now > json || now*target > json {
			t.Errorf("%d events a record: %.1f B/event against JSON's %.1f, want at least %.0fx smaller", n, now, json, max(target, 1))
		}
	}
	const rate = 10.0
	ticks := decisiontest.TickBatches(5000, rate, 200*time.Millisecond, 2)
	linger := decisiontest.LingerBatches(len(ds), rate, time.Second, 1024, 2)
	json := perEvent(columnar.CodecJSON, linger)
	row("10/s, JSON lines", json, json)
	row("10/s, 200 ms flushes, Arrow + zstd buffers (before)", perEvent(0, ticks), json)
	row("10/s, 200 ms flushes, with the dictionary", perEvent(columnar.CodecArrow, ticks), json)
	row("10/s, 2 s linger (the default before), with the dictionary", perEvent(columnar.CodecArrow, decisiontest.LingerBatches(len(ds), rate, 2*time.Second, 1024, 2)), json)
	at := perEvent(columnar.CodecArrow, linger)
	row("**10/s, 1 s linger (the default), with the dictionary**", at, json)
	if at*5 > json {
		t.Errorf("at 10/s: %.1f B/event, not 5 times smaller than JSON's %.1f", at, json)
	}
}

// TestNextRowsEqualsNext: NextRows hands over the rows Next returns, at
// the same offsets, with the same counts, whatever the filter, over Arrow
// and JSON-lines records and an undecodable one.
func TestNextRowsEqualsNext(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	arrow := decisionlog.NewWriter(l, decisionlog.WriterOptions{})
	jsonl := decisionlog.NewWriter(l, decisionlog.WriterOptions{Codec: columnar.CodecJSON})
	g := decisiontest.NewGenerator(7, time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	var all []decisions.Decision
	for i, n := range []int{500, 1, 300, 7, 2000, 40, 500} {
		b := g.Batch(n)
		all = append(all, b...)
		w := arrow
		if i%3 == 1 {
			w = jsonl
		}
		if err := w.WriteBatch(b); err != nil {
			t.Fatal(err)
		}
		if i == 4 {
			if _, err := l.Append(seglog.Record{Count: 3, MinTime: b[0].Time, MaxTime: b[0].Time, Codec: uint8(columnar.CodecArrow), Payload: []byte("not arrow")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	type row struct {
		off uint64
		t   time.Time
	}
	f := func(flt decisionlog.Filter) {
		t.Helper()
		r, err := decisionlog.Open(dir, flt)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var want []row
		for {
			d, off, err := r.Next(context.Background(), false)
			if decisionlog.IsEnd(err) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, row{off, d.Time})
		}
		rr, err := decisionlog.Open(dir, flt)
		if err != nil {
			t.Fatal(err)
		}
		defer rr.Close()
		var got []row
		var times []int64
		for {
			err := rr.NextRows(context.Background(), false, func(rows *decisionlog.Rows) error {
				if rows.Columns != nil {
					times = rows.Columns.Times(times)
				}
				for i := range rows.Len() {
					if rows.Skip != nil && rows.Skip[i] {
						continue
					}
					tm := columnar.TimeOf(0)
					if rows.Columns != nil {
						tm = columnar.TimeOf(times[i])
					} else {
						tm = rows.Events[i].Time
					}
					got = append(got, row{rows.Offset + uint64(i), tm})
				}
				return nil
			})
			if decisionlog.IsEnd(err) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if len(got) != len(want) || len(want) == 0 {
			t.Fatalf("%+v: %d rows, want %d", flt, len(got), len(want))
		}
		for i := range want {
			if got[i].off != want[i].off || !got[i].t.Equal(want[i].t) {
				t.Fatalf("%+v: row %d at %d %v, want %d %v", flt, i, got[i].off, got[i].t, want[i].off, want[i].t)
			}
		}
		if rr.Stats() != r.Stats() || len(rr.Undecodable()) != len(r.Undecodable()) || flt.From == 0 && len(r.Undecodable()) != 1 {
			t.Errorf("%+v: stats %+v (%d undecodable), want %+v (%d)", flt, rr.Stats(), len(rr.Undecodable()), r.Stats(), len(r.Undecodable()))
		}
	}
	f(decisionlog.Filter{})
	f(decisionlog.Filter{From: 1234})
	f(decisionlog.Filter{From: 503})
	f(decisionlog.Filter{Since: all[700].Time, Until: all[3000].Time})
	f(decisionlog.Filter{From: 2900, Since: all[100].Time})
}

// TestNextRowsCallbackError: an error from the callback is returned as it
// is, not counted as an undecodable record.
func TestNextRowsCallbackError(t *testing.T) {
	dir := t.TempDir()
	w := decisionlog.NewWriter(openLog(t, dir), decisionlog.WriterOptions{})
	if err := w.WriteBatch(decisiontest.NewGenerator(1, time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)).Batch(10)); err != nil {
		t.Fatal(err)
	}
	r, err := decisionlog.Open(dir, decisionlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stop := fmt.Errorf("stop")
	if err := r.NextRows(context.Background(), false, func(*decisionlog.Rows) error { return stop }); err != stop {
		t.Errorf("got %v, want the callback's error", err)
	}
	if st := r.Stats(); st.BadBatch != 0 || st.Events != 10 {
		t.Errorf("stats %+v", st)
	}
}
