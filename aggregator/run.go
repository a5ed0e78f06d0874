package aggregator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/seglog"
	"github.com/ratewarden/ratewarden/decisions/stream"
)

// LogOptions configure RunLog.
type LogOptions struct {
	Dir       string // the decision log directory; required
	Partition string // the partition's name in outputs and state; default "log"
	// StateDir keeps the partition's state (snapshot and undelivered
	// outputs); required. A restart resumes from it.
	StateDir string
	Follow   bool      // wait for new events at the end of the log
	Since    time.Time // events before are skipped; zero: from the start
	Until    time.Time // events at or after are skipped; zero: to the end
	Rollup   Options
	Sinks    []Sink
	// Now reads the wall clock, for the idle watermark and as the bound
	// of the events of records their transport does not date (see
	// RunOptions.Now); default time.Now.
	Now func() time.Time
	// Tick is how often a following run, at the end of the log, advances
	// an idle watermark and emits the windows it closes; default 200 ms.
	Tick time.Duration
	// FlushEvery is how many events a batch holds at least (whole records
	// of the log, decisionlog.SourceOptions.BatchEvents) while reading a
	// backlog: the state is saved, and the outputs delivered, once a
	// batch; default decisionlog.DefaultBatchEvents. Windows close at the
	// event that passes them whatever it is.
	FlushEvery int
	// Linger is how long a following run, caught up with the log, holds a
	// batch shorter than FlushEvery for more events
	// (decisionlog.SourceOptions.Linger): a busy tail saves the state
	// about once per Linger; default decisionlog.DefaultLinger.
	Linger time.Duration
	// Progress, if set, is called after every batch, whether it delivered
	// anything or not, every Tick at the end of a followed log, and once
	// the state is loaded.
	Progress func(RunStats)
	// Problem, if set, is called with each problem of the log as the run
	// meets it: a corrupt region or a missing segment (a seglog.Problem,
	// which names the segment file and byte offset), a record that could
	// not be decoded, or events removed from the log before this partition
	// read them (an error wrapping seglog.ErrMissing). Beyond the first
	// 1000 corrupt regions and 100 undecodable records it is not called;
	// RunStats counts them all.
	Problem func(error)
	// Consumer, if set, is the name under which the run commits its
	// position to the log as a consumer offset (seglog.CommitReaderOffset)
	// after every batch, once the state holds it, so that the log's
	// retention reports the segments it removes before this partition
	// read them. A commit that fails is passed to Problem once and does
	// not stop the run. The run's position is its state's, not the
	// consumer offset's.
	Consumer string
	// Log, if set, is the process's own writer of the log in Dir (the
	// edge's, when both run in one process): a following run then reads
	// through it and wakes at once when it appends, rather than at the
	// next look at the files (decisionlog.SourceOptions.Log). The caller
	// closes it after the run returns: a run following a closed Log
	// stops with seglog.ErrClosed at the log's end.
	Log *seglog.Log

	// perEvent makes the run decode each record into events
	// (columnar.Decoder.DecodePayload) and roll them up one by one, rather
	// than from their columns: the reference the tests hold the columnar
	// path to.
	perEvent bool
}

// RunStats are what a run did.
type RunStats struct {
	// Rollup is what this run's rollups did, summed over its partitions:
	// the events it added, the windows it emitted and so on, from zero
	// at its start whatever the state it resumed from holds (the runs
	// before counted theirs; the partials and EMF hold the totals). Every
	// source's run (RunLog, RunKinesis, Lines, Run) counts them so.
	Rollup    RollupStats
	Read      decisionlog.ReadStats
	Outputs   uint64 // outputs delivered
	Redeliver uint64 // outputs of the previous run delivered again on start
	// Awaited are the outputs pending in the state of a partition taken
	// over from a live reader that this run waited for that reader to
	// deliver, rather than delivering them again (stream.TakenOver).
	Awaited uint64
	// Leftovers are the temporary files that writes of the state or the
	// partials, cut short by a crash, had left, removed on start.
	Leftovers uint64
	Next      uint64    // the next log offset to read
	Watermark time.Time // the partition's watermark
	// Shards, of a Kinesis run, are the shards held and their lags; the
	// Watermark is then the least of theirs.
	Shards []ShardStats
	// Lost is what the log reader could not read: corrupt bytes, the
	// events lost in them and in missing segments, and (Removed) the
	// events between the saved position and the log's oldest segment when
	// the run resumed. Read.BadEvents counts the events of records that
	// could not be decoded.
	Lost seglog.Loss
	// Outside is what the log reader could not read outside the run's
	// time range (LogOptions.Since and Until), not counted in Lost
	// (decisionlog.Source.Outside).
	Outside seglog.Loss
}

