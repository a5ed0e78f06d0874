package kinesis

import (
	"context"
	"time"

	"github.com/ratewarden/ratewarden/internal/awserr"
	"github.com/ratewarden/ratewarden/internal/backoff"
)

// The names source.go calls the internal leaves by; the rest of the
// package calls the leaves directly. Delete these once source.go does.

// fullJitter is backoff.FullJitter with a draw int64n in [0, n)
// (rand.Int64N or a Rand's).
func fullJitter(base, max time.Duration, failures int, int64n func(int64) int64) time.Duration {
	return backoff.FullJitter(base, max, failures, func(n int64) int64 { return int64n(n + 1) })
}

func isThrottle(err error) bool { return awserr.IsThrottle(err) }

func sleep(ctx context.Context, d time.Duration) error { return backoff.Sleep(ctx, d) }
