package columnar

import (
	"fmt"
	"io"
	"iter"
	"strconv"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/ratewarden/ratewarden/decisions"
)

// Row groups are cut at this many rows or bytes, whichever comes first:
// large enough for Athena and DuckDB to read efficiently, small enough to
// bound the memory a row group takes while it is built.
const (
	parquetRowGroupRows  = 1 << 20
	parquetRowGroupBytes = 64 << 20
)

var parquetSchema = func() *arrow.Schema {
	str := arrow.BinaryTypes.String
	i64 := arrow.PrimitiveTypes.Int64
	fields := []arrow.Field{
		{Name: "kind", Type: str},
		{Name: "time", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "time_ns", Type: i64, Nullable: true},
		{Name: "request_id", Type: str},
		{Name: "node", Type: str},
		{Name: "client_ip", Type: str},
		{Name: "user_id", Type: str},
		{Name: "plan", Type: str},
		{Name: "tier", Type: str},
		{Name: "identity_source", Type: str},
		{Name: "method", Type: str},
		{Name: "host", Type: str},
		{Name: "path", Type: str},
		{Name: "rule", Type: str},
		{Name: "algorithm", Type: str},
		{Name: "limit", Type: i64},
		{Name: "window_ns", Type: i64},
		{Name: "count", Type: i64},
		{Name: "remaining", Type: i64},
		{Name: "reset_ns", Type: i64},
		{Name: "outcome", Type: str},
		{Name: "reason", Type: str},
		{Name: "store_latency_ns", Type: i64},
		{Name: "privacy", Type: str},
		{Name: "list", Type: str},
		{Name: "action", Type: str},
		{Name: "target", Type: str},
		{Name: "ttl_ns", Type: i64},
		{Name: "dropped", Type: i64},
		{Name: "status", Type: i64},
		{Name: "upstream_latency_ns", Type: i64},
		{Name: "response_error", Type: str},
	}
	md := arrow.NewMetadata([]string{KeySchemaVersion}, []string{strconv.Itoa(decisions.Version)})
	return arrow.NewSchema(fields, &md)
}()

// ParquetSchema returns the Arrow schema of the files WriteParquet writes.
// It is made for SQL engines rather than for round trips: see the package
// documentation. The returned schema is shared and must not be modified.
func ParquetSchema() *arrow.Schema { return parquetSchema }

// WriteParquet writes every event of batches to w as one Parquet file,
// zstd-compressed, with Parquet's dictionary encoding for the strings, for
// Athena and DuckDB. The file is complete only when WriteParquet returns
// nil. Each batch is written as it comes; row groups hold up to about a
// million events.
func WriteParquet(w io.Writer, batches iter.Seq[[]decisions.Decision]) (err error) {
	props := parquet.NewWriterProperties(
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithMaxRowGroupLength(parquetRowGroupRows),
		parquet.WithCreatedBy("ratewarden decisions/columnar"),
	)
	fw, err := pqarrow.NewFileWriter(parquetSchema, w, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return fmt.Errorf("write parquet: %w", err)
	}
	defer func() {
		if cerr := fw.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("write parquet: %w", cerr)
		}
	}()
	b := array.NewRecordBuilder(memory.DefaultAllocator, parquetSchema)
	defer b.Release()
	for ds := range batches {
		if len(ds) == 0 {
			continue
		}
		appendParquet(b, ds)
		rec := b.NewRecordBatch()
		err := fw.WriteBuffered(rec)
		rec.Release()
		if err != nil {
			return fmt.Errorf("write parquet: %w", err)
		}
		if fw.RowGroupTotalBytesWritten() > parquetRowGroupBytes {
			fw.NewBufferedRowGroup()
		}
	}
	return nil
}

func appendParquet(b *array.RecordBuilder, ds []decisions.Decision) {
	str := func(i int) *array.StringBuilder { return b.Field(i).(*array.StringBuilder) }
	i64 := func(i int) *array.Int64Builder { return b.Field(i).(*array.Int64Builder) }
	ts := b.Field(1).(*array.TimestampBuilder)
	for _, f := range b.Fields() {
		f.Reserve(len(ds))
	}
	var ip []byte
	for i := range ds {
		d := &ds[i]
		str(0).Append(d.Kind.String())
		if d.Time.IsZero() {
			ts.AppendNull()
			i64(2).AppendNull()
		} else {
			ts.Append(arrow.Timestamp(d.Time.UnixMicro()))
			i64(2).Append(d.Time.UnixNano())
		}
		str(3).Append(validUTF8(d.RequestID))
		str(4).Append(validUTF8(d.Node))
		ip = ip[:0]
		if d.ClientIP.IsValid() {
			ip = d.ClientIP.AppendTo(ip)
		}
		str(5).BinaryBuilder.Append(ip)
		str(6).Append(validUTF8(d.UserID))
		str(7).Append(validUTF8(d.Plan))
		str(8).Append(validUTF8(d.Tier))
		str(9).Append(validUTF8(d.IdentitySource))
		str(10).Append(validUTF8(d.Method))
		str(11).Append(validUTF8(d.Host))
		str(12).Append(validUTF8(d.Path))
		str(13).Append(validUTF8(d.Rule))
		str(14).Append(validUTF8(d.Algorithm))
		i64(15).Append(d.Limit)
		i64(16).Append(int64(d.Window))
		i64(17).Append(d.Count)
		i64(18).Append(d.Remaining)
		i64(19).Append(int64(d.Reset))
		str(20).Append(d.Outcome.Name())
		str(21).Append(validUTF8(d.Reason))
		i64(22).Append(int64(d.StoreLatency))
		str(23).Append(validUTF8(d.Privacy))
		str(24).Append(validUTF8(d.List))
		str(25).Append(validUTF8(d.Action))
		str(26).Append(validUTF8(d.Target))
		i64(27).Append(int64(d.TTL))
		i64(28).Append(int64(min(d.Dropped, 1<<63-1)))
		i64(29).Append(int64(d.Status))
		i64(30).Append(int64(d.UpstreamLatency))
		str(31).Append(validUTF8(d.ResponseError))
	}
}

// validUTF8 returns s with each byte that is not part of valid UTF-8
// replaced by U+FFFD, as the IPC encoder and the JSON codec do.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return string(decisions.AppendValidUTF8(nil, s))
}
