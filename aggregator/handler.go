package aggregator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/stream"
)

// Source is what the aggregator reads decisions from: a source that hands
// batches of its partitions to a stream.Handler until ctx is done or,
// for a finite source, until it has read everything, then returns.
// *kinesis.Source is one; the local decision log and JSON lines are
// others.
type Source interface {
	Run(ctx context.Context, h stream.Handler) error
}

// RunOptions configure Run.
type RunOptions struct {
	// Store keeps each partition's state; required. Every process reading
	// a partition must see the same store: a process that takes a
	// partition over resumes from the state its last reader saved.
	Store  StateStore
	Rollup Options
	Sinks  []Sink
	// Now reads the wall clock: for the idle watermark, and as the bound
	// of the events of records their transport does not date (see
	// Rollup.Bound); default time.Now.
	Now func() time.Time
	// Progress, if set, is called after every delivery, from the
	// partition's goroutine: calls for different partitions may be
	// concurrent.
	Progress func(RunStats)
	// Problem, if set, is called with each record that cannot be decoded
	// in a batch whose source does not count and report such records
	// itself (a Batch without a Corrupt hook).
	Problem func(error)
}

// Run rolls the decisions src hands over up, one Rollup per partition,
// and delivers the outputs to o.Sinks, until src.Run returns.
//
// Exactly once: before a batch's Handle returns, and so before the source
// commits its position, the partition's state is saved: the snapshot, the
// outputs the batch closed (delivered after, then the state saved without
// them) and the batch's first position, size and end (its cursor). Open
// returns the end of the last batch saved, and the source reads from
// there; a batch handed again all the same (the source's position and the
// state's disagree) starts at the saved first position and holds those
// events or more: its first events are skipped. A process that opens a
// partition loads its state from the store and delivers its pending
// outputs again. Windows close at the event whose time passes their end
// however the events were batched, so a partition handed over mid-way
// gives the same outputs as one read by a single process.
//
// A partition closed without its end (a lease lost or released) leaves its
// open windows in the state for its next reader; a partition closed as
// ended (a Kinesis shard read to its end, a log at a clean shutdown)
// emits every window it holds. A partition that has gone quiet (Idle)
// advances its watermark with the wall clock (Options.Idle), so its last
// window is emitted on time.
func Run(ctx context.Context, src Source, o RunOptions) (RunStats, error) {
	h, err := newPartitions(o)
	if err != nil {
		return RunStats{}, err
	}
	err = src.Run(ctx, h)
	return h.stats(), err
}

// partitions is the aggregator's stream.Handler: one partition's Rollup,
// state and cursor per open partition. It is safe for concurrent use for
// different partitions.
type partitions struct {
	o RunOptions

	mu    sync.Mutex
	parts map[string]*partition // while open
	// marks are each partition's watermark as its last call left it,
	// kept after it is closed.
	marks map[string]time.Time
	// rollup is what this run's calls did to the partitions' rollups
	// (RunStats.Rollup), summed: a state loaded brings the figures of
	// the runs before, which are not counted.
	rollup RollupStats

	skipped, outputs, redeliver, awaited, leftovers, opened, ended atomic.Uint64
	heartbeats                                                     atomic.Uint64
	// moved counts the partitions opened at their state's position rather
	// than the source's.
	moved atomic.Uint64
}

var _ stream.Handler = (*partitions)(nil)

func newPartitions(o RunOptions) (*partitions, error) {
	if o.Store == nil {
		return nil, errors.New("aggregate: a state store is required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &partitions{o: o, parts: map[string]*partition{}, marks: map[string]time.Time{}}, nil
}

// stats returns what the handler did: this run's rollup figures and
// outputs (figures), each open partition's watermark (Shards, by name)
// and the least of them.
func (h *partitions) stats() RunStats {
	s := h.figures()
	for name, wm := range h.watermarks() {
		s.Shards = append(s.Shards, ShardStats{Shard: name, Watermark: wm})
		if !wm.IsZero() && (s.Watermark.IsZero() || wm.Before(s.Watermark)) {
			s.Watermark = wm
		}
	}
	sort.Slice(s.Shards, func(i, j int) bool { return s.Shards[i].Shard < s.Shards[j].Shard })
	return s
}

// figures returns this run's rollup figures and outputs.
func (h *partitions) figures() RunStats {
	h.mu.Lock()
	ro := h.rollup
	h.mu.Unlock()
	return RunStats{Rollup: ro, Outputs: h.outputs.Load(), Redeliver: h.redeliver.Load(), Awaited: h.awaited.Load(), Leftovers: h.leftovers.Load()}
}

// note counts what a call that succeeded did to the partition's rollup,
// whose figures were before when it started, and keeps the partition's
// watermark.
func (h *partitions) note(name string, pt *partition, before RollupStats) {
	did, wm := pt.p.r.Stats().sub(before), pt.p.r.Watermark()
	h.mu.Lock()
	h.rollup.add(did)
	h.marks[name] = wm
	h.mu.Unlock()
}

// watermark returns the least watermark of the partitions opened so far,
// each as its last call left it, closed or not.
func (h *partitions) watermark() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var wm time.Time
	for _, m := range h.marks {
		if !m.IsZero() && (wm.IsZero() || m.Before(wm)) {
			wm = m
		}
	}
	return wm
}

// watermarks returns each open partition's watermark, zero before its
// first event.
func (h *partitions) watermarks() map[string]time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]time.Time, len(h.parts))
	for name, p := range h.parts {
		var wm time.Time
		if ns := p.watermark.Load(); ns != 0 {
			wm = time.Unix(0, ns).UTC()
		}
		out[name] = wm
	}
	return out
}