// RunLog rolls the decision log in o.Dir up and delivers the outputs to
// o.Sinks, resuming from the partition's state: Run over a
// decisionlog.Source, with the state in o.StateDir. Without Follow it
// stops at the end of the log (or at Until) and emits every open window;
// with Follow it runs until ctx is done, then emits the open windows (a
// clean shutdown). Outputs are written to the state before they are
// delivered, and the state before the log's consumer offset, so a crash at
// any point loses nothing: the restart delivers them again, byte for byte,
// and reads the log from where the state says. A state whose position is
// past the end of the log in o.Dir (kept from a log since removed,
// replaced or cut short) stops the run, following or not, with an error
// wrapping seglog.ErrPastEnd that says how to start over, before anything
// is handled, saved or committed.
func RunLog(ctx context.Context, o LogOptions) (RunStats, error) {
	if o.Dir == "" || o.StateDir == "" {
		return RunStats{}, errors.New("aggregate log: a log directory and a state directory are required")
	}
	if o.Partition == "" {
		o.Partition = "log"
	}
	if strings.ContainsAny(o.Partition, `/\.`) {
		return RunStats{}, fmt.Errorf("aggregate log: partition %q: want a name without '/', '\\' or '.'", o.Partition)
	}
	src := decisionlog.NewSource(o.Dir, decisionlog.SourceOptions{Partition: o.Partition, Follow: o.Follow,
		Since: o.Since, Until: o.Until, Consumer: o.Consumer, BatchEvents: o.FlushEvery, Linger: o.Linger, Tick: o.Tick, Problem: o.Problem,
		Log: o.Log})
	h, err := newPartitions(RunOptions{Store: &StateDir{Dir: o.StateDir}, Rollup: o.Rollup, Sinks: o.Sinks, Now: o.Now})
	if err != nil {
		return RunStats{}, fmt.Errorf("aggregate log: %w", err)
	}
	run := &onePartition{Handler: h, h: h}
	if o.perEvent {
		run.Handler = &perEvent{Handler: h, dec: columnar.NewDecoder()}
	}
	stats := func() RunStats {
		s := run.stats()
		s.Read, s.Lost, s.Outside, s.Next = src.Stats(), src.Loss(), src.Outside(), run.next.Offset()
		return s
	}
	if o.Progress != nil {
		// After every call, so that a backlog shows as it is read and the
		// end of the log as it is reached (a report with no new bytes).
		run.after = func() { o.Progress(stats()) }
	}
	if err = src.Run(ctx, run); err != nil && run.failed == nil {
		if errors.Is(err, seglog.ErrPastEnd) {
			// The state's position came from a log no longer there.
			err = fmt.Errorf("%w (the state in %s is from a log that was removed, replaced or cut short; to read %s from its start, move the state directory away)", err, o.StateDir, o.Dir)
		}
		err = fmt.Errorf("aggregate log: %w", err) // the log's, not the handler's
	}
	return stats(), err
}

// onePartition is the aggregator's handler as a source of one partition
// (the log, standard input) runs it: it keeps the position after the last
// batch handled, and calls after once each call returned nil.
type onePartition struct {
	stream.Handler // the partitions, or a wrapper of them
	h              *partitions
	next           stream.Position
	after          func() // may be nil
	failed         error  // the handler's last error
}

func (p *onePartition) Open(ctx context.Context, partition string, _ stream.Position) (stream.Position, error) {
	// The partition's position is its state's alone: a consumer offset of
	// the same name may be another state directory's, and a state
	// directory without a state reads from the start, as it always has.
	pos, err := p.Handler.Open(ctx, partition, stream.Position{})
	p.next = pos
	return pos, p.done(err)
}

