package aggregator

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/kinesis"
)

// KinesisLambda aggregates the decisions of a Kinesis event-source mapping
// in AWS Lambda: each invocation's records (all of one shard) are rolled up
// into one partial per window they touch, and each partial is written to
// the sinks before the invocation returns (EMF on stdout is the usual
// sink; CloudWatch adds up the documents of one window). An invocation's
// outputs are keyed by shard, window and the first and last sequence
// numbers of the invocation, so a retried invocation writes the same keys
// and bytes. A record that cannot be decoded is skipped and counted; a sink
// that fails fails the whole invocation (reported as a failure of its
// first record), which Lambda then retries.
//
// Distinct clients are exact per partial but CloudWatch cannot merge them
// across invocations: UniqueClients of a window is a per-invocation figure
// in Lambda. It is safe for concurrent use.
type KinesisLambda struct {
	Sinks  []Sink
	Window time.Duration // default 60 s
	TopK   int           // default 100

	// perEvent makes Arrow records roll up event by event: the reference
	// the tests hold the columnar path to.
	perEvent bool

	mu       sync.Mutex
	problems []error
	stats    LambdaStats
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
	// The records are decoded, and corrupt ones skipped and counted, by the
	// handler every Kinesis Lambda entry shares; each record's events are
	// rolled up here, and written once the invocation's records are read.
	windows := map[int64]*Partial{}
	var shard string
	var batch Batch
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
	read.Handle(ctx, ev) // the handler above never fails
	first, last := ev.Records[0], ev.Records[len(ev.Records)-1]
	rng := first.Kinesis.SequenceNumber + "-" + last.Kinesis.SequenceNumber
	var err error
	for _, start := range sortedKeys(windows) {
		o := Output{Partial: windows[start], Range: rng}
		for _, s := range l.Sinks {
			err = errors.Join(err, s.Write(ctx, shard, o))
		}
	}
	for _, s := range l.Sinks {
		err = errors.Join(err, s.Flush(ctx))
	}
	rs := read.Stats()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stats.Invocations++
	l.stats.Records += rs.Records
	l.stats.Events += rs.Events
	l.stats.Corrupt += rs.Corrupt
	for _, p := range read.Problems() {
		if len(l.problems) < 100 {
			l.problems = append(l.problems, p)
		}
	}
	if err != nil {
		l.stats.Failed++
		return events.KinesisEventResponse{BatchItemFailures: []events.KinesisBatchItemFailure{{ItemIdentifier: first.Kinesis.SequenceNumber}}}, nil
	}
	l.stats.Outputs += uint64(len(windows))
	return events.KinesisEventResponse{}, nil
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
