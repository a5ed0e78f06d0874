// Package limit holds the rate-limit algorithms as pure functions on a small
// counter state, and the types every counter store speaks: rules, keys,
// states and results. Stores keep a State per Key and call Rule.Take on it
// under their own synchronisation; distributed stores implement the same
// arithmetic server-side and are held to it by the conformance suite in
// package limittest.
package limit

import (
	"math"
	"math/bits"
	"net/netip"
	"time"

	"github.com/ratewarden/ratewarden/internal/limitspec"
)

// Algorithm is a rate-limit algorithm. It is declared in the leaf
// limitspec, so that the configuration can decode it without importing the
// edge.
type Algorithm = limitspec.Algorithm

// The algorithms. The zero value is not valid.
const (
	FixedWindow   = limitspec.FixedWindow
	SlidingWindow = limitspec.SlidingWindow
	TokenBucket   = limitspec.TokenBucket
	Concurrency   = limitspec.Concurrency
)

// Algorithms lists the valid algorithm names, for error messages.
var Algorithms = limitspec.Algorithms

// ParseAlgorithm returns the algorithm named s.
func ParseAlgorithm(s string) (Algorithm, bool) { return limitspec.ParseAlgorithm(s) }

// Rule is one limit: Limit hits per Window under Algorithm.
type Rule struct {
	Algorithm Algorithm
	Limit     int64         // hits per window; for Concurrency, requests in flight
	Window    time.Duration // 1 s to 24 h; unused by Concurrency
	// Burst is the token bucket's capacity; 0 means Limit. Other algorithms ignore it.
	Burst int64
	// MaxCount bounds how far a count is recorded above the limit (hits
	// beyond it are refused without being recorded), so that a flood does not
	// push a token bucket's refill indefinitely into the future. 0 means no
	// bound. The edge sets it to challenge factor × limit.
	MaxCount int64
}

// Capacity is the count a hit may reach and still be allowed.
func (r Rule) Capacity() int64 { return r.capacity() }

// capacity is Capacity without a copy of r.
func (r *Rule) capacity() int64 {
	if r.Algorithm == TokenBucket && r.Burst > 0 {
		return r.Burst
	}
	return r.Limit
}

// State is the counter state of one key under one rule: 16 bytes whose
// meaning depends on the algorithm. The zero State is a key never seen.
//
//	FixedWindow:   A = window index,   B = count
//	SlidingWindow: A = window index,   B = previous count << 32 | current count
//	TokenBucket:   A = theoretical arrival time (unix ns), B unused
//	Concurrency:   A unused,           B = in flight
type State struct {
	A, B int64
}

// Result is what a hit saw.
type Result struct {
	Count     int64         // the count after this hit (for a refused concurrency hit, what it would have been)
	Remaining int64         // hits left before the capacity is reached, never negative
	Reset     time.Duration // until the window resets or the bucket is full again
	Expires   int64         // unix ns after which the state is equivalent to the zero State
}

// Allowed reports whether the hit is within the rule's capacity.
func (r Rule) Allowed(res Result) bool { return res.Count <= r.capacity() }

// Key names a counter: a rule and the identity counted under it. User is
// set for authenticated identities; Addr otherwise.
type Key struct {
	Rule string     // the rule's id, unique within a configuration
	Addr netip.Addr // the client address (or its prefix address) for anonymous identities
	User string     // the user id for authenticated identities
}

// Take records n hits at now, in unix nanoseconds, and returns what the hit
// saw. It updates s in place. A negative n releases concurrency hits, and
// refunds hits of the other algorithms down to none.
func (r Rule) Take(s *State, now int64, n int64) Result {
	switch r.Algorithm {
	case FixedWindow:
		return r.fixed(s, now, n)
	case SlidingWindow:
		return r.sliding(s, now, n)
	case TokenBucket:
		return r.gcra(s, now, n)
	case Concurrency:
		return r.concurrency(s, now, n)
	}
	return Result{Count: n, Expires: now}
}

// The algorithms below take the rule by pointer: a Rule is too large for
// the compiler to keep in registers, so every copy of it goes through memory
// and costs a hit several nanoseconds.

func (r *Rule) record(count, n int64) bool {
	return r.MaxCount <= 0 || count+n <= r.MaxCount || n <= 0
}

// window returns the index of the aligned window a hit at now counts in. A
// hit whose clock read the window just before the state's counts in the
// state's window: stores read the clock before they take their lock, so
// near a boundary a hit stamped in the old window can follow one stamped in
// the new, and reopening the old window would drop the new window's count
// (and, for the sliding window, the previous window's too).
func (r *Rule) window(s *State, now int64) int64 {
	// Most hits fall in the state's window: a multiplication tells, and
	// saves the division.
	w := uint64(r.Window)
	if hi, start := bits.Mul64(uint64(s.A), w); hi == 0 && start <= uint64(now) && uint64(now)-start < w {
		return s.A
	}
	idx := now / int64(w)
	if idx == s.A-1 {
		return s.A
	}
	return idx
}

func (r *Rule) fixed(s *State, now, n int64) Result {
	w := int64(r.Window)
	idx := r.window(s, now)
	if s.A != idx {
		s.A, s.B = idx, 0
	}
	// A negative n refunds hits, down to none.
	count := max(s.B+n, 0)
	if r.record(s.B, n) {
		s.B = count
	}
	end := (idx + 1) * w
	return Result{Count: count, Remaining: remaining(r.Limit, count), Reset: time.Duration(end - now), Expires: end}
}

