package aggregator

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"math"

	"fmt"
	"math/big"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/kinesis"
	"github.com/ratewarden/ratewarden/decisions/stream"
)

// standIns are the Kinesis and DynamoDB clients of the stand-ins.
type standIns struct {
	kc *awskinesis.Client
	dc *dynamodb.Client
}

// standInRegion is where these tests make their streams: kinesalite
// bounds the shards of a region, which other packages' tests share.
const standInRegion = "eu-west-1"

func newStandIns(t testing.TB) standIns {
	kep, dep := awstest.Endpoint(t, awstest.KinesisEnv), awstest.Endpoint(t, awstest.DynamoDBEnv)
	cfg := awstest.Config(t)
	cfg.Region = standInRegion
	return standIns{
		kc: awskinesis.NewFromConfig(cfg, func(o *awskinesis.Options) { o.BaseEndpoint = aws.String(kep) }),
		dc: dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(dep) }),
	}
}

var names atomic.Int64

// stream creates a stream of n shards and a lease table, and returns
// their names.
func (s standIns) stream(t testing.TB, shards int32) (stream, table string) {
	t.Helper()
	suffix := fmt.Sprintf("%d-%d", time.Now().UnixNano(), names.Add(1))
	stream, table = "agg-"+suffix, "agg-leases-"+suffix
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.kc.CreateStream(ctx, &awskinesis.CreateStreamInput{StreamName: aws.String(stream), ShardCount: aws.Int32(shards)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.kc.DeleteStream(context.Background(), &awskinesis.DeleteStreamInput{StreamName: aws.String(stream)})
	})
	w := awskinesis.NewStreamExistsWaiter(s.kc, func(o *awskinesis.StreamExistsWaiterOptions) { o.MinDelay = 20 * time.Millisecond })
	if err := w.Wait(ctx, &awskinesis.DescribeStreamInput{StreamName: aws.String(stream)}, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	awstest.CreateTable(t, s.dc, kinesis.LeaseTableSpec(table))
	return stream, table
}

// put writes ds through the real Kinesis sink, 8 partitions, 500 events
// a call: explicit hash keys spread the identities over the shards.
func (s standIns) put(t testing.TB, stream string, ds []decisions.Decision) {
	t.Helper()
	sink, err := kinesis.New(s.kc, kinesis.Options{Stream: stream, Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(ds); i += 500 {
		if err := sink.WriteBatch(ds[i:min(i+500, len(ds))]); err != nil {
			t.Fatal(err)
		}
	}
}

// kinesisOptions reads stream with worker's id in the consumer group
// "agg", keeping state in store and writing to sink.
func (s standIns) options(stream, table, worker string, store StateStore, sink Sink) KinesisOptions {
	return KinesisOptions{Stream: s.kc, Leases: s.dc, Store: store, Sinks: []Sink{sink},
		Source: kinesis.SourceOptions{Stream: stream, Table: table, Group: "agg", Worker: worker,
			LeaseDuration: 900 * time.Millisecond, Discover: 200 * time.Millisecond, Poll: 50 * time.Millisecond,
			Records: 10, MaxBatch: 300},
		Rollup: Options{Window: time.Second, Lateness: 100 * time.Millisecond, Idle: 300 * time.Millisecond}}
}

// running is a RunKinesis in a goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan error
	stats  KinesisStats
}

func start(o KinesisOptions) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() {
		var err error
		r.stats, err = RunKinesis(ctx, o)
		r.done <- err
	}()
	return r
}

func (r *running) stop(t *testing.T) KinesisStats {
	t.Helper()
	r.cancel()
	if err := <-r.done; err != nil {
		t.Fatal(err)
	}
	return r.stats
}

// waitEvents waits until the partials under dir hold n events.
func waitEvents(t *testing.T, dir string, n int) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		e, _ := totals(t, dir, time.Second)
		if e == uint64(n) {
			return
		}
		if e > uint64(n) || time.Now().After(deadline) {
			t.Fatalf("the partials hold %d events, want %d", e, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func decidedOf(ds []decisions.Decision) (n uint64) {
	for _, d := range ds {
		if d.Kind == decisions.KindDecision {
			n++
		}
	}
	return n
}

// sameFiles fails unless got holds exactly want's files, byte for byte.
func sameFiles(t *testing.T, what string, got, want map[string][]byte) {
	t.Helper()
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !bytes.Equal(got[name], want[name]) {
			t.Errorf("%s: %s differs or is missing", what, name)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d files, want %d", what, len(got), len(want))
	}
}

// TestRunKinesisTotals reads a 4-shard stream with one worker: the
// partials hold every event once, a partition per shard, and the last
// windows close on the wall clock once the shards are quiet.
func TestRunKinesisTotals(t *testing.T) {
	s := newStandIns(t)
	stream, table := s.stream(t, 4)
	ds := testEvents(20_000)
	s.put(t, stream, ds)
	out := t.TempDir()
	began := time.Now()
	r := start(s.options(stream, table, "one", &StateDir{Dir: t.TempDir()}, &PartialsDir{Dir: out}))
	waitEvents(t, out, len(ds))
	elapsed := time.Since(began)
	st := r.stop(t)
	if _, n := totals(t, out, time.Second); n != decidedOf(ds) {
		t.Fatalf("partials hold %d decisions, the stream %d", n, decidedOf(ds))
	}
	ps, _, err := (&PartialsDir{Dir: out}).Read(t.Context(), time.Second, t0, t0.Add(time.Hour))
	if err != nil || len(ps) == 0 {
		t.Fatal(err, len(ps))
	}
	parts := map[string]bool{}
	for name := range files(t, out) {
		var start int64
		var shard string
		fmt.Sscanf(name[len("1s/2026-11-30/"):], "%d.%s", &start, &shard)
		parts[shard[:len("shardId-000000000000")]] = true
	}
	if len(parts) != 4 || st.Rollup.Events != uint64(len(ds)) || st.Source.Held != 0 {
		t.Fatalf("partitions %v, stats %+v", parts, st)
	}
	t.Logf("%d events through RunKinesis in %v (%.0f events/s, stand-ins, 200 ms between reads of a shard); %+v",
		len(ds), elapsed, float64(len(ds))/elapsed.Seconds(), st)
}

// stopAfter is a sink that, once n outputs are written, says so on
// stopped and, with fail, fails every write: the worker cut off with
// outputs saved in its state but not delivered.
type stopAfter struct {
	PartialsDir
	n       atomic.Int64
	fail    bool
	once    sync.Once
	stopped chan struct{}
}

func (s *stopAfter) Write(ctx context.Context, partition string, o Output) error {
	if s.n.Add(-1) < 0 {
		s.once.Do(func() { close(s.stopped) })
		if s.fail {
			return errCrash
		}
	}
	return s.PartialsDir.Write(ctx, partition, o)
}

// TestRunKinesisTakeover stops a worker mid-way — cleanly, or with
// outputs written to its state and never delivered — and lets another
// take its shards over from the shared state directory: the partials are
// those of an uninterrupted run, byte for byte.
func TestRunKinesisTakeover(t *testing.T) {
	s := newStandIns(t)
	stream, table := s.stream(t, 4)
	ds := testEvents(20_000)
	s.put(t, stream, ds)
	// Each run is a new lease table: a new consumer group from the
	// stream's start.
	run := func(worker, table string, store StateStore, sink Sink) *running {
		return start(s.options(stream, table, worker, store, sink))
	}
	// The reference reads events one by one; the workers below, records
	// rolled up from their columns (and one the other way: a handover
	// between the two).
	wantDir := t.TempDir()
	refOpts := s.options(stream, table, "ref", &StateDir{Dir: t.TempDir()}, &PartialsDir{Dir: wantDir})
	refOpts.perEvent = true
	ref := start(refOpts)
	waitEvents(t, wantDir, len(ds))
	ref.stop(t)
	want := files(t, wantDir)
	if _, n := totals(t, wantDir, time.Second); n != decidedOf(ds) {
		t.Fatalf("partials hold %d decisions, the stream %d", n, decidedOf(ds))
	}
	stateTable := newStateTable(t, s)
	stores := []struct {
		name string
		// new returns a function that gives each worker its store, all
		// over the same states.
		new func(t *testing.T) func() StateStore
	}{
		{"dir", func(t *testing.T) func() StateStore {
			dir := t.TempDir()
			return func() StateStore { return &StateDir{Dir: dir} }
		}},
		{"table", func(t *testing.T) func() StateStore {
			prefix := fmt.Sprint("takeover-", names.Add(1))
			return func() StateStore { return &StateTable{API: s.dc, Table: stateTable, Prefix: prefix} }
		}},
	}
	for _, store := range stores {
		for _, cut := range []struct {
			after int64
			fail  bool // the sink fails from then on; else a clean stop
		}{{3, true}, {12, true}, {8, false}} {
			t.Run(fmt.Sprint(store.name, ", cut after ", cut.after, " outputs, failing ", cut.fail), func(t *testing.T) {
				_, table := s.stream(t, 1) // a fresh lease table; the 1-shard stream is unused
				out, newStore := t.TempDir(), store.new(t)
				sink := &stopAfter{PartialsDir: PartialsDir{Dir: out}, fail: cut.fail, stopped: make(chan struct{})}
				sink.n.Store(cut.after)
				ao := s.options(stream, table, "a", newStore(), sink)
				ao.perEvent = cut.after == 12
				a := start(ao)
				select {
				case <-sink.stopped:
				case <-time.After(60 * time.Second):
					t.Fatal("a never wrote its outputs")
				}
				sa := a.stop(t)
				b := run("b", table, newStore(), &PartialsDir{Dir: out})
				waitEvents(t, out, len(ds))
				sb := b.stop(t)
				// a delivered some outputs, left the rest in the states it
				// saved (failing: with outputs to deliver again, and a
				// batch handled but not checkpointed, which b does not
				// read again: it reads from the state's position), and b
				// took over from those states.
				if sa.Outputs == 0 || sb.Rollup.Events >= uint64(len(ds)) || cut.fail && (sb.Redeliver == 0 || sb.Moved == 0) {
					t.Errorf("not a takeover mid-way: a %+v, b %+v", sa, sb)
				}
				sameFiles(t, "after a takeover", files(t, out), want)
				t.Logf("a %+v\nb %+v", sa, sb)
			})
		}
	}
}

// splitFirst splits the stream's first shard at the middle of its
// hash-key range and waits until the stream is active again.
func (s standIns) splitFirst(t *testing.T, stream string) string {
	t.Helper()
	ctx := context.Background()
	shards, err := s.kc.ListShards(ctx, &awskinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	sh := shards.Shards[0]
	lo, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.StartingHashKey), 10)
	hi, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.EndingHashKey), 10)
	mid := lo.Add(lo, hi.Add(hi, big.NewInt(1))).Rsh(lo, 1)
	if _, err := s.kc.SplitShard(ctx, &awskinesis.SplitShardInput{StreamName: aws.String(stream),
		ShardToSplit: sh.ShardId, NewStartingHashKey: aws.String(mid.String())}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := s.kc.DescribeStreamSummary(ctx, &awskinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
		if err == nil && out.StreamDescriptionSummary.StreamStatus == types.StreamStatusActive {
			return aws.ToString(sh.ShardId)
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream is not active again after the split")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunKinesisSplit splits a shard while it is aggregated: the parent,
// read to its end, emits all its windows; the children are partitions of
// their own; the partials hold every event once.
func TestRunKinesisSplit(t *testing.T) {
	s := newStandIns(t)
	stream, table := s.stream(t, 1)
	ds := testEvents(10_000)
	s.put(t, stream, ds[:5000])
	out := t.TempDir()
	r := start(s.options(stream, table, "one", &StateDir{Dir: t.TempDir()}, &PartialsDir{Dir: out}))
	defer r.cancel()
	parent := s.splitFirst(t, stream)
	s.put(t, stream, ds[5000:])
	waitEvents(t, out, len(ds))
	st := r.stop(t)
	if _, n := totals(t, out, time.Second); n != decidedOf(ds) {
		t.Fatalf("partials hold %d decisions, the stream %d", n, decidedOf(ds))
	}
	parts := map[string]int{}
	for name := range files(t, out) {
		for _, p := range []string{parent, "shardId-000000000001", "shardId-000000000002"} {
			if bytes.Contains([]byte(name), []byte("."+p+".")) {
				parts[p]++
			}
		}
	}
	if len(parts) != 3 || st.Ended != 1 {
		t.Fatalf("partials by partition %v; stats %+v: want the parent's and both children's, the parent ended", parts, st)
	}
}

// TestKinesisRedeliveredBatches hands a shard's handler batches again as
// a new holder would see them: the same batch, a superset from the same
// position, and a subset (which the Source does not promise to avoid),
// whose missing events come in the batches that follow. Each event is
// added once.
func TestKinesisRedeliveredBatches(t *testing.T) {
	ds := testEvents(100)
	store := &StateDir{Dir: t.TempDir()}
	pos := func(seq string, sub int64) stream.Position { return stream.Position{Seq: seq, Sub: sub} }
	batch := func(from stream.Position, first, n int) *stream.Batch {
		return &stream.Batch{Partition: "shardId-000000000000", From: from, To: pos(from.Seq+"'", int64(n)), Events: ds[first : first+n]}
	}
	f := func(steps []*stream.Batch, want uint64) { t.Helper(); handleAll(t, store, steps, want) }
	f([]*stream.Batch{batch(pos("1", 0), 0, 10), batch(pos("2", 0), 10, 10)}, 20)
	// A new holder: batch 2 again, then as a superset.
	f([]*stream.Batch{batch(pos("2", 0), 10, 10), batch(pos("2", 0), 10, 15)}, 25)
	// Again, as a subset, then the rest in two batches from other
	// positions: only events 25 on are new.
	f([]*stream.Batch{batch(pos("2", 0), 10, 4), batch(pos("2", 4), 14, 6), batch(pos("2", 10), 20, 10)}, 30)
}

// TestKinesisStateMovedReopens: two holders of a shard overlap while its
// lease changes hands, their states in one table. The first to save wins;
// the other's save fails with ErrStateMoved, which asks the source to open
// the shard again (stream.ErrReopen), and every call fails so until it
// does; opened again, it reads from the state the winner saved, and
// counts each event once. Before, the holder that lost the race failed
// every call for good, and, when it was the one keeping the lease, the
// shard's windows waited until it was restarted.
func TestKinesisStateMovedReopens(t *testing.T) {
	s := newStandIns(t)
	table, dir := newStateTable(t, s), t.TempDir()
	t.Run("table", func(t *testing.T) {
		testStateMovedReopens(t, func() StateStore { return &StateTable{API: s.dc, Table: table, Prefix: "overlap"} })
	})
	t.Run("dir", func(t *testing.T) { testStateMovedReopens(t, func() StateStore { return &StateDir{Dir: dir} }) })
}

// testStateMovedReopens is TestKinesisStateMovedReopens with the states
// in the stores newStore makes, one a holder, of one place.
func testStateMovedReopens(t *testing.T, newStore func() StateStore) {
	ds := testEvents(100)
	pos := func(seq string, sub int64) stream.Position { return stream.Position{Seq: seq, Sub: sub} }
	batch := func(from stream.Position, first, n int) *stream.Batch {
		return &stream.Batch{Partition: "shardId-000000000000", From: from, To: pos(from.Seq+"'", int64(n)), Events: ds[first : first+n]}
	}
	ctx := context.Background()
	holder := func() *partitions {
		h, err := newPartitions(RunOptions{Store: newStore()})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	const shard = "shardId-000000000000"
	a, b := holder(), holder()
	if _, err := a.Open(ctx, shard, stream.Position{}); err != nil {
		t.Fatal(err)
	}
	if err := a.Handle(ctx, batch(pos("1", 0), 0, 10)); err != nil {
		t.Fatal(err)
	}
	at, err := b.Open(ctx, shard, stream.Position{}) // the lease taken: a goes on until it sees so
	if err != nil || at != pos("1'", 10) {
		t.Fatalf("b opened at %v, %v", at, err)
	}
	if err := a.Handle(ctx, batch(pos("2", 0), 10, 10)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := b.Handle(ctx, batch(pos("2", 0), 10, 15)); !errors.Is(err, ErrStateMoved) || !errors.Is(err, stream.ErrReopen) {
			t.Fatalf("b saved over a's state, or did not ask to be opened again: %v", err)
		}
	}
	if at, err = b.Open(ctx, shard, at); err != nil || at != pos("2'", 10) {
		t.Fatalf("b opened again at %v, %v; want after a's last batch", at, err)
	}
	if err := b.Handle(ctx, batch(at, 20, 10)); err != nil {
		t.Fatal(err)
	}
	if got := b.parts[shard].p.r.Stats().Events; got != 30 {
		t.Errorf("b's rollup holds %d events, want 30", got)
	}
	if err := a.Handle(ctx, batch(pos("2'", 10), 20, 10)); !errors.Is(err, stream.ErrReopen) {
		t.Errorf("a saved over b's state: %v", err)
	}
}

// handleAll hands the batches of shard 0 to a new holder whose states are
// in store, and checks that the shard's rollup then holds want events.
func handleAll(t *testing.T, store StateStore, steps []*stream.Batch, want uint64) {
	t.Helper()
	ctx := context.Background()
	k, err := newPartitions(RunOptions{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Open(ctx, "shardId-000000000000", stream.Position{}); err != nil {
		t.Fatal(err)
	}
	for _, b := range steps {
		if err := k.Handle(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if got := k.parts["shardId-000000000000"].p.r.Stats().Events; got != want {
		t.Fatalf("the shard's rollup holds %d events, want %d", got, want)
	}
}

// TestKinesisRedeliveredRecords: as TestKinesisRedeliveredBatches, with
// batches of undecoded records (SourceOptions.Rows) rolled up from their
// columns: a batch again, a superset, a subset whose missing events come
// in the batch that follows, a first record read from inside or from a
// position out of range, and a corrupt record skipped. Each event is added once.
func TestKinesisRedeliveredRecords(t *testing.T) {
	ds := testEvents(40)
	rec := func(seq string, lo, hi int) stream.Record {
		b, err := columnar.Encode([]byte{byte(columnar.CodecArrow)}, ds[lo:hi], columnar.Options{Compression: columnar.ZstdDict})
		if err != nil {
			t.Fatal(err)
		}
		return stream.Record{Pos: stream.Position{Seq: seq}, Data: b}
	}
	r1, r2, r3, r4, r5, r6 := rec("1", 0, 10), rec("2", 10, 20), rec("3", 20, 25), rec("4", 25, 30), rec("5", 30, 35), rec("6", 35, 40)
	bad := stream.Record{Pos: stream.Position{Seq: "4b"}, Data: []byte{byte(columnar.CodecArrow), 1, 2, 3}}
	store := &StateDir{Dir: t.TempDir()}
	batch := func(seq string, sub int64, recs ...stream.Record) *stream.Batch {
		last := recs[len(recs)-1].Pos.Seq
		return &stream.Batch{Partition: "shardId-000000000000", From: stream.Position{Seq: seq, Sub: sub},
			To: stream.Position{Seq: last, Sub: math.MaxInt64}, Records: recs}
	}
	f := func(steps []*stream.Batch, want uint64) { t.Helper(); handleAll(t, store, steps, want) }
	f([]*stream.Batch{batch("1", 0, r1), batch("2", 0, r2)}, 20)
	f([]*stream.Batch{batch("2", 0, r2), batch("2", 0, r2, r3)}, 25)
	f([]*stream.Batch{batch("2", 0, r2), batch("3", 0, r3, r4, bad)}, 30)
	f([]*stream.Batch{batch("5", 4, r5)}, 31)
	// A position out of range (a corrupt checkpoint) reads the record
	// whole, or not at all.
	f([]*stream.Batch{batch("6", -5, r6)}, 36)
	f([]*stream.Batch{batch("6", math.MaxInt64-1, r6)}, 36)
}

// countingSink adds up the events of the outputs written to it.
type countingSink struct{ events atomic.Uint64 }

func (s *countingSink) Write(_ context.Context, _ string, o Output) error {
	s.events.Add(o.Partial.Events)
	return nil
}

func (s *countingSink) Flush(context.Context) error { return nil }

// BenchmarkRunKinesis reads 100,000 events off a 4-shard kinesalite
// stream with one RunKinesis, the source's default batch sizes, states in
// a directory or in a dynalite table; each iteration is a new consumer
// group from the stream's start, until every window is delivered. A
// stand-in figure: kinesalite and dynalite are not the services.
func BenchmarkRunKinesis(b *testing.B) {
	s := newStandIns(b)
	stream, table := s.stream(b, 4)
	stateTable := newStateTable(b, s)
	const total = 100_000
	s.put(b, stream, testEvents(total))
	group := 0
	for _, store := range []struct {
		name     string
		new      func(b *testing.B) StateStore
		perEvent bool // the Source decodes events, rolled up one by one
	}{
		{"dir", func(b *testing.B) StateStore { return &StateDir{Dir: b.TempDir()} }, false},
		{"table", func(*testing.B) StateStore {
			return &StateTable{API: s.dc, Table: stateTable, Prefix: fmt.Sprint("bench-", names.Add(1))}
		}, false},
		{"dir/events", func(b *testing.B) StateStore { return &StateDir{Dir: b.TempDir()} }, true},
	} {
		b.Run(store.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				group++
				n++
				sink := &countingSink{}
				o := s.options(stream, table, "bench", store.new(b), sink)
				o.Source.Group, o.Source.Records, o.Source.MaxBatch = fmt.Sprint("bench-", group), 0, 0
				o.Source.Poll, o.Rollup.Idle = 20*time.Millisecond, 20*time.Millisecond
				o.perEvent = store.perEvent
				r := start(o)
				for sink.events.Load() < total {
					time.Sleep(5 * time.Millisecond)
				}
				r.cancel()
				<-r.done
			}
			b.ReportMetric(float64(total*n)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// windowSink records when each window's output arrives.
type windowSink struct {
	mu      sync.Mutex
	arrived map[int64]time.Time // window end, Unix nanoseconds → when delivered
}

func (s *windowSink) Write(_ context.Context, _ string, o Output) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.arrived[o.Partial.End().UnixNano()]; !ok {
		s.arrived[o.Partial.End().UnixNano()] = time.Now()
	}
	return nil
}

func (s *windowSink) Flush(context.Context) error { return nil }

// TestRunKinesisQuietShard writes live events to a 2-shard stream, then
// nothing: the last window of each shard is emitted once the shard has
// been quiet for Idle, within window + lateness + Idle and a few reads of
// its end, not at shutdown.
func TestRunKinesisQuietShard(t *testing.T) {
	s := newStandIns(t)
	stream, table := s.stream(t, 2)
	sink := &windowSink{arrived: map[int64]time.Time{}}
	r := start(s.options(stream, table, "one", &StateDir{Dir: t.TempDir()}, sink))
	defer r.cancel()
	ds := decisionsAt(time.Now(), 200)
	s.put(t, stream, ds)
	last := ds[len(ds)-1].Time.Truncate(time.Second).Add(time.Second) // the last window's end
	deadline := time.Now().Add(30 * time.Second)
	for {
		sink.mu.Lock()
		at, ok := sink.arrived[last.UnixNano()]
		sink.mu.Unlock()
		if ok {
			// Lateness 100 ms, Idle 300 ms, reads 200 ms apart and a 50 ms
			// poll: about 0.7 s after the window's end; 2 s allows for a
			// busy machine.
			if late := at.Sub(last); late > 2*time.Second {
				t.Fatalf("the last window arrived %v after its end", late)
			} else {
				t.Logf("the last window arrived %v after its end", late)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the last window never arrived")
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.stop(t)
}

// decisionsAt returns n generated decisions stamped from start on.
func decisionsAt(start time.Time, n int) []decisions.Decision {
	return decisiontest.NewGenerator(3, start).Batch(n)
}

// TestKinesisShardLag reads a 2-shard kinesalite stream and watches
// Stats: every shard held reports the MillisBehindLatest of its last read
// once read (kinesalite reports 0 for an open shard, so this checks the
// plumbing; TestAggregatorMetrics in assemble, the export of other
// values), and a watermark that, for live events, trails the wall clock
// by about the lateness and the idle time; RunStats carries the shards
// and the least watermark, for /metrics.
func TestKinesisShardLag(t *testing.T) {
	s := newStandIns(t)
	stream, table := s.stream(t, 2)
	ds := testEvents(4000) // a backlog of old events, then live ones
	s.put(t, stream, ds)
	o := s.options(stream, table, "one", &StateDir{Dir: t.TempDir()}, &countingSink{})
	o.Source.Records = 2
	k, err := NewKinesis(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := k.Run(ctx); done <- err }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	wait := func(what string, cond func(KinesisStats) bool) KinesisStats {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			if st := k.Stats(); cond(st) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %+v", what, k.Stats())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait("the backlog", func(st KinesisStats) bool { return st.Rollup.Events == uint64(len(ds)) })
	live := decisionsAt(time.Now(), 200)
	s.put(t, stream, live)
	st := wait("live events, caught up", func(st KinesisStats) bool {
		if st.Rollup.Events != uint64(len(ds)+len(live)) || len(st.Shards) != 2 {
			return false
		}
		for _, sh := range st.Shards {
			if !sh.Read || sh.Behind != 0 || sh.Watermark.IsZero() {
				return false
			}
		}
		return true
	})
	for _, sh := range st.Shards {
		// Lateness 100 ms and Idle 300 ms: well under a second on an
		// idle machine; 10 s allows for a busy one, and is still far from
		// the backlog's events of the day before.
		if lag := time.Since(sh.Watermark); lag < 0 || lag > 10*time.Second {
			t.Errorf("shard %s: lag in event time %v", sh.Shard, lag)
		}
	}
	if rs := st.RunStats(); len(rs.Shards) != 2 || rs.Watermark.IsZero() || rs.Watermark.After(st.Shards[0].Watermark) || rs.Watermark.After(st.Shards[1].Watermark) {
		t.Errorf("RunStats %+v: want the shards and the least watermark", rs)
	}
	t.Logf("shards at the end: %+v", st.Shards)
}

// TestOpenTakenOverWaits: a shard's lease is stolen while its holder is
// delivering the windows a batch closed (its state saved with them
// pending). The new holder's Open, told the old holder may still be
// handling the shard (stream.TakenOver), waits for it to deliver them
// rather than delivering them too (each output then made by both, in two
// processes' sinks); the old holder's delivery is held until the new
// holder has looked at the state twice (loading it, then asking whether
// it moved). An old holder that never delivers (crashed, or slower than
// the wait) has its outputs delivered again once the wait is over, as
// after a crash, its state, which did not move, loaded once. Before, the
// new holder delivered them at once, in both cases. An old holder that
// has lost the shard shows its progress (stream.Progress: its state
// written again, its heartbeat): a delivery four times the wait is waited
// for; one that hangs is waited for as long as its heartbeats go on,
// and no longer than stream.MaxProgressWaits times the wait when they
// never end.
func TestOpenTakenOverWaits(t *testing.T) {
	s := newStandIns(t)
	table, dir := newStateTable(t, s), t.TempDir()
	t.Run("table", func(t *testing.T) {
		testOpenTakenOverWaits(t, func(place string) StateStore { return &StateTable{API: s.dc, Table: table, Prefix: place} })
	})
	t.Run("dir", func(t *testing.T) {
		testOpenTakenOverWaits(t, func(place string) StateStore { return &StateDir{Dir: filepath.Join(dir, place)} })
	})
}

// testOpenTakenOverWaits is TestOpenTakenOverWaits with the states in
// the stores newStore makes, one a holder, of the place named.
func testOpenTakenOverWaits(t *testing.T, newStore func(place string) StateStore) {
	const shard = "shardId-000000000000"
	ds := testEvents(20_000)
	ctx := context.Background()
	for _, c := range []struct {
		name      string
		delivers  bool          // the old holder delivers once the new one waits
		after     time.Duration // that long after
		beats     time.Duration // the old holder has lost the shard: it shows progress for that long (its source's bound)
		wait      time.Duration // how long the new holder may wait
		redeliver bool          // the new holder delivers the pending outputs
	}{
		{"delivered", true, 0, 0, time.Minute, false},
		{"not delivered", false, 0, 0, 300 * time.Millisecond, true},
		// A delivery four times the wait, the old holder's heartbeats
		// every sixth of it: waited for.
		{"delivered past the wait", true, 1200 * time.Millisecond, time.Minute, 300 * time.Millisecond, false},
		// A delivery that hangs: waited for as long as its heartbeats go
		// on, then delivered again.
		{"hangs", false, 0, 1500 * time.Millisecond, 300 * time.Millisecond, true},
		// A delivery that hangs and heartbeats without bound (its source
		// would stop it): waited for stream.MaxProgressWaits times the
		// wait, then delivered again; the new holder's save then finds
		// the state moved by a heartbeat, or not.
		{"heartbeats forever", false, 0, time.Hour, 200 * time.Millisecond, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := newStore(c.name)
			gate := &gatedSink{release: make(chan struct{}), writing: make(chan struct{})}
			opts := func(store StateStore, sink Sink) RunOptions {
				return RunOptions{Store: store, Sinks: []Sink{sink}, Rollup: Options{Window: time.Second}}
			}
			a, err := newPartitions(opts(store, gate))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.Open(ctx, shard, stream.Position{}); err != nil {
				t.Fatal(err)
			}
			to := stream.Position{Seq: "1", Sub: int64(len(ds))}
			handled := make(chan error, 1)
			actx, began := ctx, time.Now()
			if c.beats > 0 {
				actx = stream.WithProgress(ctx, stream.Progress{Every: 50 * time.Millisecond,
					Stopped: func() bool { return true }, Report: func() bool { return time.Since(began) < c.beats }})
			}
			go func() {
				handled <- a.Handle(actx, &stream.Batch{Partition: shard, From: stream.Position{Seq: "1"}, To: to, Events: ds})
			}()
			<-gate.writing // a's state is saved with the outputs pending
			saved, _, err := newStore(c.name).Load(ctx, shard)
			if err != nil || len(saved.Pending) == 0 {
				t.Fatalf("the old holder's state holds %d outputs pending, %v", len(saved.Pending), err)
			}
			var release sync.Once
			defer func() {
				release.Do(func() { close(gate.release) })
				<-handled // the old holder's save after the new one's fails, in one case
			}()
			loads := &lookHook{StateStore: newStore(c.name), at: 2, f: func() {
				if c.delivers {
					time.AfterFunc(c.after, func() { release.Do(func() { close(gate.release) }) })
				}
			}}

			sink := &countingSink{}
			b, err := newPartitions(opts(loads, sink))
			if err != nil {
				t.Fatal(err)
			}
			octx, ocancel := context.WithTimeout(ctx, time.Minute) // a wait that never gives up fails
			defer ocancel()
			at, err := b.Open(stream.TakenOver(octx, c.wait), shard, stream.Position{})
			if c.beats == time.Hour {
				if took := time.Since(began); took < stream.MaxProgressWaits*c.wait || (err != nil && !errors.Is(err, ErrStateMoved)) {
					t.Fatalf("opened after %v: %v; want the wait given up after %v", took, err, stream.MaxProgressWaits*c.wait)
				}
				if st := b.stats(); st.Redeliver != uint64(len(saved.Pending)) || st.Awaited != 0 {
					t.Fatalf("delivered again %d outputs, awaited %d; want the %d pending delivered again", st.Redeliver, st.Awaited, len(saved.Pending))
				}
				return
			}
			if err != nil || at != to {
				t.Fatalf("opened at %v, %v; want %v", at, err, to)
			}
			st := b.stats()
			if took := time.Since(began); c.beats > 0 && c.redeliver && took < c.beats {
				t.Fatalf("the new holder stopped waiting %v after the old one began delivering, while its heartbeats went on for %v", took, c.beats)
			}
			if c.redeliver {
				if st.Redeliver != uint64(len(saved.Pending)) || st.Awaited != 0 || sink.events.Load() == 0 {
					t.Fatalf("delivered again %d outputs (%d events), awaited %d; want the %d pending delivered again",
						st.Redeliver, sink.events.Load(), st.Awaited, len(saved.Pending))
				}
				// Looked at through its metadata, the state that did not
				// move was not read again.
				if c.beats == 0 && (loads.looks < 2 || loads.loads != 1) {
					t.Fatalf("looked at the state %d times, loaded it %d; want it looked at more than once, loaded once", loads.looks, loads.loads)
				}
				return
			}
			if st.Redeliver != 0 || sink.events.Load() != 0 || st.Awaited != uint64(len(saved.Pending)) {
				t.Fatalf("the new holder delivered %d outputs again (%d events) and awaited %d; want none delivered, the %d pending awaited",
					st.Redeliver, sink.events.Load(), st.Awaited, len(saved.Pending))
			}
			if n := gate.written.Load(); n != uint64(len(saved.Pending)) {
				t.Fatalf("the old holder delivered %d outputs, want %d", n, len(saved.Pending))
			}
		})
	}
}

// gatedSink holds every write until release is closed, and says on
// writing when the first write comes.
type gatedSink struct {
	release chan struct{}
	writing chan struct{}
	once    sync.Once
	written atomic.Uint64
}

func (s *gatedSink) Write(ctx context.Context, _ string, _ Output) error {
	s.once.Do(func() { close(s.writing) })
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.written.Add(1)
	return nil
}

func (s *gatedSink) Flush(context.Context) error { return nil }

// lookHook calls f before the at-th look at a state (a Load, or a
// stateWatcher's moved), and counts the Loads. Partitions may look
// concurrently.
type lookHook struct {
	StateStore
	mu               sync.Mutex
	at, looks, loads int
	f                func()
}

func (l *lookHook) look(load bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.looks++; l.looks == l.at {
		l.f()
	}
	if load {
		l.loads++
	}
}

func (l *lookHook) Load(ctx context.Context, partition string) (State, bool, error) {
	l.look(true)
	return l.StateStore.Load(ctx, partition)
}

func (l *lookHook) moved(ctx context.Context, partition string) (bool, error) {
	l.look(false)
	return l.StateStore.(stateWatcher).moved(ctx, partition)
}

// TestRunKinesisStealDuringDelivery: two RunKinesis on one stream, states
// in one table, as two `aggregate --kinesis-stream` processes. The first
// reads both shards' backlog alone, each batch closing about a dozen
// windows, and its sink takes 250 ms a write; the second starts as the first
// begins delivering and steals a shard from it while it delivers (the
// first's delivery holds at its first write until the second has loaded
// the stolen shard's state, so that it is so on a loaded machine too). The
// thief waits for the first to deliver what its state holds pending
// (Awaited), so no output (partition, positions, window: the EMF
// documents' rw_key) is delivered by both, and every event is delivered
// once. Before, the thief delivered the outputs pending at once, and both
// processes' sinks held them; and with a sink that gave up on a cancelled
// call, the first's delivery stopped when it saw its lease lost, and the
// thief delivered it all again (3 outputs, 1,409 events by both). In
// /long, the first's sink takes 700 ms a write: its delivery (about 9 s)
// outlasts the thief's wait (2 s, then 3 s) and the first's grace (5 s);
// the first's heartbeats (its state written again) keep both going.
// Before them, 13 outputs were delivered by both. In /long/shutdown the
// first is also stopped mid-delivery: the lease of its other shard,
// renewed no more, expires, and the second takes it and waits for the
// heartbeats of that delivery too (with heartbeats for lost leases
// alone, 9 outputs by both).
func TestRunKinesisStealDuringDelivery(t *testing.T) {
	// The first's sink ends its writes whatever their context (as the
	// file sinks do), or gives up on one whose context is done (as
	// the EMF sinks waiting for room do): the lease lost must not cut
	// the delivery short, or the thief delivers it all again.
	for _, c := range []struct {
		honours  bool
		delay    time.Duration
		shutdown bool // the first is stopped (SIGINT) 1.5 s after the second starts
	}{{false, 250 * time.Millisecond, false}, {true, 250 * time.Millisecond, false}, {true, 700 * time.Millisecond, false}, {true, 700 * time.Millisecond, true}} {
		honours := c.honours
		name := fmt.Sprintf("ctx=%v", honours)
		if c.delay > 250*time.Millisecond {
			// About 9 s of delivery, past the thief's 2 s and 3 s: it
			// waits on while the first writes its state again.
			name += "/long"
		}
		if c.shutdown {
			// The first's shard not stolen: its lease, no longer renewed,
			// expires during the delivery, and the second takes it and
			// waits as for the stolen one.
			name += "/shutdown"
		}
		t.Run(name, func(t *testing.T) {
			s := newStandIns(t)
			stream, table := s.stream(t, 2)
			ds := testEvents(20_000)
			s.put(t, stream, ds)
			states := newStateTable(t, s)
			opts := func(worker string, sink Sink) KinesisOptions {
				o := s.options(stream, table, worker, &StateTable{API: s.dc, Table: states, Prefix: "steal"}, sink)
				o.Source.Records, o.Source.MaxBatch = 0, 0 // a shard's backlog in one batch
				// The thief reads 2 s after its steal and waits up to 3 s more:
				// the first's delivery of about a dozen windows ends in between.
				o.Source.LeaseDuration = 3 * time.Second
				return o
			}
			// The first's delivery waits at its first write until the
			// second has loaded the state of a shard it took: the steal
			// falls within the delivery however slow the machine. Without
			// the hold, on a loaded machine the first had delivered all
			// before the second loaded, and the second had nothing to
			// wait for.
			loaded := make(chan struct{})
			a := &keySink{delay: c.delay, writing: make(chan struct{}), ctx: honours, hold: loaded}
			b := &keySink{}
			ra := start(opts("a", a))
			defer ra.cancel()
			<-a.writing
			ob := opts("b", b)
			ob.Store = &lookHook{StateStore: ob.Store, at: 1, f: func() { close(loaded) }}
			rb := start(ob)
			defer rb.cancel()
			if c.shutdown {
				time.Sleep(1500 * time.Millisecond)
				ra.cancel()
			}
			want := uint64(len(ds))
			deadline := time.Now().Add(90 * time.Second)
			for a.events()+b.events() < want && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			sa, sb := ra.stop(t), rb.stop(t)
			if got := a.events() + b.events(); got != want {
				t.Errorf("the sinks hold %d events, want %d", got, want)
			}
			both := 0
			for k := range a.keys() {
				if b.keys()[k] > 0 {
					both++
				}
			}
			if both > 0 || sb.Awaited == 0 {
				t.Fatalf("%d outputs delivered by both; the thief waited for %d (again %d): want none by both, some waited for (a: %+v, b: %+v)",
					both, sb.Awaited, sb.Redeliver, sa.Source, sb.Source)
			}
			if long := c.delay > 250*time.Millisecond; long && sa.Heartbeats == 0 {
				t.Errorf("the first wrote its state again %d times in a delivery of %v, want some", sa.Heartbeats, time.Duration(len(a.keys()))*c.delay)
			}
			t.Logf("a delivered %d outputs, b %d; b waited for %d; a's heartbeats %d", len(a.keys()), len(b.keys()), sb.Awaited, sa.Heartbeats)
		})
	}
}

// keySink counts each output it is written by partition, positions and
// window, and the events of the first write of each; each write takes
// delay, whatever its context, and writing is closed at the first, which
// then waits until hold is closed (up to holdMax), when hold is not nil.
type keySink struct {
	delay   time.Duration
	writing chan struct{}
	hold    <-chan struct{}
	ctx     bool // a write ends early, failed, when its context is done
	once    sync.Once
	mu      sync.Mutex
	by      map[string]int
	n       uint64
}

func (s *keySink) Write(ctx context.Context, partition string, o Output) error {
	if s.writing != nil {
		s.once.Do(func() {
			close(s.writing)
			if s.hold != nil {
				select {
				case <-s.hold:
				case <-time.After(holdMax):
				}
			}
		})
	}
	if s.ctx {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(s.delay):
		}
	} else {
		time.Sleep(s.delay)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = map[string]int{}
	}
	k := fmt.Sprint(partition, "/", o.RangeKey(), "/", o.Partial.End().UnixNano(), "/", o.Correction)
	if s.by[k]++; s.by[k] == 1 {
		s.n += o.Partial.Events
	}
	return nil
}

func (s *keySink) Flush(context.Context) error { return nil }

// holdMax bounds a keySink's hold: past it the write goes on, and the
// test that held it for an event that never came fails on what follows.
const holdMax = time.Minute

func (s *keySink) events() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *keySink) keys() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.by)
}
