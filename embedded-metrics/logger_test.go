package emf

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// testNow is the fixed instant of every logger test.
var testNow = time.Date(2025, 1, 2, 3, 4, 5, 6_000_000, time.UTC)

// memSink keeps documents in memory; it may be told to fail.
type memSink struct {
	mu   sync.Mutex
	docs [][]byte
	fail error
	st   SinkStats
}

var _ Sink = (*memSink)(nil)

func (s *memSink) Write(_ context.Context, doc []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		s.st.Dropped++
		return s.fail
	}
	s.docs = append(s.docs, bytes.Clone(doc))
	s.st.Written++
	return nil
}
func (s *memSink) Flush(context.Context) error { return nil }
func (s *memSink) Close(context.Context) error { return nil }
func (s *memSink) Stats() SinkStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Sink = "memory"
	return st
}

func (s *memSink) lines() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b []byte
	for _, d := range s.docs {
		b = append(append(b, d...), '\n')
	}
	return b
}

func newTestLogger(t testing.TB, cfg Config, env map[string]string) (*Logger, *memSink) {
	t.Helper()
	sink := &memSink{}
	cfg.ValidateDocuments = true
	l, err := New(cfg, func(k string) string { return env[k] }, sink)
	if err != nil {
		t.Fatal(err)
	}
	return l, sink
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestLoggerGolden(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		env  map[string]string
		do   func(t *testing.T, l *Logger)
	}{
		{"basic", Config{}, nil, func(t *testing.T, l *Logger) {
			must(t, l.PutDimensions(Dimension{"Tier", "free"}, Dimension{"Path", "/api/v1"}))
			must(t, l.SetProperty("requestId", "989ffbf8-9ace"))
			must(t, l.PutMetric("Allowed", 1, Count))
			must(t, l.PutMetric("Allowed", 1, Count))
			must(t, l.PutMetric("Latency", 12.5, Milliseconds))
		}},
		{"lambda", Config{Environment: Lambda, Namespace: "edge/limits"}, map[string]string{
			"AWS_LAMBDA_FUNCTION_NAME": "ratewarden-edge", "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
			"AWS_EXECUTION_ENV": "AWS_Lambda_provided.al2023", "AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/ratewarden-edge",
		}, func(t *testing.T, l *Logger) {
			must(t, l.PutMetric("Blocked", 3, Count))
		}},
		{"resolution and properties", Config{Environment: EC2, ServiceName: "edge"}, nil, func(t *testing.T, l *Logger) {
			must(t, l.PutMetricWithResolution("Decisions", 10, CountPerSecond, High))
			must(t, l.PutMetric("Bytes", 2048, Bytes))
			must(t, l.SetProperty("escaped", "quote\" backslash\\ newline\n tab\t \u2028"))
			must(t, l.SetProperty("number", 1.5))
			must(t, l.SetProperty("raw", json.RawMessage(`{"a":[1,2]}`)))
			must(t, l.SetProperty("struct", struct{ A int }{7}))
			must(t, l.SetProperty("Decisions", "shadowed by the metric"))
		}},
		{"dimension sets", Config{Environment: ECS, ServiceName: "edge", LogGroup: "edge-logs"}, nil, func(t *testing.T, l *Logger) {
			must(t, l.PutDimensions(Dimension{"Tier", "free"}))
			must(t, l.PutDimensions(Dimension{"Tier", "paid"}, Dimension{"Path", "/x"}))
			must(t, l.PutDimensions(Dimension{"Tier", "paid"})) // same keys: replaces the first set
			must(t, l.PutMetric("Allowed", 0.25, Percent))
		}},
		{"set dimensions without defaults", Config{}, nil, func(t *testing.T, l *Logger) {
			must(t, l.SetDimensions([]Dimension{{"Rule", "login"}}, []Dimension{}))
			must(t, l.SetNamespace("ratewarden/rules"))
			l.SetTimestamp(testNow.Add(-time.Hour))
			must(t, l.PutMetric("Hits", -3, ""))
			must(t, l.PutMetric("Tiny", 1e-7, None))
			must(t, l.PutMetric("Huge", 1e21, None))
		}},
		{"no dimensions", Config{NoDefaultDimensions: true}, nil, func(t *testing.T, l *Logger) {
			must(t, l.PutMetric("Up", 1, Count))
		}},
		{"split 101 metrics", Config{}, nil, func(t *testing.T, l *Logger) {
			for i := range 101 {
				must(t, l.PutMetric("m"+strconv.Itoa(i), float64(i), Count))
			}
		}},
		{"split 250 values", Config{}, nil, func(t *testing.T, l *Logger) {
			must(t, l.PutDimensions(Dimension{"Tier", "free"}))
			must(t, l.SetProperty("p", true))
			for i := range 250 {
				must(t, l.PutMetric("v", float64(i), Milliseconds))
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, sink := newTestLogger(t, c.cfg, c.env)
			c.do(t, l)
			must(t, l.FlushAt(context.Background(), testNow))
			got := sink.lines()
			checkGolden(t, "logger/"+strings.ReplaceAll(c.name, " ", "-")+".jsonl", got)
			for i, d := range sink.docs {
				if vs := Validate(d, testNow, ValidateOptions{}); len(vs) > 0 {
					t.Errorf("document %d invalid:\n%s", i, joinViolations(vs))
				}
			}
		})
	}
}

// putAll is one metric's input to a split test.
type putAll struct {
	name   string
	values []float64
}

// decoded is what a reader of the documents sees.
type decoded struct {
	values map[string][]float64
	docs   int
}

// checkDocuments checks every invariant of a flush: each document valid,
// within limits and size, carrying every dimension and property; and all
// values present, once each, in order.
func checkDocuments(t *testing.T, docs [][]byte, max ByteSize, dims map[string]string, props map[string]any) decoded {
	t.Helper()
	out := decoded{values: map[string][]float64{}, docs: len(docs)}
	for i, d := range docs {
		if ByteSize(len(d)) > max {
			t.Errorf("document %d is %d bytes, over %d", i, len(d), max)
		}
		if vs := Validate(d, testNow, ValidateOptions{MaxSize: max}); len(vs) > 0 {
			t.Fatalf("document %d invalid:\n%s", i, joinViolations(vs))
		}
		var root map[string]any
		if err := json.Unmarshal(d, &root); err != nil {
			t.Fatal(err)
		}
		for k, v := range dims {
			if root[k] != v {
				t.Errorf("document %d: dimension %s = %v, want %q", i, k, root[k], v)
			}
		}
		for k, v := range props {
			if fmt.Sprint(root[k]) != fmt.Sprint(v) {
				t.Errorf("document %d: property %s = %v, want %v", i, k, root[k], v)
			}
		}
		aws := root["_aws"].(map[string]any)
		for _, dir := range aws["CloudWatchMetrics"].([]any) {
			for _, def := range dir.(map[string]any)["Metrics"].([]any) {
				name := def.(map[string]any)["Name"].(string)
				switch v := root[name].(type) {
				case float64:
					out.values[name] = append(out.values[name], v)
				case []any:
					for _, e := range v {
						out.values[name] = append(out.values[name], e.(float64))
					}
				}
			}
		}
	}
	return out
}

func TestSplit(t *testing.T) {
	series := func(metrics, values int) []putAll {
		out := make([]putAll, metrics)
		for i := range out {
			out[i].name = "metric" + strconv.Itoa(i)
			for j := range values {
				out[i].values = append(out[i].values, float64(i*1000+j)+0.5)
			}
		}
		return out
	}
	cases := []struct {
		name     string
		max      ByteSize
		property string // size of a property in every document
		puts     []putAll
		wantDocs int // 0: more than one, not stated exactly
	}{
		{"1 metric 1 value", 0, "", series(1, 1), 1},
		{"100 metrics", 0, "", series(100, 1), 1},
		{"101 metrics", 0, "", series(101, 1), 2},
		{"200 metrics", 0, "", series(200, 1), 2},
		{"201 metrics", 0, "", series(201, 1), 3},
		{"100 values", 0, "", series(1, 100), 1},
		{"101 values", 0, "", series(1, 101), 2},
		{"250 values", 0, "", series(1, 250), 3},
		{"150 metrics of 150 values", 0, "", series(150, 150), 3},
		{"3 metrics of 1000 values", 0, "", series(3, 1000), 10},
		{"size: 4 KiB documents", 4 * KiB, "", series(20, 100), 0},
		{"size: big property leaves room for few values", 4 * KiB, strings.Repeat("p", 3300), series(3, 100), 0},
		{"size: 1 MiB documents hold the count limits", MaxDocumentSize, "", series(100, 100), 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, sink := newTestLogger(t, Config{MaxDocumentSize: c.max}, nil)
			dims := map[string]string{"Tier": "enterprise", "ServiceName": unknownService}
			must(t, l.PutDimensions(Dimension{"Tier", "enterprise"}))
			props := map[string]any{}
			if c.property != "" {
				props["blob"] = c.property
				must(t, l.SetProperty("blob", c.property))
			}
			total := 0
			for _, p := range c.puts {
				for _, v := range p.values {
					must(t, l.PutMetric(p.name, v, Milliseconds))
					total++
				}
			}
			must(t, l.FlushAt(context.Background(), testNow))
			max := c.max
			if max == 0 {
				max = DefaultMaxDocumentSize
			}
			got := checkDocuments(t, sink.docs, max, dims, props)
			for _, p := range c.puts {
				if !slices.Equal(got.values[p.name], p.values) {
					t.Errorf("metric %s: got %d values %v..., want %d", p.name, len(got.values[p.name]), head(got.values[p.name]), len(p.values))
				}
			}
			if c.wantDocs > 0 && got.docs != c.wantDocs || c.wantDocs == 0 && got.docs < 2 {
				t.Errorf("got %d documents, want %d (0: more than 1)", got.docs, c.wantDocs)
			}
			st := l.Stats()
			if st.Documents != uint64(got.docs) || st.Split != uint64(got.docs-1) || st.Sinks[0].Written != uint64(got.docs) || st.Sinks[0].Split != uint64(got.docs-1) {
				t.Errorf("stats %+v for %d documents", st, got.docs)
			}
			if st.Rejected != 0 || st.Dropped != 0 {
				t.Errorf("stats %+v: nothing should be rejected or dropped", st)
			}
		})
	}
}

