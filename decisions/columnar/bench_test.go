package columnar

import (
	"bytes"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/ratewarden/ratewarden/decisions"
)

// benchBatch is the batch size of the encode and decode benchmarks: a few
// seconds of one edge node's traffic, well under Kinesis's 1 MiB record.
const benchBatch = 4096

func reportRate(b *testing.B, events int) {
	b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkEncode(b *testing.B) {
	ds := generate(1, benchBatch)
	for _, c := range compressions {
		b.Run(c.String(), func(b *testing.B) { benchEncode(b, c, ds, nil) })
	}
	// The log's records hold up to 1,024 events, fewer at low rates.
	for _, n := range []int{256, 1024} {
		for _, c := range []Compression{Zstd, ZstdStream, ZstdDict} {
			b.Run(c.String()+"/batch="+itoa(n), func(b *testing.B) { benchEncode(b, c, ds[:n], nil) })
		}
	}
}

// benchEncode encodes ds again and again, and decodes each batch with d
// if it is not nil.
func benchEncode(b *testing.B, c Compression, ds []decisions.Decision, d *Decoder) {
	e := NewEncoder(Options{Compression: c})
	buf, err := e.Encode(nil, ds)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = e.Encode(buf[:0], ds)
		if d != nil {
			if _, err := d.Decode(buf, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	reportRate(b, len(ds))
	b.ReportMetric(float64(len(buf))/float64(len(ds)), "B/event")
}

func BenchmarkDecode(b *testing.B) {
	ds := generate(1, benchBatch)
	run := func(b *testing.B, c Compression, d *Decoder) {
		data, err := Encode(nil, ds, Options{Compression: c})
		if err != nil {
			b.Fatal(err)
		}
		out := make([]decisions.Decision, 0, len(ds))
		b.ReportAllocs()
		for b.Loop() {
			if out, err = d.Decode(data, out[:0]); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, len(ds))
		b.ReportMetric(float64(len(data))/float64(len(ds)), "B/event")
	}
	for _, c := range compressions {
		b.Run(c.String(), func(b *testing.B) { run(b, c, NewDecoder()) })
	}
	// arrow-go's reader, which the fast reader replaces, for comparison.
	b.Run("zstd/arrow-go", func(b *testing.B) { run(b, Zstd, &Decoder{forceSlow: true}) })
}

// BenchmarkBytesPerEvent compares the size of 100,000 generated events in
// JSON lines and in Arrow batches of 1,024 and 4,096 events in each
// compression, and in one Parquet file.
func BenchmarkBytesPerEvent(b *testing.B) {
	const n = 100_000
	ds := generate(2, n)
	report := func(b *testing.B, size int) {
		b.ReportMetric(float64(size)/n, "B/event")
	}
	var jsonSize int
	b.Run("json-lines", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf = buf[:0]
			for i := range ds {
				buf = decisions.AppendJSON(buf, &ds[i])
				buf = append(buf, '\n')
			}
		}
		jsonSize = len(buf)
		report(b, len(buf))
	})
	for _, batch := range []int{1024, 4096} {
		for _, c := range compressions {
			b.Run("arrow-"+c.String()+"/batch="+itoa(batch), func(b *testing.B) {
				e := NewEncoder(Options{Compression: c})
				var buf []byte
				for b.Loop() {
					buf = buf[:0]
					for i := 0; i < n; i += batch {
						var err error
						if buf, err = e.Encode(buf, ds[i:min(i+batch, n)]); err != nil {
							b.Fatal(err)
						}
					}
				}
				report(b, len(buf))
				if jsonSize > 0 {
					b.ReportMetric(float64(jsonSize)/float64(len(buf)), "x-smaller-than-json")
				}
			})
		}
	}
	b.Run("parquet-zstd", func(b *testing.B) {
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			err := WriteParquet(&buf, func(yield func([]decisions.Decision) bool) {
				for i := 0; i < n; i += benchBatch {
					if !yield(ds[i:min(i+benchBatch, n)]) {
						return
					}
				}
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		report(b, buf.Len())
	})
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}

// TestTimeEncodings measures what the time column costs in each way it
// could be stored, on 100,000 generated events in batches of 4,096: the
// compressed size of an Arrow stream holding just that column.
func TestTimeEncodings(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	const n = 100_000
	ds := generate(2, n)
	encodings := []struct {
		name string
		typ  arrow.DataType
		f    func(batch []decisions.Decision, i int) int64
	}{
		{"unix_ns int64", arrow.PrimitiveTypes.Int64, func(b []decisions.Decision, i int) int64 { return b[i].Time.UnixNano() }},
		{"since-first int64", arrow.PrimitiveTypes.Int64, func(b []decisions.Decision, i int) int64 { return b[i].Time.Sub(b[0].Time).Nanoseconds() }},
		{"delta int64", arrow.PrimitiveTypes.Int64, delta},
		{"delta int32", arrow.PrimitiveTypes.Int32, delta},
	}
	sizes := map[string]map[Compression]float64{}
	for _, enc := range encodings {
		sizes[enc.name] = map[Compression]float64{}
		for _, c := range compressions {
			total := 0
			for i := 0; i < n; i += benchBatch {
				batch := ds[i:min(i+benchBatch, n)]
				vals := make([]int64, len(batch))
				for j := range batch {
					vals[j] = enc.f(batch, j)
				}
				total += columnStream(t, enc.typ, vals, c)
			}
			sizes[enc.name][c] = float64(total) / n
			t.Logf("time as %-18s %-4v %5.2f B/event", enc.name, c, sizes[enc.name][c])
		}
	}
	// The layout's choices: deltas, narrowed to int32 where they fit,
	// except under zstd, which packs int64 deltas tighter than int32 ones.
	// (Under zstd, absolute times are as small as deltas or smaller: zstd
	// finds the upper bytes shared with the previous time by itself.)
	for _, c := range []Compression{LZ4, None} {
		if d, a := sizes["delta int32"][c], sizes["unix_ns int64"][c]; d >= a {
			t.Errorf("%v: int32 deltas take %.2f B/event, absolute times %.2f: deltas do not help", c, d, a)
		}
	}
	if d64, d32 := sizes["delta int64"][Zstd], sizes["delta int32"][Zstd]; d64 >= d32 {
		t.Errorf("zstd: int64 deltas take %.2f B/event, int32 %.2f: the encoder's choice of int64 under zstd is wrong", d64, d32)
	}
}

func delta(b []decisions.Decision, i int) int64 {
	if i == 0 {
		return 0
	}
	return b[i].Time.Sub(b[i-1].Time).Nanoseconds()
}

// columnStream returns the size of an Arrow stream of one column of vals
// as typ, minus that of an empty one (the schema and framing).
func columnStream(t *testing.T, typ arrow.DataType, vals []int64, c Compression) int {
	t.Helper()
	size := func(vals []int64) int {
		schema := arrow.NewSchema([]arrow.Field{{Name: "time", Type: typ}}, nil)
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		defer b.Release()
		for _, v := range vals {
			switch fb := b.Field(0).(type) {
			case *array.Int64Builder:
				fb.Append(v)
			case *array.Int32Builder:
				fb.Append(int32(v))
			}
		}
		rec := b.NewRecordBatch()
		defer rec.Release()
		var opts []ipc.Option
		switch c {
		case Zstd:
			opts = append(opts, ipc.WithZstd())
		case LZ4:
			opts = append(opts, ipc.WithLZ4())
		}
		cw := &countWriter{}
		w := ipc.NewWriter(cw, append(opts, ipc.WithSchema(schema))...)
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return cw.n
	}
	return size(vals) - size(nil)
}

type countWriter struct{ n int }

func (w *countWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	return len(p), nil
}

var _ io.Writer = (*countWriter)(nil)

// BenchmarkDecodeColumns decodes batches of 1,024 and 4,096 events to
// columns (DecodeColumns, as the aggregator reads the log), in each
// compression: under body compression the columns Columns does not hold
// are never decompressed; in one zstd frame (ZstdStream, ZstdDict) every
// byte is.
func BenchmarkDecodeColumns(b *testing.B) {
	for _, batch := range []int{256, 1024, 4096} {
		ds := generate(1, batch)
		for _, c := range compressions {
			b.Run(c.String()+"/batch="+itoa(batch), func(b *testing.B) {
				data, err := Encode(nil, ds, Options{Compression: c})
				if err != nil {
					b.Fatal(err)
				}
				d := NewDecoder()
				f := func(*Columns) error { return nil }
				b.ReportAllocs()
				for b.Loop() {
					if err := d.DecodeColumns(data, f); err != nil {
						b.Fatal(err)
					}
				}
				reportRate(b, len(ds))
				b.ReportMetric(float64(len(data))/float64(len(ds)), "B/event")
			})
		}
	}
}

// BenchmarkDecodeColumnSet decodes records of 3,072 events (the decision
// log's at high rates) to every column Columns holds and to the eight a
// count by tier, rule and outcome with distinct clients reads (kind, tier,
// rule, outcome, user id, and the address's three), compressed per buffer
// (Zstd: the columns left out are not decompressed) and as one frame
// (ZstdDict: every byte is).
func BenchmarkDecodeColumnSet(b *testing.B) {
	ds := generate(1, 3072)
	sets := []struct {
		name string
		set  ColumnSet
	}{{"all", AllColumns}, {"count", ColumnKind | ColumnTier | ColumnRule | ColumnOutcome | ColumnUserID | ColumnClientIP}}
	for _, c := range []Compression{Zstd, ZstdDict} {
		data, err := Encode(nil, ds, Options{Compression: c})
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range sets {
			b.Run(c.String()+"/"+s.name, func(b *testing.B) {
				d := NewDecoder()
				f := func(*Columns) error { return nil }
				b.ReportAllocs()
				for b.Loop() {
					if err := d.DecodeColumnSet(data, s.set, f); err != nil {
						b.Fatal(err)
					}
				}
				reportRate(b, len(ds))
			})
		}
	}
}
