package columnar

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/internal/jsonstr"
)

var t0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

var compressions = []Compression{Zstd, LZ4, None, ZstdStream, ZstdDict}

func generate(seed uint64, n int) []decisions.Decision {
	return decisiontest.NewGenerator(seed, t0).Batch(n)
}

// decoders returns the fast decoder and the arrow-go one, which must
// agree on every valid batch.
func decoders() map[string]*Decoder {
	return map[string]*Decoder{"fast": NewDecoder(), "arrow-go": {forceSlow: true}}
}

// wantBack returns what a decision comes back as: strings with invalid
// UTF-8 replaced as the JSON codec replaces it. (Times are compared as
// instants by decisiontest.Equal.)
func wantBack(d decisions.Decision) decisions.Decision {
	v := reflect.ValueOf(&d).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() != reflect.String || utf8.ValidString(f.String()) {
			continue
		}
		var s string
		if err := json.Unmarshal(jsonstr.Append(nil, f.String()), &s); err != nil {
			panic(err)
		}
		f.SetString(s)
	}
	return d
}

func checkSame(t *testing.T, got, want []decisions.Decision) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("decoded %d events, want %d", len(got), len(want))
	}
	bad := 0
	for i := range want {
		w := wantBack(want[i])
		if !decisiontest.Equal(got[i], w) {
			t.Errorf("event %d:\n%s", i, decisiontest.Diff(got[i], w))
			if bad++; bad == 5 {
				t.FailNow()
			}
		}
		if got[i].Time.Location() != time.UTC {
			t.Errorf("event %d: time in %v, want UTC", i, got[i].Time.Location())
		}
	}
}

func TestRoundTripGenerated(t *testing.T) {
	for _, n := range []int{1, 10, 1000, 100_000} {
		ds := generate(uint64(n), n)
		for _, c := range compressions {
			if n == 100_000 && c != Zstd && testing.Short() {
				continue
			}
			data, err := Encode(nil, ds, Options{Compression: c})
			if err != nil {
				t.Fatalf("%d events, %v: %v", n, c, err)
			}
			for name, d := range decoders() {
				got, err := d.Decode(data, nil)
				if err != nil {
					t.Fatalf("%d events, %v, %s: %v", n, c, name, err)
				}
				checkSame(t, got, ds)
				if d.Version() != decisions.Version || d.slowDecodes != 0 {
					t.Errorf("%d events, %v, %s: version %d, %d slow decodes", n, c, name, d.Version(), d.slowDecodes)
				}
			}
		}
	}
}

func TestRoundTripEdgeCases(t *testing.T) {
	cases := decisiontest.EdgeCases()
	enc := NewEncoder(Options{})
	dec := NewDecoder()
	for i, ev := range cases {
		data, err := enc.Encode(nil, []decisions.Decision{ev})
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		got, err := dec.Decode(data, nil)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		checkSame(t, got, []decisions.Decision{ev})
	}
	// All at once, in every compression and both decoders: nulls among
	// times, every dictionary width, long strings.
	for _, c := range compressions {
		data, err := Encode(nil, cases, Options{Compression: c})
		if err != nil {
			t.Fatal(err)
		}
		for name, d := range decoders() {
			got, err := d.Decode(data, nil)
			if err != nil {
				t.Fatalf("%v, %s: %v", c, name, err)
			}
			checkSame(t, got, cases)
		}
	}
}

