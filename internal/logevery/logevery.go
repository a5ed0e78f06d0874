// Package logevery lets a log line through at most once an interval and
// counts the ones it holds back, for lines that an outage or an attack
// would otherwise repeat once a request (a store that is down, refused
// connections).
package logevery

import (
	"sync/atomic"
	"time"
)

// Gate passes at most one line an interval. It is safe for concurrent
// use; a zero interval passes every line.
type Gate struct {
	every      int64        // ns
	next       atomic.Int64 // unix ns from which a line passes
	suppressed atomic.Uint64
}

// New returns a Gate that passes at most one line every every.
func New(every time.Duration) *Gate { return &Gate{every: int64(every)} }

// Allow reports whether a line at now passes, the first of an interval,
// and how many were held back since the last that passed; a line that
// does not pass is counted.
func (g *Gate) Allow(now time.Time) (bool, uint64) {
	ns := now.UnixNano()
	next := g.next.Load()
	if ns < next || !g.next.CompareAndSwap(next, ns+g.every) {
		g.suppressed.Add(1)
		return false, 0
	}
	return true, g.suppressed.Swap(0)
}
