package aggregator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratewarden/ratewarden/decisions/kinesis"
)

// KinesisOptions configure RunKinesis.
type KinesisOptions struct {
	Stream kinesis.StreamAPI // the Kinesis client; required
	Leases kinesis.DynamoAPI // the DynamoDB client of the lease table; required
	// Source configures the shared read of the stream: stream, lease
	// table, consumer group, worker id. Its Checkpoint must be 0: the
	// aggregator saves each shard's state after every batch, and the
	// checkpoint written after it is what lets it tell a batch handled
	// before from a new one.
	Source kinesis.SourceOptions
	// Store keeps each shard's state; required. Every worker of the
	// consumer group must see the same store: a worker that takes a shard
	// over resumes from the state its last holder saved.
	Store  StateStore
	Rollup Options
	Sinks  []Sink
	// Now reads the wall clock, for the idle watermark and as the bound
	// of the events of records their transport does not date (see
	// RunOptions.Now); default time.Now.
	Now func() time.Time
	// Progress, if set, is called after every delivery, from the shard's
	// goroutine: calls for different shards may be concurrent.
	Progress func(KinesisStats)

	// perEvent makes the Source decode events and the run roll them up
	// one by one: the reference the tests hold the columnar path to.
	perEvent bool
}

// KinesisStats are what a RunKinesis did.
type KinesisStats struct {
	// Rollup is what this process's rollups did, summed over the shards
	// (RunStats.Rollup): the events added and saved (those handled before
	// skipped), future, folded and dropped past the caps.
	Rollup    RollupStats
	Skipped   uint64 // events of batches handled before, skipped
	Outputs   uint64 // outputs delivered
	Redeliver uint64 // outputs of a previous holder delivered again
	Awaited   uint64 // outputs of a live previous holder it was waited for to deliver (RunStats.Awaited)
	Leftovers uint64 // temporary files of writes cut short, removed (RunStats.Leftovers)
	// Heartbeats counts the states written again while a delivery went
	// on, so that the shard's next holder, if it was taken, waited for it.
	Heartbeats uint64
	Opened     uint64 // shards opened: taken and their state loaded
	// Moved counts the shards opened whose state was ahead of the lease's
	// checkpoint (a batch handled, its checkpoint not written): read from
	// the state's position.
	Moved  uint64
	Ended  uint64 // shards read to their end, their windows emitted
	Source kinesis.SourceStats
	Shards []ShardStats // the shards held, by shard id
}

// RunStats returns s as the figures of a run (for self-metrics): the
// events and outputs, the shards, and the least of their watermarks.
func (s KinesisStats) RunStats() RunStats {
	r := RunStats{Rollup: s.Rollup, Outputs: s.Outputs, Redeliver: s.Redeliver, Awaited: s.Awaited, Leftovers: s.Leftovers, Shards: s.Shards}
	for _, sh := range s.Shards {
		if !sh.Watermark.IsZero() && (r.Watermark.IsZero() || sh.Watermark.Before(r.Watermark)) {
			r.Watermark = sh.Watermark
		}
	}
	return r
}

// ShardStats say how far behind a held shard is.
type ShardStats struct {
	Shard string
	// Behind is the MillisBehindLatest of the shard's last read (Read
	// says whether one has returned): how far the records read are
	// behind the newest of the shard.
	Behind time.Duration
	Read   bool
	// Watermark is the shard's watermark, zero before its first event:
	// the wall clock less it is the shard's lag in event time.
	Watermark time.Time
}

// RunKinesis rolls a Kinesis stream of decisions up, one Rollup per shard
// (the shard id is the partition), sharing the shards with the other
// workers of its consumer group through the Source's leases. It runs until
// ctx is done. It is Run over a kinesis.Source: see Run for how each event
// gets into the outputs exactly once, however shards change hands.
//
// A worker that stops or loses a shard leaves its open windows in the
// state for the next holder; a shard read to its end (split or merged)
// emits every window it holds. A held shard that has gone quiet advances
// its watermark with the wall clock (Options.Idle), so its last window is
// emitted on time.
func RunKinesis(ctx context.Context, o KinesisOptions) (KinesisStats, error) {
	k, err := NewKinesis(o)
	if err != nil {
		return KinesisStats{}, err
	}
	return k.Run(ctx)
}

var _ Source = (*kinesis.Source)(nil)

// Kinesis is a RunKinesis whose stats can be read while it runs (for
// self-metrics).
type Kinesis struct {
	src *kinesis.Source
	h   *partitions
}

// NewKinesis checks o and returns a Kinesis ready to Run.
func NewKinesis(o KinesisOptions) (*Kinesis, error) {
	switch {
	case o.Stream == nil || o.Leases == nil:
		return nil, errors.New("aggregate kinesis: the Kinesis and DynamoDB clients are required")
	case o.Store == nil:
		return nil, errors.New("aggregate kinesis: a state store is required")
	case o.Source.Checkpoint != 0:
		return nil, fmt.Errorf("aggregate kinesis: Source.Checkpoint %v: want 0, a checkpoint after every batch", o.Source.Checkpoint)
	}
	// Records are handed over undecoded and rolled up from their columns,
	// without an event made of each row.
	o.Source.Rows = !o.perEvent
	src, err := kinesis.NewSource(o.Stream, o.Leases, o.Source)
	if err != nil {
		return nil, fmt.Errorf("aggregate kinesis: %w", err)
	}
	k := &Kinesis{src: src}
	ro := RunOptions{Store: o.Store, Rollup: o.Rollup, Sinks: o.Sinks, Now: o.Now}
	if o.Progress != nil {
		ro.Progress = func(RunStats) { o.Progress(k.Stats()) }
	}
	if k.h, err = newPartitions(ro); err != nil {
		return nil, fmt.Errorf("aggregate kinesis: %w", err)
	}
	return k, nil
}

// Run runs until ctx is done, as RunKinesis does. Call it once.
func (k *Kinesis) Run(ctx context.Context) (KinesisStats, error) {
	err := k.src.Run(ctx, k.h)
	return k.Stats(), err
}

// Stats returns what the run did so far and the lag of each shard held.
// It is safe for concurrent use.
func (k *Kinesis) Stats() KinesisStats {
	rs := k.h.figures()
	st := KinesisStats{Rollup: rs.Rollup, Skipped: k.h.skipped.Load(), Outputs: rs.Outputs,
		Redeliver: rs.Redeliver, Awaited: rs.Awaited, Leftovers: rs.Leftovers, Heartbeats: k.h.heartbeats.Load(), Opened: k.h.opened.Load(), Moved: k.h.moved.Load(), Ended: k.h.ended.Load(), Source: k.src.Stats()}
	lags := k.src.Lags()
	if len(lags) == 0 {
		return st
	}
	wms := k.h.watermarks()
	st.Shards = make([]ShardStats, len(lags))
	for i, l := range lags {
		st.Shards[i] = ShardStats{Shard: l.Shard, Behind: l.Behind, Read: l.Read, Watermark: wms[l.Shard]}
	}
	return st
}
