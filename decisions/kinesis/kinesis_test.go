package kinesis

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

var start = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

// fakeAPI is an in-memory PutRecords that checks the API limits, fails
// chosen records or calls, and keeps what it accepted in order.
type fakeAPI struct {
	t         *testing.T
	calls     [][]types.PutRecordsRequestEntry
	delivered []types.PutRecordsRequestEntry
	fail      func(call, i int) string // error code for record i of a call, or ""
	err       func(call int) error     // error for a whole call, or nil
}

func (f *fakeAPI) PutRecords(_ context.Context, in *kinesis.PutRecordsInput, _ ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error) {
	n := len(f.calls)
	f.calls = append(f.calls, append([]types.PutRecordsRequestEntry(nil), in.Records...))
	size, keys := 0, map[string]bool{}
	for _, r := range in.Records {
		rs := len(r.Data) + len(*r.PartitionKey)
		if rs > maxRecordBytes {
			f.t.Errorf("call %d: record of %d bytes", n, rs)
		}
		// One record per partition in a call, or in JSON mode per identity.
		key := *r.PartitionKey
		if len(r.Data) > 0 && r.Data[0] == byte(columnar.CodecJSON) {
			ds, _ := Decode(r.Data, nil)
			h, _ := identity(&ds[0])
			key = fmt.Sprint("identity ", h)
		}
		if keys[key] {
			f.t.Errorf("call %d: two records of %s", n, key)
		}
		keys[key] = true

		size += rs
	}
	if len(in.Records) > maxCallRecords || size > maxCallBytes || len(in.Records) == 0 {
		f.t.Errorf("call %d: %d records, %d bytes", n, len(in.Records), size)
	}
	if f.err != nil {
		if err := f.err(n); err != nil {
			return nil, err
		}
	}
	out := &kinesis.PutRecordsOutput{}
	for i, r := range in.Records {
		code := ""
		if f.fail != nil {
			code = f.fail(n, i)
		}
		if code != "" {
			out.FailedRecordCount = aws.Int32(aws.ToInt32(out.FailedRecordCount) + 1)
			out.Records = append(out.Records, types.PutRecordsResultEntry{ErrorCode: aws.String(code), ErrorMessage: aws.String("injected")})
			continue
		}
		f.delivered = append(f.delivered, r)
		out.Records = append(out.Records, types.PutRecordsResultEntry{SequenceNumber: aws.String(fmt.Sprint(len(f.delivered))), ShardId: aws.String("shardId-0")})
	}
	return out, nil
}

// fakeSleep records the delays asked for and returns at once, or with
// ctx's error once ctx is done.
type fakeSleep struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (s *fakeSleep) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.delays = append(s.delays, d)
	s.mu.Unlock()
	return ctx.Err()
}

// byKey decodes records and groups their events by partition key, in order.
func byKey(t *testing.T, recs []types.PutRecordsRequestEntry) map[string][]decisions.Decision {
	t.Helper()
	m := map[string][]decisions.Decision{}
	for _, r := range recs {
		ds, err := Decode(r.Data, nil)
		if err != nil {
			t.Fatal(err)
		}
		m[*r.PartitionKey] = append(m[*r.PartitionKey], ds...)
	}
	return m
}

// checkPerKey checks that got holds exactly want, each event under its
// partition's key and each identity's events in the order written (what
// the sink promises: in Arrow mode a partition's records keep their order,
// in JSON mode only an identity's do).
func checkPerKey(t *testing.T, want []decisions.Decision, partitions int, got map[string][]decisions.Decision) {
	t.Helper()
	byID := map[uint32][]decisions.Decision{}
	n := 0
	for k, ds := range got {
		for i := range ds {
			if p := fmt.Sprint(partition(&ds[i], partitions)); p != k {
				t.Fatalf("an event of partition %s under key %s", p, k)
			}
			h, _ := identity(&ds[i])
			byID[h] = append(byID[h], ds[i])
			n++
		}
	}
	if n != len(want) {
		t.Fatalf("%d events read, %d written", n, len(want))
	}
	next := map[uint32]int{}
	for i := range want {
		h, _ := identity(&want[i])
		j := next[h]
		if j >= len(byID[h]) {
			t.Fatalf("event %d (identity %x) missing", i, h)
		}
		if diff := decisiontest.Diff(byID[h][j], want[i]); diff != "" {
			t.Fatalf("event %d (identity %x, #%d of the identity) differs:\n%s", i, h, j, diff)
		}
		next[h]++
	}
}

