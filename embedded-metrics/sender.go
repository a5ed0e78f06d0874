package emf

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// sender is what a buffering sink (AgentSink, and the AWS sinks through
// throttleQueue) shares with its one sender goroutine: the documents taken,
// finished, written and dropped, the bytes held against the sink's bound,
// and the two contexts that end the sender's work. Close out of time
// cancels ctx: the sender drops what it holds and exits. A Flush out of
// time (FlushTimeout) cancels the current generation, gen: the sender
// drops what it holds, the call in flight included, and goes on with the
// documents written after, in a new generation. Its fields are guarded by
// mu, which the sink also takes for its own queue, but for gen, which the
// sender goroutine alone reads and replaces. It is not usable until init.
type sender struct {
	name         string // the sink's kind and target, as SinkStats.Sink
	maxBytes     int
	flushTimeout time.Duration

	mu       sync.Mutex
	bytes    int    // held: queued and in flight
	accepted uint64 // documents taken into the buffer
	finished uint64 // of those, written or dropped
	written  uint64
	dropped  uint64 // documents given up on, refused ones included
	unsure   uint64 // of dropped, those sent whole and not acknowledged (SinkStats.Unconfirmed)
	closing  bool
	progress chan struct{} // closed and replaced whenever finished grows

	wake   chan struct{} // capacity 1
	exited chan struct{} // closed when the sender returns
	ctx    context.Context
	stop   context.CancelFunc
	gen    context.Context    // a child of ctx
	shed   context.CancelFunc // cancels gen
}

// init readies p for a sink named name that holds at most maxBytes and
// waits at most flushTimeout in a Flush or a Close.
func (p *sender) init(name string, maxBytes int, flushTimeout time.Duration) {
	p.name, p.maxBytes, p.flushTimeout = name, maxBytes, flushTimeout
	p.progress, p.wake, p.exited = make(chan struct{}), make(chan struct{}, 1), make(chan struct{})
	p.ctx, p.stop = context.WithCancel(context.Background())
	p.gen, p.shed = context.WithCancel(p.ctx)
}

// wakeUp wakes the sender, unless a wake-up is already pending.
func (p *sender) wakeUp() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// settle counts written and dropped documents, of size bytes in all, as
// finished, and wakes those waiting for progress.
func (p *sender) settle(written, dropped, size int) { p.settleUnsure(written, dropped, 0, size) }

// settleUnsure is settle with unsure of the dropped documents counted as
// SinkStats.Unconfirmed.
func (p *sender) settleUnsure(written, dropped, unsure, size int) {
	if written+dropped == 0 {
		return
	}
	p.mu.Lock()
	p.written += uint64(written)
	p.dropped += uint64(dropped)
	p.unsure += uint64(unsure)
	p.finished += uint64(written + dropped)
	p.bytes -= size
	close(p.progress)
	p.progress = make(chan struct{})
	p.mu.Unlock()
}

// renew gives the sender a new generation, after the last one ended, and
// reports whether the sender is stopped instead (Close ran out of time).
// The sink then drops what it holds. The new generation comes first: a
// Flush that runs out of time meanwhile cancels it, or finds what it waits
// for dropped.
func (p *sender) renew() (stopped bool) {
	if p.ctx.Err() != nil {
		return true
	}
	gen, shed := context.WithCancel(p.ctx)
	p.mu.Lock()
	p.gen, p.shed = gen, shed
	p.mu.Unlock()
	return false
}

// flush waits until every document accepted before the call is written or
// dropped, or ctx ends. Past FlushTimeout the sender sheds what it holds,
// and flush returns ErrSinkBehind, saying how many of its documents were
// not delivered.
func (p *sender) flush(ctx context.Context) error {
	p.mu.Lock()
	target := p.accepted
	p.mu.Unlock()
	p.wakeUp()
	return p.await(ctx, "flush", func() uint64 { return target - min(target, p.finished) })
}

// awaitRoom waits until a document of n bytes fits in the buffer, as a
// Flush would: past FlushTimeout the sender sheds what it holds, and
// awaitRoom returns ErrSinkBehind. A document that can never fit does not
// wait.
func (p *sender) awaitRoom(ctx context.Context, n int) error {
	if n > p.maxBytes {
		return nil
	}
	return p.await(ctx, "wait for room in", func() uint64 {
		if p.bytes+n <= p.maxBytes {
			return 0
		}
		return p.accepted - p.finished
	})
}

// await waits until pending, called under mu, returns 0: the documents
// the caller waits for. Once FlushTimeout passes, it sheds the documents
// the sender holds and returns ErrSinkBehind with the count pending then.
func (p *sender) await(ctx context.Context, verb string, pending func() uint64) error {
	timer := time.NewTimer(p.flushTimeout)
	defer timer.Stop()
	var behind uint64 // pending when FlushTimeout passed
	for {
		p.mu.Lock()
		n, progress := pending(), p.progress
		p.mu.Unlock()
		switch {
		case n == 0 && behind > 0:
			return fmt.Errorf("%s %s: %d documents not delivered within %v: %w", verb, p.name, behind, p.flushTimeout, ErrSinkBehind)
		case n == 0:
			return nil
		}
		select {
		case <-progress:
		case <-timer.C:
			// Once: the sender drops what it holds at once.
			p.mu.Lock()
			behind = pending()
			shed := p.shed
			p.mu.Unlock()
			shed()
		case <-p.exited:
			p.mu.Lock()
			n = pending()
			p.mu.Unlock()
			if n > 0 {
				return fmt.Errorf("%s %s: sender stopped", verb, p.name)
			}
			return nil
		case <-ctx.Done():
			return fmt.Errorf("%s %s: %w", verb, p.name, ctx.Err())
		}
	}
}

// close stops taking documents, lets the sender deliver what is buffered
// and waits for it to exit. If ctx ends or FlushTimeout passes first, the
// sender is stopped and drops what is left, counted, and close still waits
// for it, so that it never leaves the goroutine behind; past FlushTimeout
// close returns ErrSinkBehind, saying how many documents were dropped
// while it waited.
func (p *sender) close(ctx context.Context) error {
	p.mu.Lock()
	p.closing = true
	dropped := p.dropped
	p.mu.Unlock()
	p.wakeUp()
	cctx, cancel := context.WithTimeout(ctx, p.flushTimeout)
	defer cancel()
	select {
	case <-p.exited:
		p.stop()
		return nil
	case <-cctx.Done():
	}
	p.stop()
	<-p.exited
	if ctx.Err() != nil {
		return fmt.Errorf("close %s: %w", p.name, ctx.Err())
	}
	p.mu.Lock()
	dropped = p.dropped - dropped
	p.mu.Unlock()
	return fmt.Errorf("close %s: %d documents not delivered within %v: %w", p.name, dropped, p.flushTimeout, ErrSinkBehind)
}

// stats returns the sender's part of the sink's SinkStats.
func (p *sender) stats() SinkStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return SinkStats{Sink: p.name, Written: p.written, Dropped: p.dropped, Buffered: p.accepted - p.finished, Unconfirmed: p.unsure}
}
