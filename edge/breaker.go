package edge

import (
	"sync/atomic"
	"time"
)

// Breaker states, as reported by the breaker_state metric.
const (
	breakerClosed   = 0
	breakerOpen     = 1
	breakerHalfOpen = 2
)

// breaker is a circuit breaker in front of the counter store: after
// `failures` consecutive failures it opens and callers skip the store; after
// `cooldown` one caller probes (half-open) and its result closes or re-opens
// it. It is safe for concurrent use and never takes a lock.
type breaker struct {
	failures int64
	cooldown int64 // ns

	state    atomic.Int32
	streak   atomic.Int64 // consecutive failures
	openedAt atomic.Int64 // unix ns
	opened   atomic.Uint64
}

// allow reports whether a call may go to the store at now, and whether
// that call is the half-open probe, whose result closes or re-opens the
// breaker.
func (b *breaker) allow(now int64) (ok, probe bool) {
	switch b.state.Load() {
	case breakerClosed:
		return true, false
	case breakerOpen:
		if now-b.openedAt.Load() < b.cooldown {
			return false, false
		}
		// One caller wins the probe.
		ok := b.state.CompareAndSwap(breakerOpen, breakerHalfOpen)
		return ok, ok
	default: // half-open: a probe is in flight
		return false, false
	}
}

// closed reports whether calls go to the store. Unlike allow it changes
// nothing: a caller that only wants to know does not take the probe.
func (b *breaker) closed() bool { return b.state.Load() == breakerClosed }

func (b *breaker) success() {
	b.streak.Store(0)
	if b.state.Load() != breakerClosed {
		b.state.Store(breakerClosed)
	}
}

func (b *breaker) failure(now int64) {
	n := b.streak.Add(1)
	switch s := b.state.Load(); {
	case s == breakerHalfOpen:
		b.trip(breakerHalfOpen, now)
	case s == breakerClosed && n >= b.failures:
		b.trip(breakerClosed, now)
	}
}

// abandon gives up a probe that ended without a verdict on the store (its
// caller went away): the next caller may probe at once.
func (b *breaker) abandon(now int64) {
	if b.state.Load() == breakerHalfOpen {
		b.openedAt.Store(now - b.cooldown)
		b.state.CompareAndSwap(breakerHalfOpen, breakerOpen)
	}
}

func (b *breaker) trip(from int32, now int64) {
	b.openedAt.Store(now)
	if b.state.CompareAndSwap(from, breakerOpen) {
		b.opened.Add(1)
	}
}

func newBreaker(failures int, cooldown time.Duration) *breaker {
	return &breaker{failures: int64(max(failures, 1)), cooldown: int64(cooldown)}
}
