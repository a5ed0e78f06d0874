package emf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"

	"github.com/ratewarden/ratewarden/internal/sdkhttp"
)

// logsServer decodes the CloudWatch Logs wire protocol (awsJson1.1) and
// checks every PutLogEvents call against the API's limits.
type logsServer struct {
	t *testing.T
	// fail, if set, answers call n (from 1, PutLogEvents only) with a
	// status and error type instead of accepting it.
	fail func(n int) (status int, errType string)
	// needCreate makes PutLogEvents fail with ResourceNotFoundException
	// until the group and stream are created.
	needCreate bool
	clock      *throttleClock
	// block, if set, runs before a PutLogEvents call is handled.
	block func(r *http.Request)
	// reject, if set, returns the rejectedLogEventsInfo of an accepted
	// call of the documents ids, in order ("" for none).
	reject func(ids []string) string
	// lose, if set, reports whether the answer to accepted call n is
	// lost: the call is recorded, then hangs unanswered until its client
	// gives up on it.
	lose func(n int) bool

	mu       sync.Mutex
	calls    int // PutLogEvents requests
	created  []string
	received map[string]int // event message id -> times received
	messages []string       // every event message, in order of arrival
	events   int
	at       []time.Time // fake time of each PutLogEvents request
	batches  []logsBatch // accepted PutLogEvents calls
}

// logsBatch describes one accepted PutLogEvents call.
type logsBatch struct {
	events, bytes int
	span          time.Duration
}