// TestRoundTripWidths makes every column take each of its widths.
func TestRoundTripWidths(t *testing.T) {
	for _, n := range []int{100, 300, 40_000} { // dictionaries of int8, int16 and int32 indices
		ds := generate(7, n)
		for i := range ds {
			ds[i].Path = "/p/" + strconv.Itoa(i)
			ds[i].Host = "h" + strconv.Itoa(i%200)
			switch i % 4 { // integers of every width, both signs
			case 1:
				ds[i].Limit, ds[i].Count, ds[i].Dropped = -100, 1000, 300
			case 2:
				ds[i].Limit, ds[i].Count, ds[i].Dropped = -40_000, 70_000, 70_000
			case 3:
				ds[i].Limit, ds[i].Count, ds[i].Dropped = math.MinInt64, math.MaxInt64, decisions.MaxDropped // the most readers believe: 8 bytes
			}
		}
		for _, c := range compressions {
			data, err := Encode(nil, ds, Options{Compression: c})
			if err != nil {
				t.Fatal(err)
			}
			for name, d := range decoders() {
				got, err := d.Decode(data, nil)
				if err != nil {
					t.Fatalf("%d events, %v, %s: %v", n, c, name, err)
				}
				checkSame(t, got, ds)
			}
		}
	}
}

func TestEncodeErrors(t *testing.T) {
	ok := generate(1, 3)
	for _, c := range []struct {
		name string
		ds   []decisions.Decision
		opts Options
		want string
	}{
		{"empty", nil, Options{}, "empty batch"},
		{"year 1", []decisions.Decision{ok[0], {Time: time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC)}}, Options{}, "event 1: time 0001-01-01"},
		{"year 3000", []decisions.Decision{{Time: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}}, Options{}, "outside 1677-09-21 to 2262-04-11"},
		{"compression", ok, Options{Compression: 9}, "unknown compression 9"},
	} {
		dst := []byte("prefix")
		out, err := Encode(dst, c.ds, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) || string(out) != "prefix" {
			t.Errorf("%s: %q, %v; want an error mentioning %q and dst unchanged", c.name, out, err, c.want)
		}
	}
}

// TestAppend checks that Encode and Decode append, and that Decode writes
// every field of events it appends over old ones in dst's spare capacity.
func TestAppend(t *testing.T) {
	ds := generate(3, 500)
	enc := NewEncoder(Options{})
	a, err := enc.Encode([]byte("head"), ds[:200])
	if err != nil {
		t.Fatal(err)
	}
	if string(a[:4]) != "head" {
		t.Fatalf("Encode did not append: %q", a[:4])
	}
	b, err := enc.Encode(nil, ds[200:])
	if err != nil {
		t.Fatal(err)
	}
	junk := decisiontest.EdgeCases()[2]
	junk.Kind, junk.Dropped, junk.TTL, junk.List, junk.ClientIP = 9, 9, 9, "junk", netip.MustParseAddr("fe80::1%junk")
	dst := make([]decisions.Decision, 0, 1000)
	for range cap(dst) {
		dst = append(dst, junk)
	}
	dst = dst[:0]
	dec := NewDecoder()
	if dst, err = dec.Decode(a[4:], dst); err != nil {
		t.Fatal(err)
	}
	if dst, err = dec.Decode(b, dst); err != nil {
		t.Fatal(err)
	}
	checkSame(t, dst, ds)
}

func TestDeterministic(t *testing.T) {
	ds := generate(5, 5000)
	for _, c := range compressions {
		e := NewEncoder(Options{Compression: c})
		first, err := e.Encode(nil, ds)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := e.Encode(nil, ds)
		fresh, _ := Encode(nil, ds, Options{Compression: c})
		if !bytes.Equal(first, again) || !bytes.Equal(first, fresh) {
			t.Errorf("%v: encoding the same batch twice gave different bytes (%d, %d, %d)", c, len(first), len(again), len(fresh))
		}
	}
}