// partition is an open partition: its rollup, state and sinks, and the
// cursor of the last batch handled. Only the partition's goroutine uses
// it.
type partition struct {
	p    partitionRun
	last cursor
	// broken says the in-memory state may be ahead of the saved one (a
	// handler call failed half-way): it is loaded again before the next.
	broken bool
	// moved says another reader saved the partition's state
	// (ErrStateMoved, a stream.ErrReopen): every call fails so until the
	// source opens the partition again, which loads the state the other
	// reader saved and reads from its position (or, finding its lease
	// gone, stops reading it).
	moved bool
	dec   *columnar.Decoder // reads the batches' records, once needed
	// watermark is the rollup's, in Unix nanoseconds (0: none yet), for
	// stats from other goroutines.
	watermark atomic.Int64
}

// observe publishes the rollup's watermark.
func (pt *partition) observe() {
	if wm := pt.p.r.Watermark(); !wm.IsZero() {
		pt.watermark.Store(wm.UnixNano())
	}
}

// cursor is a partition's State.Cursor: the first position and event
// count of the last batch handled, and the position after it. carry is
// what a batch handled again held fewer events than the first time: the
// events still to skip from the batches that follow it.
type cursor struct {
	from   stream.Position
	events uint64
	to     stream.Position
	carry  uint64
}

func (c cursor) append(b []byte) []byte {
	b = appendBytes(b, []byte(c.from.Seq))
	b = appendUvarint(b, uint64(c.from.Sub))
	b = appendUvarint(b, c.events)
	b = appendBytes(b, []byte(c.to.Seq))
	b = appendUvarint(b, uint64(c.to.Sub))
	return appendUvarint(b, c.carry)
}

func decodeCursor(b []byte) (c cursor, err error) {
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
		return cursor{}, fmt.Errorf("cursor: %w", r.err)
	}
	return c, nil
}

// Open loads the partition's state, as its last reader saved it, delivers
// again what that reader may not have delivered, and returns the
// position after the events the state holds: the end of the last batch
// handled, or, for a state that has no cursor, the rollup's next log
// offset. A partition without a state is read from from, and so is one
// whose last batch was a shorter redelivery (carry): its events to skip
// are counted from the source's position.
func (h *partitions) Open(ctx context.Context, partition string, from stream.Position) (stream.Position, error) {
	pt, err := h.load(ctx, partition)
	if err != nil {
		return from, err
	}
	h.note(partition, pt, pt.p.r.Stats())
	h.opened.Add(1)
	at := from
	switch {
	case len(pt.p.cursor) > 0 && pt.last.carry == 0:
		at = pt.last.to
	case len(pt.p.cursor) > 0:
	case pt.p.resumed:
		at = stream.Offset(pt.p.r.Next())
	}
	if at != from {
		h.moved.Add(1)
	}
	return at, nil
}

// load loads the partition's state, delivers its pending outputs and
// makes it the open partition.
func (h *partitions) load(ctx context.Context, name string) (*partition, error) {
	pt := &partition{p: partitionRun{name: name, store: h.o.Store, sinks: h.o.Sinks, r: NewRollup(h.o.Rollup)}}
	err := pt.p.resume(ctx)
	h.redeliver.Add(pt.p.redeliver)
	h.awaited.Add(pt.p.awaited)
	h.leftovers.Add(pt.p.leftovers)
	h.delivered(pt)
	if err != nil {
		return nil, fmt.Errorf("aggregate: partition %s: %w", name, err)
	}
	last, err := decodeCursor(pt.p.cursor)
	if err != nil {
		return nil, fmt.Errorf("aggregate: partition %s: %w", name, pt.p.stateError(err))
	}
	pt.last = last
	pt.observe()
	h.mu.Lock()
	h.parts[name] = pt
	h.mu.Unlock()
	return pt, nil
}

