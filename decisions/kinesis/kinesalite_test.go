package kinesis

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/sinktest"
)

// endpoint returns the kinesalite endpoint tests/run started.
func endpoint(t testing.TB) string { return awstest.Endpoint(t, awstest.KinesisEnv) }

func client(t testing.TB, ep string) *kinesis.Client {
	return kinesis.NewFromConfig(awstest.Config(t), func(o *kinesis.Options) { o.BaseEndpoint = aws.String(ep) })
}

var streams atomic.Int64

// newStream creates a stream of shards shards, waits until it is active,
// and deletes it when the test ends.
func newStream(t testing.TB, kc *kinesis.Client, shards int32) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := fmt.Sprintf("decisions-%d-%d", time.Now().UnixNano(), streams.Add(1))
	if _, err := kc.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(shards)}); err != nil {
		t.Fatal(err)
	}
	// kinesalite bounds the shards it holds at once; give them back.
	t.Cleanup(func() {
		kc.DeleteStream(context.Background(), &kinesis.DeleteStreamInput{StreamName: aws.String(name)})
	})
	w := kinesis.NewStreamExistsWaiter(kc, func(o *kinesis.StreamExistsWaiterOptions) { o.MinDelay = 20 * time.Millisecond })
	if err := w.Wait(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(name)}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return name
}

// readStream returns every record of the stream, shard by shard, each
// shard's records in order.
func readStream(kc *kinesis.Client, name string) ([]types.PutRecordsRequestEntry, error) {
	shards, err := readShards(kc, name)
	var out []types.PutRecordsRequestEntry
	for _, sh := range shards {
		out = append(out, sh.records...)
	}
	return out, err
}

// shardRecords are a shard's records, in order.
type shardRecords struct {
	shard   types.Shard
	records []types.PutRecordsRequestEntry
}

// readShards returns every record of the stream, by shard.
func readShards(kc *kinesis.Client, name string) ([]shardRecords, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	shards, err := kc.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(name)})
	if err != nil {
		return nil, err
	}
	var out []shardRecords
	for _, sh := range shards.Shards {
		out = append(out, shardRecords{shard: sh})
		recs := &out[len(out)-1].records
		it, err := kc.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(name), ShardId: sh.ShardId,
			ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
		if err != nil {
			return nil, err
		}
		iter := it.ShardIterator
		for iter != nil {
			got, err := kc.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter})
			if err != nil {
				return nil, err
			}
			if len(got.Records) == 0 {
				break
			}
			for _, r := range got.Records {
				*recs = append(*recs, types.PutRecordsRequestEntry{Data: r.Data, PartitionKey: r.PartitionKey})
			}
			iter = got.NextShardIterator
		}
	}
	return out, nil
}

// streamSink is a Sink under the conformance suite. Shards interleave, so
// the stream has no total order, and the sink keeps order only per
// identity. ReadBack restores write order from the sequence of identities
// the wrapper saw written: the i-th event written takes the next unread
// event of its identity. Each key's events are thus compared in the
// order the stream holds them, which is what the sink promises.
type streamSink struct {
	*Sink
	kc     *kinesis.Client
	stream string
	keys   []string // partition key and identity of each event written, in order
}

// orderKey is what the sink keeps in order: an identity, under its
// partition's key.
func orderKey(partitionKey string, d *decisions.Decision) string {
	h, _ := identity(d)
	return partitionKey + "/" + strconv.FormatUint(uint64(h), 16)
}

func (s *streamSink) WriteBatch(ds []decisions.Decision) error {
	for i := range ds {
		s.keys = append(s.keys, orderKey(strconv.Itoa(partition(&ds[i], s.opts.Partitions)), &ds[i]))
	}
	return s.Sink.WriteBatch(ds)
}

