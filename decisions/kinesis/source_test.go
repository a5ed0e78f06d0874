package kinesis

import (
	"context"
	"fmt"
	"math/big"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"

	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/stream"
)

func dynamoClient(t testing.TB, ep string) *dynamodb.Client {
	return dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(ep) })
}

// newLeaseTable creates a lease table on dynalite and deletes it after the
// test.
func newLeaseTable(t testing.TB, dc *dynamodb.Client) string {
	t.Helper()
	name := fmt.Sprintf("leases-%d-%d", time.Now().UnixNano(), streams.Add(1))
	awstest.CreateTable(t, dc, LeaseTableSpec(name))
	return name
}

// seenLog records what each worker handled.
type seenLog struct {
	mu      sync.Mutex
	by      map[string][]string // event id → workers that handled it, in order
	order   map[int][]int       // partition → event numbers in handling order, first handling only
	batches map[string]int      // batch id → times handled
}

func newSeenLog() *seenLog {
	return &seenLog{by: map[string][]string{}, order: map[int][]int{}, batches: map[string]int{}}
}

// batchID returns a batch's identity: partition, first and last position.
func batchID(b *stream.Batch) string {
	return b.Partition + "/" + b.From.String() + "-" + b.To.String()
}

func (l *seenLog) handler(worker string) stream.HandleFunc {
	return func(_ context.Context, b *stream.Batch) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.batches[batchID(b)]++
		for i := range b.Events {
			d := &b.Events[i]
			if len(l.by[d.RequestID]) == 0 {
				var n int
				fmt.Sscanf(d.RequestID, "e%d", &n)
				p := partition(d, 8)
				l.order[p] = append(l.order[p], n)
			}
			l.by[d.RequestID] = append(l.by[d.RequestID], worker)
		}
		return nil
	}
}

func (l *seenLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.by)
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writer puts numbered events on a stream through a Sink.
type writer struct {
	sink *Sink
	g    *decisiontest.Generator
	n    int
}

