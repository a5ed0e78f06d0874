package decisions

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// BatchWriter writes batches of decisions for an Emitter. WriteBatch is
// called from one goroutine at a time; Flush makes what was written durable
// as far as the writer can.
type BatchWriter interface {
	WriteBatch(ds []Decision) error
	Flush() error
}

// Discard is a BatchWriter that drops every decision: for an edge that
// only wants its metrics, and for benchmarks of the hand-off alone.
var Discard BatchWriter = discard{}

type discard struct{}

func (discard) WriteBatch([]Decision) error { return nil }
func (discard) Flush() error                { return nil }

// Tee returns a BatchWriter writing every batch to each of ws in turn; a
// failing writer does not keep the others from their batch, but a slow one
// holds them all up. Behind an Emitter, give writers that do I/O over a
// network a Fanout lane each instead.
func Tee(ws ...BatchWriter) BatchWriter { return tee(ws) }

type tee []BatchWriter

func (t tee) WriteBatch(ds []Decision) error {
	var errs []error
	for _, w := range t {
		errs = append(errs, w.WriteBatch(ds))
	}
	return errors.Join(errs...)
}

func (t tee) Flush() error {
	var errs []error
	for _, w := range t {
		errs = append(errs, w.Flush())
	}
	return errors.Join(errs...)
}

// EmitterOptions configures an Emitter.
type EmitterOptions struct {
	Queue int // decisions held at most awaiting the writer; default 4096
	Batch int // decisions handed to the writer at once at most; default 1024
	// BatchBytes bounds a batch's estimated encoded size (Size), so that a
	// batch fits a sink's record limit (a Kinesis record is 1 MiB at most);
	// default 1 MiB. A single larger decision goes alone.
	BatchBytes int
	Interval   time.Duration // the writer is flushed at least this often while decisions arrive; default 200ms
	// Linger, when more than 0, replaces Interval: a decision waits in the
	// queue at most Linger for others to join it, and the queue is written
	// as soon as it holds Batch decisions. So a sink that pays per record
	// (Kinesis, the log's schema) gets full batches at low rates, for at
	// most Linger of delay, and is written as often as it fills at high
	// rates. Decisions that arrive while a batch is written wait for the
	// next batch or for Linger from the end of that write (the writer's
	// time is not counted against them). Close writes what lingers.
	Linger time.Duration
	// OnError is called with every write or flush error, from the writer
	// goroutine. It may be nil.
	OnError func(error)
	// DropReport is how often decisions dropped since the last report are
	// written to the sink as a KindDrops event, so the loss is visible in
	// the log itself; default 10s. Node names the reporter.
	DropReport time.Duration
	Node       string
}

// Emitter hands decisions from the request path to a BatchWriter without
// blocking: Emit appends the decision to a bounded buffer, and one goroutine
// swaps that buffer for an empty one and writes it out in batches, so the
// request path never waits for a copy or a write. When the buffer is full
// the decision is dropped and counted. Emitter is safe for concurrent use.
type Emitter struct {
	w    BatchWriter
	opts EmitterOptions

	mu      sync.Mutex
	pending []Decision // cap opts.Queue; appended to by Emit
	closed  bool
	emitted uint64 // under mu: the lock is held anyway
	wakeAt  int    // queue length at which Emit wakes the writer

	wake  chan struct{}
	flush chan chan error // Flush's requests to the writer goroutine
	stop  chan struct{}
	done  chan struct{}

	dropped, written, errs, clamped atomic.Uint64
	reported                        uint64 // drops already reported in the log; writer goroutine only
	// Writer goroutine only: how many slots from the start of the buffer
	// it holds (spare) and of the one it gave Emit (pending) may still
	// hold written decisions (see drain).
	spareDirty, pendingDirty int
}

// EmitterStats are an Emitter's counters.
type EmitterStats struct {
	Emitted uint64 // accepted into the queue
	Dropped uint64 // refused: queue full or emitter closed
	Written uint64 // handed to the writer without error
	Errors  uint64 // write or flush errors
	Queued  int    // in the queue now
	// Clamped counts decisions written with a field cut to what readers
	// take (Decision.Clamp): a longer one would make them refuse the
	// whole record.
	Clamped uint64
}

