package emf

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/smithy-go/encoding/cbor"
)

// metricDataServer decodes PutMetricData in Smithy RPC v2 CBOR, checks each
// call against the API's limits, and sums every value it receives.
type metricDataServer struct {
	t     *testing.T
	fail  func(n int) (status int, errType string)
	block func(r *http.Request)
	// lose, as logsServer's: the answer to accepted call n is lost.
	lose func(n int) bool

	mu     sync.Mutex
	calls  int
	datums []int    // datums per accepted call
	series []string // every datum received: its key, values and counts
	totals map[string]map[float64]float64
}

func (s *metricDataServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := s.t
	if r.Method != http.MethodPost || r.URL.Path != "/service/GraniteServiceVersion20100801/operation/PutMetricData" {
		t.Errorf("%s %s, want POST of PutMetricData", r.Method, r.URL.Path)
	}
	if r.Header.Get("Smithy-Protocol") != "rpc-v2-cbor" || r.Header.Get("Content-Type") != "application/cbor" {
		t.Errorf("smithy-protocol %q content-type %q", r.Header.Get("Smithy-Protocol"), r.Header.Get("Content-Type"))
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			t.Errorf("gunzip: %v", err)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		t.Errorf("read body: %v", err)
	}
	// The body is read first, so that the server sees the client give up
	// on a blocked call (the request's context ends).
	if s.block != nil {
		s.block(r)
		if r.Context().Err() != nil {
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	w.Header().Set("Smithy-Protocol", "rpc-v2-cbor")
	w.Header().Set("Content-Type", "application/cbor")
	if s.fail != nil {
		if status, typ := s.fail(s.calls); status != 0 {
			if typ == "ThrottlingException" {
				w.Header().Set("X-Amzn-Query-Error", "Throttling;Sender")
			}
			w.WriteHeader(status)
			w.Write(cbor.Encode(cbor.Map{"__type": cbor.String("com.amazon.coral.availability#" + typ), "message": cbor.String("injected")}))
			return
		}
	}
	if len(raw) > 1_048_576 {
		t.Errorf("request of %d bytes, want at most 1 MiB", len(raw))
	}
	v, err := cbor.Decode(raw)
	if err != nil {
		t.Errorf("decode CBOR: %v", err)
		return
	}
	in := v.(cbor.Map)
	ns := string(in["Namespace"].(cbor.String))
	list := in["MetricData"].(cbor.List)
	if len(list) == 0 || len(list) > 1000 {
		t.Errorf("%d datums, want 1 to 1000", len(list))
	}
	size := metricDataEnvelopeSize(ns)
	for _, item := range list {
		d := item.(cbor.Map)
		var md types.MetricDatum
		name := string(d["MetricName"].(cbor.String))
		md.MetricName = &name
		var dims []string
		if _, ok := d["Dimensions"]; ok {
			md.Dimensions = []types.Dimension{}
		}
		for _, x := range d["Dimensions"].(cbor.List) {
			dm := x.(cbor.Map)
			n, v := string(dm["Name"].(cbor.String)), string(dm["Value"].(cbor.String))
			md.Dimensions = append(md.Dimensions, types.Dimension{Name: aws.String(n), Value: aws.String(v)})
			dims = append(dims, n+"="+v)
		}
		ts, err := cbor.AsTime(d["Timestamp"])
		if err != nil {
			t.Errorf("timestamp: %v", err)
		}
		md.Timestamp = &ts
		unit := ""
		if u, ok := d["Unit"].(cbor.String); ok {
			unit = string(u)
			md.Unit = types.StandardUnit(unit)
		}
		res := int32(0)
		if x, ok := d["StorageResolution"].(cbor.Uint); ok {
			res = int32(x)
			md.StorageResolution = &res
		}
		values, counts := d["Values"].(cbor.List), d["Counts"].(cbor.List)
		if len(values) != len(counts) || len(values) == 0 || len(values) > 150 {
			t.Errorf("%d values and %d counts, want as many, 1 to 150", len(values), len(counts))
		}
		key := fmt.Sprintf("%s|%s|%s|%s|%d|%d", ns, name, strings.Join(dims, ","), unit, res, ts.UnixMilli())
		if s.totals[key] == nil {
			s.totals[key] = make(map[float64]float64)
		}
		vc := ""
		seen := make(map[float64]bool)
		for i := range values {
			x, _ := cbor.AsFloat64(values[i])
			c, _ := cbor.AsFloat64(counts[i])
			if seen[x] {
				t.Errorf("value %v twice in one datum", x)
			}
			seen[x] = true
			s.totals[key][x] += c
			md.Values = append(md.Values, x)
			md.Counts = append(md.Counts, c)
			vc += fmt.Sprintf(" %v×%v", x, c)
		}
		s.series = append(s.series, key+vc)
		size += metricDataDatumSize(&md)
	}
	if size != len(raw) {
		t.Errorf("request of %d bytes, the sink reckoned %d", len(raw), size)
	}
	s.datums = append(s.datums, len(list))
	if s.lose != nil && s.lose(s.calls) {
		s.mu.Unlock()
		<-r.Context().Done()
		s.mu.Lock()
	}
}

// metricDataDoc returns document i: a latency array with repeated values
// and a request count, by tier and route.
func metricDataTestDoc(i, routes, nvalues int, ts int64) ([]byte, map[string]map[float64]float64) {
	tier := []string{"free", "pro"}[i%2]
	route := fmt.Sprintf("/api/v%d", i%routes)
	want := make(map[string]map[float64]float64)
	add := func(name, dims, unit string, res int, v float64) {
		k := fmt.Sprintf("ratewarden|%s|%s|%s|%d|%d", name, dims, unit, res, ts)
		if want[k] == nil {
			want[k] = make(map[float64]float64)
		}
		want[k][v]++
	}
	var lat []string
	for j := range nvalues {
		v := float64((i*31 + j/2) % 400) // each value twice
		lat = append(lat, fmt.Sprint(v))
		add("Latency", "tier="+tier+",route="+route, "Milliseconds", 1, v)
		add("Latency", "tier="+tier, "Milliseconds", 1, v)
	}
	add("Requests", "tier="+tier+",route="+route, "Count", 0, 1)
	add("Requests", "tier="+tier, "Count", 0, 1)
	doc := fmt.Appendf(nil, `{"_aws":{"Timestamp":%d,"CloudWatchMetrics":[{"Namespace":"ratewarden","Dimensions":[["tier","route"],["tier"]],`+
		`"Metrics":[{"Name":"Latency","Unit":"Milliseconds","StorageResolution":1},{"Name":"Requests","Unit":"Count"}]}]},`+
		`"tier":%q,"route":%q,"Latency":[%s],"Requests":1}`, ts, tier, route, strings.Join(lat, ","))
	return doc, want
}

func mergeTotals(dst, src map[string]map[float64]float64) {
	for k, m := range src {
		if dst[k] == nil {
			dst[k] = make(map[float64]float64)
		}
		for v, c := range m {
			dst[k][v] += c
		}
	}
}

func newMetricDataTest(t *testing.T, srv *metricDataServer, edit func(*MetricDataOptions)) *MetricDataSink {
	t.Helper()
	srv.t = t
	srv.totals = make(map[string]map[float64]float64)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	opts := MetricDataOptions{BufferBytes: 64 << 20, Throttle: testThrottle(newThrottleClock())}
	if edit != nil {
		edit(&opts)
	}
	s, err := NewMetricDataSink(cloudwatch.NewFromConfig(testAWSConfig(hs.URL)), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func checkTotals(t *testing.T, got, want map[string]map[float64]float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d metric series received, want %d", len(got), len(want))
	}
	for k, w := range want {
		if !maps.Equal(got[k], w) {
			t.Errorf("series %s: received %d distinct values, want %d (or counts differ)", k, len(got[k]), len(w))
		}
	}
}

func TestMetricDataLimits(t *testing.T) {
	f := func(name string, ndocs, routes, nvalues int, want func(t *testing.T, datums []int)) {
		t.Run(name, func(t *testing.T) {
			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			srv := &metricDataServer{block: func(*http.Request) { once.Do(func() { close(entered); <-release }) }}
			s := newMetricDataTest(t, srv, nil)
			ctx := testContext(t)
			ts := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
			wantTotals := make(map[string]map[float64]float64)
			for i := range ndocs {
				doc, w := metricDataTestDoc(i, routes, nvalues, ts)
				mergeTotals(wantTotals, w)
				if err := s.Write(ctx, doc); err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					<-entered // the first call waits until every document is buffered
				}
			}
			close(release)
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			checkTotals(t, srv.totals, wantTotals)
			checkStats(t, s.Stats(), uint64(ndocs), 0, 0, 0)
			want(t, srv.datums[1:])
		})
	}
	// 1500 routes by 2 tiers: 3002 small datums, in calls of 1000.
	f("1000 datums", 1001, 1500, 0, func(t *testing.T, d []int) {
		if len(d) < 2 || d[0] != 1000 {
			t.Errorf("datums per call %v, want full calls of 1000", d)
		}
	})
	// Up to 300 distinct values per route series, 150 per datum: the
	// request size, not the datum count, cuts the calls.
	f("1 MB and 150 values", 401, 200, 300, func(t *testing.T, d []int) {
		if len(d) < 2 || d[0] >= 1000 {
			t.Errorf("datums per call %v, want calls cut by size", d)
		}
	})
}

func TestMetricDataMerge(t *testing.T) {
	// Three documents of one series: values merge into Values and Counts.
	srv := &metricDataServer{}
	s := newMetricDataTest(t, srv, nil)
	ctx := testContext(t)
	for _, vals := range []string{"[1,1,2]", "[2,3]", "2"} {
		s.Write(ctx, fmt.Appendf(nil, `{"_aws":{"Timestamp":1700000000000,"CloudWatchMetrics":[{"Namespace":"ns","Dimensions":[[]],"Metrics":[{"Name":"m"}]}]},"m":%s}`, vals))
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got := srv.totals["ns|m|||0|1700000000000"]
	if want := map[float64]float64{1: 2, 2: 3, 3: 1}; !maps.Equal(got, want) {
		t.Errorf("received %v, want %v", got, want)
	}
	checkStats(t, s.Stats(), 3, 0, 0, 0)
}

func TestMetricDataThrottled(t *testing.T) {
	f := func(name string, fail func(n int) (int, string), edit func(*Throttle), check func(t *testing.T, st SinkStats, srv *metricDataServer, want map[string]map[float64]float64)) {
		t.Run(name, func(t *testing.T) {
			srv := &metricDataServer{fail: fail}
			s := newMetricDataTest(t, srv, func(o *MetricDataOptions) { edit(&o.Throttle) })
			ctx := testContext(t)
			want := make(map[string]map[float64]float64)
			for i := range 200 {
				doc, w := metricDataTestDoc(i, 10, 4, 1_700_000_000_000)
				mergeTotals(want, w)
				s.Write(ctx, doc)
			}
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			check(t, s.Stats(), srv, want)
		})
	}
	f("throttled then ok", func(n int) (int, string) {
		switch n {
		case 1, 2:
			return 400, "ThrottlingException"
		case 3:
			return 500, "InternalServiceFault"
		case 4:
			return 503, "ServiceUnavailable"
		}
		return 0, ""
	}, func(*Throttle) {}, func(t *testing.T, st SinkStats, srv *metricDataServer, want map[string]map[float64]float64) {
		checkTotals(t, srv.totals, want)
		checkStats(t, st, 200, 0, 4, 4)
	})
	f("retries exhausted", func(int) (int, string) { return 400, "ThrottlingException" },
		func(c *Throttle) { c.MaxRetries = 3 }, func(t *testing.T, st SinkStats, srv *metricDataServer, want map[string]map[float64]float64) {
			if srv.calls%4 != 0 {
				t.Errorf("%d calls, want a multiple of 4", srv.calls)
			}
			checkTotals(t, srv.totals, nil)
			checkStats(t, st, 0, 200, uint64(srv.calls/4*3), uint64(srv.calls))
		})
	f("refused", func(int) (int, string) { return 400, "InvalidParameterValue" },
		func(*Throttle) {}, func(t *testing.T, st SinkStats, srv *metricDataServer, want map[string]map[float64]float64) {
			checkStats(t, st, 0, 200, 0, uint64(srv.calls))
		})
}

func TestMetricDataUnreadable(t *testing.T) {
	srv := &metricDataServer{}
	s := newMetricDataTest(t, srv, nil)
	ctx := testContext(t)
	good := []byte(`{"_aws":{"Timestamp":1700000000000,"CloudWatchMetrics":[{"Namespace":"ns","Dimensions":[["d"]],"Metrics":[{"Name":"m"}]}]},"d":"x","m":1}`)
	bad := bytes.Replace(good, []byte(`"d":"x"`), []byte(`"d":7`), 1)
	s.Write(ctx, good)
	s.Write(ctx, bad)
	s.Write(ctx, []byte(`{"_aws":`))
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkTotals(t, srv.totals, map[string]map[float64]float64{"ns|m|d=x||0|1700000000000": {1: 1}})
	checkStats(t, s.Stats(), 1, 2, 0, 2)
}

// BenchmarkMetricDataConvert measures turning a batch of 1000 documents
// into PutMetricData calls.
func BenchmarkMetricDataConvert(b *testing.B) {
	docs := make([]string, 1000)
	for i := range docs {
		doc, _ := metricDataTestDoc(i, 50, 10, 1_700_000_000_000)
		docs[i] = string(doc)
	}
	now := time.Now()
	var aggs metricDataAggs
	b.ReportAllocs()
	for b.Loop() {
		aggs.reset()
		for i, d := range docs {
			if err := aggs.addDoc(d, i, now); err != nil {
				b.Fatal(err)
			}
		}
		metricDataCalls(aggs.order, len(docs))
	}
}
