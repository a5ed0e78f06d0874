package emf

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrSinkFull is returned by Write when a sink's buffer cannot take the
// document; the document is dropped and counted.
var ErrSinkFull = errors.New("sink buffer full")

// ErrSinkClosed is returned by Write after Close; the document is dropped
// and counted.
var ErrSinkClosed = errors.New("sink closed")

// ErrSinkBehind is returned by a Flush or Close that ran out of time (an
// AgentSink's FlushTimeout): the documents not delivered by then were
// dropped and counted, and the sink goes on with those written after.
var ErrSinkBehind = errors.New("sink behind: documents dropped")

// throttleDeliver delivers one batch of documents through the throttler and
// reports, by position, the documents it gave up on.
type throttleDeliver func(ctx context.Context, docs []string) (dropped []bool)

// throttleQueue is the buffer and sender goroutine shared by the AWS sinks:
// Write appends to a FIFO bounded in bytes; one goroutine takes what is
// buffered once the throttler admits a call (so a batch grows while the
// bucket refills) and hands it to deliver. It is safe for concurrent use.
type throttleQueue struct {
	name     string
	maxBytes int
	maxBatch int // documents taken at once
	thr      *throttler
	deliver  throttleDeliver
	counters *throttleCounters

	mu        sync.Mutex
	docs      []string // copies of the documents buffered, oldest first
	bytes     int
	accepted  uint64 // documents taken into the buffer
	finished  uint64 // of those, written or dropped
	closing   bool
	progress  chan struct{} // closed and replaced whenever finished grows
	wake      chan struct{} // capacity 1
	exited    chan struct{} // closed when the sender returns
	stop      context.CancelFunc
	senderCtx context.Context

	written, dropped uint64 // guarded by mu, so that Stats adds up
}

func newThrottleQueue(name string, maxBytes, maxBatch int, thr *throttler, c *throttleCounters, deliver throttleDeliver) *throttleQueue {
	q := &throttleQueue{
		name: name, maxBytes: maxBytes, maxBatch: maxBatch, thr: thr, deliver: deliver, counters: c,
		progress: make(chan struct{}), wake: make(chan struct{}, 1), exited: make(chan struct{}),
	}
	q.senderCtx, q.stop = context.WithCancel(context.Background())
	go q.run()
	return q
}

func (q *throttleQueue) write(doc []byte) error {
	q.mu.Lock()
	var err error
	switch {
	case q.closing:
		err = ErrSinkClosed
	case q.thr.cfg.DropWhenOpen && q.thr.isOpen(q.thr.cfg.Now()):
		err = ErrCircuitOpen
		q.counters.errors.Add(1)
	case q.bytes+len(doc) > q.maxBytes:
		err = ErrSinkFull
	}
	if err != nil {
		q.dropped++
		q.mu.Unlock()
		return fmt.Errorf("write %s: %w", q.name, err)
	}
	q.docs = append(q.docs, string(doc))
	q.bytes += len(doc)
	q.accepted++
	q.mu.Unlock()
	wakeSender(q.wake)
	return nil
}

// refuse drops and counts, as an error, a document that no call can carry.
func (q *throttleQueue) refuse(why string) error {
	q.mu.Lock()
	q.dropped++
	q.mu.Unlock()
	q.counters.errors.Add(1)
	return fmt.Errorf("write %s: %s", q.name, why)
}

// run is the sender goroutine.
func (q *throttleQueue) run() {
	defer close(q.exited)
	ctx := q.senderCtx
	for {
		q.mu.Lock()
		for len(q.docs) == 0 && !q.closing {
			q.mu.Unlock()
			select {
			case <-q.wake:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				q.dropRest()
				return
			}
			q.mu.Lock()
		}
		if len(q.docs) == 0 { // closing and empty
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()

		// Wait for the breaker and a token before taking the batch, so
		// that what arrives meanwhile goes in the same call.
		admitErr := q.thr.admit(ctx)
		if ctx.Err() != nil {
			q.dropRest()
			return
		}
		q.mu.Lock()
		n := min(len(q.docs), q.maxBatch)
		batch := q.docs[:n:n]
		q.docs = q.docs[n:]
		if len(q.docs) == 0 {
			q.docs = nil // let the backing array go
		}
		q.mu.Unlock()

		var dropped []bool
		if admitErr != nil { // open breaker with DropWhenOpen: one error per document, as in write
			q.counters.errors.Add(uint64(n))
			dropped = make([]bool, n)
			for i := range dropped {
				dropped[i] = true
			}
		} else {
			dropped = q.deliver(ctx, batch)
		}
		q.finish(batch, dropped)
		if ctx.Err() != nil {
			q.dropRest()
			return
		}
	}
}

// finish counts a delivered batch and wakes Flush.
func (q *throttleQueue) finish(batch []string, dropped []bool) {
	var d, size int
	for i := range batch {
		size += len(batch[i])
		if dropped[i] {
			d++
		}
	}
	q.mu.Lock()
	q.dropped += uint64(d)
	q.written += uint64(len(batch) - d)
	q.bytes -= size
	q.finished += uint64(len(batch))
	close(q.progress)
	q.progress = make(chan struct{})
	q.mu.Unlock()
}

// dropRest counts what is still buffered as dropped: Close ran out of time.
func (q *throttleQueue) dropRest() {
	q.mu.Lock()
	batch := q.docs
	q.docs = nil
	q.mu.Unlock()
	dropped := make([]bool, len(batch))
	for i := range dropped {
		dropped[i] = true
	}
	q.finish(batch, dropped)
}

// flush waits until every document accepted before the call is written or
// dropped.
func (q *throttleQueue) flush(ctx context.Context) error {
	q.mu.Lock()
	target := q.accepted
	q.mu.Unlock()
	wakeSender(q.wake)
	for {
		q.mu.Lock()
		done, progress := q.finished >= target, q.progress
		q.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-progress:
		case <-q.exited:
			q.mu.Lock()
			done = q.finished >= target
			q.mu.Unlock()
			if !done {
				return fmt.Errorf("flush %s: sender stopped", q.name)
			}
			return nil
		case <-ctx.Done():
			return fmt.Errorf("flush %s: %w", q.name, ctx.Err())
		}
	}
}

// close stops taking documents, delivers what is buffered and stops the
// sender. If ctx ends first, the sender is stopped and what is left is
// dropped and counted.
func (q *throttleQueue) close(ctx context.Context) error {
	q.mu.Lock()
	q.closing = true
	q.mu.Unlock()
	wakeSender(q.wake)
	return awaitSender(ctx, q.name, q.exited, q.stop)
}

func (q *throttleQueue) stats() SinkStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return SinkStats{
		Sink:     q.name,
		Written:  q.written,
		Dropped:  q.dropped,
		Buffered: q.accepted - q.finished,
		Retries:  q.counters.retries.Load(),
		Errors:   q.counters.errors.Load(),
	}
}
