package decisions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"
	"weak"
)

func sample() Decision {
	return Decision{
		Time: time.Date(2026, 11, 30, 3, 0, 1, 123456789, time.UTC), RequestID: "r-1", Node: "edge-1",
		ClientIP: netip.MustParseAddr("2001:db8::7"), UserID: "u_\"abc\"\n", Plan: "pro", Tier: "pro",
		IdentitySource: SourceJWT, Method: "GET", Host: "api.example.com", Path: "/api/reports/\x01\xff",
		Rule: "pro:/api/reports", Algorithm: "fixed_window", Limit: 30, Window: time.Minute, Count: 31,
		Remaining: 0, Reset: 42*time.Second + 123456789, Outcome: Challenge, Reason: "over the limit", StoreLatency: 1500*time.Microsecond + 7,
		Status: 504, UpstreamLatency: 2*time.Second + 3, ResponseError: UpstreamTimeout,
	}
}

// TestJSONVersion1 reads a line written before the response fields
// existed: they decode as zero and the version is reported.
func TestJSONVersion1(t *testing.T) {
	line := `{"v":1,"kind":"decision","time":"2026-11-30T03:00:01Z","request_id":"r","node":"e","client_ip":"203.0.113.7","user_id":"","plan":"","tier":"anonymous","identity_source":"peer","method":"GET","host":"h","path":"/","rule":"anonymous:global","algorithm":"fixed_window","limit":60,"window_ms":60000,"count":1,"remaining":59,"reset_ms":1000,"outcome":"allow","reason":"within the limit","store_latency_us":0,"privacy":""}`
	d, v, err := ParseJSON([]byte(line))
	if err != nil || v != 1 || d.Status != 0 || d.UpstreamLatency != 0 || d.ResponseError != "" || d.Outcome != Allow {
		t.Errorf("version 1 line: %v (v%d) %+v", err, v, d)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	d := sample()
	line := AppendJSON(nil, &d)
	if !json.Valid(line) {
		t.Fatalf("invalid JSON: %s", line)
	}
	got, v, err := ParseJSON(line)
	if err != nil || v != Version {
		t.Fatalf("parse: %v (v%d)", err, v)
	}
	want := d
	want.Path = "/api/reports/\x01\ufffd" // invalid UTF-8 is replaced
	if got != want {
		t.Errorf("round trip\n got %+v\nwant %+v", got, want)
	}
	for _, ev := range []Decision{
		{Kind: KindFeedback, Time: d.Time, Node: "aggregator-1", Reason: "scraper alert", List: "challenge", Action: "add", Target: "203.0.113.0/24", TTL: 30 * time.Minute},
		{Kind: KindDrops, Time: d.Time, Node: "edge-1", Reason: "queue full", Dropped: 1234},
		{Kind: KindDecision, Time: d.Time, Outcome: Allow, Privacy: "truncate/keep", ClientIP: netip.MustParseAddr("203.0.113.0")},
	} {
		line := AppendJSON(nil, &ev)
		got, _, err := ParseJSON(line)
		if err != nil || got != ev {
			t.Errorf("%s event round trip: %v\n got %+v\nwant %+v\n%s", ev.Kind, err, got, ev, line)
		}
	}
	for o := Outcome(1); int(o) < NumOutcomes; o++ {
		d.Outcome = o
		got, _, err := ParseJSON(AppendJSON(nil, &d))
		if err != nil || got.Outcome != o {
			t.Errorf("outcome %v: %v %v", o, got.Outcome, err)
		}
	}
}

func TestParseJSONErrors(t *testing.T) {
	for _, c := range []struct{ name, line, want string }{
		{"not json", `{"v":1,`, "parse decision"},
		{"no version", `{"time":"2026-11-30T03:00:00Z","outcome":"allow"}`, "schema version"},
		{"bad time", `{"v":1,"time":"yesterday","outcome":"allow"}`, "time"},
		{"bad ip", `{"v":1,"time":"2026-11-30T03:00:00Z","client_ip":"1.2.3","outcome":"allow"}`, "client_ip"},
		{"bad outcome", `{"v":1,"time":"2026-11-30T03:00:00Z","outcome":"maybe"}`, "unknown outcome"},
		// Times outside int64 nanoseconds would wrap into another century.
		{"year 9999", `{"v":2,"time":"9999-12-31T23:59:59Z","outcome":"allow"}`, "outside 1677-09-21T00:12:43.145224192Z to 2262-04-11T23:47:16.854775807Z"},
		{"a nanosecond past 2262", `{"v":2,"time":"2262-04-11T23:47:16.854775808Z","outcome":"allow"}`, "time 2262-04-11T23:47:16.854775808Z is outside"},
		{"year 1600", `{"v":2,"time":"1600-01-01T00:00:00Z","outcome":"allow"}`, "is outside"},
		{"year 1 not at midnight", `{"v":2,"time":"0001-01-01T00:00:01Z","outcome":"allow"}`, "is outside"},
		// Fields longer than the edge writes.
		{"user id", `{"v":2,"time":"2026-11-30T03:00:00Z","outcome":"allow","user_id":"` + strings.Repeat("u", MaxUserIDLen+1) + `"}`, "user_id of 257 bytes, at most 256"},
		{"plan", `{"v":2,"time":"2026-11-30T03:00:00Z","outcome":"allow","plan":"` + strings.Repeat("p", 400_000) + `"}`, "plan of 400000 bytes"},
		{"tier", `{"v":2,"time":"2026-11-30T03:00:00Z","outcome":"allow","tier":"` + strings.Repeat("t", MaxNameLen+1) + `"}`, "tier of 257 bytes"},
		{"rule", `{"v":2,"time":"2026-11-30T03:00:00Z","outcome":"allow","rule":"` + strings.Repeat("r", MaxRuleLen+1) + `"}`, "rule of 8450 bytes, at most 8449"},
		{"node", `{"v":2,"time":"2026-11-30T03:00:00Z","outcome":"allow","node":"` + strings.Repeat("n", MaxNameLen+1) + `"}`, "node of 257 bytes"},
		{"reason", `{"v":2,"time":"2026-11-30T03:00:00Z","outcome":"allow","reason":"` + strings.Repeat("x", MaxNameLen+1) + `"}`, "reason of 257 bytes"},
		{"response error", `{"v":2,"time":"2026-11-30T03:00:00Z","outcome":"allow","response_error":"` + strings.Repeat("x", MaxNameLen+1) + `"}`, "response_error of 257 bytes"},
		{"list", `{"v":2,"kind":"feedback","time":"2026-11-30T03:00:00Z","list":"` + strings.Repeat("x", MaxNameLen+1) + `"}`, "list of 257 bytes"},
		{"action", `{"v":2,"kind":"feedback","time":"2026-11-30T03:00:00Z","action":"` + strings.Repeat("x", MaxNameLen+1) + `"}`, "action of 257 bytes"},
	} {
		if _, _, err := ParseJSON([]byte(c.line)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to mention %q", c.name, err, c.want)
		}
	}
	// The edges of what is believed: the last nanosecond of int64, the
	// zero time (written for an event without one), the longest fields.
	for _, line := range []string{
		`{"v":2,"time":"2262-04-11T23:47:16.854775807Z","outcome":"allow"}`,
		`{"v":2,"time":"1677-09-21T00:12:43.145224192Z","outcome":"allow"}`,
		`{"v":2,"time":"0001-01-01T00:00:00Z","outcome":"allow"}`,
		`{"v":2,"time":"2026-11-30T03:00:00Z","outcome":"allow","user_id":"` + strings.Repeat("u", MaxUserIDLen) + `","rule":"` + strings.Repeat("r", MaxRuleLen) + `"}`,
	} {
		if _, _, err := ParseJSON([]byte(line)); err != nil {
			t.Errorf("%.80s: %v", line, err)
		}
	}
	// A newer version is read as far as the known fields go.
	d, v, err := ParseJSON([]byte(`{"v":2,"time":"2026-11-30T03:00:00Z","outcome":"block","future_field":1}`))
	if err != nil || v != 2 || d.Outcome != Block {
		t.Errorf("newer version: %+v v%d %v", d, v, err)
	}
}

// memWriter records batches; it can be made to fail or to block.
type memWriter struct {
	mu      sync.Mutex
	got     []Decision
	flushes int
	fail    error
	gate    chan struct{}
}

func (m *memWriter) WriteBatch(ds []Decision) error {
	if m.gate != nil {
		<-m.gate
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	m.got = append(m.got, ds...)
	return nil
}

func (m *memWriter) Flush() error {
	m.mu.Lock()
	m.flushes++
	m.mu.Unlock()
	return nil
}

func TestEmitterCloseFlushesEverything(t *testing.T) {
	w := &memWriter{}
	e := NewEmitter(w, EmitterOptions{Queue: 1 << 14, Batch: 100, Interval: time.Hour})
	const n = 10000
	for i := range n {
		d := sample()
		d.Count = int64(i)
		if !e.Emit(d) {
			t.Fatalf("emit %d dropped", i)
		}
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(w.got) != n {
		t.Fatalf("wrote %d, want %d", len(w.got), n)
	}
	for i, d := range w.got {
		if d.Count != int64(i) {
			t.Fatalf("decision %d out of order: count %d", i, d.Count)
		}
	}
	s := e.Stats()
	if s.Emitted != n || s.Written != n || s.Dropped != 0 || s.Queued != 0 || w.flushes == 0 {
		t.Errorf("stats %+v flushes %d", s, w.flushes)
	}
	if e.Emit(sample()) || e.Stats().Dropped != 1 {
		t.Error("emit after close was accepted")
	}
}

// TestEmitterFlush: Flush returns only once every decision emitted before
// it is written and the writer flushed, with no timer involved (the
// interval is an hour); it reports write errors and its context's end, and
// returns at once after Close.
func TestEmitterFlush(t *testing.T) {
	ctx := context.Background()
	w := &memWriter{}
	e := NewEmitter(w, EmitterOptions{Queue: 64, Batch: 8, Interval: time.Hour})
	for round := 1; round <= 3; round++ {
		for range 5 {
			e.Emit(sample())
		}
		if err := e.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		w.mu.Lock()
		got, flushes := len(w.got), w.flushes
		w.mu.Unlock()
		if got != 5*round || flushes < round {
			t.Fatalf("round %d: %d written, %d flushes when Flush returned", round, got, flushes)
		}
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(ctx); err != nil {
		t.Errorf("flush after close: %v", err)
	}

	failing := NewEmitter(&memWriter{fail: errors.New("disk full")}, EmitterOptions{Interval: time.Hour})
	defer failing.Close(ctx)
	failing.Emit(sample())
	if err := failing.Flush(ctx); err == nil || !strings.Contains(err.Error(), "1 write or flush errors") {
		t.Errorf("flush over a failing writer: %v", err)
	}

	blocked := &memWriter{gate: make(chan struct{})}
	stuck := NewEmitter(blocked, EmitterOptions{Interval: time.Hour})
	stuck.Emit(sample())
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := stuck.Flush(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("flush with an ended context: %v", err)
	}
	close(blocked.gate)
	stuck.Close(ctx)
}

func TestEmitterDropsWhenFull(t *testing.T) {
	w := &memWriter{gate: make(chan struct{})}
	e := NewEmitter(w, EmitterOptions{Queue: 8, Batch: 4, Interval: time.Hour, Node: "edge-9"})
	accepted := 0
	for range 100 {
		if e.Emit(sample()) {
			accepted++
		}
	}
	close(w.gate)
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := e.Stats()
	// The writer may hold one whole queue while blocked: at most twice the
	// queue is accepted. The drops are reported in the sink itself, once.
	if accepted < 8 || accepted > 16 || s.Dropped != uint64(100-accepted) || s.Written != uint64(accepted) || len(w.got) != accepted+1 {
		t.Fatalf("accepted %d stats %+v wrote %d", accepted, s, len(w.got))
	}
	last := w.got[len(w.got)-1]
	if last.Kind != KindDrops || last.Dropped != s.Dropped || last.Node != "edge-9" {
		t.Errorf("drop report %+v, want %d dropped by edge-9", last, s.Dropped)
	}
}

func TestEmitterCountsWriteErrors(t *testing.T) {
	var reported []error
	var mu sync.Mutex
	w := &memWriter{fail: errors.New("disk full")}
	e := NewEmitter(w, EmitterOptions{Batch: 2, OnError: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }})
	for range 4 {
		e.Emit(sample())
	}
	e.Close(context.Background())
	if s := e.Stats(); s.Errors == 0 || s.Written != 0 || len(reported) != int(s.Errors) {
		t.Errorf("stats %+v reported %d", s, len(reported))
	}
}

func TestJSONLinesFile(t *testing.T) {
	path := t.TempDir() + "/d.jsonl"
	f, err := OpenJSONLines(path)
	if err != nil {
		t.Fatal(err)
	}
	e := NewEmitter(f, EmitterOptions{})
	for range 3 {
		e.Emit(sample())
	}
	e.Close(context.Background())
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := NewJSONLinesWriter(&buf)
	d := sample()
	w.WriteBatch([]Decision{d, d, d})
	w.Flush()
	b, _ := readFile(path)
	if !bytes.Equal(b, buf.Bytes()) || bytes.Count(b, []byte("\n")) != 3 {
		t.Errorf("file %q\nwant %q", b, buf.Bytes())
	}
}

func BenchmarkEmit(b *testing.B) {
	e := NewEmitter(Discard, EmitterOptions{Queue: 1 << 16})
	defer e.Close(context.Background())
	d := sample()
	b.ReportAllocs()
	for b.Loop() {
		e.Emit(d)
	}
}

// BenchmarkEmitFlush is what Lambda pays per invocation to hand one
// decision over and wait until the writer goroutine wrote and flushed it:
// Emit, then Flush, into Discard.
func BenchmarkEmitFlush(b *testing.B) {
	e := NewEmitter(Discard, EmitterOptions{Interval: time.Hour})
	defer e.Close(context.Background())
	d := sample()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		e.Emit(d)
		if err := e.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendJSON(b *testing.B) {
	d := sample()
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendJSON(buf[:0], &d)
	}
	b.SetBytes(int64(len(buf)))
}

func readFile(path string) ([]byte, error) { return os.ReadFile(path) }

// TestEmitterReportsDropsPeriodically runs the emitter's own timers on the
// fake clock of testing/synctest: drops are reported on the interval, once
// each, and an interval without drops reports nothing.
func TestEmitterReportsDropsPeriodically(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &memWriter{gate: make(chan struct{})}
		e := NewEmitter(w, EmitterOptions{Queue: 4, Batch: 4, Interval: time.Hour, DropReport: 10 * time.Second, Node: "n"})
		for range 20 { // the writer is blocked: 4 queued, 4 in its hands at most, the rest dropped
			e.Emit(sample())
		}
		close(w.gate)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		time.Sleep(10 * time.Second) // no new drops: no second report
		synctest.Wait()
		e.Close(context.Background())
		var reports []uint64
		for _, d := range w.got {
			if d.Kind == KindDrops {
				reports = append(reports, d.Dropped)
			}
		}
		if dropped := e.Stats().Dropped; len(reports) != 1 || reports[0] != dropped || dropped == 0 {
			t.Errorf("reports %v, dropped %d", reports, dropped)
		}
	})
}

// TestEmitterReportsDropsCapped: drops beyond MaxDropped since the last
// report, more than readers believe of one event, are reported MaxDropped
// at a time, the rest carried to the next report, and on Close in as many
// reports as it takes; every report is one a reader accepts.
func TestEmitterReportsDropsCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &memWriter{}
		e := NewEmitter(w, EmitterOptions{Interval: time.Hour, DropReport: 10 * time.Second, Node: "n"})
		e.dropped.Add(MaxDropped + 5)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		time.Sleep(10 * time.Second) // the 5 carried over
		synctest.Wait()
		e.dropped.Add(2*MaxDropped + 1)
		e.Close(context.Background())
		var reports []uint64
		for _, d := range w.got {
			if d.Kind == KindDrops {
				reports = append(reports, d.Dropped)
				if err := d.Check(); err != nil {
					t.Errorf("report of %d: %v", d.Dropped, err)
				}
			}
		}
		if want := []uint64{MaxDropped, 5, MaxDropped, MaxDropped, 1}; !slices.Equal(reports, want) {
			t.Errorf("reports %v, want %v", reports, want)
		}
	})
}

