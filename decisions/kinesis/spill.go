package kinesis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/seglog"
)

// spillConsumer is the consumer name under which a Spill commits how far
// it has drained its log.
const spillConsumer = "kinesis-drain"

// SpillOptions configure a Spill.
type SpillOptions struct {
	// Dir is the directory of the spill log, a decision log readable with
	// "ratewarden decisions cat"; required. What is in it when the Spill
	// opens is drained first.
	Dir string
	// Retry is how long the drainer waits after the stream refused a
	// spilled batch before it tries again; default 5s.
	Retry time.Duration
	// Log configures the spill log's segments and syncing; retention is
	// turned off, as a spilled event leaves the log only once delivered.
	Log seglog.Options
}

// SpillStats count what a Spill did, in events.
type SpillStats struct {
	Spilled uint64 // events written to the spill log
	Drained uint64 // spilled events since delivered to the stream
	Dropped uint64 // events neither delivered nor spilled: the spill log failed
	Backlog uint64 // events in the spill log not yet delivered
}

// Spill is a decisions.BatchWriter that puts batches on a Kinesis stream
// through a Sink and keeps what the stream cannot take: records the Sink
// gives up on (stream unreachable, throttled beyond its retries, refused)
// go to a local decision log, and every later batch follows them there
// until a drainer has delivered the log's backlog, oldest first. So one
// identity's events reach the stream in the order they were written, and
// an outage costs disk space instead of events.
//
// Delivery is at least once: a spilled record the stream took but whose
// answer was lost, or a drain interrupted by a crash before its commit, is
// delivered again.
//
// No lock is held across a call to the stream: WriteBatch delivers
// through its Sink and the drainer through a clone of it, and the lock
// guards only the spill log. So a hung stream holds up neither the other
// nor, once a backlog exists, WriteBatch, which then only appends to the
// log. WriteBatch is called from one goroutine at a time (an Emitter's);
// Stats is safe for concurrent use.
type Spill struct {
	sink  *Sink // WriteBatch's
	drain *Sink // the drainer's: a clone
	log   *seglog.Log
	w     *decisionlog.Writer
	opts  SpillOptions

	mu sync.Mutex // guards the log's writer, appends and commits; never held across a call to the stream

	wake       chan struct{}
	stop, done chan struct{}
	stopCtx    context.Context // done once Interrupt or Close is called: cuts a delivery in flight short
	cancel     context.CancelFunc
	closeOnce  sync.Once

	spilled, drained, dropped atomic.Uint64
	committed                 atomic.Uint64 // drained up to this offset of the log
}

var _ decisions.BatchWriter = (*Spill)(nil)

// NewSpill returns a Spill in front of sink, spilling to opts.Dir, and
// starts its drainer. Close stops it.
func NewSpill(sink *Sink, opts SpillOptions) (*Spill, error) {
	if sink == nil {
		return nil, errors.New("new spill: nil sink")
	}
	if opts.Dir == "" {
		return nil, errors.New("new spill: Dir: want the spill log's directory")
	}
	if opts.Retry <= 0 {
		opts.Retry = 5 * time.Second
	}
	opts.Log.RetainAge, opts.Log.RetainBytes = 0, 0
	log, err := seglog.Open(opts.Dir, opts.Log)
	if err != nil {
		return nil, fmt.Errorf("new spill: %w", err)
	}
	committed, _, err := log.Offset(spillConsumer)
	if err != nil {
		log.Close()
		return nil, fmt.Errorf("new spill: %w", err)
	}
	codec := columnar.CodecArrow
	if sink.opts.JSON {
		codec = columnar.CodecJSON
	}
	s := &Spill{
		sink: sink, drain: sink.clone(), log: log, opts: opts,
		w:    decisionlog.NewWriter(log, decisionlog.WriterOptions{Codec: codec}),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	s.stopCtx, s.cancel = context.WithCancel(context.Background())
	s.committed.Store(committed)
	go s.drainLoop()
	if s.backlog() > 0 {
		s.poke()
	}
	return s, nil
}

// WriteBatch puts ds on the stream, or in the spill log if the stream
// cannot take it or a backlog is waiting. It returns an error only for
// events it could keep nowhere.
func (s *Spill) WriteBatch(ds []decisions.Decision) error {
	if len(ds) == 0 {
		return nil
	}
	// The backlog only grows here, and shrinks once the drainer has
	// delivered: with none, nothing spilled is on its way, and ds may go
	// straight to the stream.
	if s.backlog() > 0 {
		return s.spillEvents(ds)
	}
	undelivered, _ := s.sink.deliver(s.stopCtx, ds)
	if len(undelivered) == 0 {
		return nil
	}
	err := s.spillEntries(undelivered)
	s.poke()
	return err
}

// spillEvents appends ds to the spill log as one record.
func (s *Spill) spillEvents(ds []decisions.Decision) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.w.WriteBatch(ds); err != nil {
		s.dropped.Add(uint64(len(ds)))
		return fmt.Errorf("spill decisions: %d events lost: %w", len(ds), err)
	}
	s.spilled.Add(uint64(len(ds)))
	return nil
}

