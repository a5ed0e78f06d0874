package aggregator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/kinesis"
	"github.com/ratewarden/ratewarden/decisions/stream"
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
	// Now reads the wall clock, for the idle watermark only; default
	// time.Now.
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
	Events    uint64 // events added and saved, those handled before skipped
	Skipped   uint64 // events of batches handled before, skipped
	Future    uint64 // events too far ahead to move a watermark (RollupStats.Future)
	Folded    uint64 // decisions with a name folded into OtherKey (RollupStats.Folded)
	Outputs   uint64 // outputs delivered
	Redeliver uint64 // outputs of a previous holder delivered again
	Opened    uint64 // shards opened: taken and their state loaded
	Ended     uint64 // shards read to their end, their windows emitted
	Source    kinesis.SourceStats
	Shards    []ShardStats // the shards held, by shard id

	// Events dropped past the caps on the windows held
	// (RollupStats.AheadDropped and CorrectionsDropped).
	AheadDropped, CorrectionsDropped uint64
}

// RunStats returns s as the figures of a run (for self-metrics): the
// events and outputs, the shards, and the least of their watermarks.
func (s KinesisStats) RunStats() RunStats {
	r := RunStats{Rollup: RollupStats{Events: s.Events, Future: s.Future, Folded: s.Folded,
		AheadDropped: s.AheadDropped, CorrectionsDropped: s.CorrectionsDropped}, Outputs: s.Outputs, Redeliver: s.Redeliver, Shards: s.Shards}
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
// ctx is done.
//
// Exactly once: before a batch's handler returns, and so before the Source
// checkpoints after it, the shard's state is saved: the snapshot, the
// outputs the batch closed (delivered after, then the state saved without
// them) and the batch's first position and size. A batch the Source
// delivers again after a change of hands starts at that position and holds
// those events or more: its first events are skipped. A worker that takes
// a shard loads its state from the store and delivers its pending outputs
// again. Windows close at the event whose time passes their end however
// the events were batched, so a shard handed over mid-way gives the same
// outputs as one read by a single worker.
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

// Kinesis is a RunKinesis whose stats can be read while it runs (for
// self-metrics).
type Kinesis struct{ k *kinesisRun }

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
	if o.Now == nil {
		o.Now = time.Now
	}
	// Records are handed over undecoded and rolled up from their columns,
	// without an event made of each row.
	o.Source.Rows = !o.perEvent
	src, err := kinesis.NewSource(o.Stream, o.Leases, o.Source)
	if err != nil {
		return nil, fmt.Errorf("aggregate kinesis: %w", err)
	}
	return &Kinesis{&kinesisRun{o: o, src: src, shards: map[string]*shardRun{}}}, nil
}

// Run runs until ctx is done, as RunKinesis does. Call it once.
func (k *Kinesis) Run(ctx context.Context) (KinesisStats, error) {
	err := k.k.src.Run(ctx, k.k)
	return k.k.stats(), err
}

// Stats returns what the run did so far and the lag of each shard held.
// It is safe for concurrent use.
func (k *Kinesis) Stats() KinesisStats { return k.k.stats() }

// kinesisRun is the ShardHandler of RunKinesis.
type kinesisRun struct {
	o   KinesisOptions
	src *kinesis.Source

	mu     sync.Mutex
	shards map[string]*shardRun // by shard id, while held

	events, skipped, future, folded, outputs, redeliver, opened, ended atomic.Uint64
	aheadDropped, correctionsDropped                                   atomic.Uint64
}

var _ stream.Handler = (*kinesisRun)(nil)

func (k *kinesisRun) stats() KinesisStats {
	st := KinesisStats{Events: k.events.Load(), Skipped: k.skipped.Load(), Future: k.future.Load(), Folded: k.folded.Load(),
		AheadDropped: k.aheadDropped.Load(), CorrectionsDropped: k.correctionsDropped.Load(), Outputs: k.outputs.Load(),
		Redeliver: k.redeliver.Load(), Opened: k.opened.Load(), Ended: k.ended.Load(), Source: k.src.Stats()}
	lags := k.src.Lags()
	if len(lags) == 0 {
		return st
	}
	st.Shards = make([]ShardStats, len(lags))
	k.mu.Lock()
	for i, l := range lags {
		st.Shards[i] = ShardStats{Shard: l.Shard, Behind: l.Behind, Read: l.Read}
		if sh := k.shards[l.Shard]; sh != nil {
			if ns := sh.watermark.Load(); ns != 0 {
				st.Shards[i].Watermark = time.Unix(0, ns).UTC()
			}
		}
	}
	k.mu.Unlock()
	return st
}

