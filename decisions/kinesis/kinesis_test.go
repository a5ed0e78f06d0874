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
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
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
		if len(r.Data) > 0 && r.Data[0] == decisionlog.CodecJSON {
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

// TestKinesisWireBytes reports the bytes per decision on the wire, Arrow
// against JSON, for 10k generator events written in emitter-sized batches.
func TestKinesisWireBytes(t *testing.T) {
	ds := decisiontest.NewGenerator(5, start).Batch(10_000)
	// perDecision returns the bytes on the wire per decision and the PUT
	// payload units (each record's data and key, rounded up to 25 KB) per
	// million decisions.
	perDecision := func(opts Options, batch int) (float64, float64) {
		api, s := newFake(t, opts)
		for i := 0; i < len(ds); i += batch {
			if err := s.WriteBatch(append([]decisions.Decision(nil), ds[i:min(i+batch, len(ds))]...)); err != nil {
				t.Fatal(err)
			}
		}
		units := 0
		for _, r := range api.delivered {
			units += (len(r.Data) + len(*r.PartitionKey) + 25<<10 - 1) / (25 << 10)
		}
		return float64(s.Stats().Bytes) / float64(len(ds)), float64(units) * 1e6 / float64(len(ds))
	}
	// Arrow pays a schema per record, so its gain depends on how many
	// events share a record: about batch/partitions.
	json, jsonUnits := perDecision(Options{JSON: true}, 1024)
	t.Logf("json: %.1f B/decision, %.0f PUT payload units per million decisions", json, jsonUnits)
	for _, c := range []struct{ partitions, batch int }{{1, 1024}, {4, 1024}, {64, 1024}, {4, 10_000}, {64, 10_000}} {
		arrow, units := perDecision(Options{Partitions: c.partitions}, c.batch)
		t.Logf("arrow in a zstd frame, %d partitions, batches of %d: %.1f B/decision (json/arrow %.1fx), %.0f PUT payload units per million decisions",
			c.partitions, c.batch, arrow, json/arrow, units)
		if c.batch/c.partitions >= 256 && arrow*10 > json {
			t.Errorf("arrow %.1f B/decision not a tenth of json's %.1f with %d events a record", arrow, json, c.batch/c.partitions)
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
