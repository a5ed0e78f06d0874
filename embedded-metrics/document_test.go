package emf

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// windowDocument is a document as the aggregator emits it for one
// event-time window: five dimension sets, the decision counters, a
// latency histogram as values and counts, and the idempotency property.
func windowDocument(latencies int) *Document {
	values := make([]float64, latencies)
	counts := make([]uint64, latencies)
	for i := range values {
		values[i] = 0.25 * float64(i+1)
		counts[i] = uint64(i%4 + 1)
	}
	idem, err := NewProperty("ratewarden", map[string]any{
		"source": "kinesis:decisions", "shard": "shardId-000000000003",
		"from": "49654837213720000000000000000000000000000000000000000003", "to": "49654837213720000000000000000000000000000000000000000999",
		"window": "2025-01-02T03:00:00Z/PT1M",
	})
	if err != nil {
		panic(err)
	}
	count := func(name string, v float64) Metric { return Metric{Name: name, Unit: Count, Values: []float64{v}} }
	return &Document{
		Namespace: "ratewarden",
		Timestamp: time.Date(2025, 1, 2, 3, 0, 0, 0, time.UTC),
		Dimensions: [][]Dimension{
			{{"Tier", "free"}},
			{{"Tier", "free"}, {"Rule", "login"}},
			{{"Outcome", "blocked"}},
			{{"Node", "edge-eu-1a"}},
			{},
		},
		Properties: []Property{idem, StringProperty("aggregator", "agg-1")},
		Metrics: []Metric{
			count("Requests", 1200), count("Allowed", 1100), count("Blocked", 60), count("Challenged", 25),
			count("TokenPassed", 15), count("FailOpen", 0), count("FailClosed", 0), count("LocalLimit", 40),
			count("ShadowBlocked", 3), count("DenyListed", 7), count("AllowListed", 90), count("UniqueClients", 312),
			{Name: "StoreLatency", Unit: Milliseconds, Values: values, Counts: counts},
			count("DecisionsDropped", 0),
		},
	}
}

func TestDocumentGolden(t *testing.T) {
	many := &Document{Namespace: "ratewarden/split", Timestamp: testNow}
	for i := range 120 {
		many.Metrics = append(many.Metrics, Metric{Name: "m" + strconv.Itoa(i), Unit: Count, Values: []float64{float64(i)}})
	}
	many.Metrics[0].Values = make([]float64, 150)
	for i := range many.Metrics[0].Values {
		many.Metrics[0].Values[i] = float64(i)
	}
	cases := []struct {
		name string
		doc  *Document
		max  ByteSize
	}{
		{"aggregator window", windowDocument(150), 0},
		{"split 120 metrics and 150 values", many, 0},
		{"split by size", windowDocument(150), 4 * KiB},
		{"no dimensions", &Document{
			Namespace: "ratewarden",
			Timestamp: testNow,
			Properties: []Property{
				{Name: "raw", Value: json.RawMessage("{\n  \"a\": [1,\r\n 2]\n}")},
				{Name: "Up", Value: json.RawMessage(`"shadowed by the metric"`)},
				{Name: "Empty", Value: json.RawMessage(`"kept: the metric Empty has no values"`)},
			},
			Metrics: []Metric{
				{Name: "Up", Values: []float64{1}, Resolution: High},
				{Name: "Empty", Unit: Count},
				{Name: "Zero counts", Unit: Count, Values: []float64{5}, Counts: []uint64{0}},
				{Name: "Repeated", Unit: Seconds, Values: []float64{1.5, 2}, Counts: []uint64{3, 1}},
			},
		}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lim := Limits{MaxSize: c.max, Now: testNow}
			got, err := AppendDocuments(nil, c.doc, lim)
			must(t, err)
			checkGolden(t, "document/"+strings.ReplaceAll(c.name, " ", "-")+".jsonl", got)
			max := c.max
			if max == 0 {
				max = DefaultMaxDocumentSize
			}
			for i, line := range bytes.SplitAfter(got, []byte{'\n'}) {
				if len(line) == 0 {
					continue
				}
				if vs := Validate(bytes.TrimSuffix(line, []byte{'\n'}), testNow, ValidateOptions{MaxSize: max}); len(vs) > 0 {
					t.Errorf("line %d invalid:\n%s", i, joinViolations(vs))
				}
			}
			again, err := AppendDocuments([]byte("prefix\n"), c.doc, lim)
			must(t, err)
			if !bytes.Equal(again, append([]byte("prefix\n"), got...)) {
				t.Error("a second encoding differs from the first, or lost dst")
			}
		})
	}
}

