// Package backoff computes the delays of exponential backoff with full
// jitter, for callers that retry a remote call: after the n-th
// consecutive failure, wait a delay drawn uniformly from
// [0, min(max, base·2^(n-1))].
//
// Sleep waits out a delay unless the caller's context ends first.
//
// Callers pass the random draw in, so that a test can fix it and a
// caller with its own source (a seeded rand.Rand) keeps it. Its functions
// are safe for concurrent use when the draw is.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Bound returns the upper end of the delay after failures consecutive
// failures: min(max, base·2^(failures-1)), or max when that product
// overflows or base is not positive. Fewer than one failure counts as one.
// It returns 0 when the bound is not positive.
func Bound(base, max time.Duration, failures int) time.Duration {
	if failures < 1 {
		failures = 1
	}
	bound := max
	if failures <= 32 {
		if b := base << (failures - 1); b > 0 && b < bound {
			bound = b
		}
	}
	if bound <= 0 {
		return 0
	}
	return bound
}

// FullJitter returns a delay in [0, Bound(base, max, failures)], drawn by
// jitter, which returns a value in [0, n] (Uniform, or a test's fixed
// choice). It does not call jitter when the bound is 0.
func FullJitter(base, max time.Duration, failures int, jitter func(n int64) int64) time.Duration {
	bound := Bound(base, max, failures)
	if bound == 0 {
		return 0
	}
	return time.Duration(jitter(int64(bound)))
}

// Uniform returns a value drawn uniformly from [0, n] by math/rand/v2's
// global source; n must not be negative. It is safe for concurrent use.
func Uniform(n int64) int64 { return rand.Int64N(n + 1) }

// Sleep waits d, or until ctx is done, and returns ctx.Err() in that case.
// A d of 0 or less does not wait: it returns ctx.Err(), nil while ctx
// lives. It is safe for concurrent use.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