func (p *onePartition) Handle(ctx context.Context, b *stream.Batch) error {
	err := p.Handler.Handle(ctx, b)
	if err == nil {
		p.next = b.To
	}
	return p.done(err)
}

func (p *onePartition) Idle(ctx context.Context, partition string) error {
	return p.done(p.Handler.Idle(ctx, partition))
}

func (p *onePartition) Close(ctx context.Context, partition string, ended bool) error {
	err := p.Handler.Close(ctx, partition, ended)
	if err != nil {
		p.failed = err
	}
	return err
}

// done notes the handler's error err, or calls after when it is nil.
func (p *onePartition) done(err error) error {
	if err != nil {
		p.failed = err
		return err
	}
	if p.after != nil {
		p.after()
	}
	return nil
}

// stats are the handler's figures, with the partition's watermark (kept
// once it is closed), and no shards.
func (p *onePartition) stats() RunStats {
	s := p.h.figures()
	s.Watermark = p.h.watermark()
	return s
}

// perEvent hands the handler each record of a batch as its own batch of
// events, decoded whole (LogOptions.perEvent).
type perEvent struct {
	stream.Handler
	dec *columnar.Decoder
	evs []decisions.Decision
}

func (p *perEvent) Handle(ctx context.Context, b *stream.Batch) error {
	if len(b.Records) == 0 {
		return p.Handler.Handle(ctx, b)
	}
	for i := range b.Records {
		rec := &b.Records[i]
		from, to := stream.Offset(max(b.From.Offset(), rec.Pos.Offset())), b.To
		if i+1 < len(b.Records) {
			to = b.Records[i+1].Pos
		}
		var err error
		p.evs, err = p.dec.DecodePayload(rec.Codec, rec.Data, p.evs[:0])
		if err != nil {
			b.Corrupt(rec, rec.Count, err)
			p.evs = p.evs[:0]
		}
		evs := p.evs[min(from.Sub-rec.Pos.Sub, int64(len(p.evs))):]
		if len(evs) == 0 {
			evs = nil // not Records: an empty batch of events
		}
		sub := &stream.Batch{Partition: b.Partition, From: from, To: to, Events: evs, Filter: b.Filter}
		if err := p.Handler.Handle(ctx, sub); err != nil {
			return err
		}
	}
	return nil
}

// partitionRun is one partition's Rollup with its state store and sinks:
// what the log and each Kinesis shard share. It is not safe for concurrent
// use.
type partitionRun struct {
	name      string
	store     StateStore
	sinks     []Sink
	r         *Rollup
	cursor    []byte // saved with every state
	snap      []byte // the last snapshot saved, its bytes reused by the next
	delivered uint64
	redeliver uint64
	leftovers uint64 // temporary files removed on resume (removeLeftovers)
	// awaited counts the outputs pending in the state loaded that the
	// previous reader, still live, delivered while resume waited for it
	// (see awaitPending).
	awaited uint64
	// heartbeats counts the state written again while a long delivery
	// went on (see deliver).
	heartbeats uint64
	resumed    bool // a state was found
}

// resume restores the rollup and cursor from the partition's state and
// delivers again the outputs the previous run may not have delivered.
// For a partition taken over from a live reader (stream.TakenOver), it
// first waits for that reader to deliver them (awaitPending).
func (p *partitionRun) resume(ctx context.Context) error {
	st, ok, err := p.store.Load(ctx, p.name)
	if err != nil {
		return err
	}
	if d := stream.TakenOverFor(ctx); ok && len(st.Pending) > 0 && d > 0 {
		if st, ok, err = p.awaitPending(ctx, st, d); err != nil {
			return err
		}
	}
	// After the wait: a leftover is then a crash's, not the previous
	// reader's write under way.
	if err := p.removeLeftovers(st.Pending); err != nil {
		return err
	}
	if !ok {
		return nil
	}
	if err := p.r.Restore(st.Snapshot); err != nil {
		return p.stateError(err)
	}
	p.resumed = true
	p.cursor = st.Cursor
	if len(st.Pending) == 0 {
		return nil
	}
	p.redeliver += uint64(len(st.Pending))
	return p.deliver(ctx, st, true)
}

