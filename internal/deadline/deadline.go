// Package deadline keeps a timeout per operation on a connection (each
// write to a client, each read of an origin's response) at the cost of a
// clock read, as nginx's send_timeout and proxy_read_timeout bound the
// time between two successive operations: each operation gets the timeout
// from its start, but the deadline is set anew only when the one set
// before is nearer than the timeout less 1/64 of it, so that a connection
// doing many short operations in a row renews it once every 1/64 of the
// timeout rather than at every operation (a renewal costs a timer update;
// the clock read, about 50 ns, is all the rest pay). Each operation thus
// gets at least 63/64 of the timeout.
package deadline

import (
	"sync/atomic"
	"time"
)

// Renew is the share of the timeout an operation may lose to a deadline
// set earlier: each gets at least d - d/Renew.
const Renew = 64

// Keep is the least time to go of a deadline that an operation starting
// under a timeout of d keeps rather than renews.
func Keep(d time.Duration) time.Duration { return d - d/Renew }

// epoch is what deadlines are counted from (monotonic).
var epoch = time.Now()

// Renewing is the deadline of a timeout per operation. The zero value
// has no timeout (Next never renews); Init sets one. Its methods may be
// called from several goroutines.
type Renewing struct {
	d, keep time.Duration
	// until is the deadline set last, as time since epoch; 0 when none
	// was set or another has been set since (Forget).
	until atomic.Int64
}

// Init gives each operation d from its start, renewing the deadline when
// the one set last is less than keep away (Keep(d) for the bound of the
// package doc; d itself renews it at every operation).
func (r *Renewing) Init(d, keep time.Duration) {
	r.d, r.keep = d, keep
	r.until.Store(0)
}

// Timeout is the timeout Init set; 0 for none.
func (r *Renewing) Timeout() time.Duration { return r.d }

// Next is called as an operation starts: it returns the deadline to set,
// Timeout() from now, and true when the one set last is nearer than keep
// (or was forgotten); false when that one is kept. The caller sets the
// deadline it returns before the operation.
func (r *Renewing) Next() (time.Time, bool) {
	if r.d <= 0 {
		return time.Time{}, false
	}
	now := time.Since(epoch)
	if time.Duration(r.until.Load())-now >= r.keep {
		return time.Time{}, false
	}
	until := now + r.d
	r.until.Store(int64(until))
	return epoch.Add(until), true
}

// Passed reports whether the deadline set last has passed; false when
// none is set.
func (r *Renewing) Passed() bool {
	until := r.until.Load()
	return until != 0 && time.Since(epoch) >= time.Duration(until)
}

// Forget says that the deadline set last is no longer the one in force
// (another was set, or it was cleared): the next operation sets its own.
func (r *Renewing) Forget() { r.until.Store(0) }