// NewEmitter starts an Emitter draining into w. Close it to flush. It holds
// two buffers of opts.Queue decisions.
func NewEmitter(w BatchWriter, opts EmitterOptions) *Emitter {
	if opts.Queue <= 0 {
		opts.Queue = 4096
	}
	if opts.Batch <= 0 {
		opts.Batch = 1024
	}
	opts.Batch = min(opts.Batch, opts.Queue)
	if opts.Linger < 0 {
		opts.Linger = 0
	}
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = 1 << 20
	}
	if opts.Interval <= 0 {
		opts.Interval = 200 * time.Millisecond
	}
	if opts.DropReport <= 0 {
		opts.DropReport = 10 * time.Second
	}
	e := &Emitter{
		w: w, opts: opts,
		pending: make([]Decision, 0, opts.Queue),
		wake:    make(chan struct{}, 1),
		flush:   make(chan chan error),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		// Waking the writer costs the request path a thread wake-up, so it
		// is woken when a quarter of the queue is used (or a batch, if
		// larger), and otherwise finds the queue on its interval. A
		// lingering writer is woken by the first decision, to start its
		// wait, and by the one that fills a batch.
		wakeAt: max(opts.Queue/4, opts.Batch),
	}
	if opts.Linger > 0 {
		e.wakeAt = opts.Batch
	}
	go e.run(make([]Decision, 0, opts.Queue))
	return e
}

// Emit queues d. It never blocks on I/O; it reports false when d was
// dropped because the queue was full or the emitter closed.
func (e *Emitter) Emit(d Decision) bool { return e.EmitRef(&d) }

// EmitRef is Emit for a caller holding the decision by reference: it is
// copied once, into the queue, and d is not retained. The request path
// uses it because a decision is about 430 bytes.
func (e *Emitter) EmitRef(d *Decision) bool {
	e.mu.Lock()
	n := len(e.pending)
	if n == cap(e.pending) || e.closed {
		e.mu.Unlock()
		e.dropped.Add(1)
		return false
	}
	// Not append(e.pending, *d), which copies *d to the stack first.
	e.pending = e.pending[:n+1]
	e.pending[n] = *d
	e.emitted++
	wake := len(e.pending) == e.wakeAt || (len(e.pending) == 1 && e.opts.Linger > 0)
	e.mu.Unlock()
	if wake {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// Stats returns the emitter's counters.
func (e *Emitter) Stats() EmitterStats {
	e.mu.Lock()
	q, emitted := len(e.pending), e.emitted
	e.mu.Unlock()
	return EmitterStats{Emitted: emitted, Dropped: e.dropped.Load(), Written: e.written.Load(), Errors: e.errs.Load(), Queued: q,
		Clamped: e.clamped.Load()}
}

// swap takes the queued decisions, leaving spare (emptied) in their place.
func (e *Emitter) swap(spare []Decision) []Decision {
	e.mu.Lock()
	out := e.pending
	e.pending = spare[:0]
	e.mu.Unlock()
	e.spareDirty, e.pendingDirty = max(len(out), e.pendingDirty), e.spareDirty
	return out
}

func (e *Emitter) run(spare []Decision) {
	defer close(e.done)
	if e.opts.Linger > 0 {
		e.linger(spare)
		return
	}
	tick := time.NewTicker(e.opts.Interval)
	defer tick.Stop()
	report := time.NewTicker(e.opts.DropReport)
	defer report.Stop()
	for {
		select {
		case <-e.wake:
			spare = e.drain(spare, false, true)
		case <-tick.C:
			spare = e.drain(spare, true, false)
		case now := <-report.C:
			e.reportDrops(now)
		case reply := <-e.flush:
			spare = e.flushNow(spare, reply)
		case <-e.stop:
			e.finish(spare)
			return
		}
	}
}

// flushNow serves a Flush: it reports drops, writes everything queued,
// flushes, and answers reply with the errors on the way.
func (e *Emitter) flushNow(spare []Decision, reply chan<- error) []Decision {
	errs := e.errs.Load()
	e.reportDrops(time.Now())
	spare = e.drain(spare, true, false)
	if n := e.errs.Load() - errs; n > 0 {
		reply <- fmt.Errorf("flush decisions: %d write or flush errors", n)
	} else {
		reply <- nil
	}
	return spare
}

// finish writes what is queued and the last drop reports, and flushes.
func (e *Emitter) finish(spare []Decision) {
	spare = e.drain(spare, false, false)
	for now := time.Now(); e.reportDrops(now); {
		// No next report comes: write the rest now.
	}
	e.drain(spare, true, false)
}

// linger is run's loop for a lingering emitter: the queue is written when
// it holds a batch, or Linger after its first decision arrived.
func (e *Emitter) linger(spare []Decision) {
	wait := time.NewTimer(e.opts.Linger)
	wait.Stop()
	armed := false
	report := time.NewTicker(e.opts.DropReport)
	defer report.Stop()
	for {
		select {
		case <-e.wake:
			switch n := e.queued(); {
			case n >= e.opts.Batch:
				spare = e.drainWhile(spare, false, false, e.opts.Batch)
				wait.Stop()
				armed = false
			case n > 0 && !armed:
				wait.Reset(e.opts.Linger)
				armed = true
			}
			// A decision that arrived during the drain found the queue
			// not empty and woke no one: look again.
			if !armed && e.queued() > 0 {
				wait.Reset(e.opts.Linger)
				armed = true
			}
		case <-wait.C:
			armed = false
			spare = e.drain(spare, false, false)
		case now := <-report.C:
			e.reportDrops(now)
		case reply := <-e.flush:
			wait.Stop()
			armed = false
			spare = e.flushNow(spare, reply)
		case <-e.stop:
			wait.Stop()
			e.finish(spare)
			return
		}
	}
}

func (e *Emitter) queued() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.pending)
}