// TestEmitterReleasesStrings checks that the emitter lets go of the
// strings its decisions held: a drain woken by a filling queue leaves
// written decisions for the next ones to overwrite, and the next ticks
// clear what was not overwritten. The emitter's timers run on the fake
// clock of testing/synctest; each request path is a string of its own,
// watched through a weak pointer.
func TestEmitterReleasesStrings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := NewEmitter(Discard, EmitterOptions{Queue: 8, Batch: 2, Interval: time.Second})
		defer e.Close(context.Background())
		var paths []weak.Pointer[byte]
		emit := func(i int) {
			d := sample()
			d.Path = strings.Clone("/api/" + strconv.Itoa(i) + "/" + strings.Repeat("x", 64))
			paths = append(paths, weak.Make(unsafe.StringData(d.Path)))
			e.EmitRef(&d)
		}
		for i := range 7 { // 3 wakes of the writer; the seventh waits for a tick
			emit(i)
			synctest.Wait()
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		runtime.GC()
		for i, p := range paths {
			if p.Value() != nil {
				t.Errorf("two intervals on, the path of decision %d is still held", i)
			}
		}
		if st := e.Stats(); st.Written != 7 || st.Dropped != 0 {
			t.Errorf("stats %+v, want 7 written", st)
		}
	})
}