func head(v []float64) []float64 { return v[:min(len(v), 3)] }

func TestRejected(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	cases := []struct {
		name  string
		call  func(l *Logger) error
		field string // InvalidError.Field; "" means the call succeeds
	}{
		{"NaN", func(l *Logger) error { return l.PutMetric("m", math.NaN(), Count) }, "metric value"},
		{"+Inf", func(l *Logger) error { return l.PutMetric("m", math.Inf(1), Count) }, "metric value"},
		{"-Inf", func(l *Logger) error { return l.PutMetric("m", math.Inf(-1), Count) }, "metric value"},
		{"too large", func(l *Logger) error { return l.PutMetric("m", 1.2e108, Count) }, "metric value"},
		{"too small", func(l *Logger) error { return l.PutMetric("m", 1e-109, Count) }, "metric value"},
		{"largest", func(l *Logger) error { return l.PutMetric("m", -1.174271e+108, Count) }, ""},
		{"empty name", func(l *Logger) error { return l.PutMetric("", 1, Count) }, "metric name"},
		{"blank name", func(l *Logger) error { return l.PutMetric("  ", 1, Count) }, "metric name"},
		{"name 1024", func(l *Logger) error { return l.PutMetric(long(1024), 1, Count) }, ""},
		{"name 1025", func(l *Logger) error { return l.PutMetric(long(1025), 1, Count) }, "metric name"},
		{"name _aws", func(l *Logger) error { return l.PutMetric("_aws", 1, Count) }, "metric name"},
		{"bad unit", func(l *Logger) error { return l.PutMetric("m", 1, "Requests") }, "metric unit"},
		{"bad resolution", func(l *Logger) error { return l.PutMetricWithResolution("m", 1, Count, 5) }, "storage resolution"},
		{"resolution changes", func(l *Logger) error {
			must(t, l.PutMetricWithResolution("m", 1, Count, High))
			return l.PutMetric("m", 1, Count)
		}, "storage resolution"},
		{"unit changes", func(l *Logger) error {
			must(t, l.PutMetric("m", 1, Count))
			return l.PutMetric("m", 1, Seconds)
		}, "metric unit"},
		{"metric named as dimension", func(l *Logger) error { return l.PutMetric("ServiceName", 1, Count) }, "metric name"},
		{"dimension named as metric", func(l *Logger) error {
			must(t, l.PutMetric("m", 1, Count))
			return l.PutDimensions(Dimension{"m", "v"})
		}, "dimension name"},
		{"27 keys and 3 defaults", func(l *Logger) error { return l.PutDimensions(dimensions(27)...) }, ""},
		{"28 keys and 3 defaults", func(l *Logger) error { return l.PutDimensions(dimensions(28)...) }, "dimension set"},
		{"31 keys", func(l *Logger) error { return l.PutDimensions(dimensions(31)...) }, "dimension set"},
		{"set 30 keys", func(l *Logger) error { return l.SetDimensions(dimensions(30)) }, ""},
		{"set 31 keys", func(l *Logger) error { return l.SetDimensions(dimensions(31)) }, "dimension set"},
		{"dimension value 1024", func(l *Logger) error { return l.PutDimensions(Dimension{"d", long(1024)}) }, ""},
		{"dimension value 1025", func(l *Logger) error { return l.PutDimensions(Dimension{"d", long(1025)}) }, "dimension value"},
		{"dimension value non-ASCII", func(l *Logger) error { return l.PutDimensions(Dimension{"d", "Zürich"}) }, "dimension value"},
		{"dimension value empty", func(l *Logger) error { return l.PutDimensions(Dimension{"d", ""}) }, "dimension value"},
		{"dimension key 250", func(l *Logger) error { return l.PutDimensions(Dimension{long(250), "v"}) }, ""},
		{"dimension key 251", func(l *Logger) error { return l.PutDimensions(Dimension{long(251), "v"}) }, "dimension name"},
		{"dimension key colon", func(l *Logger) error { return l.PutDimensions(Dimension{":d", "v"}) }, "dimension name"},
		{"namespace", func(l *Logger) error { return l.SetNamespace(":my app") }, "namespace"},
		{"namespace 257", func(l *Logger) error { return l.SetNamespace(long(257)) }, "namespace"},
		{"property _aws", func(l *Logger) error { return l.SetProperty("_aws", 1) }, "property name"},
		{"property NaN", func(l *Logger) error { return l.SetProperty("p", math.NaN()) }, "property value"},
		{"property raw", func(l *Logger) error { return l.SetProperty("p", json.RawMessage("{")) }, "property value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, _ := newTestLogger(t, Config{}, nil)
			before := l.Stats().Rejected
			err := c.call(l)
			var ie *InvalidError
			switch {
			case c.field == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.field == "":
				return
			case !errors.As(err, &ie):
				t.Fatalf("error %v is not an *InvalidError", err)
			case ie.Field != c.field || ie.Allowed == "":
				t.Errorf("error %v: field %q, want %q, with an allowed text", err, ie.Field, c.field)
			}
			if got := l.Stats().Rejected - before; got != 1 {
				t.Errorf("rejected counted %d times, want 1", got)
			}
		})
	}
}