// reportDrops writes a KindDrops event for the decisions dropped since the
// last report, if any: at most MaxDropped of them, the most readers
// believe of one event (a larger count would be skipped as corrupt); the
// rest go in the next report. It reports whether it wrote one and drops
// remain unreported.
func (e *Emitter) reportDrops(now time.Time) (more bool) {
	all := e.dropped.Load() - e.reported
	n := min(all, MaxDropped)
	if n == 0 {
		return false
	}
	ev := []Decision{{Kind: KindDrops, Time: now, Node: e.opts.Node, Reason: "decision queue full", Dropped: n}}
	if err := e.w.WriteBatch(ev); err != nil {
		e.fail(err)
		return false
	}
	e.reported += n
	return all > n
}

// drain writes everything queued, then flushes if asked to or if anything
// was written. It returns the buffer to swap in next time.
//
// Written decisions hold the strings of their requests. Unless keep is
// set, drain clears them from both buffers before it returns. A drain
// woken by the queue filling up keeps them: the decisions arriving meanwhile
// overwrite those slots, and a slot the request path writes after the
// writer cleared it is a slot it must take back from the writer's core,
// which costs each decision more than the clearing itself. What the next
// decisions do not overwrite is cleared on the next tick: a written
// decision is held at most two Intervals.
func (e *Emitter) drain(spare []Decision, flush, keep bool) []Decision {
	return e.drainWhile(spare, flush, keep, 1)
}

// drainWhile is drain that takes the queue again after a write only while
// at least min decisions are queued: a lingering writer woken by a full
// batch leaves what arrived during its write to its linger, rather than
// writing it at once as a short batch (at a high rate, a writer racing the
// request path would otherwise write a record of every few decisions).
func (e *Emitter) drainWhile(spare []Decision, flush, keep bool, min int) []Decision {
	wrote := false
	for {
		q := e.swap(spare)
		for i := range q {
			if q[i].Clamp() {
				e.clamped.Add(1)
			}
		}
		for b := q; len(b) > 0; {
			n := e.cut(b)
			if err := e.w.WriteBatch(b[:n]); err != nil {
				e.fail(err)
			} else {
				e.written.Add(uint64(n))
			}
			b = b[n:]
		}
		if !keep {
			clear(q[:e.spareDirty]) // release the strings the requests held
			e.spareDirty = 0
		}
		spare = q
		if len(q) == 0 {
			break
		}
		wrote = true
		if min > 1 && e.queued() < min {
			break
		}
	}
	if wrote || flush {
		if err := e.w.Flush(); err != nil {
			e.fail(err)
		}
	}
	return spare
}