// stateWatcher is a StateStore that tells, without reading a
// partition's state, whether another store saved it since this one last
// read or wrote it (the check of its Save): a state's metadata, or a
// table item's generation. awaitPending asks it before it loads the
// state again: a state of megabytes, chunked in a table, is then read
// once it moved rather than ten times a second.
type stateWatcher interface {
	moved(ctx context.Context, partition string) (bool, error)
}

var (
	_ stateWatcher = (*StateDir)(nil)
	_ stateWatcher = (*StateTable)(nil)
)

// awaitPollEvery is how often awaitPending looks at the state again.
const awaitPollEvery = 100 * time.Millisecond

// awaitPending loads the partition's state again, each time it moved
// (stateWatcher), until it holds no pending outputs, or d has passed
// since the wait began or since the reader last wrote the same state
// again (its heartbeat while it delivers, see deliver; up to
// stream.MaxProgressWaits times d in all), and returns the last loaded.
// st, loaded, holds some: a reader that is still live saved it, and is
// delivering them (partitionRun.save), then saves the state without
// them. Delivering them here as well would make each output twice, in
// two processes' sinks (an EMF file each), which no sink can tell apart. A
// state that changes but still holds pending outputs is the reader's next
// batch: waiting goes on. Past d, what is pending is delivered again, as
// after a crash.
func (p *partitionRun) awaitPending(ctx context.Context, st State, d time.Duration) (State, bool, error) {
	began := time.Now()
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	tick := time.NewTicker(min(awaitPollEvery, d))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return st, true, ctx.Err()
		case <-timeout.C:
			return st, true, nil
		case <-tick.C:
		}
		if w, ok := p.store.(stateWatcher); ok {
			moved, err := w.moved(ctx, p.name)
			if err != nil {
				return st, true, err
			}
			if !moved {
				continue
			}
		}
		next, ok, err := p.store.Load(ctx, p.name)
		if err != nil {
			return st, true, err
		}
		if !ok {
			return next, false, nil // removed meanwhile: nothing to deliver
		}
		switch {
		case !bytes.Equal(next.Snapshot, st.Snapshot) || !bytes.Equal(next.Cursor, st.Cursor) || len(next.Pending) == 0:
			p.awaited += uint64(len(st.Pending))
		case time.Since(began) < stream.MaxProgressWaits*d:
			// The same state written again: the reader's heartbeat
			// through a long delivery (see deliver). The wait starts
			// again.
			timeout.Reset(d)
		}
		if st = next; len(st.Pending) == 0 {
			return st, true, nil
		}
	}
}

// leftoverRemover is a StateStore or Sink that writes files whole
// through temporary files (atomicfile): removeLeftovers removes those
// that writes of the partition's state or of outs, cut short by a crash,
// left behind, and returns how many. The partition's holder calls it as
// it resumes, before it saves or delivers anything: it is then the only
// writer of those files (the state directory's lock, a shard's lease).
type leftoverRemover interface {
	removeLeftovers(partition string, outs []Output) (int, error)
}

// removeLeftovers has the store and the sinks remove what writes of the
// partition's files cut short by a crash left (see leftoverRemover);
// outs are the outputs it delivers again.
func (p *partitionRun) removeLeftovers(outs []Output) error {
	remove := func(x any) error {
		r, ok := x.(leftoverRemover)
		if !ok {
			return nil
		}
		n, err := r.removeLeftovers(p.name, outs)
		p.leftovers += uint64(n)
		if err != nil {
			return fmt.Errorf("aggregate %s: %w", p.name, err)
		}
		return nil
	}
	if err := remove(p.store); err != nil {
		return err
	}
	for _, s := range p.sinks {
		if err := remove(s); err != nil {
			return err
		}
	}
	return nil
}

// againWriter is a Sink that can be handed an output delivered again
// after a crash, and then leaves out what it holds of it already (an EMF
// file: EMFSink.WriteAgain).
type againWriter interface {
	WriteAgain(ctx context.Context, partition string, o Output) error
}