// TestParseDurationOverflow: a number past what a time.Duration holds is
// refused, not wrapped into another (2^61+5 µs read as 5 µs before), and
// the largest that fits is read exactly.
func TestParseDurationOverflow(t *testing.T) {
	for _, c := range []struct {
		n    string
		unit time.Duration
	}{
		{"2305843009213693957", time.Microsecond}, {"9223372036854775807", time.Microsecond},
		{"9223372036854776", time.Microsecond}, {"-9223372036854776", time.Microsecond},
		{"9223372036855", time.Millisecond}, {"9223372036854.775808", time.Millisecond},
	} {
		if d, err := parseDuration(json.Number(c.n), c.unit); err == nil {
			t.Errorf("%s in %v: read %d, want an error", c.n, c.unit, d)
		}
	}
	for _, c := range []struct {
		n    string
		unit time.Duration
	}{{"9223372036854.775807", time.Millisecond}, {"9223372036854775.807", time.Microsecond}} {
		if d, err := parseDuration(json.Number(c.n), c.unit); err != nil || d != math.MaxInt64 {
			t.Errorf("%s in %v: read %d, %v; want %d", c.n, c.unit, d, err, int64(math.MaxInt64))
		}
	}
	line := `{"v":1,"kind":"decision","time":"2026-12-05T00:00:00Z","client_ip":"192.0.2.1","outcome":"allow","store_latency_us":2305843009213693957}`
	if d, _, err := ParseJSON([]byte(line)); err == nil {
		t.Errorf("a store latency past a duration's range parsed as %v", d.StoreLatency)
	}
}