// shardRun is a held shard: its partition and the cursor of the last
// batch handled. Only the shard's consumer goroutine uses it.
type shardRun struct {
	p    partitionRun
	last kinesisCursor
	// broken says the in-memory state may be ahead of the saved one (a
	// handler call failed half-way): it is loaded again before the next.
	broken bool
	// moved says another holder saved the shard's state (ErrStateMoved):
	// every call fails until the Source, finding its lease gone, stops
	// the shard's consumer.
	moved bool
	dec   *columnar.Decoder // reads the batches' records, once needed
	// watermark is the rollup's, in Unix nanoseconds (0: none yet), for
	// Stats from other goroutines.
	watermark atomic.Int64
}

// observe publishes the rollup's watermark.
func (sh *shardRun) observe() {
	if wm := sh.p.r.Watermark(); !wm.IsZero() {
		sh.watermark.Store(wm.UnixNano())
	}
}

// kinesisCursor is a Kinesis shard's State.Cursor: the first position and
// event count of the last batch handled, and the position after it. carry
// is what a batch handled again held fewer events than the first time:
// the events still to skip from the batches that follow it.
type kinesisCursor struct {
	from   stream.Position
	events uint64
	to     stream.Position
	carry  uint64
}

func (c kinesisCursor) append(b []byte) []byte {
	b = appendBytes(b, []byte(c.from.Seq))
	b = appendUvarint(b, uint64(c.from.Sub))
	b = appendUvarint(b, c.events)
	b = appendBytes(b, []byte(c.to.Seq))
	b = appendUvarint(b, uint64(c.to.Sub))
	return appendUvarint(b, c.carry)
}

func decodeKinesisCursor(b []byte) (c kinesisCursor, err error) {
	if len(b) == 0 {
		return c, nil
	}
	r := &reader{b: b}
	c.from = stream.Position{Seq: r.string(), Sub: int64(r.uvarint())}
	c.events = r.uvarint()
	c.to = stream.Position{Seq: r.string(), Sub: int64(r.uvarint())}
	c.carry = r.uvarint()
	if r.err == nil && len(r.b) != 0 {
		r.fail(fmt.Errorf("%d bytes after the end", len(r.b)))
	}
	if r.err != nil {
		return kinesisCursor{}, fmt.Errorf("kinesis cursor: %w", r.err)
	}
	return c, nil
}

// Open loads the shard's state, as its last holder saved it, and delivers
// again what that holder may not have delivered.
func (k *kinesisRun) Open(ctx context.Context, shard string, from stream.Position) (stream.Position, error) {
	sh, err := k.load(ctx, shard)
	if err != nil {
		return from, err
	}
	k.mu.Lock()
	k.shards[shard] = sh
	k.mu.Unlock()
	k.opened.Add(1)
	return from, nil
}

func (k *kinesisRun) load(ctx context.Context, shard string) (*shardRun, error) {
	sh := &shardRun{p: partitionRun{name: shard, store: k.o.Store, sinks: k.o.Sinks, r: NewRollup(k.o.Rollup)}}
	err := sh.p.resume(ctx)
	k.redeliver.Add(sh.p.redeliver)
	k.delivered(sh)
	if err != nil {
		return nil, fmt.Errorf("aggregate kinesis: shard %s: %w", shard, err)
	}
	last, err := decodeKinesisCursor(sh.p.cursor)
	if err != nil {
		return nil, fmt.Errorf("aggregate kinesis: shard %s: %w", shard, err)
	}
	sh.last = last
	sh.observe()
	return sh, nil
}

func (k *kinesisRun) shard(ctx context.Context, shard string) (*shardRun, error) {
	k.mu.Lock()
	sh := k.shards[shard]
	k.mu.Unlock()
	if sh != nil && sh.moved {
		return nil, fmt.Errorf("aggregate kinesis: shard %s: %w", shard, ErrStateMoved)
	}
	if sh != nil && !sh.broken {
		return sh, nil
	}
	sh, err := k.load(ctx, shard)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	k.shards[shard] = sh
	k.mu.Unlock()
	return sh, nil
}