// stateError returns err, an error of the state the partition loaded,
// naming where the store keeps it when the store can say.
func (p *partitionRun) stateError(err error) error {
	if n, ok := p.store.(stateNamer); ok {
		return n.stateError(p.name, err)
	}
	return err
}

// save writes the state with outs, then delivers outs and writes the state
// without them. With no outs it writes the state once.
func (p *partitionRun) save(ctx context.Context, outs []Output) error {
	if _, ok := p.store.(noState); ok {
		if len(outs) == 0 {
			return nil
		}
		return p.deliver(ctx, State{Pending: outs}, false)
	}
	// The snapshot's bytes are made once and written over at every save:
	// a store does not keep them (StateStore).
	snap, err := p.r.AppendSnapshot(p.snap[:0])
	if err != nil {
		return err
	}
	p.snap = snap
	st := State{Snapshot: snap, Pending: outs, Cursor: p.cursor}
	if err := p.store.Save(ctx, p.name, st); err != nil {
		return err
	}
	if len(outs) == 0 {
		return nil
	}
	return p.deliver(ctx, st, false)
}

// deliver hands st's pending outputs to every sink, again when they were
// pending in the state the run resumed from (see againWriter), flushes the
// sinks and writes the state without them.
//
// A source that lets a call end what it started once the partition is
// lost asks for progress reports (stream.Progress): once it has stopped
// reading the partition, deliver writes st again about every so often
// while it delivers, and reports it (heartbeat). The partition's next
// reader, which waits for these outputs rather than deliver them too
// (awaitPending), waits as long
// as the state is written again, and the source keeps the call's context
// as long. Before, a delivery longer than a fixed wait (a slow CloudWatch
// agent, a backlog's hundreds of windows) was made by both readers.
func (p *partitionRun) deliver(ctx context.Context, st State, again bool) error {
	stop := func() error { return nil }
	if pr, ok := stream.ProgressOf(ctx); ok && len(st.Pending) > 0 {
		if _, ok := p.store.(noState); !ok {
			stop = p.heartbeat(ctx, st, pr)
		}
	}
	err := p.deliverPending(ctx, st, again)
	if herr := stop(); err == nil {
		err = herr
	}
	if err != nil {
		return err
	}
	return p.store.Save(ctx, p.name, State{Snapshot: st.Snapshot, Cursor: st.Cursor})
}

// deliverPending writes st's pending outputs to every sink and flushes
// them (see deliver).
func (p *partitionRun) deliverPending(ctx context.Context, st State, again bool) error {
	for _, o := range st.Pending {
		for _, s := range p.sinks {
			write := s.Write
			if a, ok := s.(againWriter); ok && again {
				write = a.WriteAgain
			}
			if err := write(ctx, p.name, o); err != nil {
				return fmt.Errorf("aggregate %s: deliver: %w", p.name, err)
			}
		}
	}
	for _, s := range p.sinks {
		if err := s.Flush(ctx); err != nil {
			return fmt.Errorf("aggregate %s: deliver: %w", p.name, err)
		}
	}
	p.delivered += uint64(len(st.Pending))
	return nil
}

// heartbeat writes st, as it is, every pr.Every once the source stopped
// reading the partition (before, nobody waits for it), until the
// returned stop is called, and reports each write: the partition's next
// reader, waiting for st's pending outputs, sees that this reader is
// still delivering them (awaitPending). stop waits for a write under
// way, never cut short (the store would not know whether it was
// written), and returns the
// first write's error, which ends the heartbeat: ErrStateMoved once that
// reader stopped waiting and wrote the state itself.
func (p *partitionRun) heartbeat(ctx context.Context, st State, pr stream.Progress) (stop func() error) {
	quit, done := make(chan struct{}), make(chan error, 1)
	go func() {
		t := time.NewTicker(pr.Every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				done <- nil
				return
			case <-t.C:
			}
			if !pr.Stopped() {
				continue
			}
			if err := p.store.Save(ctx, p.name, st); err != nil {
				done <- err
				return
			}
			p.heartbeats++
			if !pr.Report() {
				done <- nil // past the source's bound: the next reader stops waiting
				return
			}
		}
	}()
	return func() error {
		close(quit)
		return <-done
	}
}