func dimensions(n int) []Dimension {
	out := make([]Dimension, n)
	for i := range out {
		out[i] = Dimension{"d" + strconv.Itoa(i), "v"}
	}
	return out
}

func TestFlushRefuses(t *testing.T) {
	cases := []struct {
		name string
		ts   time.Time
		prop int // property size
		max  ByteSize
	}{
		{"timestamp too old", testNow.Add(-MaxTimestampPast - time.Second), 0, 0},
		{"timestamp too new", testNow.Add(MaxTimestampFuture + time.Second), 0, 0},
		{"property fills the document", time.Time{}, 5000, 4 * KiB},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, sink := newTestLogger(t, Config{MaxDocumentSize: c.max}, nil)
			l.SetTimestamp(c.ts)
			if c.prop > 0 {
				must(t, l.SetProperty("blob", strings.Repeat("b", c.prop)))
			}
			must(t, l.PutMetric("m", 1, Count))
			err := l.FlushAt(context.Background(), testNow)
			var ie *InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("flush error %v, want an *InvalidError", err)
			}
			if len(sink.docs) != 0 || l.Stats().Rejected != 1 {
				t.Errorf("%d documents written, stats %+v; want none written and 1 rejected", len(sink.docs), l.Stats())
			}
			// The buffer is empty afterwards: a second flush writes nothing.
			must(t, l.FlushAt(context.Background(), testNow))
		})
	}
}

