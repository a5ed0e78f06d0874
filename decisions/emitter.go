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

// EmitterOptions configures an Emitter.
type EmitterOptions struct {
	Queue    int           // decisions held at most awaiting the writer; default 65536
	Batch    int           // decisions handed to the writer at once at most; default 1024
	Interval time.Duration // the writer is flushed at least this often while decisions arrive; default 200ms
	// OnError is called with every write or flush error, from the writer
	// goroutine. It may be nil.
	OnError func(error)
}

// Emitter hands decisions from the request path to a BatchWriter without
// blocking: Emit copies the decision into a bounded queue, and one
// goroutine drains it in batches. When the queue is full the decision is
// dropped and counted. Emitter is safe for concurrent use.
type Emitter struct {
	w    BatchWriter
	opts EmitterOptions

	mu   sync.Mutex
	buf  []Decision // ring
	head int        // index of the oldest queued decision
	n    int        // queued decisions

	wake chan struct{}
	stop chan struct{}
	done chan struct{}

	emitted, dropped, written, errs atomic.Uint64
	closed                          atomic.Bool
}

// EmitterStats are an Emitter's counters.
type EmitterStats struct {
	Emitted uint64 // accepted into the queue
	Dropped uint64 // refused: queue full or emitter closed
	Written uint64 // handed to the writer without error
	Errors  uint64 // write or flush errors
	Queued  int    // in the queue now
}

// NewEmitter starts an Emitter draining into w. Close it to flush.
func NewEmitter(w BatchWriter, opts EmitterOptions) *Emitter {
	if opts.Queue <= 0 {
		opts.Queue = 65536
	}
	if opts.Batch <= 0 {
		opts.Batch = 1024
	}
	if opts.Interval <= 0 {
		opts.Interval = 200 * time.Millisecond
	}
	e := &Emitter{
		w: w, opts: opts,
		buf:  make([]Decision, opts.Queue),
		wake: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	go e.run()
	return e
}

// Emit queues d. It never blocks on I/O; it reports false when d was
// dropped because the queue was full or the emitter closed.
func (e *Emitter) Emit(d Decision) bool {
	e.mu.Lock()
	if e.n == len(e.buf) || e.closed.Load() {
		e.mu.Unlock()
		e.dropped.Add(1)
		return false
	}
	i := e.head + e.n
	if i >= len(e.buf) {
		i -= len(e.buf)
	}
	e.buf[i] = d
	e.n++
	wake := e.n == e.opts.Batch
	e.mu.Unlock()
	e.emitted.Add(1)
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
	q := e.n
	e.mu.Unlock()
	return EmitterStats{Emitted: e.emitted.Load(), Dropped: e.dropped.Load(), Written: e.written.Load(), Errors: e.errs.Load(), Queued: q}
}

// take moves up to len(dst) queued decisions into dst and returns how many.
func (e *Emitter) take(dst []Decision) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := min(e.n, len(dst))
	for j := range k {
		i := e.head + j
		if i >= len(e.buf) {
			i -= len(e.buf)
		}
		dst[j] = e.buf[i]
		e.buf[i] = Decision{} // release the strings the request held
	}
	e.head = (e.head + k) % len(e.buf)
	e.n -= k
	return k
}

func (e *Emitter) run() {
	defer close(e.done)
	batch := make([]Decision, e.opts.Batch)
	tick := time.NewTicker(e.opts.Interval)
	defer tick.Stop()
	for {
		select {
		case <-e.wake:
			e.drain(batch, false)
		case <-tick.C:
			e.drain(batch, true)
		case <-e.stop:
			e.drain(batch, true)
			return
		}
	}
}

// drain writes everything queued, then flushes if asked to or if anything
// was written.
func (e *Emitter) drain(batch []Decision, flush bool) {
	wrote := false
	for {
		k := e.take(batch)
		if k == 0 {
			break
		}
		if err := e.w.WriteBatch(batch[:k]); err != nil {
			e.fail(err)
		} else {
			e.written.Add(uint64(k))
		}
		wrote = true
		clear(batch[:k])
	}
	if wrote || flush {
		if err := e.w.Flush(); err != nil {
			e.fail(err)
		}
	}
}

func (e *Emitter) fail(err error) {
	e.errs.Add(1)
	if e.opts.OnError != nil {
		e.opts.OnError(err)
	}
}

// Close stops accepting decisions, writes and flushes everything queued,
// and waits for the writer goroutine, or for ctx.
func (e *Emitter) Close(ctx context.Context) error {
	if e.closed.Swap(true) {
		return nil
	}
	close(e.stop)
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
