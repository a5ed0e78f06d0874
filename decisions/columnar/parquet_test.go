package columnar

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

func TestWriteParquet(t *testing.T) {
	batches := [][]decisions.Decision{generate(29, 3000), {}, generate(31, 2000), decisiontest.EdgeCases()}
	var all []decisions.Decision
	for _, b := range batches {
		all = append(all, b...)
	}
	var buf bytes.Buffer
	if err := WriteParquet(&buf, slices.Values(batches)); err != nil {
		t.Fatal(err)
	}
	pf, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if cc, err := pf.MetaData().RowGroup(0).ColumnChunk(0); err != nil || cc.Compression() != compress.Codecs.Zstd {
		t.Errorf("compression %v (%v), want zstd", cc.Compression(), err)
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	if tbl.NumRows() != int64(len(all)) {
		t.Fatalf("%d rows, want %d", tbl.NumRows(), len(all))
	}
	for i, f := range ParquetSchema().Fields() {
		if g := tbl.Schema().Field(i); g.Name != f.Name || !arrow.TypeEqual(g.Type, f.Type) || g.Nullable != f.Nullable {
			t.Errorf("column %d read back as %v, want %v", i, g, f)
		}
	}
	// Spot checks: every row of a few columns.
	col := func(name string) arrow.Array {
		i := tbl.Schema().FieldIndices(name)[0]
		c := tbl.Column(i).Data()
		if len(c.Chunks()) != 1 {
			t.Fatalf("%s: %d chunks", name, len(c.Chunks()))
		}
		return c.Chunk(0)
	}
	paths, ts, ns, ips, outcomes := col("path").(*array.String), col("time").(*array.Timestamp), col("time_ns").(*array.Int64), col("client_ip").(*array.String), col("outcome").(*array.String)
	for i, d := range all {
		d = wantBack(d)
		if paths.Value(i) != d.Path {
			t.Fatalf("row %d: path %q, want %q", i, paths.Value(i), d.Path)
		}
		if d.Time.IsZero() != ts.IsNull(i) || d.Time.IsZero() != ns.IsNull(i) {
			t.Fatalf("row %d: time null %v, want %v", i, ts.IsNull(i), d.Time.IsZero())
		}
		if !d.Time.IsZero() && (ns.Value(i) != d.Time.UnixNano() || ts.Value(i) != arrow.Timestamp(d.Time.UnixMicro())) {
			t.Fatalf("row %d: time %d ns, %d µs; want %v", i, ns.Value(i), ts.Value(i), d.Time)
		}
		wantIP := ""
		if d.ClientIP.IsValid() {
			wantIP = d.ClientIP.String()
		}
		if ips.Value(i) != wantIP {
			t.Fatalf("row %d: client_ip %q, want %q", i, ips.Value(i), wantIP)
		}
		if d.Outcome != 0 && outcomes.Value(i) != d.Outcome.String() {
			t.Fatalf("row %d: outcome %q, want %q", i, outcomes.Value(i), d.Outcome)
		}
	}
	if at := ts.Value(0).ToTime(arrow.Microsecond); !at.Equal(all[0].Time.Truncate(time.Microsecond)) {
		t.Errorf("row 0: time %v, want %v", at, all[0].Time)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteParquetError(t *testing.T) {
	err := WriteParquet(failWriter{}, slices.Values([][]decisions.Decision{generate(1, 10)}))
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("disk full")) {
		t.Errorf("error %v, want the writer's", err)
	}
}