func TestTimestampWindowEdges(t *testing.T) {
	for _, ts := range []time.Time{testNow.Add(-MaxTimestampPast), testNow.Add(MaxTimestampFuture)} {
		l, sink := newTestLogger(t, Config{}, nil)
		l.SetTimestamp(ts)
		must(t, l.PutMetric("m", 1, Count))
		must(t, l.FlushAt(context.Background(), testNow))
		if len(sink.docs) != 1 {
			t.Errorf("timestamp %s: %d documents, want 1", ts, len(sink.docs))
		}
	}
}

func TestBufferFullAndClosed(t *testing.T) {
	l, sink := newTestLogger(t, Config{MaxBufferedValues: 3}, nil)
	for i := range 3 {
		must(t, l.PutMetric("m", float64(i), Count))
	}
	if err := l.PutMetric("m", 4, Count); !errors.Is(err, ErrBufferFull) {
		t.Errorf("4th value: %v, want ErrBufferFull", err)
	}
	must(t, l.FlushAt(context.Background(), testNow))
	must(t, l.PutMetric("m", 5, Count)) // room again after the flush
	must(t, l.FlushAt(context.Background(), testNow))
	must(t, l.Close(context.Background()))
	if err := l.PutMetric("m", 6, Count); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
	got := checkDocuments(t, sink.docs, DefaultMaxDocumentSize, nil, nil)
	if want := []float64{0, 1, 2, 5}; !slices.Equal(got.values["m"], want) {
		t.Errorf("values %v, want %v", got.values["m"], want)
	}
	if st := l.Stats(); st.Dropped != 2 || st.Documents != 2 {
		t.Errorf("stats %+v, want 2 dropped and 2 documents", st)
	}
}