func newWriter(t *testing.T, kc *kinesis.Client, name string) *writer {
	s, err := New(kc, Options{Stream: name, Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	return &writer{sink: s, g: decisiontest.NewGenerator(31, start)}
}

func (w *writer) write(t *testing.T, events int) {
	t.Helper()
	ds := w.g.Batch(events)
	for i := range ds {
		ds[i].RequestID = fmt.Sprintf("e%d", w.n)
		w.n++
	}
	if err := w.sink.WriteBatch(ds); err != nil {
		t.Fatal(err)
	}
}

func sourceOptions(name, table, worker string) SourceOptions {
	return SourceOptions{Stream: name, Table: table, Worker: worker, LeaseDuration: 900 * time.Millisecond,
		Discover: 200 * time.Millisecond, Poll: 50 * time.Millisecond, MaxBatch: 100}
}

// newSource returns a Source of the stream on api and the lease table
// on db, as o configures it.
func newSource(t *testing.T, api StreamAPI, db DynamoAPI, o SourceOptions) *Source {
	t.Helper()
	s, err := NewSource(api, db, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// run starts a Source and returns a stop function that waits for Run.
func run(t *testing.T, s *Source, h stream.Handler) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, h) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	return sync.OnceFunc(stop)
}

// checkOrder fails if a partition's events were first handled out of the
// order they were written.
func (l *seenLog) checkOrder(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for p, ns := range l.order {
		for i := 1; i < len(ns); i++ {
			if ns[i] <= ns[i-1] {
				t.Fatalf("partition %d: event %d handled after %d", p, ns[i], ns[i-1])
			}
		}
	}
}

// readFirst writes 1050 events to the stream and reads them with a
// worker "w1" in batches of 100, ending inside records of about 130
// events, until it stops.
func readFirst(t *testing.T, kc *kinesis.Client, dc *dynamodb.Client, name, table string) (*writer, *seenLog) {
	t.Helper()
	w := newWriter(t, kc, name)
	w.write(t, 1050)
	seen := newSeenLog()
	s1 := newSource(t, kc, dc, sourceOptions(name, table, "w1"))
	stop := run(t, s1, seen.handler("w1"))
	waitFor(t, "1050 events", func() bool { return seen.count() == 1050 })
	stop()
	st := s1.Stats()
	if st.Events != 1050 || st.Held != 0 || st.Corrupt != 0 || st.Checkpoints == 0 {
		t.Fatalf("first worker's stats %+v", st)
	}
	return w, seen
}

// TestSourceResumesInsideRecords reads a stream in batches smaller than
// its records, stops, and starts again: the second worker resumes at the
// checkpoint inside the last record and hands over only new events.
func TestSourceResumesInsideRecords(t *testing.T) {
	kc := client(t, endpoint(t))
	dc := dynamoClient(t, awstest.Endpoint(t, awstest.DynamoDBEnv))
	name, table := newStream(t, kc, 2), newLeaseTable(t, dc)
	w, seen := readFirst(t, kc, dc, name, table)
	w.write(t, 300)
	s2 := newSource(t, kc, dc, sourceOptions(name, table, "w2"))
	stop := run(t, s2, seen.handler("w2"))
	waitFor(t, "1350 events", func() bool { return seen.count() == 1350 })
	stop()
	if st := s2.Stats(); st.Events != 300 {
		t.Fatalf("second worker handled %d events, want the 300 new ones: %+v", st.Events, st)
	}
	for id, ws := range seen.by {
		if len(ws) != 1 {
			t.Fatalf("event %s handled by %v", id, ws)
		}
	}
	seen.checkOrder(t)
}

// TestSourceCheckpointInterval reads with a checkpoint interval longer
// than the test: a shard's first batch is checkpointed, the next ones are
// not until the worker stops, which writes down what its handler took; a
// second worker then hands over only new events.
func TestSourceCheckpointInterval(t *testing.T) {
	kc := client(t, endpoint(t))
	dc := dynamoClient(t, awstest.Endpoint(t, awstest.DynamoDBEnv))
	name, table := newStream(t, kc, 1), newLeaseTable(t, dc)
	w := newWriter(t, kc, name)
	w.write(t, 1000)
	seen := newSeenLog()
	opts := sourceOptions(name, table, "w1")
	opts.Checkpoint = time.Hour
	s1 := newSource(t, kc, dc, opts)
	stop := run(t, s1, seen.handler("w1"))
	// The source counts a batch after its handler returns: wait for its
	// count of events, which follows its count of batches, not for the
	// handler's (the last batch was not counted yet, now and then).
	waitFor(t, "1000 events", func() bool { return seen.count() == 1000 && s1.Stats().Events == 1000 })
	if st := s1.Stats(); st.Checkpoints != 1 || st.Batches < 10 {
		t.Fatalf("%d checkpoints of %d batches, want the first batch's only", st.Checkpoints, st.Batches)
	}
	stop()
	if st := s1.Stats(); st.Checkpoints != 2 {
		t.Fatalf("%d checkpoints after stopping, want one more", st.Checkpoints)
	}
	w.write(t, 200)
	s2 := newSource(t, kc, dc, sourceOptions(name, table, "w2"))
	stop = run(t, s2, seen.handler("w2"))
	waitFor(t, "1200 events", func() bool { return seen.count() == 1200 })
	stop()
	if st := s2.Stats(); st.Events != 200 {
		t.Fatalf("second worker handled %d events, want the 200 new ones", st.Events)
	}
	seen.checkOrder(t)
}

// shardLog records the calls a stream.Handler gets.
type shardLog struct {
	mu    sync.Mutex
	calls []string // "open <shard>", "close <shard> ended|stopped"
	idle  map[string]int
	seen  *seenLog
}

var _ stream.Handler = (*shardLog)(nil)

func (l *shardLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, s)
}

func (l *shardLog) Open(_ context.Context, shard string, from stream.Position) (stream.Position, error) {
	l.add("open " + shard)
	return from, nil
}

func (l *shardLog) Handle(ctx context.Context, b *stream.Batch) error {
	return l.seen.handler("w")(ctx, b)
}

func (l *shardLog) Idle(_ context.Context, shard string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.idle[shard]++
	return nil
}

func (l *shardLog) Close(_ context.Context, shard string, ended bool) error {
	l.add(fmt.Sprint("close ", shard, " ", map[bool]string{true: "ended", false: "stopped"}[ended]))
	return nil
}

// TestSourceShardHandler: a handler is opened on each shard, told
// when a shard is caught up, closed as ended when a split ends a shard and
// as stopped when the worker stops.
func TestSourceShardHandler(t *testing.T) {
	kc := client(t, endpoint(t))
	dc := dynamoClient(t, awstest.Endpoint(t, awstest.DynamoDBEnv))
	name, table := newStream(t, kc, 1), newLeaseTable(t, dc)
	w := newWriter(t, kc, name)
	w.write(t, 300)
	l := &shardLog{idle: map[string]int{}, seen: newSeenLog()}
	s := newSource(t, kc, dc, sourceOptions(name, table, "w"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, l) }()
	waitFor(t, "the parent to go quiet", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.seen.count() == 300 && l.idle["shardId-000000000000"] > 0
	})
	splitShard(t, kc, name)
	w.write(t, 300)
	waitFor(t, "600 events", func() bool { return l.seen.count() == 600 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, c := range l.calls {
		got[c]++
	}
	want := map[string]int{"open shardId-000000000000": 1, "close shardId-000000000000 ended": 1,
		"open shardId-000000000001": 1, "close shardId-000000000001 stopped": 1,
		"open shardId-000000000002": 1, "close shardId-000000000002 stopped": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("calls %v, want %v", l.calls, want)
	}
	if l.calls[0] != "open shardId-000000000000" || l.calls[1] != "close shardId-000000000000 ended" {
		t.Fatalf("calls %v: want the parent opened and ended first", l.calls)
	}
}

// TestSourceTakeover runs two workers on four shards; they split them two
// and two. Then one worker's network is cut (a crash, as far as the others
// can tell): the other takes its shards after the lease duration and
// resumes from its checkpoints. No event is lost; the only events handled
// twice are the ones the cut worker handled after its last checkpoint,
// at most one batch per shard.
func TestSourceTakeover(t *testing.T) {
	kep, dep := endpoint(t), awstest.Endpoint(t, awstest.DynamoDBEnv)
	kc, dc := client(t, kep), dynamoClient(t, dep)
	name, table := newStream(t, kc, 4), newLeaseTable(t, dc)
	kp, dp := &proxy{target: kep}, &proxy{target: dep}
	ks, ds := httptest.NewServer(kp), httptest.NewServer(dp)
	t.Cleanup(ks.Close)
	t.Cleanup(ds.Close)

	w := newWriter(t, kc, name)
	w.write(t, 2000)
	seen := newSeenLog()
	a := newSource(t, client(t, ks.URL), dynamoClient(t, ds.URL), sourceOptions(name, table, "a"))
	b := newSource(t, kc, dc, sourceOptions(name, table, "b"))
	// a reads everything first, so that b's steals find it idle: a steal
	// from a busy worker may have the thief handle again the victim's
	// last batch, which would blur what this test counts.
	ha, hb := &openLog{Handler: seen.handler("a")}, &openLog{Handler: seen.handler("b")}
	stopA := run(t, a, ha)
	defer stopA()
	waitFor(t, "a to read the first 2000 events", func() bool { return seen.count() == 2000 })
	stopB := run(t, b, hb)
	defer stopB()
	waitFor(t, "two shards each", func() bool { return len(a.Held()) == 2 && len(b.Held()) == 2 })
	w.write(t, 2000)
	waitFor(t, "some of the second 2000 events", func() bool { return seen.count() > 2500 })

	kp.down.Store(true)
	dp.down.Store(true)
	waitFor(t, "b to hold all four shards", func() bool { return len(b.Held()) == 4 })
	w.write(t, 2000)
	waitFor(t, "6000 events", func() bool { return seen.count() == 6000 })
	stopB()

	seen.mu.Lock()
	dups := 0
	for id, ws := range seen.by {
		switch {
		case len(ws) == 1:
		case len(ws) == 2 && ws[0] == "a" && ws[1] == "b":
			dups++
		default:
			t.Fatalf("event %s handled by %v: only a's uncheckpointed events may be handled again, by b", id, ws)
		}
	}
	seen.mu.Unlock()
	if max := 2 * 100; dups > max {
		t.Fatalf("%d events handled twice, want at most one batch (100) per shard a held", dups)
	}
	if st := b.Stats(); st.Taken < 4 {
		t.Fatalf("b took %d leases, want its two and a's two: %+v", st.Taken, st)
	}
	// Every shard b opened was a's, stolen or expired: its Open was told
	// a may still be handling it; a's, free, were not.
	if ds := hb.takenOver(); len(ds) < 4 || slices.ContainsFunc(ds, func(d time.Duration) bool { return d != 900*time.Millisecond }) {
		t.Errorf("b's Opens told the shard was taken over for %v, want 900ms each", ds)
	}
	if ds := ha.takenOver(); len(ds) < 4 || slices.ContainsFunc(ds, func(d time.Duration) bool { return d != 0 }) {
		t.Errorf("a's Opens told the shard was taken over for %v, want none", ds)
	}
	t.Logf("a %+v; b %+v; %d events handled twice", a.Stats(), b.Stats(), dups)
}

// openLog is a Handler that records what stream.TakenOverFor says at each
// Open.
type openLog struct {
	stream.Handler
	mu sync.Mutex
	ds []time.Duration
}

func (o *openLog) Open(ctx context.Context, shard string, from stream.Position) (stream.Position, error) {
	o.mu.Lock()
	o.ds = append(o.ds, stream.TakenOverFor(ctx))
	o.mu.Unlock()
	return o.Handler.Open(ctx, shard, from)
}

func (o *openLog) takenOver() []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.ds)
}