// bulky returns n events with distinct users and incompressible paths of
// pathLen bytes.
func bulky(n, pathLen int) []decisions.Decision {
	r := rand.New(rand.NewPCG(1, 2))
	ds := make([]decisions.Decision, n)
	b := make([]byte, pathLen/2)
	for i := range ds {
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		ds[i] = decisions.Decision{Time: start.Add(time.Duration(i)), Outcome: decisions.Allow, RequestID: fmt.Sprint("r", i),
			UserID: fmt.Sprint("user-", i), Path: "/" + hex.EncodeToString(b)}
	}
	return ds
}

func TestKinesisSplitLimits(t *testing.T) {
	f := func(name string, opts Options, ds []decisions.Decision, minCalls int) {
		t.Run(name, func(t *testing.T) {
			api, s := sendFake(t, opts, ds)
			if len(api.calls) < minCalls {
				t.Errorf("%d calls, want at least %d", len(api.calls), minCalls)
			}
			checkPerKey(t, ds, s.opts.Partitions, byKey(t, api.delivered))
			st := s.Stats()
			if st.Events != uint64(len(ds)) || st.Records != uint64(len(api.delivered)) || st.Calls != uint64(len(api.calls)) || st.Failed != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
	f("500_records_per_call", Options{JSON: true, Partitions: 1 << 16}, bulky(1200, 10), 3)
	f("5MiB_per_call", Options{JSON: true, Partitions: 1 << 16}, bulky(600, 20_000), 3)
	f("1MiB_per_record", Options{Partitions: 1}, bulky(400, 8_000), 2)
	f("arrow_many_keys", Options{Partitions: 64}, decisiontest.NewGenerator(3, start).Batch(5000), 1)
}

func TestKinesisRetryOnlyFailed(t *testing.T) {
	api := &fakeAPI{t: t, fail: func(call, i int) string {
		if call == 0 && (i == 1 || i == 3) {
			return "ProvisionedThroughputExceededException"
		}
		return ""
	}}
	var sl fakeSleep
	s, err := New(api, Options{Stream: "s", Partitions: 64, Sleep: sl.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	ds := decisiontest.NewGenerator(4, start).Batch(2000)
	if err := s.WriteBatch(append([]decisions.Decision(nil), ds...)); err != nil {
		t.Fatal(err)
	}
	if len(api.calls) != 2 {
		t.Fatalf("%d calls, want 2", len(api.calls))
	}
	retry := api.calls[1]
	if len(retry) != 2 || !bytes.Equal(retry[0].Data, api.calls[0][1].Data) || !bytes.Equal(retry[1].Data, api.calls[0][3].Data) {
		t.Fatalf("second call has %d records, want records 1 and 3 of the first", len(retry))
	}
	if len(sl.delays) != 1 || sl.delays[0] > 50*time.Millisecond {
		t.Errorf("delays %v, want one of at most 50ms", sl.delays)
	}
	checkPerKey(t, ds, 64, byKey(t, api.delivered))
	if st := s.Stats(); st.Retried != 2 || st.Throttled != 2 || st.Failed != 0 || st.Events != 2000 {
		t.Errorf("stats %+v", st)
	}
}

// A key with several records (each 1 MiB at most) whose first fails must
// not have its second delivered before the first.
func TestKinesisOrderAcrossRetries(t *testing.T) {
	api := &fakeAPI{t: t, fail: func(call, i int) string {
		if call < 3 && i == 0 {
			return "InternalFailure"
		}
		return ""
	}}
	var sl fakeSleep
	s, err := New(api, Options{Stream: "s", Partitions: 1, Sleep: sl.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	ds := bulky(400, 8_000)
	if err := s.WriteBatch(append([]decisions.Decision(nil), ds...)); err != nil {
		t.Fatal(err)
	}
	checkPerKey(t, ds, 1, byKey(t, api.delivered))
	if len(sl.delays) != 3 {
		t.Errorf("%d backoffs, want 3", len(sl.delays))
	}
}

func TestKinesisGiveUp(t *testing.T) {
	throttle := &smithy.GenericAPIError{Code: "ThrottlingException", Message: "rate exceeded"}
	f := func(name string, api *fakeAPI, n int, wantCalls, wantFailed int, wantDelays int) {
		t.Run(name, func(t *testing.T) {
			api.t = t
			var sl fakeSleep
			s, err := New(api, Options{Stream: "s", Partitions: 64, MaxRetries: 3, BaseDelay: 10 * time.Millisecond, MaxDelay: 25 * time.Millisecond, Sleep: sl.Sleep})
			if err != nil {
				t.Fatal(err)
			}
			ds := bulky(n, 10)
			err = s.WriteBatch(ds)
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d events not delivered", wantFailed)) {
				t.Fatalf("error %v, want one naming %d events", err, wantFailed)
			}
			if st := s.Stats(); st.Failed != uint64(wantFailed) || st.Events != uint64(n-wantFailed) || len(api.calls) != wantCalls {
				t.Errorf("stats %+v after %d calls, want %d failed, %d calls", st, len(api.calls), wantFailed, wantCalls)
			}
			if len(sl.delays) != wantDelays {
				t.Errorf("%d backoffs, want %d", len(sl.delays), wantDelays)
			}
			bounds := []time.Duration{10, 20, 25, 25}
			for i, d := range sl.delays {
				if d < 0 || d > bounds[i]*time.Millisecond {
					t.Errorf("backoff %d: %v, want at most %v", i, d, bounds[i]*time.Millisecond)
				}
			}
		})
	}
	f("throttled_calls", &fakeAPI{err: func(int) error { return throttle }}, 100, 4, 100, 3)
	f("transport_errors", &fakeAPI{err: func(int) error { return errors.New("connection reset") }}, 100, 4, 100, 3)
	f("kms_throttled", &fakeAPI{err: func(int) error {
		return &smithy.GenericAPIError{Code: "KMSThrottlingException", Fault: smithy.FaultClient}
	}}, 100, 4, 100, 3)
	f("permanent_error", &fakeAPI{err: func(int) error {
		return &smithy.GenericAPIError{Code: "ResourceNotFoundException", Fault: smithy.FaultClient}
	}}, 100, 1, 100, 0)
	// Record 0 always fails: only its events are lost.
	api := &fakeAPI{fail: func(_, i int) string {
		if i == 0 {
			return "ProvisionedThroughputExceededException"
		}
		return ""
	}}
	ds := bulky(100, 10)
	first := 0
	for i := range ds {
		if partition(&ds[i], 64) == partition(&ds[0], 64) {
			first++
		}
	}
	f("one_record", api, 100, 4, first, 3)
}

func TestKinesisDecode(t *testing.T) {
	// Edge cases of the schema run in the conformance suite against
	// kinesalite; here, generator events through both codecs.
	ds := decisiontest.NewGenerator(6, start).Batch(3000)
	f := func(name string, opts Options) {
		t.Run(name, func(t *testing.T) {
			api, _ := sendFake(t, opts, ds)
			checkPerKey(t, ds, 64, byKey(t, api.delivered))
		})
	}
	f("arrow", Options{Partitions: 64})
	f("json", Options{JSON: true, Partitions: 64})
	for _, bad := range [][]byte{nil, {0}, {3, '{'}, {1, 1, 2, 3}, {2, '{'}} {
		if _, err := Decode(bad, nil); err == nil {
			t.Errorf("Decode(%q): no error", bad)
		}
	}
}

func TestKinesisOptions(t *testing.T) {
	f := func(opts Options, want string) {
		t.Helper()
		_, err := New(&fakeAPI{t: t}, opts)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New(%+v): %v, want an error naming %s", opts, err, want)
		}
	}
	f(Options{}, "kinesis.stream")
	f(Options{Stream: "s", Partitions: -1}, "kinesis.partitions")
	f(Options{Stream: "s", BaseDelay: time.Second, MaxDelay: time.Millisecond}, "kinesis.base_delay")
}

// TestKinesisWireBytes reports, in Markdown for BENCHMARKS.md, what
// generator events cost on the wire: bytes, PUT payload units (each
// record's data and key, rounded up to 25 KB), on-demand data-in (rounded
// up to 1 KB) and calls, per decision, by decisions per record and at the
// seed's rate as the emitter batches it. Sizes are deterministic. It
// holds the size targets: never larger than JSON, at least 5 times smaller
// at 20 decisions a record and 10 times at 200.
func TestKinesisWireBytes(t *testing.T) {
	ds := decisiontest.NewGenerator(5, start).Batch(20_000)
	type cost struct{ bytes, units, kb, calls float64 } // per decision
	measure := func(opts Options, c columnar.Compression, batches []int) cost {
		api, s := newFake(t, opts)
		if !opts.JSON {
			s.enc = columnar.NewEncoder(columnar.Options{Compression: c})
		}
		n := 0
		for _, b := range batches {
			if n+b > len(ds) {
				break
			}
			if err := s.WriteBatch(append([]decisions.Decision(nil), ds[n:n+b]...)); err != nil {
				t.Fatal(err)
			}
			n += b
		}
		units, kb := 0, 0
		for _, r := range api.delivered {
			size := len(r.Data) + len(*r.PartitionKey)
			units += (size + 25<<10 - 1) / (25 << 10)
			kb += (size + 1<<10 - 1) / (1 << 10)
		}
		return cost{float64(s.Stats().Bytes) / float64(n), float64(units) / float64(n), float64(kb) / float64(n), float64(len(api.calls)) / float64(n)}
	}
	repeat := func(size int) []int {
		out := make([]int, min(len(ds)/size, 500))
		for i := range out {
			out[i] = size
		}
		return out
	}
	// The seed's 50 M decisions a month, at us-east-1 list prices:
	// provisioned, $0.014 per million PUT payload units; on-demand, $0.08
	// per GB written.
	const month = 50e6
	row := func(name string, c, json cost) {
		t.Logf("| %s | %.1f | %.1f× | %.0f | %.0f | $%.4f | %.2f GB, $%.3f |", name, c.bytes, json.bytes/c.bytes, c.units*1e6, c.calls*1e6,
			c.units*month*0.014/1e6, c.kb*month/(1<<20), c.kb*month/(1<<20)*0.08)
	}
	t.Log("| records | B/decision | JSON ÷ this | PUT payload units per million decisions | calls per million | PUT cost a month (50 M) | on-demand data-in a month |")
	t.Log("| --- | --- | --- | --- | --- | --- | --- |")
	json := measure(Options{JSON: true, Partitions: 4}, 0, repeat(1024))
	row("JSON, one decision per record, batches of 1024", json, json)
	for _, n := range []int{1, 4, 20, 200, 1024} {
		old := measure(Options{Partitions: 1}, columnar.ZstdStream, repeat(n))
		now := measure(Options{Partitions: 1}, columnar.ZstdDict, repeat(n))
		row(fmt.Sprintf("%d decisions a record, zstd frame (before)", n), old, json)
		row(fmt.Sprintf("**%d decisions a record, zstd frame with the dictionary**", n), now, json)
		target := map[int]float64{20: 5, 200: 10, 1024: 10}[n]
		if now.bytes > json.bytes || now.bytes*target > json.bytes {
			t.Errorf("%d decisions a record: %.1f B/decision against JSON's %.1f, want at least %.0fx smaller", n, now.bytes, json.bytes, max(target, 1))
		}
	}
	// The seed's rate: 50 M decisions a month is about 19 a second.
	const rate = 19.0
	ticks := decisiontest.TickBatches(5000, rate, 200*time.Millisecond, 1)
	linger := decisiontest.LingerBatches(len(ds), rate, 5*time.Second, 1024, 1)
	row("19/s, 200 ms flushes, 4 partitions, zstd frame (before)", measure(Options{Partitions: 4}, columnar.ZstdStream, ticks), json)
	row("19/s, 200 ms flushes, 4 partitions, with the dictionary", measure(Options{Partitions: 4}, columnar.ZstdDict, ticks), json)
	at := measure(Options{Partitions: 4}, columnar.ZstdDict, linger)
	row("19/s, 5 s linger (the default before), 4 partitions, with the dictionary", at, json)
	row("19/s, 5 s linger, 8 partitions, with the dictionary", measure(Options{Partitions: 8}, columnar.ZstdDict, linger), json)
	row("19/s, JSON, 5 s linger", measure(Options{JSON: true, Partitions: 4}, 0, linger), json)
	if at.bytes*5 > json.bytes {
		t.Errorf("at the seed's rate, 5 s linger: %.1f B/decision, not 5 times smaller than JSON's %.1f", at.bytes, json.bytes)
	}
	// The default linger (500 ms, for freshness on Kinesis) at the seed's
	// rate, and at the seed's abusive client's 800 a second; never larger
	// than JSON.
	for _, r := range []float64{rate, 20, 800} {
		for _, l := range []time.Duration{500 * time.Millisecond, 5 * time.Second} {
			if r == rate && l == 5*time.Second {
				continue // above
			}
			c := measure(Options{Partitions: 4}, columnar.ZstdDict, decisiontest.LingerBatches(len(ds), r, l, 1024, 1))
			name := fmt.Sprintf("%.0f/s, %v linger, 4 partitions, with the dictionary", r, l)
			if l == 500*time.Millisecond {
				name = "**" + strings.Replace(name, "linger", "linger (the default)", 1) + "**"
			}
			row(name, c, json)
			if c.bytes > json.bytes {
				t.Errorf("%s: %.1f B/decision, more than JSON's %.1f", name, c.bytes, json.bytes)
			}
		}
	}
}

func FuzzDecode(f *testing.F) {
	api := &fakeAPI{t: &testing.T{}}
	s, _ := New(api, Options{Stream: "s", Partitions: 1})
	_ = s.WriteBatch(decisiontest.NewGenerator(7, start).Batch(20))
	s.opts.JSON = true
	_ = s.WriteBatch(decisiontest.NewGenerator(8, start).Batch(2))
	for _, r := range api.delivered {
		f.Add(r.Data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = Decode(data, nil)
	})
}

// An event too large for a record is given up alone; the rest go.
func TestKinesisOversizeEvent(t *testing.T) {
	f := func(name string, opts Options) {
		t.Run(name, func(t *testing.T) {
			api, s := newFake(t, opts)
			ds := bulky(10, 10)
			big := bulky(1, 3<<20)[0]
			big.UserID = "big"
			err := s.WriteBatch(append(ds[:5:5], append([]decisions.Decision{big}, ds[5:]...)...))
			if err == nil || !strings.Contains(err.Error(), "exceeds the record limit") {
				t.Fatalf("error %v", err)
			}
			if st := s.Stats(); st.Failed != 1 || st.Events != 10 {
				t.Errorf("stats %+v", st)
			}
			checkPerKey(t, ds, s.opts.Partitions, byKey(t, api.delivered))
		})
	}
	f("arrow", Options{Partitions: 64})
	f("json", Options{JSON: true, Partitions: 64})
}

// newFake returns a Sink on stream "s" over a fake API.
func newFake(t *testing.T, opts Options) (*fakeAPI, *Sink) {
	t.Helper()
	api := &fakeAPI{t: t}
	opts.Stream = "s"
	s, err := New(api, opts)
	if err != nil {
		t.Fatal(err)
	}
	return api, s
}

// sendFake writes a copy of ds as one batch through a Sink over a fake API.
func sendFake(t *testing.T, opts Options, ds []decisions.Decision) (*fakeAPI, *Sink) {
	t.Helper()
	api, s := newFake(t, opts)
	if err := s.WriteBatch(append([]decisions.Decision(nil), ds...)); err != nil {
		t.Fatal(err)
	}
	return api, s
}