// Handle adds the batch's new events, closing windows as the watermark
// passes them, and saves the shard's state with the outputs before it
// delivers them.
func (k *kinesisRun) Handle(ctx context.Context, b *stream.Batch) error {
	sh, err := k.shard(ctx, b.Partition)
	if err != nil {
		return err
	}
	// The first events of a batch handled before (its checkpoint not
	// written) are skipped: the same events, or more, from the same
	// position. Fewer, the Source does not promise, but they are skipped
	// too, and the rest from the batches that follow (carry).
	want := sh.last.carry
	if sh.last.from == b.From && sh.last.events > 0 {
		want = sh.last.events
	}
	r := sh.p.r
	before := r.Stats()
	var outs []Output
	var total, skip uint64
	// Windows close at the event that passes them (Due after every
	// event), however the events were batched.
	limit := func(pb *Batch, lo, hi int) int {
		if pb == nil {
			return lo + 1
		}
		return r.dueEnd(pb, lo, hi)
	}
	after := func(int) error {
		if r.Due() {
			outs = r.take(false, outs)
		}
		return nil
	}
	add := func(rows *stream.Rows) error {
		lo := rows.Lo
		n := rows.Len() - lo
		s := int(min(uint64(n), want-skip))
		total += uint64(n)
		skip += uint64(s)
		lo += s
		return r.addDecoded(rows.Rows, lo, r.Next()-uint64(lo), rows.Skip, limit, after)
	}
	if sh.dec == nil {
		sh.dec = columnar.NewDecoder()
	}
	b.Rows(sh.dec, add) // add never fails
	next := kinesisCursor{from: b.From, events: total, to: b.To}
	switch {
	case sh.last.from == b.From && sh.last.events > 0 && skip < sh.last.events:
		next = sh.last
		next.carry = sh.last.events - skip
	case !(sh.last.from == b.From && sh.last.events > 0) && sh.last.carry > 0 && skip < sh.last.carry:
		next = sh.last
		next.carry -= skip
	}
	k.skipped.Add(skip)
	if total == skip && next == sh.last {
		return nil
	}
	sh.last = next
	sh.p.cursor = sh.last.append(nil) // not in place: a loaded cursor shares the bytes it was read with
	sh.observe()
	if err := k.save(ctx, sh, outs); err != nil {
		return err
	}
	k.events.Add(total - skip)
	st := r.Stats()
	k.future.Add(st.Future - before.Future)
	k.folded.Add(st.Folded - before.Folded)
	k.aheadDropped.Add(st.AheadDropped - before.AheadDropped)
	k.correctionsDropped.Add(st.CorrectionsDropped - before.CorrectionsDropped)
	return nil
}

// save saves and delivers outs; a failure marks the shard to be loaded
// again, its in-memory state being ahead of the saved one.
func (k *kinesisRun) save(ctx context.Context, sh *shardRun, outs []Output) error {
	err := sh.p.save(ctx, outs)
	k.delivered(sh)
	if err != nil {
		sh.broken = true
		sh.moved = errors.Is(err, ErrStateMoved)
	}
	return err
}

// delivered counts the outputs the shard's partition delivered and
// reports progress.
func (k *kinesisRun) delivered(sh *shardRun) {
	n := sh.p.delivered
	if n == 0 {
		return
	}
	sh.p.delivered = 0
	k.outputs.Add(n)
	if k.o.Progress != nil {
		k.o.Progress(k.stats())
	}
}

// Idle advances a quiet shard's watermark with the wall clock and emits the
// windows it closes.
func (k *kinesisRun) Idle(ctx context.Context, shard string) error {
	sh, err := k.shard(ctx, shard)
	if err != nil {
		return err
	}
	sh.p.r.Advance(k.o.Now())
	sh.observe()
	outs := sh.p.r.take(false, nil)
	if len(outs) == 0 {
		return nil
	}
	return k.save(ctx, sh, outs)
}

// Close emits every window of a shard read to its end; a shard stopped or
// lost is forgotten, its state saved already.
func (k *kinesisRun) Close(ctx context.Context, shard string, ended bool) error {
	if !ended {
		k.mu.Lock()
		delete(k.shards, shard)
		k.mu.Unlock()
		return nil
	}
	sh, err := k.shard(ctx, shard)
	if err != nil {
		return err
	}
	if err := k.save(ctx, sh, sh.p.r.take(true, nil)); err != nil {
		return err
	}
	k.mu.Lock()
	delete(k.shards, shard)
	k.mu.Unlock()
	k.ended.Add(1)
	return nil
}