func TestSinkErrorsCounted(t *testing.T) {
	good, bad := &memSink{}, &memSink{fail: errors.New("disk full")}
	l, err := New(Config{}, nil, good, bad)
	must(t, err)
	for i := range 150 {
		must(t, l.PutMetric("m", float64(i), Count))
	}
	err = l.FlushAt(context.Background(), testNow)
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("flush error %v, want the sink's error", err)
	}
	st := l.Stats()
	want := []SinkReport{
		{Written: 2, Split: 1, Sink: SinkStats{Sink: "memory", Written: 2}},
		{Dropped: 2, Sink: SinkStats{Sink: "memory", Dropped: 2}},
	}
	if !slices.Equal(st.Sinks, want) {
		t.Errorf("sink reports %+v, want %+v", st.Sinks, want)
	}
}

func TestPropertiesAndDimensionsPersist(t *testing.T) {
	l, sink := newTestLogger(t, Config{}, nil)
	must(t, l.PutDimensions(Dimension{"Tier", "free"}))
	must(t, l.SetProperty("p", "x"))
	must(t, l.PutMetric("a", 1, Count))
	must(t, l.FlushAt(context.Background(), testNow))
	must(t, l.FlushAt(context.Background(), testNow)) // nothing buffered: no document
	must(t, l.PutMetric("b", 2, Count))
	must(t, l.FlushAt(context.Background(), testNow))
	got := checkDocuments(t, sink.docs, DefaultMaxDocumentSize, map[string]string{"Tier": "free"}, map[string]any{"p": "x"})
	if got.docs != 2 || !slices.Equal(got.values["a"], []float64{1}) || !slices.Equal(got.values["b"], []float64{2}) {
		t.Errorf("got %+v", got)
	}
	l.ResetDimensions(false)
	must(t, l.PutMetric("Tier", 3, Count)) // no longer a dimension
}