func TestDocumentSplitKeepsEverything(t *testing.T) {
	expand := func(m Metric) []float64 {
		if m.Counts == nil {
			return m.Values
		}
		var out []float64
		for i, v := range m.Values {
			for range m.Counts[i] {
				out = append(out, v)
			}
		}
		return out
	}
	cases := []struct {
		name     string
		doc      *Document
		max      ByteSize
		wantDocs int // 0: more than one, not stated exactly
	}{
		{"window, one document", windowDocument(20), 0, 1},
		{"window, histogram of 150 values", windowDocument(150), 0, 4}, // 375 expanded values
		{"window, 4 KiB", windowDocument(150), 4 * KiB, 0},
		{"window, 1 MiB", windowDocument(400), MaxDocumentSize, 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := AppendDocuments(nil, c.doc, Limits{MaxSize: c.max, Now: testNow})
			must(t, err)
			max := c.max
			if max == 0 {
				max = DefaultMaxDocumentSize
			}
			docs := splitLines(t, out)
			dims := map[string]string{"Tier": "free", "Rule": "login", "Outcome": "blocked", "Node": "edge-eu-1a"}
			got := checkDocuments(t, docs, max, dims, map[string]any{"aggregator": "agg-1"})
			for _, m := range c.doc.Metrics {
				if want := expand(m); !slices.Equal(got.values[m.Name], want) {
					t.Errorf("metric %s: got %d values %v..., want %d", m.Name, len(got.values[m.Name]), head(got.values[m.Name]), len(want))
				}
			}
			if c.wantDocs > 0 && got.docs != c.wantDocs || c.wantDocs == 0 && got.docs < 2 {
				t.Errorf("got %d documents, want %d (0: more than 1)", got.docs, c.wantDocs)
			}
		})
	}
}

func TestAppendDocumentsRefuses(t *testing.T) {
	valid := func(change func(d *Document)) *Document {
		d := windowDocument(3)
		change(d)
		return d
	}
	cases := []struct {
		name  string
		doc   *Document
		lim   Limits
		field string // InvalidError.Field
	}{
		{"namespace", valid(func(d *Document) { d.Namespace = ":a" }), Limits{}, "namespace"},
		{"timestamp not set", valid(func(d *Document) { d.Timestamp = time.Time{} }), Limits{IgnoreTimestampWindow: true}, "timestamp"},
		{"timestamp too old", valid(func(d *Document) { d.Timestamp = testNow.Add(-MaxTimestampPast - time.Millisecond) }), Limits{}, "timestamp"},
		{"timestamp too new", valid(func(d *Document) { d.Timestamp = testNow.Add(MaxTimestampFuture + time.Millisecond) }), Limits{}, "timestamp"},
		{"size limit", valid(func(*Document) {}), Limits{MaxSize: MaxDocumentSize + 1}, "document size limit"},
		{"31 dimension sets", valid(func(d *Document) { d.Dimensions = make([][]Dimension, 31) }), Limits{}, "dimension sets"},
		{"31 keys", valid(func(d *Document) { d.Dimensions = [][]Dimension{dimensions(31)} }), Limits{}, "dimension set"},
		{"key twice in a set", valid(func(d *Document) { d.Dimensions = [][]Dimension{{{"a", "1"}, {"a", "1"}}} }), Limits{}, "dimension set"},
		{"key with two values", valid(func(d *Document) { d.Dimensions = [][]Dimension{{{"a", "1"}}, {{"a", "2"}}} }), Limits{}, "dimension value"},
		{"dimension value non-ASCII", valid(func(d *Document) { d.Dimensions = [][]Dimension{{{"a", "Zürich"}}} }), Limits{}, "dimension value"},
		{"dimension key _aws", valid(func(d *Document) { d.Dimensions = [][]Dimension{{{"_aws", "x"}}} }), Limits{}, "dimension name"},
		{"metric name empty", valid(func(d *Document) { d.Metrics[0].Name = "" }), Limits{}, "metric name"},
		{"metric name _aws", valid(func(d *Document) { d.Metrics[0].Name = "_aws" }), Limits{}, "metric name"},
		{"metric name twice", valid(func(d *Document) { d.Metrics[1].Name = d.Metrics[0].Name }), Limits{}, "metric name"},
		{"metric name is a dimension key", valid(func(d *Document) { d.Metrics[0].Name = "Tier" }), Limits{}, "metric name"},
		{"metric unit", valid(func(d *Document) { d.Metrics[0].Unit = "Requests" }), Limits{}, "metric unit"},
		{"metric resolution", valid(func(d *Document) { d.Metrics[0].Resolution = 5 }), Limits{}, "storage resolution"},
		{"metric value NaN", valid(func(d *Document) { d.Metrics[0].Values = []float64{1, math.NaN()} }), Limits{}, "metric value"},
		{"metric value too large", valid(func(d *Document) { d.Metrics[0].Values = []float64{1.2e108} }), Limits{}, "metric value"},
		{"counts for fewer values", valid(func(d *Document) { d.Metrics[0].Counts = []uint64{1, 2} }), Limits{}, "metric counts"},
		{"property _aws", valid(func(d *Document) { d.Properties[0].Name = "_aws" }), Limits{}, "property name"},
		{"property twice", valid(func(d *Document) { d.Properties[1].Name = d.Properties[0].Name }), Limits{}, "property name"},
		{"property not JSON", valid(func(d *Document) { d.Properties[0].Value = json.RawMessage("{") }), Limits{}, "property value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.lim.Now.IsZero() {
				c.lim.Now = testNow
			}
			dst := []byte("kept\n")
			out, err := AppendDocuments(dst, c.doc, c.lim)
			var ie *InvalidError
			switch {
			case !errors.As(err, &ie):
				t.Fatalf("error %v is not an *InvalidError", err)
			case ie.Field != c.field || ie.Allowed == "":
				t.Errorf("error %v: field %q, want %q, with an allowed text", err, ie.Field, c.field)
			}
			if string(out) != "kept\n" {
				t.Errorf("appended %q to a refused document", out[len(dst):])
			}
			// A timestamp out of range says which side it is on.
			var te *TimestampError
			if got, want := errors.As(err, &te), strings.HasPrefix(c.name, "timestamp too "); got != want {
				t.Errorf("error %v: a *TimestampError %v, want %v", err, got, want)
			} else if got && te.Ahead != (c.name == "timestamp too new") {
				t.Errorf("error %v: Ahead %v", err, te.Ahead)
			}
		})
	}
}

