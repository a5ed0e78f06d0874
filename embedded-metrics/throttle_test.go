package emf

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/smithy-go"
	"golang.org/x/time/rate"
)

// throttleClock is a fake clock: Sleep advances it at once and records
// the wait, so backoff and cooldown take no real time.
type throttleClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newThrottleClock() *throttleClock {
	return &throttleClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *throttleClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *throttleClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.sleeps = append(c.sleeps, d)
	return nil
}

func (c *throttleClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *throttleClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sleeps)
}

// testThrottle returns a Throttle on clock whose jitter always picks the
// bound, so that delays are exact.
func testThrottle(clock *throttleClock) Throttle {
	return Throttle{
		CallsPerSecond: 1000, Burst: 1, MaxRetries: 10,
		BaseDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Second,
		BreakerFailures: 100, BreakerCooldown: time.Minute,
		Now: clock.Now, Sleep: clock.Sleep, Jitter: func(n int64) int64 { return n },
	}
}

func TestThrottleBackoffAndBreaker(t *testing.T) {
	throttling := &smithy.GenericAPIError{Code: "ThrottlingException"}
	refused := &smithy.GenericAPIError{Code: "ValidationError", Fault: smithy.FaultClient}
	ms := time.Millisecond
	f := func(name string, edit func(*Throttle), results []error, wantErr error, wantCalls int, wantSleeps []time.Duration, wantRetries, wantErrors uint64) {
		t.Run(name, func(t *testing.T) {
			clock := newThrottleClock()
			cfg := testThrottle(clock)
			cfg.CallsPerSecond = rate.Inf // no token waits here
			edit(&cfg)
			cfg.setDefaults()
			var c throttleCounters
			thr := newThrottler(cfg, &c)
			calls := 0
			_, err := thr.do(context.Background(), func(context.Context) error {
				calls++
				if calls > len(results) {
					return nil
				}
				return results[calls-1]
			})
			if !errors.Is(err, wantErr) {
				t.Errorf("err %v, want %v", err, wantErr)
			}
			if calls != wantCalls {
				t.Errorf("%d calls, want %d", calls, wantCalls)
			}
			if got := clock.Sleeps(); !slices.Equal(got, wantSleeps) {
				t.Errorf("sleeps %v, want %v", got, wantSleeps)
			}
			if c.retries.Load() != wantRetries || c.errors.Load() != wantErrors {
				t.Errorf("retries %d errors %d, want %d %d", c.retries.Load(), c.errors.Load(), wantRetries, wantErrors)
			}
		})
	}
	f("success", func(*Throttle) {}, nil, nil, 1, nil, 0, 0)
	f("doubling to the cap", func(*Throttle) {}, []error{throttling, throttling, throttling, throttling, throttling, throttling}, nil, 7,
		[]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2000 * ms}, 6, 6)
	f("refused is not retried", func(*Throttle) {}, []error{refused}, refused, 1, nil, 0, 1)
	f("retries bounded", func(c *Throttle) { c.MaxRetries = 2 }, []error{throttling, throttling, throttling, throttling}, throttling, 3,
		[]time.Duration{100 * ms, 200 * ms}, 2, 3)
	f("no retries", func(c *Throttle) { c.MaxRetries = -1 }, []error{throttling}, throttling, 1, nil, 0, 1)
	f("deadline is retried", func(*Throttle) {}, []error{context.DeadlineExceeded}, nil, 2, []time.Duration{100 * ms}, 1, 1)
	// Two failures open the breaker: the third call waits out the cooldown
	// (less the backoff already slept), and the failed probe opens it again.
	f("breaker", func(c *Throttle) { c.BreakerFailures = 2 }, []error{throttling, throttling, throttling}, nil, 4,
		[]time.Duration{100 * ms, 200 * ms, time.Minute - 200*ms, 400 * ms, time.Minute - 400*ms}, 3, 3)
	f("breaker drops", func(c *Throttle) { c.BreakerFailures = 1; c.DropWhenOpen = true }, []error{throttling}, ErrCircuitOpen, 1,
		[]time.Duration{100 * ms}, 0, 1)
}

func TestThrottleTokenBucket(t *testing.T) {
	clock := newThrottleClock()
	cfg := testThrottle(clock)
	cfg.CallsPerSecond, cfg.Burst = 4, 2
	cfg.setDefaults()
	var c throttleCounters
	thr := newThrottler(cfg, &c)
	var at []time.Time
	for range 6 {
		if _, err := thr.do(context.Background(), func(context.Context) error { at = append(at, clock.Now()); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// A burst of 2, then one call every 250ms.
	start := at[0]
	want := []time.Duration{0, 0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond, time.Second}
	for i := range at {
		if got := at[i].Sub(start); got != want[i] {
			t.Errorf("call %d at %v, want %v", i, got, want[i])
		}
	}
}

func TestThrottleRetryable(t *testing.T) {
	f := func(err error, want bool) {
		t.Helper()
		if got := throttleRetryable(err); got != want {
			t.Errorf("throttleRetryable(%v) = %v, want %v", err, got, want)
		}
	}
	f(&smithy.GenericAPIError{Code: "ThrottlingException"}, true)
	f(&smithy.GenericAPIError{Code: "LimitExceededException"}, true)
	f(&smithy.GenericAPIError{Code: "InvalidParameterValue", Fault: smithy.FaultClient}, false)
	f(&smithy.GenericAPIError{Code: "LimitExceeded", Fault: smithy.FaultClient}, true)
	f(context.DeadlineExceeded, true)
	f(fmt.Errorf("put metric data: %w", context.Canceled), false)
	f(errors.New("connection reset by peer"), true)
}