func TestConcurrentUse(t *testing.T) {
	l, sink := newTestLogger(t, Config{}, nil)
	const workers, each = 4, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := "w" + strconv.Itoa(w)
			for i := range each {
				if err := l.PutMetric(name, float64(i), Count); err != nil {
					t.Error(err)
					return
				}
				if i%100 == 0 {
					if err := l.FlushAt(context.Background(), testNow); err != nil {
						t.Error(err)
					}
					_ = l.Stats()
				}
			}
		}()
	}
	wg.Wait()
	must(t, l.FlushAt(context.Background(), testNow))
	got := checkDocuments(t, sink.docs, DefaultMaxDocumentSize, nil, nil)
	for w := range workers {
		if n := len(got.values["w"+strconv.Itoa(w)]); n != each {
			t.Errorf("worker %d: %d values, want %d", w, n, each)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		cfg  Config
		want string // in the error; "" means valid
	}{
		{Config{}, ""},
		{Config{Namespace: "a\tb"}, `namespace: "a\tb" is not allowed`},
		{Config{Namespace: "My App"}, ""},
		{Config{Environment: "k8s"}, `environment: "k8s" is not allowed; use one of local, lambda, ecs, ec2`},
		{Config{MaxDocumentSize: 2 * MiB}, "max_document_size: 2097152 is not allowed"},
		{Config{MaxDocumentSize: 100}, "max_document_size: 100 is not allowed"},
		{Config{MaxBufferedValues: -1}, "max_buffered_values: -1 is not allowed"},
		{Config{ServiceName: "Zürich"}, `service_name: "Zürich" is not allowed`},
	}
	for _, c := range cases {
		c.cfg.SetDefaults()
		err := c.cfg.Validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
}

func TestResolveEnvironment(t *testing.T) {
	env := map[string]string{"AWS_LAMBDA_FUNCTION_NAME": "fn", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "128"}
	getenv := func(k string) string { return env[k] }
	cases := []struct {
		cfg  Config
		want Environment
	}{
		{Config{}, Environment{Kind: Local, ServiceName: "Unknown", ServiceType: "Local", LogGroup: "Unknown-metrics"}},
		{Config{Environment: Lambda}, Environment{Kind: Lambda, ServiceName: "fn", ServiceType: "AWS::Lambda::Function", LogGroup: "fn",
			Properties: []Dimension{{"memorySize", "128"}}}},
		{Config{Environment: ECS, ServiceName: "svc"}, Environment{Kind: ECS, ServiceName: "svc", ServiceType: "AWS::ECS::Container", LogGroup: "svc-metrics"}},
		{Config{Environment: EC2, ServiceType: "T", LogGroup: "lg"}, Environment{Kind: EC2, ServiceName: "Unknown", ServiceType: "T", LogGroup: "lg"}},
	}
	for _, c := range cases {
		got := ResolveEnvironment(c.cfg, getenv)
		if got.String() != c.want.String() || !slices.Equal(got.Properties, c.want.Properties) {
			t.Errorf("ResolveEnvironment(%+v) = %+v, want %+v", c.cfg, got, c.want)
		}
	}
}