// splitShard splits the only shard of stream in two halves of the hash
// key space, waits until the stream is active again, and returns the
// parent's id.
func splitShard(t *testing.T, kc *kinesis.Client, name string) string {
	t.Helper()
	ctx := context.Background()
	shards, err := kc.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	// At the middle of the shard's hash-key range, as UpdateShardCount
	// and aws init split.
	lo, _ := new(big.Int).SetString(aws.ToString(shards.Shards[0].HashKeyRange.StartingHashKey), 10)
	hi, _ := new(big.Int).SetString(aws.ToString(shards.Shards[0].HashKeyRange.EndingHashKey), 10)
	mid := lo.Add(lo, hi.Add(hi, big.NewInt(1))).Rsh(lo, 1)
	if _, err := kc.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String(name),
		ShardToSplit: shards.Shards[0].ShardId, NewStartingHashKey: aws.String(mid.String())}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stream to be active", func() bool {
		out, err := kc.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
		return err == nil && out.StreamDescriptionSummary.StreamStatus == types.StreamStatusActive
	})
	return aws.ToString(shards.Shards[0].ShardId)
}

// TestSourceReshard splits the stream's only shard while a worker reads
// it: the parent is read to its end before either child, so every
// partition's events are handled in the order written.
func TestSourceReshard(t *testing.T) {
	kc := client(t, endpoint(t))
	dc := dynamoClient(t, awstest.Endpoint(t, awstest.DynamoDBEnv))
	name, table := newStream(t, kc, 1), newLeaseTable(t, dc)
	w := newWriter(t, kc, name)
	w.write(t, 1500)
	seen := newSeenLog()
	s := newSource(t, kc, dc, sourceOptions(name, table, "w"))
	stop := run(t, s, seen.handler("w"))
	defer stop()
	waitFor(t, "the first events", func() bool { return seen.count() > 0 })

	ctx := context.Background()
	splitShard(t, kc, name)
	w.write(t, 1500) // on the children
	waitFor(t, "3000 events", func() bool { return seen.count() == 3000 })
	seen.checkOrder(t)
	for id, ws := range seen.by {
		if len(ws) != 1 {
			t.Fatalf("event %s handled %d times", id, len(ws))
		}
	}
	// The parent's lease goes once both children have checkpoints; a new
	// worker's discovery does not make it again.
	waitFor(t, "the parent's lease to be cleaned", func() bool { return s.Stats().Cleaned == 1 })
	stop()
	again := newSource(t, kc, dc, sourceOptions(name, table, "again"))
	if err := again.discover(ctx); err != nil {
		t.Fatal(err)
	}
	leases, err := (&leases{api: dc, table: table, group: "ratewarden/" + name}).list(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != 2 {
		t.Fatalf("leases %+v, want the two children's", leases)
	}
	for _, le := range leases {
		if len(le.parents) != 1 || le.seq == "" {
			t.Fatalf("lease %+v: want a child with a checkpoint", le)
		}
	}
}

// BenchmarkSource reads a 4-shard stream of 20,000 events out of
// kinesalite with one worker, leases and checkpoints in dynalite; each
// iteration is a new consumer group reading the stream from its start.
func BenchmarkSource(b *testing.B) {
	kc := client(b, endpoint(b))
	dc := dynamoClient(b, awstest.Endpoint(b, awstest.DynamoDBEnv))
	name, table := newStream(b, kc, 4), newLeaseTable(b, dc)
	sink, err := New(kc, Options{Stream: name, Partitions: 4})
	if err != nil {
		b.Fatal(err)
	}
	const total = 20_000
	g := decisiontest.NewGenerator(51, start)
	for range total / 1000 {
		if err := sink.WriteBatch(g.Batch(1000)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	group := 0
	for b.Loop() {
		group++
		var n atomic.Int64
		done := make(chan struct{})
		finish := sync.OnceFunc(func() { close(done) })
		opts := SourceOptions{Stream: name, Table: table, Group: fmt.Sprint("bench-", group), LeaseDuration: time.Second,
			Discover: time.Hour, Poll: 20 * time.Millisecond}
		s, err := NewSource(kc, dc, opts)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			s.Run(ctx, stream.HandleFunc(func(_ context.Context, bt *stream.Batch) error {
				if n.Add(int64(len(bt.Events))) >= total {
					finish()
				}
				return nil
			}))
		}()
		<-done
		cancel()
	}
	b.ReportMetric(float64(total*group)/b.Elapsed().Seconds(), "events/s")
}

// TestSourceRowsResumes: a worker reading events checkpoints in batches
// smaller than its records; a worker handed undecoded records
// (SourceOptions.Rows) then resumes at its checkpoint and takes only the
// new rows (Batch.Rows skipping a record's rows before From is
// TestKinesisRedeliveredRecords', in the aggregator). A corrupt record is skipped and counted once, though the
// batch that holds it is handled twice (the first call fails).
func TestSourceRowsResumes(t *testing.T) {
	kc := client(t, endpoint(t))
	dc := dynamoClient(t, awstest.Endpoint(t, awstest.DynamoDBEnv))
	name, table := newStream(t, kc, 1), newLeaseTable(t, dc)
	w, _ := readFirst(t, kc, dc, name, table)
	if _, err := kc.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String(name),
		PartitionKey: aws.String("x"), Data: []byte{byte(columnar.CodecArrow), 1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	w.write(t, 300)
	o := sourceOptions(name, table, "w2")
	o.Rows = true
	s2 := newSource(t, kc, dc, o)
	var rows, calls atomic.Int64
	dec := columnar.NewDecoder()
	stop := run(t, s2, stream.HandleFunc(func(_ context.Context, b *stream.Batch) error {
		if len(b.Events) != 0 || len(b.Records) == 0 {
			t.Errorf("a batch of %d events and %d records", len(b.Events), len(b.Records))
		}
		var got int64
		n, err := b.Rows(dec, func(r *stream.Rows) error {
			got += int64(r.Len() - r.Lo)
			return nil
		})
		if err != nil || uint64(got) != n {
			t.Errorf("Rows: %d rows, returned %d (%v)", got, n, err)
		}
		if calls.Add(1) == 1 {
			return fmt.Errorf("fail the first call")
		}
		rows.Add(got)
		return nil
	}))
	waitFor(t, "300 rows", func() bool { return rows.Load() >= 300 })
	stop()
	if st := s2.Stats(); rows.Load() != 300 || st.Events != 300 || st.Corrupt != 1 || st.Retries == 0 {
		t.Fatalf("second worker took %d rows, stats %+v; want 300 events, one corrupt record, a retry", rows.Load(), st)
	}
}

// rewind is a handler that keeps its own position: the shard's start.
type rewind struct {
	stream.HandleFunc
	mu   sync.Mutex
	from []stream.Position // the positions Open was called with
}

func (r *rewind) Open(_ context.Context, _ string, from stream.Position) (stream.Position, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.from = append(r.from, from)
	return stream.Position{}, nil
}

// TestSourceReadsFromOpen: a worker resumes a shard from the position its
// handler's Open returns, not from the lease's checkpoint: a handler at the
// shard's start gets every event again, then the new ones.
func TestSourceReadsFromOpen(t *testing.T) {
	kc := client(t, endpoint(t))
	dc := dynamoClient(t, awstest.Endpoint(t, awstest.DynamoDBEnv))
	name, table := newStream(t, kc, 1), newLeaseTable(t, dc)
	w, _ := readFirst(t, kc, dc, name, table)
	w.write(t, 100)
	seen := newSeenLog()
	h := &rewind{HandleFunc: seen.handler("w2")}
	s2 := newSource(t, kc, dc, sourceOptions(name, table, "w2"))
	stop := run(t, s2, h)
	waitFor(t, "1150 events", func() bool { return seen.count() == 1150 })
	stop()
	if st := s2.Stats(); st.Events != 1150 {
		t.Fatalf("second worker handled %d events, want all 1150: %+v", st.Events, st)
	}
	if len(h.from) != 1 || h.from[0].Seq == "" {
		t.Fatalf("Open called with %v, want the first worker's checkpoint", h.from)
	}
	seen.checkOrder(t)
}

// TestSourceCountsEventsOnce: a handler that reads a batch of decoded
// events through Batch.Rows does not make the Source count them twice.
func TestSourceCountsEventsOnce(t *testing.T) {
	kc := client(t, endpoint(t))
	dc := dynamoClient(t, awstest.Endpoint(t, awstest.DynamoDBEnv))
	name, table := newStream(t, kc, 1), newLeaseTable(t, dc)
	newWriter(t, kc, name).write(t, 300)
	var got atomic.Uint64
	dec := columnar.NewDecoder()
	h := stream.HandleFunc(func(_ context.Context, b *stream.Batch) error {
		n, err := b.Rows(dec, func(*stream.Rows) error { return nil })
		got.Add(n)
		return err
	})
	s := newSource(t, kc, dc, sourceOptions(name, table, "w1"))
	stop := run(t, s, h)
	waitFor(t, "300 events", func() bool { return got.Load() == 300 })
	stop()
	if st := s.Stats(); st.Events != 300 {
		t.Fatalf("the source counted %d events, the handler read 300", st.Events)
	}
}

// TestSourceRefusedAtStart: a stream or a lease table that does not exist
// stops Run with an error naming it, when the first discovery is refused.
// Before, the refusal was dropped and tried again every Discover: an
// aggregator pointed at a mistyped stream read nothing and said nothing
// until stopped. The context's deadline only bounds the test.
func TestSourceRefusedAtStart(t *testing.T) {
	kc := client(t, endpoint(t))
	dc := dynamoClient(t, awstest.Endpoint(t, awstest.DynamoDBEnv))
	name, table := newStream(t, kc, 1), newLeaseTable(t, dc)
	for _, c := range []struct{ stream, table, want string }{
		{"no-such-stream-" + name, table, "no-such-stream-" + name},
		{name, "no-such-table-" + table, "no-such-table-" + table},
	} {
		s := newSource(t, kc, dc, sourceOptions(c.stream, c.table, "w1"))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.Run(ctx, stream.HandleFunc(func(context.Context, *stream.Batch) error { return nil }))
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "ResourceNotFound") {
			t.Errorf("Run on stream %s, table %s = %v, want an error naming %s", c.stream, c.table, err, c.want)
		}
	}
}

// TestRefusedForGood: which first discoveries' errors end Run. A stream
// still being created (ResourceInUseException, which kinesalite never
// answers to ListShards) is waited for, as throttling and server errors
// are; a missing stream or table and a denied call end it.
func TestRefusedForGood(t *testing.T) {
	for _, c := range []struct {
		code string
		want bool
	}{
		{"ResourceInUseException", false},
		{"LimitExceededException", false},
		{"InternalFailure", false},
		{"ResourceNotFoundException", true},
		{"AccessDeniedException", true},
	} {
		err := fmt.Errorf("list shards: %w", &smithy.GenericAPIError{Code: c.code})
		if got := refusedForGood(err); got != c.want {
			t.Errorf("refusedForGood(%s) = %v, want %v", c.code, got, c.want)
		}
	}
}

// quiet is a handler's Idle and Close that do nothing.
type quiet struct{}

func (quiet) Idle(context.Context, string) error        { return nil }
func (quiet) Close(context.Context, string, bool) error { return nil }

// reopener is a handler whose Handle, once it has taken failAfter events,
// fails once with stream.ErrReopen (its state moved under it); its next
// Open returns the shard's start.
type reopener struct {
	quiet
	seen      *seenLog
	failAfter int
	mu        sync.Mutex
	handled   int
	failed    bool
	from      []stream.Position // the positions Open was called with
	takenOver []time.Duration   // and what stream.TakenOverFor said
}

func (r *reopener) Open(ctx context.Context, _ string, from stream.Position) (stream.Position, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.from = append(r.from, from)
	r.takenOver = append(r.takenOver, stream.TakenOverFor(ctx))
	if r.failed {
		return stream.Position{}, nil
	}
	return from, nil
}

func (r *reopener) Handle(ctx context.Context, b *stream.Batch) error {
	r.mu.Lock()
	if !r.failed && r.handled >= r.failAfter {
		r.failed = true
		r.mu.Unlock()
		return fmt.Errorf("save state: %w", stream.ErrReopen)
	}
	r.handled += len(b.Events)
	r.mu.Unlock()
	return r.seen.handler("w1")(ctx, b)
}

// TestSourceReopens: a handler whose state moved under it (another worker
// saved it while the two overlapped) fails a batch with stream.ErrReopen:
// the worker, still holding the lease, opens the shard again and reads
// from the position Open returns (here the shard's start, so the events
// before come again), every event handled, in order; the Open again is
// told the other worker may still be handling the shard for a lease
// duration (stream.TakenOver), the first was not. Before, such a call
// was made again and again, and failed each time, until the worker was
// restarted: the shard's last windows waited.
func TestSourceReopens(t *testing.T) {
	kc := client(t, endpoint(t))
	dc := dynamoClient(t, awstest.Endpoint(t, awstest.DynamoDBEnv))
	name, table := newStream(t, kc, 1), newLeaseTable(t, dc)
	newWriter(t, kc, name).write(t, 1050)
	seen := newSeenLog()
	h := &reopener{seen: seen, failAfter: 300}
	s := newSource(t, kc, dc, sourceOptions(name, table, "w1"))
	stop := run(t, s, h)
	waitFor(t, "1050 events", func() bool { return seen.count() == 1050 })
	twice := func() int {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		n := 0
		for _, ws := range seen.by {
			if len(ws) > 1 {
				n++
			}
		}
		return n
	}
	waitFor(t, "the events before the reopening twice", func() bool { return twice() >= 300 })
	stop()
	st := s.Stats()
	if st.Reopened != 1 || st.Lost != 0 || len(h.from) != 2 || h.from[1].Seq == "" {
		t.Fatalf("stats %+v, Open called with %v: want one reopening, at the position handled", st, h.from)
	}
	if want := []time.Duration{0, 900 * time.Millisecond}; !slices.Equal(h.takenOver, want) {
		t.Errorf("Open told the shard was taken over from a live worker for %v, want %v", h.takenOver, want)
	}
	if n := twice(); n >= 1050 {
		t.Errorf("%d events handled twice, want those before the reopening (300 or a few more)", n)
	}
	seen.checkOrder(t)
}

// sharedState is a handler's durable state of each shard, as the
// aggregator keeps it in its state table: a position and a version that
// each save bumps; stateHandler is one worker's handler over it, which
// refuses to save over a version it did not read (stream.ErrReopen).
type sharedState struct {
	mu  sync.Mutex
	pos map[string]stream.Position
	ver map[string]int
	by  map[string][]string // event id → workers that saved it
}

type stateHandler struct {
	quiet
	st     *sharedState
	worker string
	loaded map[string]int // by shard: the version last read or saved
	work   time.Duration  // each batch's handling before its save
	opened []time.Time    // when Open was called
	// takenOver is what stream.TakenOverFor said at each Open, by shard.
	takenOver map[string][]time.Duration
}

func (h *stateHandler) Open(ctx context.Context, shard string, from stream.Position) (stream.Position, error) {
	h.st.mu.Lock()
	defer h.st.mu.Unlock()
	h.opened = append(h.opened, time.Now())
	if h.takenOver == nil {
		h.takenOver = map[string][]time.Duration{}
	}
	h.takenOver[shard] = append(h.takenOver[shard], stream.TakenOverFor(ctx))
	h.loaded[shard] = h.st.ver[shard]
	if p, ok := h.st.pos[shard]; ok {
		return p, nil
	}
	return from, nil
}

func (h *stateHandler) Handle(_ context.Context, b *stream.Batch) error {
	time.Sleep(h.work)
	h.st.mu.Lock()
	defer h.st.mu.Unlock()
	if h.st.ver[b.Partition] != h.loaded[b.Partition] {
		return fmt.Errorf("save %s: %w", b.Partition, stream.ErrReopen)
	}
	for i := range b.Events {
		id := b.Events[i].RequestID
		h.st.by[id] = append(h.st.by[id], h.worker)
	}
	h.st.pos[b.Partition] = b.To
	h.st.ver[b.Partition]++
	h.loaded[b.Partition] = h.st.ver[b.Partition]
	return nil
}

// TestSourceStealWaits: a worker that steals a shard from a busy one waits
// two thirds of a lease duration (600 ms here) before it opens it
// (stealWait), so that the other, which sees the steal at its next
// checkpoint or renewal, has saved its last batch: the thief opens the
// shard where the other's state left it, no save of one is refused for
// the other's (no reopening), and no event is saved twice. Before, the
// thief opened the shard at once (a few milliseconds after it started),
// and the two could read it side by side until the other stopped: both
// delivered what they read meanwhile.
func TestSourceStealWaits(t *testing.T) {
	kc := client(t, endpoint(t))
	dc := dynamoClient(t, awstest.Endpoint(t, awstest.DynamoDBEnv))
	name, table := newStream(t, kc, 2), newLeaseTable(t, dc)
	st := &sharedState{pos: map[string]stream.Position{}, ver: map[string]int{}, by: map[string][]string{}}
	// Each batch takes a while before its save, as the aggregator's
	// rollup, state write and deliveries do.
	handler := func(w string) *stateHandler {
		return &stateHandler{st: st, worker: w, loaded: map[string]int{}, work: 150 * time.Millisecond}
	}
	w := newWriter(t, kc, name)
	written := make(chan int)
	stopWriting := make(chan struct{})
	go func() {
		for {
			select {
			case <-stopWriting:
				written <- w.n
				return
			case <-time.After(10 * time.Millisecond):
				ds := w.g.Batch(20)
				for i := range ds {
					ds[i].RequestID = fmt.Sprintf("e%d", w.n)
					w.n++
				}
				if err := w.sink.WriteBatch(ds); err != nil {
					t.Error(err) // not Fatal: not the test's goroutine
					w.n -= len(ds)
				}
			}
		}
	}()
	a, ha := newSource(t, kc, dc, sourceOptions(name, table, "a")), handler("a")
	stopA := run(t, a, ha)
	defer stopA()
	saved := func() int {
		st.mu.Lock()
		defer st.mu.Unlock()
		return len(st.by)
	}
	waitFor(t, "a to read both shards", func() bool { return len(a.Held()) == 2 && saved() > 200 })
	b, hb := newSource(t, kc, dc, sourceOptions(name, table, "b")), handler("b")
	bStart := time.Now()
	stopB := run(t, b, hb)
	defer stopB()
	waitFor(t, "b to steal a shard and read it", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		for _, ws := range st.by {
			if ws[len(ws)-1] == "b" {
				return len(b.Held()) == 1
			}
		}
		return false
	})
	close(stopWriting)
	n := <-written
	waitFor(t, "every event", func() bool { return saved() == n })
	stopA()
	stopB()
	twice := 0
	for _, ws := range st.by {
		if len(ws) > 1 {
			twice++
		}
	}
	st.mu.Lock()
	firstOpen := hb.opened[0]
	st.mu.Unlock()
	if wait := 600 * time.Millisecond; firstOpen.Sub(bStart) < wait {
		t.Errorf("b opened the shard it stole %v after it started, before the %v it waits", firstOpen.Sub(bStart), wait)
	}
	if ra, rb := a.Stats().Reopened, b.Stats().Reopened; twice > 0 || ra+rb > 0 {
		t.Errorf("%d of %d events saved twice, %d and %d reopenings: the thief read beside the worker it stole from", twice, n, ra, rb)
	}
	// The thief's Open is told the worker it stole from may still be
	// handling the shard, for a lease duration; the first holder's were
	// not (their leases were free).
	st.mu.Lock()
	defer st.mu.Unlock()
	for shard, ds := range hb.takenOver {
		if want := []time.Duration{900 * time.Millisecond}; !slices.Equal(ds, want) {
			t.Errorf("b's Open of %s told it was taken over for %v, want %v", shard, ds, want)
		}
	}
	for shard, ds := range ha.takenOver {
		if ds[0] != 0 {
			t.Errorf("a's first Open of %s told it was taken over (%v), from no one", shard, ds)
		}
	}
}

// holdHandler holds the first batch of the first shard handed to it until
// released (whatever its context, as a sink that finishes its writes
// does), and notes whether that context was done when it was released,
// or when it was done (with release nil).
type holdHandler struct {
	mu      sync.Mutex
	shard   string        // the held shard, once handed
	holding chan struct{} // closed once the batch is held
	release chan struct{} // nil: the batch is held until its context is done
	ctxErr  error         // the held batch's context's error at its end
	ended   time.Time     // when the held call returned
}

func (h *holdHandler) Open(_ context.Context, _ string, from stream.Position) (stream.Position, error) {
	return from, nil
}

func (h *holdHandler) Handle(ctx context.Context, b *stream.Batch) error {
	h.mu.Lock()
	first := h.shard == ""
	if first {
		h.shard = b.Partition
	}
	h.mu.Unlock()
	if !first {
		return nil
	}
	close(h.holding)
	if h.release != nil {
		<-h.release
	} else {
		<-ctx.Done()
	}
	h.mu.Lock()
	h.ctxErr, h.ended = ctx.Err(), time.Now()
	h.mu.Unlock()
	return nil
}

func (h *holdHandler) Idle(context.Context, string) error        { return nil }
func (h *holdHandler) Close(context.Context, string, bool) error { return nil }
func (h *holdHandler) held() (string, error, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.shard, h.ctxErr, h.ended
}

// TestSourceLostLeaseGrace takes a shard from a worker whose handler is in
// the middle of a batch of it. The worker goes on renewing its other lease
// while that call runs, and the call keeps its context for 5/3 of a lease
// duration (as long as the thief waits for what it delivers), then it is
// done. The thief here renews nothing, and the worker takes the shard
// back once the call has ended. Before, the lost lease's consumer was
// stopped and waited for at the renewal: its handler's context was done
// at once, and a call that did not end with it held every other renewal
// up.
func TestSourceLostLeaseGrace(t *testing.T) {
	for _, finish := range []bool{true, false} {
		t.Run(fmt.Sprintf("finish=%v", finish), func(t *testing.T) {
			kc := client(t, endpoint(t))
			dc := dynamoClient(t, awstest.Endpoint(t, awstest.DynamoDBEnv))
			name, table := newStream(t, kc, 2), newLeaseTable(t, dc)
			newWriter(t, kc, name).write(t, 200)
			o := sourceOptions(name, table, "a")
			o.LeaseDuration = 3 * time.Second
			a := newSource(t, kc, dc, o)
			h := &holdHandler{holding: make(chan struct{})}
			release := func() {}
			if finish {
				h.release = make(chan struct{})
				release = sync.OnceFunc(func() { close(h.release) })
			}
			stop := run(t, a, h)
			defer stop()
			defer release() // before stop, should the test fail first
			<-h.holding
			held, _, _ := h.held()
			waitFor(t, "a to hold both shards", func() bool { return len(a.Held()) == 2 })
			// Another worker takes the held shard's lease.
			ls := a.leases
			counter := func(shard string) (owner string, n int64) {
				all, err := ls.list(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				for _, le := range all {
					if le.shard == shard {
						return le.owner, le.counter
					}
				}
				t.Fatalf("no lease of %s", shard)
				return "", 0
			}
			_, n := counter(held)
			if err := ls.take(context.Background(), held, "b", n); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "a to find the lease lost", func() bool { return a.Stats().Lost == 1 })
			lostAt := time.Now()
			if got, st := a.Held(), a.Stats(); len(got) != 1 || got[0] == held || st.Held != 1 {
				t.Fatalf("a holds %v (stats: %d) after losing %s, want its other shard only", got, st.Held, held)
			}
			other := a.Held()[0]
			_, before := counter(other)
			// Two renewals of the other lease (every second) while the call
			// on the lost shard runs.
			time.Sleep(2200 * time.Millisecond)
			owner, after := counter(other)
			if owner != "a" || after < before+2 {
				t.Errorf("a's other lease: owner %q, counter %d then %d 2.2 s later, want a's, renewed twice: renewals waited for the lost shard's call", owner, before, after)
			}
			release()
			waitFor(t, "the held call to end", func() bool { _, _, end := h.held(); return !end.IsZero() })
			_, err, end := h.held()
			switch {
			case finish && err != nil:
				t.Errorf("the held call's context was done (%v) %v after the lease was lost, within the lease duration", err, end.Sub(lostAt))
			case !finish && (end.Sub(lostAt) < 4500*time.Millisecond || end.Sub(lostAt) > 7*time.Second):
				t.Errorf("the held call's context was done %v after the lease was lost, want 5/3 of a lease duration (5 s)", end.Sub(lostAt))
			}
			// b renews nothing: a takes the lease back once it expires, and
			// reads the shard again once the call left behind has ended.
			waitFor(t, "a to hold both shards again", func() bool { return len(a.Held()) == 2 })
		})
	}
}

// TestHandlerGraceProgress: a handler call's context outlives its
// consumer's by the grace, and by the grace after each progress the call
// reports (stream.Progress): a call that reports every third of a lease
// keeps its context for as long as it does, and loses it a grace after
// its last report; before its consumer stops, reports change nothing; a
// call that reports forever is told to stop reporting
// stream.MaxProgressWaits lease durations after its consumer stopped,
// and loses its context a grace after its last report that extended it.
func TestHandlerGraceProgress(t *testing.T) {
	const lease = 600 * time.Millisecond
	const grace = lease * 5 / 3 // graceLeases
	for _, reports := range []string{"none", "for a while", "forever"} {
		ctx, cancel := context.WithCancel(context.Background())
		hctx, hcancel := handlerGrace(ctx, lease)
		pr, ok := stream.ProgressOf(hctx)
		if !ok || pr.Every != lease/3 {
			t.Fatalf("progress asked every %v (%v), want %v", pr.Every, ok, lease/3)
		}
		if !pr.Report() { // the consumer has not stopped: nothing to extend
			t.Fatal("a report before the consumer stopped says to stop reporting")
		}
		if pr.Stopped() {
			t.Fatal("stopped before the consumer's context ended")
		}
		cancel()
		if !pr.Stopped() {
			t.Fatal("not stopped once the consumer's context ended")
		}
		stopped := time.Now()
		lastReport := stopped
		switch reports {
		case "for a while":
			for time.Since(stopped) < 3*grace {
				pr.Report()
				lastReport = time.Now()
				if hctx.Err() != nil {
					t.Fatalf("the call's context ended %v after its consumer's, reported every %v (grace %v)", time.Since(stopped), pr.Every, grace)
				}
				time.Sleep(pr.Every)
			}
		case "forever":
			limit := stream.MaxProgressWaits*lease + grace
			var refused time.Duration // when a report first said to stop
			for hctx.Err() == nil && time.Since(stopped) < 10*limit {
				if !pr.Report() && refused == 0 {
					refused = time.Since(stopped)
				}
				time.Sleep(pr.Every)
			}
			took := time.Since(stopped)
			if hctx.Err() == nil || took < stream.MaxProgressWaits*lease || refused < stream.MaxProgressWaits*lease || refused > took {
				t.Fatalf("reported forever: the call's context ended %v (%v) after its consumer's, reports refused from %v; want both after %v, about %v",
					took, hctx.Err(), refused, stream.MaxProgressWaits*lease, limit)
			}
			t.Logf("reported forever: reports refused %v, the context ended %v after its consumer's (limit %v)", refused, took, limit)
			hcancel()
			continue
		}
		select {
		case <-hctx.Done():
			if took := time.Since(lastReport); took < grace-grace/10 {
				t.Errorf("reports %s: the call's context ended %v after the last report, want the grace, %v", reports, took, grace)
			}
		case <-time.After(10 * grace):
			t.Fatalf("reports %s: the call's context still open %v after the last report", reports, 10*grace)
		}
		hcancel()
	}
}