// TestSchemaCoversDecision fails when Decision gains a field that no
// column stores: add the column (and bump the layout only if an old reader
// could not follow).
func TestSchemaCoversDecision(t *testing.T) {
	fieldColumns := map[string][]string{
		"Kind": {"kind"}, "Time": {"time_delta_ns"}, "RequestID": {"request_id"}, "Node": {"node"},
		"ClientIP": {"client_ip", "client_ip_family", "client_ip_zone"}, "UserID": {"user_id"}, "Plan": {"plan"},
		"Tier": {"tier"}, "IdentitySource": {"identity_source"}, "Method": {"method"}, "Host": {"host"},
		"Path": {"path"}, "Rule": {"rule"}, "Algorithm": {"algorithm"}, "Limit": {"limit"}, "Window": {"window_ns"},
		"Count": {"count"}, "Remaining": {"remaining"}, "Reset": {"reset_ns"}, "Outcome": {"outcome"},
		"Reason": {"reason"}, "StoreLatency": {"store_latency_ns"}, "Privacy": {"privacy"}, "List": {"list"},
		"Action": {"action"}, "Target": {"target"}, "TTL": {"ttl_ns"}, "Dropped": {"dropped"},
		"Status": {"status"}, "UpstreamLatency": {"upstream_latency_ns"}, "ResponseError": {"response_error"},
	}
	typ := reflect.TypeFor[decisions.Decision]()
	covered := map[string]bool{}
	for i := range typ.NumField() {
		cols, ok := fieldColumns[typ.Field(i).Name]
		if !ok {
			t.Errorf("Decision.%s has no column", typ.Field(i).Name)
		}
		for _, c := range cols {
			covered[c] = true
		}
	}
	s := Schema()
	for _, f := range s.Fields() {
		if !covered[f.Name] {
			t.Errorf("column %s stores no Decision field", f.Name)
		}
	}
	if len(covered) != s.NumFields() {
		t.Errorf("%d columns cover the fields, the schema has %d", len(covered), s.NumFields())
	}
	if v, _ := s.Metadata().GetValue(KeySchemaVersion); v != strconv.Itoa(decisions.Version) {
		t.Errorf("schema version %q, want %d", v, decisions.Version)
	}
}