func TestAppendDocumentsNoRoom(t *testing.T) {
	doc := windowDocument(3)
	doc.Timestamp = testNow
	doc.Properties = append(doc.Properties, StringProperty("blob", strings.Repeat("b", 5000)))
	out, err := AppendDocuments(nil, doc, Limits{MaxSize: 4 * KiB, Now: testNow})
	var ie *InvalidError
	if !errors.As(err, &ie) || ie.Field != "document size" {
		t.Fatalf("error %v, want an *InvalidError for the document size", err)
	}
	if len(out) != 0 {
		t.Errorf("appended %d bytes, want none", len(out))
	}
}

func TestAppendDocumentsTooManyValues(t *testing.T) {
	doc := windowDocument(3)
	doc.Metrics[12].Counts[0] = maxExpandedValues // StoreLatency: 2^20 + 5 values
	out, err := AppendDocuments(nil, doc, Limits{Now: testNow})
	var ie *InvalidError
	if !errors.As(err, &ie) || ie.Field != "metric values" {
		t.Fatalf("error %v, want an *InvalidError for the metric values", err)
	}
	got := checkDocuments(t, splitLines(t, out), DefaultMaxDocumentSize, nil, nil)
	if len(got.values["StoreLatency"]) != 0 || !slices.Equal(got.values["Requests"], []float64{1200}) || got.docs != 1 {
		t.Errorf("got %d documents, StoreLatency %v, Requests %v; want one document without StoreLatency", got.docs, head(got.values["StoreLatency"]), got.values["Requests"])
	}
}

// TestLoggerIsDocument checks that a Logger's flush is the encoding of the
// Document of what it buffered.
func TestLoggerIsDocument(t *testing.T) {
	l, sink := newTestLogger(t, Config{}, nil)
	must(t, l.PutDimensions(Dimension{"Tier", "free"}))
	must(t, l.PutDimensions(Dimension{"Tier", "paid"}, Dimension{"Rule", "login"}))
	must(t, l.SetProperty("p", 1))
	for i := range 250 {
		must(t, l.PutMetric("Latency", float64(i), Milliseconds))
	}
	must(t, l.PutMetric("Blocked", 1, Count))
	must(t, l.FlushAt(context.Background(), testNow))
	doc := &Document{
		Namespace: DefaultNamespace,
		Timestamp: testNow,
		Dimensions: [][]Dimension{
			{{"LogGroup", "Unknown-metrics"}, {"ServiceName", "Unknown"}, {"ServiceType", "Local"}, {"Tier", "paid"}},
			{{"LogGroup", "Unknown-metrics"}, {"ServiceName", "Unknown"}, {"ServiceType", "Local"}, {"Tier", "paid"}, {"Rule", "login"}},
		},
		Properties: []Property{{Name: "p", Value: json.RawMessage("1")}},
		Metrics: []Metric{
			{Name: "Latency", Unit: Milliseconds, Values: make([]float64, 250)},
			{Name: "Blocked", Unit: Count, Values: []float64{1}},
		},
	}
	for i := range doc.Metrics[0].Values {
		doc.Metrics[0].Values[i] = float64(i)
	}
	want, err := AppendDocuments(nil, doc, Limits{Now: testNow})
	must(t, err)
	if got := sink.lines(); !bytes.Equal(got, want) {
		t.Errorf("logger wrote\n%s\nthe document encodes as\n%s", got, want)
	}
}

