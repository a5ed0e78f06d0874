package aggregator

import (
	"context"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/kinesis"
)

// KinesisLambda aggregates the decisions of a Kinesis event-source mapping
// in AWS Lambda. Each invocation holds records of one shard, in sequence
// order; they are read in commit groups of CommitRecords consecutive
// records (default: the whole invocation). A group's decisions are rolled
// up into one partial per window they touch, and the group's partials are
// written to each sink in turn, then flushed, before the next group is
// read; the invocation returns once every group is written.
//
// An output is keyed by shard, window and the group's first and last
// sequence numbers (Output.Range), so a retry that delivers the same
// records again writes the same keys and bytes: stored partials are
// replaced, not doubled, and EMF documents carry the same rw_key. Readers
// merge a window's partials across groups, invocations and shards.
//
// A record that cannot be decoded is skipped, counted and reported. When a
// sink fails, the invocation answers with a partial batch failure naming
// the failed group's first record (map the function with
// FunctionResponseTypes ReportBatchItemFailures): Lambda then retries from
// that record on, and the groups before it, whose outputs are durable, are
// not delivered again. Sinks are written in order and a group stops at the
// first that fails, so a sink listed after a fallible one (EMF on stdout
// after stored partials) sees a group only once the one before it has it.
//
// Distinct clients are exact per partial but CloudWatch cannot merge them
// across invocations: UniqueClients of a window is a per-group figure in
// EMF; stored partials merge them exactly. It is safe for concurrent use.
type KinesisLambda struct {
	Sinks         []Sink
	Window        time.Duration // default 60 s
	TopK          int           // default 100
	CommitRecords int           // records per commit group; default (0) all of an invocation's

	// OnInvocation, when set, is called at the end of each invocation with
	// what it did.
	OnInvocation func(ctx context.Context, inv Invocation)

	// perEvent makes Arrow records roll up event by event: the reference
	// the tests hold the columnar path to.
	perEvent bool

	mu       sync.Mutex
	problems []error
	stats    LambdaStats
}

// Invocation is what one KinesisLambda invocation did.
type Invocation struct {
	Shard    string
	From, To string  // sequence numbers of the invocation's first and last records
	Records  uint64  // records read
	Events   uint64  // decisions read
	Corrupt  uint64  // records (or log events) skipped
	Outputs  int     // partials written to every sink
	FailedAt string  // the first record whose outputs are not durable; "" when all are
	Err      error   // the sink error behind FailedAt
	Problems []error // the corrupt records' errors, at most 100
}

// LambdaStats count what a KinesisLambda did: the decoding counts of the
// Kinesis Lambda handler it reads records with, and the outputs.
type LambdaStats struct {
	kinesis.LambdaStats
	Outputs uint64 // partials written to every sink
}

// Handle handles one invocation.
func (l *KinesisLambda) Handle(ctx context.Context, ev events.KinesisEvent) (events.KinesisEventResponse, error) {
	if len(ev.Records) == 0 {
		return events.KinesisEventResponse{}, nil
	}
	size, k := l.Window, l.TopK
	if size <= 0 {
		size = time.Minute
	}
	if k <= 0 {
		k = 100
	}
	group := l.CommitRecords
	if group <= 0 || group > len(ev.Records) {
		group = len(ev.Records)
	}
	// The records are decoded, and corrupt ones skipped and counted, by the
	// handler every Kinesis Lambda entry shares; each record's events are
	// rolled up here into the windows of its group.
	var (
		windows map[int64]*Partial
		shard   string
		batch   Batch
	)
	window := func(start int64) *Partial {
		p := windows[start]
		if p == nil {
			p = NewPartial(time.Unix(0, start), size, k)
			windows[start] = p
		}
		return p
	}
	addEvents := func(ds []decisions.Decision) {
		for j := range ds {
			d := &ds[j]
			window(windowStart(d.Time, size)).Update(d)
		}
	}
	read := kinesis.NewLambdaRowsHandler(func(_ context.Context, r *kinesis.Rows) error {
		shard = r.Shard
		if r.Columns == nil {
			addEvents(r.Events)
			return nil
		}
		// Arrow records are rolled up from their columns, a run of rows
		// of one window at a time.
		batch.Prepare(r.Columns)
		times, w := batch.Times(), int64(size)
		for i := 0; i < len(times); {
			start := windowStartNs(times[i], w)
			j := i + 1
			for j < len(times) && times[j] >= start && times[j]-start < w {
				j++
			}
			window(start).UpdateColumns(&batch, i, j)
			i = j
		}
		return nil
	})
	if l.perEvent {
		read = kinesis.NewLambdaHandler(func(_ context.Context, b *kinesis.Batch) error {
			shard = b.Shard
			addEvents(b.Events)
			return nil
		})
	}
	inv := Invocation{From: ev.Records[0].Kinesis.SequenceNumber, To: ev.Records[len(ev.Records)-1].Kinesis.SequenceNumber}
	for i := 0; i < len(ev.Records); i += group {
		recs := ev.Records[i:min(i+group, len(ev.Records))]
		windows = map[int64]*Partial{}
		read.Handle(ctx, events.KinesisEvent{Records: recs}) // the handler above never fails
		rng := recs[0].Kinesis.SequenceNumber + "-" + recs[len(recs)-1].Kinesis.SequenceNumber
		if err := l.write(ctx, shard, rng, windows); err != nil {
			inv.FailedAt, inv.Err = recs[0].Kinesis.SequenceNumber, err
			break
		}
		inv.Outputs += len(windows)
	}
	rs := read.Stats()
	inv.Shard, inv.Records, inv.Events, inv.Corrupt, inv.Problems = shard, rs.Records, rs.Events, rs.Corrupt, read.Problems()
	l.mu.Lock()
	l.stats.Invocations++
	l.stats.Records += rs.Records
	l.stats.Events += rs.Events
	l.stats.Corrupt += rs.Corrupt
	l.stats.Outputs += uint64(inv.Outputs)
	for _, p := range inv.Problems {
		if len(l.problems) < 100 {
			l.problems = append(l.problems, p)
		}
	}
	if inv.FailedAt != "" {
		l.stats.Failed++
	}
	l.mu.Unlock()
	if l.OnInvocation != nil {
		l.OnInvocation(ctx, inv)
	}
	if inv.FailedAt != "" {
		return events.KinesisEventResponse{BatchItemFailures: []events.KinesisBatchItemFailure{{ItemIdentifier: inv.FailedAt}}}, nil
	}
	return events.KinesisEventResponse{}, nil
}

// write writes a group's windows to each sink in turn and flushes it,
// stopping at the first sink that fails.
func (l *KinesisLambda) write(ctx context.Context, shard, rng string, windows map[int64]*Partial) error {
	if len(windows) == 0 {
		return nil
	}
	starts := sortedKeys(windows)
	for _, s := range l.Sinks {
		for _, start := range starts {
			if err := s.Write(ctx, shard, Output{Partial: windows[start], Range: rng}); err != nil {
				return err
			}
		}
		if err := s.Flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Stats returns the counts so far.
func (l *KinesisLambda) Stats() LambdaStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Problems returns the first corrupt records' errors.
func (l *KinesisLambda) Problems() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.problems...)
}