func FuzzDurationJSON(f *testing.F) {
	for _, d := range []int64{0, 1, 999, 1000, 1_000_000, 60_000_000_000, 42_123_456_789, -5, 1<<62 + 3} {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, ns int64) {
		if ns == math.MinInt64 {
			return
		}
		for _, unit := range []time.Duration{time.Millisecond, time.Microsecond} {
			b := appendDuration(nil, "d", time.Duration(ns), unit)
			var obj map[string]json.Number
			dec := json.NewDecoder(bytes.NewReader(append(append([]byte("{"), b[1:]...), '}')))
			dec.UseNumber()
			if err := dec.Decode(&obj); err != nil {
				t.Fatalf("%d: %s is not JSON: %v", ns, b, err)
			}
			got, err := parseDuration(obj["d"], unit)
			if err != nil || got != time.Duration(ns) {
				t.Fatalf("%d ns in %v: wrote %s, read %d (%v)", ns, unit, b, got, err)
			}
		}
	})
}

// TestEmitterBatchesByBytes: batches stop at BatchBytes of estimated size,
// and a decision larger than that still goes, alone.
func TestEmitterBatchesByBytes(t *testing.T) {
	w := &batchSizes{}
	e := NewEmitter(w, EmitterOptions{Queue: 1024, Batch: 1000, BatchBytes: 10_000, Interval: time.Hour})
	small := sample()
	big := sample()
	big.Path = strings.Repeat("x", 20_000)
	for range 100 {
		e.Emit(small)
	}
	e.Emit(big)
	e.Close(context.Background())
	per := 10_000 / Size(&small)
	total := 0
	for i, n := range w.sizes {
		total += n
		last := i == len(w.sizes)-1
		if (last && n != 1) || (!last && n > per) {
			t.Errorf("batch %d has %d decisions (at most %d fit in 10000 bytes; the big one goes alone)", i, n, per)
		}
	}
	if total != 101 {
		t.Errorf("%d decisions written, want 101", total)
	}
}

type batchSizes struct{ sizes []int }

func (b *batchSizes) WriteBatch(ds []Decision) error { b.sizes = append(b.sizes, len(ds)); return nil }
func (b *batchSizes) Flush() error                   { return nil }

// BenchmarkClamp is what the emitter's writer goroutine pays a decision
// to find that it has nothing to clamp (Decision.Clamp), before writing.
func BenchmarkClamp(b *testing.B) {
	d := sample()
	for b.Loop() {
		if d.Clamp() {
			b.Fatal("clamped a sample decision")
		}
	}
}
