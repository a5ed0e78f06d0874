package emf

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrSinkFull is returned by Write when a sink's buffer cannot take the
// document; the document is dropped and counted.
var ErrSinkFull = errors.New("sink buffer full")

// ErrSinkClosed is returned by Write after Close; the document is dropped
// and counted.
var ErrSinkClosed = errors.New("sink closed")

// ErrSinkBehind is returned by a Flush or Close that ran out of time (the
// sink's FlushTimeout): the documents not delivered by then were dropped
// and counted, and the sink goes on with those written after.
var ErrSinkBehind = errors.New("sink behind: documents dropped")

// throttleDeliver delivers one batch of documents through the throttler and
// reports, by position, what became of each.
type throttleDeliver func(ctx context.Context, docs []string) []docFate

// docFate is what became of a document handed to a throttleDeliver. A
// document in several calls takes the fate furthest down the list of any
// of them (markFate): one of its calls given up on loses it, and one that
// went unanswered may have delivered part of it.
type docFate uint8

const (
	docWritten docFate = iota
	docDropped         // given up on
	// docUnanswered is given up on after a call that held it went
	// unanswered (throttler.do): it may have arrived. It is counted
	// Dropped and Unconfirmed.
	docUnanswered
)

// markFate sets fates[i] to f, unless it is already further down the list.
func markFate(fates []docFate, i int, f docFate) { fates[i] = max(fates[i], f) }

// callFate is the fate of the documents of a call that do ended with err.
func callFate(unanswered bool, err error) docFate {
	switch {
	case err == nil:
		return docWritten
	case unanswered:
		return docUnanswered
	}
	return docDropped
}

// throttleQueue is the buffer and sender goroutine shared by the AWS sinks:
// Write appends to a FIFO bounded in bytes; one goroutine takes what is
// buffered once the throttler admits a call (so a batch grows while the
// bucket refills) and hands it to deliver. A Flush or Close that runs past
// the flush timeout sheds what the queue holds: the buffered documents and
// the batch in flight, whose calls are cancelled. It is safe for concurrent
// use.
type throttleQueue struct {
	sender
	maxBatch int // documents taken at once
	thr      *throttler
	deliver  throttleDeliver
	counters *throttleCounters

	docs []string // copies of the documents buffered, oldest first; guarded by mu
}

func newThrottleQueue(name string, maxBytes, maxBatch int, flushTimeout time.Duration, thr *throttler, c *throttleCounters, deliver throttleDeliver) *throttleQueue {
	q := &throttleQueue{maxBatch: maxBatch, thr: thr, deliver: deliver, counters: c}
	q.init(name, maxBytes, flushTimeout)
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
	q.wakeUp()
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

// run is the sender goroutine: one batch a round, in the generation of
// that round; when the generation ends, what the queue holds is dropped.
func (q *throttleQueue) run() {
	defer close(q.exited)
	for {
		ctx := q.gen
		if !q.waitDocs(ctx) {
			return // closed and delivered
		}
		if ctx.Err() == nil {
			q.send(ctx)
		}
		if ctx.Err() != nil && q.halted() {
			return
		}
	}
}

// waitDocs waits until documents are buffered or ctx ends, and reports
// false when the queue is closing and empty.
func (q *throttleQueue) waitDocs(ctx context.Context) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.docs) == 0 && !q.closing {
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-ctx.Done():
		}
		q.mu.Lock()
		if ctx.Err() != nil {
			return true
		}
	}
	return len(q.docs) > 0
}

// send takes one batch once the throttler admits a call and delivers it.
func (q *throttleQueue) send(ctx context.Context) {
	// Wait for the breaker and a token before taking the batch, so that
	// what arrives meanwhile goes in the same call.
	admitErr := q.thr.admit(ctx)
	if ctx.Err() != nil {
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

	var fates []docFate
	if admitErr != nil { // open breaker with DropWhenOpen: one error per document, as in write
		q.counters.errors.Add(uint64(n))
		fates = make([]docFate, n)
		for i := range fates {
			fates[i] = docDropped
		}
	} else {
		fates = q.deliver(ctx, batch)
	}
	q.finish(batch, fates)
}

// finish counts a delivered batch and wakes Flush.
func (q *throttleQueue) finish(batch []string, fates []docFate) {
	var dropped, unsure, size int
	for i := range batch {
		size += len(batch[i])
		switch fates[i] {
		case docUnanswered:
			unsure++
			dropped++
		case docDropped:
			dropped++
		}
	}
	q.settleUnsure(len(batch)-dropped, dropped, unsure, size)
}

// halted drops what is still buffered, once the sender's generation has
// ended, and reports whether the sender is stopped (Close ran out of
// time). Otherwise a Flush ran out of time: the sender goes on in a new
// generation.
func (q *throttleQueue) halted() bool {
	stopped := q.renew()
	q.mu.Lock()
	batch := q.docs
	q.docs = nil
	q.mu.Unlock()
	size := 0
	for _, d := range batch {
		size += len(d)
	}
	q.settle(0, len(batch), size)
	return stopped
}

func (q *throttleQueue) stats() SinkStats {
	st := q.sender.stats()
	st.Retries, st.Errors = q.counters.retries.Load(), q.counters.errors.Load()
	return st
}