func TestAppendDocumentsConcurrent(t *testing.T) {
	doc := windowDocument(150)
	want, err := AppendDocuments(nil, doc, Limits{Now: testNow})
	must(t, err)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				got, err := AppendDocuments(nil, doc, Limits{Now: testNow})
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("concurrent encoding differs (%v)", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestWriter(t *testing.T) {
	good, bad := &memSink{}, &memSink{fail: errors.New("disk full")}
	w, err := NewWriter(WriterOptions{ValidateDocuments: true}, good, bad)
	must(t, err)
	doc := windowDocument(150) // 4 documents
	err = w.Write(context.Background(), doc, testNow.Add(time.Hour))
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("write error %v, want the sink's error", err)
	}
	doc.Namespace = "a\tb"
	var ie *InvalidError
	if err := w.Write(context.Background(), doc, testNow); !errors.As(err, &ie) {
		t.Errorf("write error %v, want an *InvalidError", err)
	}
	must(t, w.Flush(context.Background()))
	must(t, w.Close(context.Background()))
	want := Stats{
		Documents: 4, Split: 3, Rejected: 1,
		Sinks: []SinkReport{
			{Written: 4, Split: 3, Sink: SinkStats{Sink: "memory", Written: 4}},
			{Dropped: 4, Sink: SinkStats{Sink: "memory", Dropped: 4}},
		},
	}
	st := w.Stats()
	if st.Documents != want.Documents || st.Split != want.Split || st.Rejected != want.Rejected || !slices.Equal(st.Sinks, want.Sinks) {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	if _, err := NewWriter(WriterOptions{MaxDocumentSize: 2 * MiB}); err == nil {
		t.Error("NewWriter accepted a 2 MiB document size")
	}
}

// TestWriterStdout checks that a Writer's stdout sink receives exactly the
// lines AppendDocuments encodes.
func TestWriterStdout(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(WriterOptions{ValidateDocuments: true}, NewStdoutSink(&buf))
	must(t, err)
	doc := windowDocument(150)
	must(t, w.Write(context.Background(), doc, testNow))
	must(t, w.Close(context.Background()))
	want, err := AppendDocuments(nil, doc, Limits{Now: testNow})
	must(t, err)
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("stdout got\n%s\nwant\n%s", buf.Bytes(), want)
	}
	if st := w.Stats(); st.Sinks[0].Written != 4 || st.Sinks[0].Sink.Written != 4 || st.Sinks[0].Sink.Buffered != 0 {
		t.Errorf("stats %+v, want 4 documents written", st)
	}
}

// FuzzDocuments checks that every line AppendDocuments writes passes
// Validate, that nothing is appended to a refused document, that the same
// document encodes to the same bytes, and that no value is lost.
func FuzzDocuments(f *testing.F) {
	f.Add("ratewarden", "Tier", "free", "requestId", "abc", "Latency", 12.5, uint8(3), uint16(2), uint16(0), uint8(3))
	f.Add("a/b", "k", "v", "p", "\u2028", "a\"b\\c\n", -1e-7, uint8(250), uint16(700), uint16(4096), uint8(1))
	f.Add("x", ":x", "", "_aws", "x", "é", 1e21, uint8(1), uint16(0), uint16(1), uint8(0))
	f.Add("x", "Tier", "paid", "Tier", "x", "Tier", 1.0, uint8(1), uint16(1), uint16(1), uint8(2))
	f.Fuzz(func(t *testing.T, ns, dimKey, dimValue, propName, propValue, name string, value float64, n uint8, count uint16, maxSize uint16, nsets uint8) {
		count %= 512 // enough for several pieces; more only slows the fuzzer
		doc := &Document{Namespace: ns, Timestamp: testNow}
		for i := range int(nsets % 4) {
			set := []Dimension{{dimKey, dimValue}}
			if i == 1 {
				set = append(set, Dimension{"Rule", "login"})
			}
			if i == 2 {
				set = nil
			}
			doc.Dimensions = append(doc.Dimensions, set)
		}
		doc.Properties = []Property{StringProperty(propName, propValue), {Name: "n", Value: json.RawMessage("[1,\n2]")}}
		values := make([]float64, n)
		for i := range values {
			values[i] = value
		}
		doc.Metrics = []Metric{
			{Name: name, Unit: Milliseconds, Values: values},
			{Name: name + " histogram", Unit: Count, Resolution: High, Values: []float64{value, -value}, Counts: []uint64{uint64(count), uint64(count / 3)}},
		}
		max := ByteSize(maxSize) + 512
		lim := Limits{MaxSize: max, Now: testNow}
		out, err := AppendDocuments([]byte("x"), doc, lim)
		if out[0] != 'x' {
			t.Fatal("dst was overwritten")
		}
		var ie *InvalidError
		if err != nil && !errors.As(err, &ie) {
			t.Fatalf("error %v is not an *InvalidError", err)
		}
		again, _ := AppendDocuments([]byte("x"), doc, lim)
		if !bytes.Equal(out, again) {
			t.Fatal("the same document encoded twice differs")
		}
		got := 0
		for i, d := range splitLines(t, out[1:]) {
			if vs := Validate(d, testNow, ValidateOptions{MaxSize: max}); len(vs) > 0 {
				t.Fatalf("line %d invalid:\n%s\n%s", i, d, joinViolations(vs))
			}
			var root map[string]json.RawMessage
			var meta struct {
				AWS struct {
					CloudWatchMetrics []struct{ Metrics []struct{ Name string } }
				} `json:"_aws"`
			}
			if err := json.Unmarshal(d, &root); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(d, &meta); err != nil {
				t.Fatal(err)
			}
			for _, def := range meta.AWS.CloudWatchMetrics[0].Metrics {
				got += countValues(t, root[def.Name])
			}
		}
		if want := int(n) + int(count) + int(count/3); err == nil && got != want {
			t.Fatalf("documents hold %d values, want %d", got, want)
		}
	})
}

// countValues counts the metric values of a member: a number, an array of
// numbers, or nothing.
func countValues(t *testing.T, raw json.RawMessage) int {
	t.Helper()
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) > 0 && raw[0] == '[':
		var vs []float64
		if err := json.Unmarshal(raw, &vs); err != nil {
			t.Fatal(err)
		}
		return len(vs)
	case len(raw) > 0:
		return 1
	}
	return 0
}

