// Package limitspec names the choices a rate limit is configured with: its
// algorithm, the bounds of its window, and whose clock a counter store
// counts by. The configuration decodes and validates them, and the edge
// runs them; both import this leaf, so the configuration (and whatever reads
// it, the aggregator included) does not import the edge. edge/limit and
// edge/redisstore declare aliases of these types, so their callers keep
// writing limit.FixedWindow and redisstore.CallerTime.
//
// Everything in the package is safe for concurrent use.
package limitspec

import (
	"fmt"
	"slices"
	"time"
)

// Algorithm is a rate-limit algorithm.
type Algorithm uint8

// The algorithms. The zero value is not valid.
const (
	// FixedWindow counts hits in aligned windows (the seed design).
	FixedWindow Algorithm = iota + 1
	// SlidingWindow weights the previous window's count by the share of it
	// still inside the sliding window and adds the current count.
	SlidingWindow
	// TokenBucket is GCRA: Limit per Window refills a bucket of Burst.
	TokenBucket
	// Concurrency limits requests in flight; hits are released with n < 0.
	Concurrency
)

var algorithmNames = [...]string{
	FixedWindow:   "fixed_window",
	SlidingWindow: "sliding_window",
	TokenBucket:   "token_bucket",
	Concurrency:   "concurrency",
}

// Algorithms lists the valid algorithm names, for error messages.
var Algorithms = slices.Clone(algorithmNames[1:])

// String returns the algorithm's configuration name.
func (a Algorithm) String() string {
	if a == 0 || int(a) >= len(algorithmNames) {
		return "unknown"
	}
	return algorithmNames[a]
}

// ParseAlgorithm returns the algorithm named s.
func ParseAlgorithm(s string) (Algorithm, bool) {
	for i, n := range algorithmNames {
		if i != 0 && n == s {
			return Algorithm(i), true
		}
	}
	return 0, false
}

// Window bounds.
const (
	MinWindow = time.Second
	MaxWindow = 24 * time.Hour
)

// Clock chooses whose clock a counter store counts by (store.redis.clock).
type Clock uint8

const (
	// ServerTime, the default, counts by the store server's clock (the
	// Redis scripts call TIME), so that edges whose clocks disagree still
	// share windows exactly; Take ignores its now argument. Windows of the
	// fixed and sliding window algorithms must be whole microseconds,
	// TIME's resolution.
	ServerTime Clock = iota
	// CallerTime counts by the now passed to Take, to the nanosecond, as
	// the memory store does; the conformance suite runs in this mode.
	CallerTime
)

// UnmarshalText reads a clock by its configuration name: server or caller.
func (c *Clock) UnmarshalText(b []byte) error {
	switch string(b) {
	case "server":
		*c = ServerTime
	case "caller":
		*c = CallerTime
	default:
		return fmt.Errorf("clock %q: want server or caller", b)
	}
	return nil
}

// Choices lists the names UnmarshalText accepts, the default first.
func (Clock) Choices() []string { return []string{"server", "caller"} }

// String returns the clock's configuration name.
func (c Clock) String() string {
	switch c {
	case ServerTime:
		return "server"
	case CallerTime:
		return "caller"
	}
	return "unknown"
}