// cut returns how many decisions from the front of b make the next batch:
// at most Batch of them, and at most BatchBytes of estimated size.
func (e *Emitter) cut(b []Decision) int {
	n, size := 0, 0
	for n < len(b) && n < e.opts.Batch {
		size += Size(&b[n])
		if size > e.opts.BatchBytes && n > 0 {
			break
		}
		n++
	}
	return n
}

// Size estimates d's encoded size in bytes: its strings and a fixed part.
// It errs on the large side for the columnar form and is close for JSON
// lines.
func Size(d *Decision) int {
	return 480 + len(d.RequestID) + len(d.Node) + len(d.UserID) + len(d.Plan) + len(d.Tier) + len(d.IdentitySource) +
		len(d.Method) + len(d.Host) + len(d.Path) + len(d.Rule) + len(d.Algorithm) + len(d.Reason) + len(d.Privacy) +
		len(d.List) + len(d.Action) + len(d.Target) + len(d.ResponseError)
}

func (e *Emitter) fail(err error) {
	e.errs.Add(1)
	if e.opts.OnError != nil {
		e.opts.OnError(err)
	}
}

// Flush writes every decision emitted before it was called, and the count
// of drops not yet reported, flushes the writer and waits for that, or for
// ctx. It is for processes that can be frozen or ended without a signal
// between requests (AWS Lambda): the decisions of a request are written
// before its response is returned. It reports an error when a write or
// flush failed on the way (each is also counted and passed to OnError).
// After Close it returns nil at once: Close wrote everything. Flush is safe
// for concurrent use; concurrent Flushes share the writer goroutine's turns.
func (e *Emitter) Flush(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case e.flush <- reply:
	case <-e.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("flush decisions: %w", ctx.Err())
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return fmt.Errorf("flush decisions: %w", ctx.Err())
	}
}

// Close stops accepting decisions, writes and flushes everything queued,
// and waits for the writer goroutine, or for ctx.
func (e *Emitter) Close(ctx context.Context) error {
	e.mu.Lock()
	already := e.closed
	e.closed = true
	e.mu.Unlock()
	if !already {
		close(e.stop)
	}
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close emitter: %w", ctx.Err())
	}
}

// JSONLines is a BatchWriter writing one JSON object per decision and line.
// It is not safe for concurrent use; an Emitter serialises its calls.
type JSONLines struct {
	w       *bufio.Writer
	scratch []byte
}

var _ BatchWriter = (*JSONLines)(nil)

// NewJSONLinesWriter returns a JSONLines writing to w (stdout in Lambda).
func NewJSONLinesWriter(w io.Writer) *JSONLines {
	return &JSONLines{w: bufio.NewWriterSize(w, 256<<10)}
}

// JSONLinesFile is a JSONLines appending to a file.
type JSONLinesFile struct {
	JSONLines
	f *os.File
}

// OpenJSONLines opens (creating or appending to) path.
func OpenJSONLines(path string) (*JSONLinesFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open decisions file: %w", err)
	}
	return &JSONLinesFile{JSONLines: *NewJSONLinesWriter(f), f: f}, nil
}

// WriteBatch encodes ds into the buffer.
func (j *JSONLines) WriteBatch(ds []Decision) error {
	for i := range ds {
		j.scratch = AppendJSON(j.scratch[:0], &ds[i])
		j.scratch = append(j.scratch, '\n')
		if _, err := j.w.Write(j.scratch); err != nil {
			return fmt.Errorf("write decisions: %w", err)
		}
	}
	return nil
}

// Flush writes the buffer out.
func (j *JSONLines) Flush() error {
	if err := j.w.Flush(); err != nil {
		return fmt.Errorf("flush decisions: %w", err)
	}
	return nil
}

// Close flushes, syncs and closes the file.
func (j *JSONLinesFile) Close() error {
	return errors.Join(j.Flush(), j.f.Sync(), j.f.Close())
}