// BenchmarkAppendDocuments encodes an aggregator's document for one
// window: 5 dimension sets, 14 metrics, and a latency histogram of 150
// distinct values, as values and counts (375 values written) or as the
// 375 values themselves.
func BenchmarkAppendDocuments(b *testing.B) {
	counted := windowDocument(150)
	plain := windowDocument(150)
	m := &plain.Metrics[12]
	var values []float64
	for i, v := range m.Values {
		for range m.Counts[i] {
			values = append(values, v)
		}
	}
	m.Values, m.Counts = values, nil
	for _, c := range []struct {
		name string
		doc  *Document
	}{{"counts", counted}, {"values", plain}} {
		b.Run(c.name, func(b *testing.B) {
			lim := Limits{Now: c.doc.Timestamp}
			n := 0
			for _, m := range c.doc.Metrics {
				n += len(m.Values)
				for _, k := range m.Counts {
					n += int(k) - 1
				}
			}
			var buf []byte
			docs := 0
			b.ReportAllocs()
			for b.Loop() {
				var err error
				buf, err = AppendDocuments(buf[:0], c.doc, lim)
				if err != nil {
					b.Fatal(err)
				}
				docs = bytes.Count(buf, []byte{'\n'})
			}
			b.SetBytes(int64(len(buf)))
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "values/s")
			b.ReportMetric(float64(docs), "docs/op")
		})
	}
}

// BenchmarkAppendDocumentsParallel encodes the window document from every
// core, through the shared pool of encoders.
func BenchmarkAppendDocumentsParallel(b *testing.B) {
	doc := windowDocument(150)
	lim := Limits{Now: doc.Timestamp}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var buf []byte
		for pb.Next() {
			var err error
			if buf, err = AppendDocuments(buf[:0], doc, lim); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