const lo32 = 1<<32 - 1

func (r *Rule) sliding(s *State, now, n int64) Result {
	w := int64(r.Window)
	idx := r.window(s, now)
	prev, cur := s.B>>32&lo32, s.B&lo32
	switch {
	case s.A == idx:
	case s.A == idx-1:
		prev, cur = cur, 0
	default:
		prev, cur = 0, 0
	}
	elapsed := max(now-idx*w, 0) // 0 for a hit stamped in the window before
	// The previous window still covers (w-elapsed)/w of the sliding window.
	// Integer arithmetic keeps the rounding exact: prev < 2³² and w < 2⁴⁷,
	// so the product needs 128 bits and the quotient fits in 32.
	hi, lo := bits.Mul64(uint64(prev), uint64(w-elapsed))
	q, rem := bits.Div64(hi, lo, uint64(w))
	weighted := int64(q)
	if rem != 0 {
		weighted++
	}
	// A negative n refunds hits of the current window, down to none.
	count := weighted + max(cur+n, 0)
	if r.record(weighted+cur, n) {
		cur = min(max(cur+n, 0), lo32)
	}
	s.A, s.B = idx, prev<<32|cur
	end := (idx + 1) * w
	return Result{Count: count, Remaining: remaining(r.Limit, count), Reset: time.Duration(end - now), Expires: end + w}
}

// interval is the token bucket's emission interval: the time one hit takes
// to refill. It is at least 1 ns: with a Limit above Window's nanoseconds an
// interval of 0 would count nothing and allow every hit.
func (r *Rule) interval() int64 { return max(int64(r.Window)/max(r.Limit, 1), 1) }

func (r *Rule) gcra(s *State, now, n int64) Result {
	capacity := r.capacity()
	t := r.interval()
	tat := max(s.A, now)
	newTAT := advance(tat, now, n, t)
	// Hits in use: how many emission intervals the bucket is behind, rounded up.
	count := ceilDiv(newTAT-now, t)
	if r.record(ceilDiv(tat-now, t), n) {
		s.A = newTAT
	}
	full := max(s.A, now)
	return Result{Count: count, Remaining: remaining(capacity, count), Reset: time.Duration(full - now), Expires: full}
}

// TokenBucketResult returns what a token bucket hit of n at now saw, from
// the theoretical arrival times before the hit (State.A) and after it, as
// Take computes it; for stores that keep the arrival time themselves.
func (r Rule) TokenBucketResult(before, after, now, n int64) Result {
	t := r.interval()
	count := ceilDiv(advance(max(before, now), now, n, t)-now, t)
	full := max(after, now)
	return Result{Count: count, Remaining: remaining(r.capacity(), count), Reset: time.Duration(full - now), Expires: full}
}

// advance returns tat moved by n emission intervals of t, where tat ≥ now.
// It saturates at math.MaxInt64, so that a flood recorded without MaxCount
// cannot wrap the arrival time into the past and empty the bucket, and it
// stops at now, because a bucket holds no more than its capacity.
func advance(tat, now, n, t int64) int64 {
	if n >= 0 {
		if n > (math.MaxInt64-max(tat, 0))/t {
			return math.MaxInt64
		}
		return tat + n*t
	}
	if n < -((tat - now) / t) {
		return now
	}
	return tat + n*t
}

func (r *Rule) concurrency(s *State, now, n int64) Result {
	count := s.B + n
	if n < 0 || count <= r.Limit {
		s.B = max(count, 0)
		count = s.B
	}
	exp := int64(math.MaxInt64)
	if s.B == 0 {
		exp = now
	}
	return Result{Count: count, Remaining: remaining(r.Limit, max(count, s.B)), Expires: exp}
}

func remaining(limit, count int64) int64 { return max(limit-count, 0) }

// ceilDiv returns ⌈a/b⌉ for b > 0, and 0 for a ≤ 0; it does not overflow.
func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a-1)/b + 1
}

// RetryAfter is how long a client refused by this result should wait before
// a hit would be allowed again.
func (r Rule) RetryAfter(res Result) time.Duration { return r.retryAfter(res) }

// retryAfter is RetryAfter on r's fields where they are, so that calling
// RetryAfter copies no Rule: its inlined value methods would copy r, just
// stored, with wide loads that wait for the narrow stores.
func (r *Rule) retryAfter(res Result) time.Duration {
	if res.Count <= r.capacity() {
		return 0
	}
	switch r.Algorithm {
	case TokenBucket:
		// The bucket must drain until one more hit fits.
		t := r.interval()
		return max(res.Reset-time.Duration(r.capacity()*t)+time.Duration(t), time.Duration(t))
	case SlidingWindow:
		// After the reset the current window's count C becomes the previous
		// window's, and one more hit fits once C×(w-e)/w ≤ Limit-1, that is
		// e ≥ w×(C-Limit+1)/C into the next window. The result does not
		// tell C from the previous window's share, so take C = Count: the
		// wait is enough whatever the split, and exact for a client whose
		// hits all fell in the current window.
		c := uint64(max(res.Count, 1))
		x := min(uint64(max(res.Count-r.Limit+1, 0)), c)
		hi, lo := bits.Mul64(uint64(r.Window), x)
		q, rem := bits.Div64(hi, lo, c)
		if rem != 0 {
			q++
		}
		return res.Reset + time.Duration(q)
	}
	return res.Reset
}