func (s *streamSink) ReadBack() ([]decisions.Decision, error) {
	recs, err := readStream(s.kc, s.stream)
	if err != nil {
		return nil, err
	}
	byKey := map[string][]decisions.Decision{}
	total := 0
	for _, r := range recs {
		ds, err := Decode(r.Data, nil)
		if err != nil {
			return nil, err
		}
		for i := range ds {
			k := orderKey(*r.PartitionKey, &ds[i])
			byKey[k] = append(byKey[k], ds[i])
		}
		total += len(ds)
	}
	out := make([]decisions.Decision, 0, total)
	for _, k := range s.keys {
		if len(byKey[k]) == 0 {
			return nil, fmt.Errorf("read back: key %s has fewer events than written", k)
		}
		out = append(out, byKey[k][0])
		byKey[k] = byKey[k][1:]
	}
	for _, ds := range byKey {
		out = append(out, ds...) // extra events: the suite reports the count
	}
	return out, nil
}

func TestKinesisSink(t *testing.T) {
	ep := endpoint(t)
	kc := client(t, ep)
	for _, mode := range []struct {
		name string
		json bool
	}{{"arrow", false}, {"json", true}} {
		t.Run(mode.name, func(t *testing.T) {
			sinktest.Run(t, func(t *testing.T) sinktest.Sink {
				name := newStream(t, kc, 4)
				// A deadline a loaded machine keeps: kinesalite writes a JSON
				// call's 500 records one by one, and a call cut short by its
				// deadline is sent again, duplicating what it had written.
				s, err := New(kc, Options{Stream: name, JSON: mode.json, Timeout: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				return &streamSink{Sink: s, kc: kc, stream: name}
			})
		})
	}
}

// TestKinesisCompressionBySize: the sink compresses a record as the
// decision log does (columnar.CompressionFor): a record of 1,024 events in
// one zstd frame with the dictionary, one of 4,096 per buffer, and a batch
// of 8,192 events too large for one record split into records of at most
// 1 MiB (kinesalite refuses larger), each compressed for its own size.
// Every record read back from kinesalite is the bytes columnar.Encode
// gives its events with that compression and decodes to them.
func TestKinesisCompressionBySize(t *testing.T) {
	kc := client(t, endpoint(t))
	name := newStream(t, kc, 1)
	s, err := New(kc, Options{Stream: name, Partitions: 1, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	gen := decisiontest.NewGenerator(17, start)
	batches := [][]decisions.Decision{gen.Batch(1024), gen.Batch(4096), bulky(8192, 300)}
	var all []decisions.Decision
	for _, b := range batches {
		if err := s.WriteBatch(append([]decisions.Decision(nil), b...)); err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	recs, err := readStream(kc, name)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	perBuffer := 0
	for _, r := range recs {
		ds, err := Decode(r.Data, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := all[:len(ds)]
		all = all[len(ds):]
		c := columnar.CompressionFor(len(ds))
		enc, err := columnar.Encode([]byte{byte(columnar.CodecArrow)}, want, columnar.Options{Compression: c})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.Data, enc) {
			t.Errorf("the record of %d events (%d bytes) is not %v (%d bytes)", len(ds), len(r.Data), c, len(enc))
		}
		if g, w := jsonLines(ds), jsonLines(want); g != w {
			t.Errorf("the record of %d events decodes to other events than written", len(ds))
		}
		if len(r.Data) > maxRecordBytes {
			t.Errorf("a record of %d bytes", len(r.Data))
		}
		if c == columnar.Zstd {
			perBuffer++
		}
		sizes = append(sizes, len(ds))
	}
	if len(all) != 0 || len(recs) < 4 || sizes[0] != 1024 || sizes[1] != 4096 || perBuffer < 2 {
		t.Errorf("records of %v events (%d per buffer), %d events not read back; want 1024, 4096, then the 8192 split, some per buffer", sizes, perBuffer, len(all))
	}
}

// jsonLines returns ds as JSON lines.
func jsonLines(ds []decisions.Decision) string {
	var b []byte
	for i := range ds {
		b = append(decisions.AppendJSON(b, &ds[i]), '\n')
	}
	return string(b)
}

// fault is what the proxy does to one PutRecords call.
type fault struct {
	fail       []int  // records marked failed (ProvisionedThroughputExceededException) and not forwarded
	status     int    // answer this status with code instead of forwarding
	code       string //
	reset      bool   // reset the connection without forwarding
	resetAfter bool   // forward, then reset the connection instead of answering
}

// proxy forwards to kinesalite, injecting faults into PutRecords calls by
// their number (from 0).
type proxy struct {
	target string
	plan   map[int]fault
	down   atomic.Bool // reset every request: the stream is unreachable
	// blackhole, when set, holds every request unanswered (the endpoint
	// accepts and never answers) until release is closed, then resets it;
	// held receives a value as each request is held.
	blackhole atomic.Bool
	release   chan struct{}
	held      chan struct{}

	mu         sync.Mutex
	calls      int
	duplicated int // events forwarded in calls whose answer was lost
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.down.Load() {
		reset(w)
		return
	}
	if p.blackhole.Load() {
		select {
		case p.held <- struct{}{}:
		default:
		}
		<-p.release
		reset(w)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	var f fault
	if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".PutRecords") {
		p.mu.Lock()
		f = p.plan[p.calls]
		p.calls++
		p.mu.Unlock()
	}
	switch {
	case f.reset:
		reset(w)
		return
	case f.status != 0:
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(f.status)
		fmt.Fprintf(w, `{"__type":%q,"message":"injected"}`, f.code)
		return
	}
	var req map[string]json.RawMessage
	var recs []json.RawMessage
	if len(f.fail) > 0 || f.resetAfter {
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if err := json.Unmarshal(req["Records"], &recs); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
	}
	failed := map[int]bool{}
	if len(f.fail) > 0 {
		var kept []json.RawMessage
		for _, i := range f.fail {
			failed[i] = true
		}
		for i, rec := range recs {
			if !failed[i] {
				kept = append(kept, rec)
			}
		}
		recs = kept
		req["Records"], _ = json.Marshal(recs)
		body, _ = json.Marshal(req)
	}
	out, err := http.NewRequest(r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	for k, v := range r.Header {
		if k != "Content-Length" {
			out.Header[k] = v
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	rbody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if f.resetAfter {
		n := 0
		for _, rec := range recs {
			var e struct{ Data []byte }
			if json.Unmarshal(rec, &e) == nil {
				ds, _ := Decode(e.Data, nil)
				n += len(ds)
			}
		}
		p.mu.Lock()
		p.duplicated += n
		p.mu.Unlock()
		reset(w)
		return
	}
	if len(f.fail) > 0 && resp.StatusCode == http.StatusOK {
		var res struct {
			FailedRecordCount int
			Records           []map[string]any
			EncryptionType    string `json:",omitempty"`
		}
		if err := json.Unmarshal(rbody, &res); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		var all []map[string]any
		for i, j := 0, 0; i < len(res.Records)+len(failed); i++ {
			if failed[i] {
				all = append(all, map[string]any{"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "injected"})
				continue
			}
			all = append(all, res.Records[j])
			j++
		}
		res.Records, res.FailedRecordCount = all, res.FailedRecordCount+len(failed)
		rbody, _ = json.Marshal(res)
	}
	rewritten := len(f.fail) > 0
	for k, v := range resp.Header {
		if k != "Content-Length" && (!rewritten || !strings.EqualFold(k, "X-Amz-Crc32")) {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(rbody)
}

// reset closes the client's connection with a TCP reset.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

func TestKinesisFaults(t *testing.T) {
	ep := endpoint(t)
	kc := client(t, ep)
	f := func(name string, plan map[int]fault, atLeastOnce bool) {
		t.Run(name, func(t *testing.T) {
			stream := newStream(t, kc, 4)
			p := &proxy{target: ep, plan: plan}
			srv := httptest.NewServer(p)
			t.Cleanup(srv.Close)
			var sl fakeSleep
			s, err := New(client(t, srv.URL), Options{Stream: stream, Partitions: 16, Sleep: sl.Sleep})
			if err != nil {
				t.Fatal(err)
			}
			g := decisiontest.NewGenerator(9, start)
			var want []decisions.Decision
			for b := range 3 {
				ds := g.Batch(300)
				for i := range ds {
					ds[i].RequestID = fmt.Sprintf("b%d-%d", b, i)
				}
				want = append(want, ds...)
				if err := s.WriteBatch(ds); err != nil {
					t.Fatalf("batch %d: %v", b, err)
				}
			}
			seen := countOnStream(t, kc, stream)
			got := 0
			for _, c := range seen {
				got += c
			}
			for _, d := range want {
				if seen[d.RequestID] == 0 {
					t.Fatalf("event %s lost", d.RequestID)
				}
			}
			dups := 0
			if atLeastOnce {
				dups = p.duplicated
				if dups == 0 {
					t.Fatal("the proxy duplicated nothing")
				}
			}
			if got != len(want)+dups {
				t.Fatalf("read %d events, want %d written + %d duplicated", got, len(want), dups)
			}
			if st := s.Stats(); st.Failed != 0 || st.Events != uint64(len(want)) || len(sl.delays) == 0 {
				t.Errorf("stats %+v after %d backoffs", st, len(sl.delays))
			}
			t.Logf("stats %+v, backoffs %v", s.Stats(), sl.delays)
		})
	}
	f("failed_records", map[int]fault{0: {fail: []int{0, 2, 5}}, 1: {fail: []int{0}}, 3: {fail: []int{1, 3}}}, false)
	f("throttled_calls", map[int]fault{0: {status: 400, code: "ThrottlingException"}, 1: {status: 400, code: "ProvisionedThroughputExceededException"}}, false)
	f("server_error", map[int]fault{1: {status: 500, code: "InternalFailure"}}, false)
	f("reset_before_forward", map[int]fault{0: {reset: true}, 2: {reset: true}}, false)
	// The call reaches the stream but its answer is lost: the sink cannot
	// tell and sends it again, so delivery is at least once, and exactly
	// the events of that call appear twice.
	f("reset_after_forward", map[int]fault{1: {resetAfter: true}}, true)

	t.Run("give_up", func(t *testing.T) {
		stream := newStream(t, kc, 1)
		plan := map[int]fault{}
		for i := range 4 {
			plan[i] = fault{status: 400, code: "ThrottlingException"}
		}
		srv := httptest.NewServer(&proxy{target: ep, plan: plan})
		t.Cleanup(srv.Close)
		var sl fakeSleep
		s, err := New(client(t, srv.URL), Options{Stream: stream, MaxRetries: 3, Sleep: sl.Sleep})
		if err != nil {
			t.Fatal(err)
		}
		err = s.WriteBatch(decisiontest.NewGenerator(10, start).Batch(100))
		if err == nil || !strings.Contains(err.Error(), "100 events not delivered") {
			t.Fatalf("error %v", err)
		}
		if st := s.Stats(); st.Failed != 100 || st.Throttled != 4 || st.Calls != 4 {
			t.Errorf("stats %+v", st)
		}
	})
}

// BenchmarkWriteBatch writes emitter-sized batches of generator events to
// a 4-shard stream on kinesalite; and, on one partition, records of 1,024
// events (one zstd frame with the dictionary) and of 4,096 (compressed per
// buffer, columnar.CompressionFor), the sink's two compressions.
func BenchmarkWriteBatch(b *testing.B) {
	ep := endpoint(b)
	kc := client(b, ep)
	for _, mode := range []struct {
		name              string
		json              bool
		partitions, batch int
	}{{"arrow", false, 4, 1024}, {"json", true, 4, 1024}, {"arrow/record=1024", false, 1, 1024}, {"arrow/record=4096", false, 1, 4096}} {
		b.Run(mode.name, func(b *testing.B) {
			s, err := New(kc, Options{Stream: newStream(b, kc, int32(mode.partitions)), JSON: mode.json, Partitions: mode.partitions})
			if err != nil {
				b.Fatal(err)
			}
			batch := decisiontest.NewGenerator(11, start).Batch(mode.batch)
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				if err := s.WriteBatch(batch); err != nil {
					b.Fatal(err)
				}
				n += len(batch)
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(s.Stats().Bytes)/float64(n), "B/event")
		})
	}
}