func (s *logsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := s.t
	body, err := io.ReadAll(r.Body)
	if err != nil {
		t.Errorf("read body: %v", err)
	}
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-amz-json-1.1" {
		t.Errorf("%s with content type %q, want POST application/x-amz-json-1.1", r.Method, r.Header.Get("Content-Type"))
	}
	target := r.Header.Get("X-Amz-Target")
	if target == "Logs_20140328.PutLogEvents" && s.block != nil {
		s.block(r)
		if r.Context().Err() != nil {
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	reply := func(status int, body string) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
	switch target {
	case "Logs_20140328.CreateLogGroup", "Logs_20140328.CreateLogStream":
		s.created = append(s.created, strings.TrimPrefix(target, "Logs_20140328."))
		reply(200, "{}")
		return
	case "Logs_20140328.PutLogEvents":
	default:
		t.Errorf("X-Amz-Target %q", target)
		reply(400, `{"__type":"UnknownOperationException"}`)
		return
	}
	s.calls++
	if s.clock != nil {
		s.at = append(s.at, s.clock.Now())
	}
	if got := r.Header.Get("X-Amzn-Logs-Format"); got != "json/emf" {
		t.Errorf("x-amzn-logs-format %q, want json/emf", got)
	}
	if s.needCreate && len(s.created) < 2 {
		reply(400, `{"__type":"ResourceNotFoundException","message":"The specified log group does not exist."}`)
		return
	}
	if s.fail != nil {
		if status, typ := s.fail(s.calls); status != 0 {
			reply(status, fmt.Sprintf(`{"__type":%q,"message":"injected"}`, typ))
			return
		}
	}
	var in struct {
		LogGroupName, LogStreamName string
		LogEvents                   []struct {
			Timestamp int64  `json:"timestamp"`
			Message   string `json:"message"`
		} `json:"logEvents"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		t.Errorf("decode PutLogEvents: %v", err)
	}
	if in.LogGroupName != "emf" || in.LogStreamName != "edge-1" {
		t.Errorf("group %q stream %q", in.LogGroupName, in.LogStreamName)
	}
	n, size := len(in.LogEvents), 0
	var ids []string
	if n == 0 || n > 10_000 {
		t.Errorf("%d events in a call, want 1 to 10000", n)
	}
	for i, e := range in.LogEvents {
		size += len(e.Message) + 26
		if i > 0 && e.Timestamp < in.LogEvents[i-1].Timestamp {
			t.Errorf("event %d at %d after %d: out of order", i, e.Timestamp, in.LogEvents[i-1].Timestamp)
		}
		var doc struct {
			ID  string                    `json:"id"`
			AWS struct{ Timestamp int64 } `json:"_aws"`
		}
		if err := json.Unmarshal([]byte(e.Message), &doc); err != nil {
			t.Errorf("event %d: %v", i, err)
		}
		if doc.AWS.Timestamp != e.Timestamp {
			t.Errorf("event %d stamped %d, document says %d", i, e.Timestamp, doc.AWS.Timestamp)
		}
		s.received[doc.ID]++
		ids = append(ids, doc.ID)
		s.messages = append(s.messages, e.Message)
		s.events++
	}
	if size > 1_048_576 {
		t.Errorf("batch of %d bytes, want at most 1048576", size)
	}
	if n > 0 && in.LogEvents[n-1].Timestamp-in.LogEvents[0].Timestamp > 24*3600*1000 {
		t.Errorf("batch spans %d ms, want at most 24h", in.LogEvents[n-1].Timestamp-in.LogEvents[0].Timestamp)
	}
	if n > 0 {
		span := time.Duration(in.LogEvents[n-1].Timestamp-in.LogEvents[0].Timestamp) * time.Millisecond
		s.batches = append(s.batches, logsBatch{events: n, bytes: size, span: span})
	}
	if s.lose != nil && s.lose(s.calls) {
		s.mu.Unlock()
		<-r.Context().Done()
		s.mu.Lock()
		return
	}
	if s.reject != nil {
		if info := s.reject(ids); info != "" {
			reply(200, `{"nextSequenceToken":"1","rejectedLogEventsInfo":`+info+`}`)
			return
		}
	}
	reply(200, `{"nextSequenceToken":"1"}`)
}

// check asserts that every id in want arrived exactly once and nothing
// else arrived.
func (s *logsServer) check(want []string) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range want {
		if s.received[id] != 1 {
			s.t.Errorf("document %s received %d times, want 1", id, s.received[id])
		}
	}
	if s.events != len(want) {
		s.t.Errorf("%d events received, want %d", s.events, len(want))
	}
}

// testAWSConfig is the SDK configuration the AWS sink tests use: a fixed
// region, static credentials, the test server as endpoint, and the HTTP
// client the binary's configuration has (assemble.AWS).
func testAWSConfig(url string) aws.Config {
	return aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(url),
		HTTPClient:   sdkhttp.New(),
	}
}

// newLogsTest starts a logsServer and a LogsSink writing to it.
func newLogsTest(t *testing.T, srv *logsServer, edit func(*LogsOptions)) *LogsSink {
	t.Helper()
	srv.t = t
	srv.received = make(map[string]int)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	api := cloudwatchlogs.NewFromConfig(testAWSConfig(hs.URL))
	if srv.clock == nil {
		srv.clock = newThrottleClock()
	}
	opts := LogsOptions{LogGroup: "emf", LogStream: "edge-1", Throttle: testThrottle(srv.clock)}
	if edit != nil {
		edit(&opts)
	}
	s, err := NewLogsSink(api, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// logsDoc returns an EMF document with id and timestamp ts (ms), padded
// with pad bytes of property.
func logsDoc(id string, ts int64, pad int) []byte {
	if pad < 0 { // as small as the server accepts
		return fmt.Appendf(nil, `{"_aws":{"Timestamp":%d},"id":%q}`, ts, id)
	}
	return fmt.Appendf(nil, `{"_aws":{"Timestamp":%d,"CloudWatchMetrics":[{"Namespace":"ratewarden","Dimensions":[["tier"]],"Metrics":[{"Name":"Requests","Unit":"Count"}]}]},"tier":"free","Requests":1,"id":%q,"pad":%q}`,
		ts, id, strings.Repeat("x", pad))
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func checkStats(t *testing.T, got SinkStats, written, dropped, retries, errs uint64) {
	t.Helper()
	if got.Written != written || got.Dropped != dropped || got.Buffered != 0 || got.Retries != retries || got.Errors != errs {
		t.Errorf("stats %+v, want written %d dropped %d buffered 0 retries %d errors %d", got, written, dropped, retries, errs)
	}
}

func TestLogsLimits(t *testing.T) {
	f := func(name string, n, pad int, stamp func(i int) int64, want func(t *testing.T, batches []logsBatch)) {
		t.Run(name, func(t *testing.T) {
			// The first call, of document 0 alone, waits until every other
			// document is buffered, so that they are batched together.
			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			srv := &logsServer{block: func(*http.Request) { once.Do(func() { close(entered); <-release }) }}
			s := newLogsTest(t, srv, func(o *LogsOptions) { o.BufferBytes = 64 << 20 })
			ctx := testContext(t)
			var ids []string
			for i := range n {
				id := fmt.Sprint(i)
				ids = append(ids, id)
				if err := s.Write(ctx, logsDoc(id, stamp(i), pad)); err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					<-entered
				}
			}
			close(release)
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			srv.check(ids)
			checkStats(t, s.Stats(), uint64(n), 0, 0, 0)
			want(t, srv.batches[1:])
		})
	}
	base := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	hour := time.Hour.Milliseconds()
	f("count limit", 12_001, -1, func(i int) int64 { return base + int64(i%7) }, func(t *testing.T, b []logsBatch) {
		if len(b) != 2 || b[0].events != 10_000 || b[1].events != 2000 {
			t.Errorf("batches %+v, want 10000 and 2000 events", b)
		}
	})
	doc := len(logsDoc("1", base, 100_000)) + 26
	f("byte limit", 26, 100_000, func(i int) int64 { return base }, func(t *testing.T, b []logsBatch) {
		per := 1_048_576 / doc
		if len(b) != 3 || b[0].events != per || b[1].events != per || b[2].events != 25-2*per {
			t.Errorf("batches %+v, want %d, %d and %d events", b, per, per, 25-2*per)
		}
	})
	f("out of order", 3001, 10, func(i int) int64 { return base + int64((i*7919)%3000) }, func(t *testing.T, b []logsBatch) {
		if len(b) != 1 || b[0].events != 3000 {
			t.Errorf("batches %+v, want one of 3000 events", b)
		}
	})
	// Stamps over 49 hours: hours 0 to 24 in one batch, 25 to 49 in another.
	f("24h span", 201, 10, func(i int) int64 { return base + int64(i%50)*hour }, func(t *testing.T, b []logsBatch) {
		if len(b) != 2 || b[0].span != 24*time.Hour || b[1].span != 24*time.Hour {
			t.Errorf("batches %+v, want 2 spanning 24h each", b)
		}
	})
}

func TestLogsThrottledAndFailing(t *testing.T) {
	f := func(name string, fail func(n int) (int, string), edit func(*Throttle), n int, check func(t *testing.T, st SinkStats, srv *logsServer)) {
		t.Run(name, func(t *testing.T) {
			srv := &logsServer{fail: fail}
			s := newLogsTest(t, srv, func(o *LogsOptions) { edit(&o.Throttle) })
			ctx := testContext(t)
			var ids []string
			for i := range n {
				id := fmt.Sprint(i)
				ids = append(ids, id)
				s.Write(ctx, logsDoc(id, 1_700_000_000_000, 10))
			}
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			check(t, s.Stats(), srv)
		})
	}
	// Three throttled calls and two server errors, then success: every
	// document arrives once, each failure is one error and one retry.
	f("throttled then ok", func(n int) (int, string) {
		switch {
		case n <= 3:
			return 400, "ThrottlingException"
		case n <= 5:
			return 503, "ServiceUnavailableException"
		}
		return 0, ""
	}, func(*Throttle) {}, 500, func(t *testing.T, st SinkStats, srv *logsServer) {
		ids := make([]string, 500)
		for i := range ids {
			ids[i] = fmt.Sprint(i)
		}
		srv.check(ids)
		checkStats(t, st, 500, 0, 5, 5)
	})
	// Always failing with 500: each call is tried 1+2 times, then its
	// documents are dropped.
	f("retries exhausted", func(int) (int, string) { return 500, "InternalFailure" },
		func(c *Throttle) { c.MaxRetries = 2 }, 300, func(t *testing.T, st SinkStats, srv *logsServer) {
			srv.mu.Lock()
			calls := srv.calls
			srv.mu.Unlock()
			if calls%3 != 0 {
				t.Errorf("%d calls, want a multiple of 3", calls)
			}
			checkStats(t, st, 0, 300, uint64(calls/3*2), uint64(calls))
			srv.check(nil)
		})
	// A refused call (400, not throttling) is not retried.
	f("refused", func(int) (int, string) { return 400, "InvalidParameterException" },
		func(*Throttle) {}, 10, func(t *testing.T, st SinkStats, srv *logsServer) {
			srv.mu.Lock()
			calls := srv.calls
			srv.mu.Unlock()
			checkStats(t, st, 0, 10, 0, uint64(calls))
		})
}

func TestLogsBreaker(t *testing.T) {
	clock := newThrottleClock()
	srv := &logsServer{clock: clock, fail: func(n int) (int, string) {
		if n <= 6 {
			return 400, "ThrottlingException"
		}
		return 0, ""
	}}
	s := newLogsTest(t, srv, func(o *LogsOptions) { o.Throttle.BreakerFailures = 3 })
	ctx := testContext(t)
	if err := s.Write(ctx, logsDoc("a", 1_700_000_000_000, 0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	srv.check([]string{"a"})
	checkStats(t, s.Stats(), 1, 0, 6, 6)
	// After the third failure the breaker is open: each later call comes
	// a cooldown after the one before (backoff is at most 2s).
	for i := 3; i < len(srv.at); i++ {
		if gap := srv.at[i].Sub(srv.at[i-1]); gap < time.Minute {
			t.Errorf("call %d came %v after call %d, want at least the 1m cooldown", i+1, gap, i)
		}
	}
}

func TestLogsBreakerDrops(t *testing.T) {
	clock := newThrottleClock()
	failing := true
	var mu sync.Mutex
	srv := &logsServer{clock: clock, fail: func(int) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		if failing {
			return 503, "ServiceUnavailableException"
		}
		return 0, ""
	}}
	s := newLogsTest(t, srv, func(o *LogsOptions) {
		o.Throttle.BreakerFailures, o.Throttle.MaxRetries, o.Throttle.DropWhenOpen = 1, -1, true
	})
	ctx := testContext(t)
	s.Write(ctx, logsDoc("a", 1_700_000_000_000, 0))
	s.Flush(ctx)
	if err := s.Write(ctx, logsDoc("b", 1_700_000_000_000, 0)); !errors.Is(err, ErrCircuitOpen) {
		t.Errorf("write while open: %v, want ErrCircuitOpen", err)
	}
	mu.Lock()
	failing = false
	mu.Unlock()
	clock.Advance(time.Minute) // the cooldown ends; the next call is the probe
	if err := s.Write(ctx, logsDoc("c", 1_700_000_000_000, 0)); err != nil {
		t.Fatal(err)
	}
	s.Flush(ctx)
	srv.check([]string{"c"})
	// Errors: the failed call, and document b refused while open.
	checkStats(t, s.Stats(), 1, 2, 0, 2)
}

// TestLogsBreakerDropsBuffered opens the breaker while documents wait in
// the buffer: with DropWhenOpen the sender drops them, one error each.
func TestLogsBreakerDropsBuffered(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	srv := &logsServer{
		block: func(*http.Request) { once.Do(func() { close(entered); <-release }) },
		fail:  func(int) (int, string) { return 503, "ServiceUnavailableException" },
	}
	s := newLogsTest(t, srv, func(o *LogsOptions) {
		o.Throttle.BreakerFailures, o.Throttle.MaxRetries, o.Throttle.DropWhenOpen = 1, -1, true
	})
	ctx := testContext(t)
	must(t, s.Write(ctx, logsDoc("a", 1_700_000_000_000, 0)))
	<-entered // the call carrying a waits while b, c and d are buffered
	for _, id := range []string{"b", "c", "d"} {
		must(t, s.Write(ctx, logsDoc(id, 1_700_000_000_000, 0)))
	}
	close(release)
	must(t, s.Flush(ctx))
	srv.check(nil)
	// Errors: the failed call, then b, c and d dropped by the open breaker.
	checkStats(t, s.Stats(), 0, 4, 0, 4)
}

// TestLogsRefusedDocuments: a document too big for an event and events
// CloudWatch rejects are each dropped and counted as one error.
func TestLogsRefusedDocuments(t *testing.T) {
	// Documents 0 and 1 are too old, 4 and 5 too new, in whatever calls
	// the sink sends them: their indices in each call.
	srv := &logsServer{reject: func(ids []string) string {
		var info []string
		if i := slices.IndexFunc(ids, func(id string) bool { return id > "1" }); i != 0 {
			if i < 0 {
				i = len(ids)
			}
			info = append(info, fmt.Sprintf(`"tooOldLogEventEndIndex":%d`, i-1))
		}
		if i := slices.IndexFunc(ids, func(id string) bool { return id >= "4" }); i >= 0 {
			info = append(info, fmt.Sprintf(`"tooNewLogEventStartIndex":%d`, i))
		}
		if info == nil {
			return ""
		}
		return "{" + strings.Join(info, ",") + "}"
	}}
	s := newLogsTest(t, srv, nil)
	ctx := testContext(t)
	if err := s.Write(ctx, logsDoc("big", 1_700_000_000_000, 1<<20)); err == nil || !strings.Contains(err.Error(), "exceeds the event limit") {
		t.Errorf("write of an oversized document: %v, want an event limit error", err)
	}
	for i := range 6 {
		must(t, s.Write(ctx, logsDoc(fmt.Sprint(i), 1_700_000_000_000+int64(i), 0)))
	}
	must(t, s.Close(ctx))
	srv.check([]string{"0", "1", "2", "3", "4", "5"}) // the server stores all; it reports 0, 1, 4 and 5 rejected
	// Written: 2 and 3. Dropped and errors: big, 0, 1, 4, 5.
	checkStats(t, s.Stats(), 2, 5, 0, 5)
}

func TestLogsCreate(t *testing.T) {
	srv := &logsServer{needCreate: true}
	s := newLogsTest(t, srv, func(o *LogsOptions) { o.Create = true })
	ctx := testContext(t)
	s.Write(ctx, logsDoc("a", 1_700_000_000_000, 0))
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	srv.check([]string{"a"})
	if want := []string{"CreateLogGroup", "CreateLogStream"}; strings.Join(srv.created, ",") != strings.Join(want, ",") {
		t.Errorf("created %v, want %v", srv.created, want)
	}
	checkStats(t, s.Stats(), 1, 0, 1, 1)
}

func TestLogsTimeoutRetried(t *testing.T) {
	var once sync.Once
	// The first call hangs until the client's 50ms deadline gives up on it.
	srv := &logsServer{block: func(r *http.Request) {
		once.Do(func() { <-r.Context().Done() })
	}}
	s := newLogsTest(t, srv, func(o *LogsOptions) { o.Throttle.Timeout = 50 * time.Millisecond })
	ctx := testContext(t)
	s.Write(ctx, logsDoc("a", 1_700_000_000_000, 0))
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	srv.check([]string{"a"})
	checkStats(t, s.Stats(), 1, 0, 1, 1)
}

func TestLogsBufferFull(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	srv := &logsServer{block: func(*http.Request) {
		once.Do(func() { close(entered); <-release })
	}}
	s := newLogsTest(t, srv, func(o *LogsOptions) { o.BufferBytes = 1 << 20 })
	ctx := testContext(t)
	doc := func(i int) []byte { return logsDoc(fmt.Sprintf("%03d", i), 1_700_000_000_000, 100_000) }
	capacity := (1 << 20) / len(doc(0)) // documents the buffer holds, the one in the call included
	if err := s.Write(ctx, doc(0)); err != nil {
		t.Fatal(err)
	}
	<-entered // the sender holds document 0 in a call that does not return
	var ids []string
	ids = append(ids, "000")
	full := 0
	for i := 1; i < capacity+6; i++ {
		switch err := s.Write(ctx, doc(i)); {
		case errors.Is(err, ErrSinkFull):
			full++
		case err != nil:
			t.Fatal(err)
		default:
			ids = append(ids, fmt.Sprintf("%03d", i))
		}
	}
	if st := s.Stats(); st.Buffered != uint64(capacity) || st.Dropped != 6 || full != 6 {
		t.Errorf("stats %+v with %d refused, want %d buffered and 6 dropped", st, full, capacity)
	}
	close(release)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	srv.check(ids)
	checkStats(t, s.Stats(), uint64(capacity), 6, 0, 0)
}