// spillEntries appends records the Sink gave up on, as they are: a
// record's payload is already a decision-log payload behind its codec id.
func (s *Spill) spillEntries(es []entry) error {
	now := time.Now()
	recs := make([]seglog.Record, len(es))
	n := 0
	for i, e := range es {
		recs[i] = seglog.Record{Count: uint32(e.events), MinTime: now, MaxTime: now, Codec: e.data[0], Payload: e.data[1:]}
		n += e.events
	}
	s.mu.Lock()
	_, err := s.log.Append(recs...)
	s.mu.Unlock()
	if err != nil {
		s.dropped.Add(uint64(n))
		return fmt.Errorf("spill decisions: %d events lost: %w", n, err)
	}
	s.spilled.Add(uint64(n))
	return nil
}

func (s *Spill) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// drainLoop delivers the spill log's backlog, oldest record first, waiting
// opts.Retry after a failure.
func (s *Spill) drainLoop() {
	defer close(s.done)
	var r *seglog.Reader
	defer func() {
		if r != nil {
			r.Close()
		}
	}()
	var retry <-chan time.Time
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
		case <-retry:
		}
		retry = nil
		for s.backlog() > 0 {
			if r == nil {
				var err error
				if r, err = s.log.Reader(s.committed.Load()); err != nil {
					retry = time.After(s.opts.Retry)
					break
				}
			}
			if !s.drainOne(r) {
				// Start again from the last commit: the record that failed
				// is sent again whole.
				r.Close()
				r = nil
				retry = time.After(s.opts.Retry)
				break
			}
			select {
			case <-s.stop:
				return
			default:
			}
		}
	}
}

// drainOne delivers the next spilled record and commits past it. It
// reports whether it did.
func (s *Spill) drainOne(r *seglog.Reader) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	rec, err := r.Next(ctx)
	cancel()
	if err != nil {
		return false
	}
	ds, err := Decode(append([]byte{rec.Codec}, rec.Payload...), nil)
	if err != nil {
		// Undecodable: count it lost and step past it, or the backlog
		// would never drain.
		s.dropped.Add(uint64(rec.Count))
		return s.commit(rec)
	}
	undelivered, _ := s.drain.deliver(s.stopCtx, ds)
	if len(undelivered) > 0 {
		return false
	}
	s.drained.Add(uint64(len(ds)))
	return s.commit(rec)
}

// commit records that rec is delivered and drops drained segments.
func (s *Spill) commit(rec seglog.Record) bool {
	next := rec.FirstOffset + uint64(rec.Count)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.log.CommitOffset(spillConsumer, next); err != nil {
		return false
	}
	s.committed.Store(next)
	s.log.RemoveBefore(next)
	return true
}

// backlog is how many spilled events wait: those appended past the last
// commit.
func (s *Spill) backlog() uint64 { return s.log.NextOffset() - s.committed.Load() }

// Flush does nothing: WriteBatch is synchronous.
func (s *Spill) Flush() error { return nil }

// Stats returns the counters.
func (s *Spill) Stats() SpillStats {
	return SpillStats{Spilled: s.spilled.Load(), Drained: s.drained.Load(), Dropped: s.dropped.Load(), Backlog: s.backlog()}
}

// Interrupt cuts short the calls to the stream in flight and gives up
// every later one at once: from then on WriteBatch spills everything, at
// disk speed. For a shutdown that cannot wait for a slow or hung stream:
// what is spilled is drained when a Spill next opens the directory.
func (s *Spill) Interrupt() { s.cancel() }

// Close stops the drainer and closes the spill log; what is still in it
// is drained when a Spill next opens the directory.
func (s *Spill) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.cancel()
	})
	select {
	case <-s.done:
	case <-ctx.Done():
		return fmt.Errorf("close spill: %w", ctx.Err())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.Close()
}