// stream writes an arbitrary IPC stream: schema md, columns cols.
func stream(t *testing.T, md map[string]string, sealed bool, cols map[string]arrow.Array) []byte {
	t.Helper()
	var fields []arrow.Field
	var arrs []arrow.Array
	for _, c := range columns { // our columns first, in order, then the rest
		if a, ok := cols[c.name]; ok {
			fields = append(fields, arrow.Field{Name: c.name, Type: a.DataType(), Nullable: true})
			arrs = append(arrs, a)
		}
	}
	for name, a := range cols {
		if _, ours := columnIndex[name]; !ours {
			fields = append(fields, arrow.Field{Name: name, Type: a.DataType(), Nullable: true})
			arrs = append(arrs, a)
		}
	}
	if sealed {
		md[KeyChecksum] = checksumPlaceholder
	}
	meta := arrow.MetadataFrom(md)
	schema := arrow.NewSchema(fields, &meta)
	n := int64(0)
	if len(arrs) > 0 {
		n = int64(arrs[0].Len())
	}
	rec := array.NewRecordBatchWithMetadata(schema, arrs, n, arrow.NewMetadata([]string{KeyTimeBase}, []string{"0"}))
	defer rec.Release()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(schema), ipc.WithZstd())
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out := buf.Bytes()
	if sealed {
		if err := sealChecksum(out); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// columnsOf returns the arrays of an encoded batch by column name.
func columnsOf(t *testing.T, data []byte) (map[string]arrow.Array, map[string]string) {
	t.Helper()
	r, err := ipc.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Next() {
		t.Fatal(r.Err())
	}
	rec := r.RecordBatch()
	rec.Retain()
	cols := map[string]arrow.Array{}
	for i, f := range rec.Schema().Fields() {
		cols[f.Name] = rec.Column(i)
	}
	return cols, rec.Schema().Metadata().ToMap()
}

// TestOlderWriter decodes a batch of schema version 1, written before the
// response columns existed: they decode as zero values.
func TestOlderWriter(t *testing.T) {
	ds := generate(12, 50)
	data, _ := Encode(nil, ds, Options{})
	cols, md := columnsOf(t, data)
	md[KeySchemaVersion] = "1"
	for _, name := range []string{"status", "upstream_latency_ns", "response_error"} {
		delete(cols, name)
	}
	want := append([]decisions.Decision(nil), ds...)
	base := ds[0].Time.UnixNano()
	for i := range want { // the time base was rewritten to 0
		want[i].Time = time.Unix(0, ds[i].Time.UnixNano()-base).UTC()
		want[i].Status, want[i].UpstreamLatency, want[i].ResponseError = 0, 0, ""
	}
	for name, d := range decoders() {
		got, err := d.Decode(stream(t, md, true, cols), nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkSame(t, got, want)
		if d.Version() != 1 {
			t.Errorf("%s: version %d, want 1", name, d.Version())
		}
	}
}

func TestNewerWriter(t *testing.T) {
	ds := generate(11, 50)
	data, _ := Encode(nil, ds, Options{})
	cols, md := columnsOf(t, data)
	md[KeySchemaVersion] = strconv.Itoa(decisions.Version + 1)
	mem := memory.DefaultAllocator
	// Extra columns: one the fast reader steps over, one it leaves to
	// arrow-go's reader.
	ib := array.NewInt64Builder(mem)
	lb := array.NewListBuilder(mem, arrow.BinaryTypes.String)
	vb := array.NewStringViewBuilder(mem)
	for i := range ds {
		ib.Append(int64(i))
		lb.Append(true)
		lb.ValueBuilder().(*array.StringBuilder).Append("x")
		vb.Append("view")
	}
	cols["future_int"], cols["future_list"] = ib.NewArray(), lb.NewArray()
	for _, extra := range []struct {
		name string
		arr  arrow.Array
		slow int
	}{
		{"list", nil, 0},
		{"string view", vb.NewArray(), 1},
	} {
		if extra.arr != nil {
			cols["future_view"] = extra.arr
		}
		data := stream(t, md, true, cols)
		d := NewDecoder()
		got, err := d.Decode(data, nil)
		if err != nil {
			t.Fatalf("%s: %v", extra.name, err)
		}
		want := append([]decisions.Decision(nil), ds...)
		base := ds[0].Time.UnixNano()
		for i := range want { // the time base was rewritten to 0
			want[i].Time = time.Unix(0, ds[i].Time.UnixNano()-base).UTC()
		}
		checkSame(t, got, want)
		if d.Version() != decisions.Version+1 || d.slowDecodes != extra.slow {
			t.Errorf("%s: version %d, %d slow decodes; want %d, %d", extra.name, d.Version(), d.slowDecodes, decisions.Version+1, extra.slow)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	ds := generate(13, 20)
	valid, _ := Encode(nil, ds, Options{})
	cols, md := columnsOf(t, valid)
	without := func(name string) map[string]arrow.Array {
		out := map[string]arrow.Array{}
		for k, v := range cols {
			if k != name {
				out[k] = v
			}
		}
		return out
	}
	with := func(name string, a arrow.Array) map[string]arrow.Array {
		out := without(name)
		out[name] = a
		return out
	}
	mdWith := func(k, v string) map[string]string {
		out := map[string]string{}
		for k, v := range md {
			out[k] = v
		}
		if v == "" {
			delete(out, k)
		} else {
			out[k] = v
		}
		return out
	}
	sb := array.NewStringBuilder(memory.DefaultAllocator)
	for range ds {
		sb.Append("thirty")
	}
	ub := array.NewUint8Builder(memory.DefaultAllocator)
	for range ds {
		ub.Append(5)
	}
	line := decisions.AppendJSON(nil, &ds[0])
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "empty input"},
		{"json", line, "not an Arrow IPC stream"},
		{"text", []byte("hello, world: not a batch at all"), "not an Arrow IPC stream"},
		{"truncated", valid[:len(valid)/2], "checksum mismatch"},
		{"schema only", valid[:100], "truncated: a schema message of"},
		{"no version", stream(t, mdWith(KeySchemaVersion, ""), true, cols), "no ratewarden.schema_version"},
		{"bad version", stream(t, mdWith(KeySchemaVersion, "one"), true, cols), `"one" is not a version`},
		{"newer layout", stream(t, mdWith(KeyLayout, "2"), true, cols), "layout 2 (schema version " + strconv.Itoa(decisions.Version) + "); this reader knows layout 1"},
		{"missing column", stream(t, md, true, without("path")), "column path is missing"},
		{"wrong type", stream(t, md, true, with("limit", sb.NewArray())), "column limit: type utf8, want int8"},
		{"bad family", stream(t, md, true, with("client_ip_family", ub.NewArray())), "column client_ip_family: row 0: address family 5"},
		{"other schema", stream(t, map[string]string{}, false, map[string]arrow.Array{"x": sb.NewArray()}), "no ratewarden.schema_version"},
	} {
		for name, d := range decoders() {
			got, err := d.Decode(c.data, []decisions.Decision{{}})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "decode decisions: ") || len(got) != 1 {
				t.Errorf("%s, %s: %d events, error %v; want an error mentioning %q", c.name, name, len(got), err, c.want)
			}
		}
	}
	if _, err := Decode(stream(t, mdWith(KeyLayout, "2"), true, cols), nil); !errors.Is(err, ErrNewerLayout) {
		t.Errorf("newer layout: %v, want ErrNewerLayout", err)
	}
}

// TestCorruption flips each byte and truncates at each length of a small
// batch: every one must be refused, except, in a zstd frame, a flip that
// changes nothing the frame decompresses to (a bit zstd does not read).
func TestCorruption(t *testing.T) {
	for _, c := range compressions {
		want := generate(17, 5)
		data, _ := Encode(nil, want, Options{Compression: c})
		d := NewDecoder()
		for i := range data {
			bad := bytes.Clone(data)
			bad[i] ^= 0x20
			got, err := d.Decode(bad, nil)
			if err == nil && c.framed() && len(got) == len(want) {
				for j := range got {
					if !decisiontest.Equal(got[j], want[j]) {
						t.Fatalf("%v: byte %d of %d flipped: event %d changed without an error", c, i, len(data), j)
					}
				}
				continue
			}
			if err == nil {
				t.Fatalf("%v: byte %d of %d flipped: no error", c, i, len(data))
			}
			if _, err := d.Decode(data[:i], nil); err == nil {
				t.Fatalf("%v: truncated to %d bytes of %d: no error", c, i, len(data))
			}
		}
		// Bytes after the end of the stream are refused too, checksum or
		// not; after a zstd frame, zstd refuses them.
		trailing := "after the end of the stream"
		if c.framed() {
			trailing = "magic number mismatch"
		}
		for name, d := range decoders() {
			d.skipChecksum = true
			if _, err := d.Decode(append(bytes.Clone(data), 0, 0, 0, 0, 0, 0, 0, 0), nil); err == nil || !strings.Contains(err.Error(), trailing) {
				t.Errorf("%v, %s: trailing bytes: %v", c, name, err)
			}
		}
	}
}

// TestUnsealed decodes a stream without checksum, as another writer
// would write it.
func TestUnsealed(t *testing.T) {
	ds := generate(19, 30)
	data, _ := Encode(nil, ds, Options{})
	cols, md := columnsOf(t, data)
	delete(md, KeyChecksum)
	base := ds[0].Time.UnixNano()
	for i := range ds {
		ds[i].Time = time.Unix(0, ds[i].Time.UnixNano()-base)
	}
	for name, d := range decoders() {
		got, err := d.Decode(stream(t, md, false, cols), nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkSame(t, got, ds)
	}
}

// TestDecodeRefusesForgedDrops: a dropped count over decisions.MaxDropped
// makes the batch corrupt for either decoder, as a field over its cap
// does: readers add the counts up.
func TestDecodeRefusesForgedDrops(t *testing.T) {
	ds := generate(8, 50)
	ds[20] = decisions.Decision{Kind: decisions.KindDrops, Time: ds[20].Time, Node: "edge-1", Dropped: decisions.MaxDropped + 1}
	data, err := Encode(nil, ds, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range decoders() {
		if _, err := d.Decode(data, nil); err == nil || !strings.Contains(err.Error(), "column dropped: row 20: dropped 1099511627777, at most 1099511627776") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