// partition returns the open partition, loaded again if a failed call left
// it broken.
func (h *partitions) partition(ctx context.Context, name string) (*partition, error) {
	h.mu.Lock()
	pt := h.parts[name]
	h.mu.Unlock()
	if pt != nil && pt.moved {
		return nil, fmt.Errorf("aggregate: partition %s: %w", name, ErrStateMoved)
	}
	if pt != nil && !pt.broken {
		return pt, nil
	}
	return h.load(ctx, name)
}

// Handle adds the batch's new events, closing windows as the watermark
// passes them, and saves the partition's state with the outputs before it
// delivers them.
func (h *partitions) Handle(ctx context.Context, b *stream.Batch) error {
	pt, err := h.partition(ctx, b.Partition)
	if err != nil {
		return err
	}
	// The first events of a batch handled before (its commit not made)
	// are skipped: the same events, or more, from the same position.
	// Fewer, the sources do not promise, but they are skipped too, and
	// the rest from the batches that follow (carry).
	again := pt.last.from == b.From && pt.last.events > 0
	want := pt.last.carry
	if again {
		want = pt.last.events
	}
	r := pt.p.r
	before := r.Stats()
	var outs []Output
	var total, skip uint64
	var now time.Time // read once, for the first record its transport does not date
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
		// A log's rows are numbered by their offsets; a shard's go on
		// from the rollup's count.
		seq := r.Next() - uint64(lo)
		if rows.Pos.Seq == "" {
			seq = rows.Pos.Offset()
		}
		at := rows.Arrived
		if at.IsZero() {
			if now.IsZero() {
				now = h.o.Now()
			}
			at = now
		}
		r.Bound(at)
		return r.addDecoded(rows.Rows, lo, seq, rows.Skip, limit, after)
	}
	if pt.dec == nil {
		pt.dec = columnar.NewDecoder()
	}
	if b.Corrupt == nil && h.o.Problem != nil {
		b.Corrupt = func(rec *stream.Record, lost int, err error) {
			h.o.Problem(fmt.Errorf("aggregate: partition %s: record at %s, %d events lost: %w", b.Partition, rec.Pos, lost, err))
		}
	}
	b.Rows(pt.dec, add) // add never fails
	next := cursor{from: b.From, events: total, to: b.To}
	switch {
	case again && skip < pt.last.events:
		next = pt.last
		next.carry = pt.last.events - skip
	case !again && pt.last.carry > 0 && skip < pt.last.carry:
		next = pt.last
		next.carry -= skip
	}
	h.skipped.Add(skip)
	if total == skip && next == pt.last {
		return nil
	}
	pt.last = next
	pt.p.cursor = pt.last.append(nil) // not in place: a loaded cursor shares the bytes it was read with
	pt.observe()
	if err := h.save(ctx, pt, outs); err != nil {
		return err
	}
	h.note(b.Partition, pt, before)
	return nil
}

// save saves and delivers outs; a failure marks the partition to be
// loaded again, its in-memory state being ahead of the saved one.
func (h *partitions) save(ctx context.Context, pt *partition, outs []Output) error {
	err := pt.p.save(ctx, outs)
	h.delivered(pt)
	if err != nil {
		pt.broken = true
		pt.moved = errors.Is(err, ErrStateMoved)
	}
	return err
}

// delivered counts the outputs the partition delivered and reports
// progress.
func (h *partitions) delivered(pt *partition) {
	h.heartbeats.Add(pt.p.heartbeats)
	pt.p.heartbeats = 0
	n := pt.p.delivered
	if n == 0 {
		return
	}
	pt.p.delivered = 0
	h.outputs.Add(n)
	if h.o.Progress != nil {
		h.o.Progress(h.stats())
	}
}

// Idle advances a quiet partition's watermark with the wall clock and
// emits the windows it closes.
func (h *partitions) Idle(ctx context.Context, partition string) error {
	pt, err := h.partition(ctx, partition)
	if err != nil {
		return err
	}
	before := pt.p.r.Stats()
	pt.p.r.Advance(h.o.Now())
	pt.observe()
	outs := pt.p.r.take(false, nil)
	if len(outs) > 0 {
		if err := h.save(ctx, pt, outs); err != nil {
			return err
		}
	}
	h.note(partition, pt, before)
	return nil
}

// Close emits every window of a partition that ended; a partition stopped
// or lost is forgotten, its state saved already.
func (h *partitions) Close(ctx context.Context, partition string, ended bool) error {
	if !ended {
		h.forget(partition)
		return nil
	}
	pt, err := h.partition(ctx, partition)
	if err != nil {
		return err
	}
	before := pt.p.r.Stats()
	if err := h.save(ctx, pt, pt.p.r.take(true, nil)); err != nil {
		return err
	}
	h.note(partition, pt, before)
	h.forget(partition)
	h.ended.Add(1)
	return nil
}

func (h *partitions) forget(partition string) {
	h.mu.Lock()
	delete(h.parts, partition)
	h.mu.Unlock()
}
