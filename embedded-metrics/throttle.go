package emf

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	smithyhttp "github.com/aws/smithy-go/transport/http"
	"golang.org/x/time/rate"

	"github.com/ratewarden/ratewarden/internal/awserr"
	"github.com/ratewarden/ratewarden/internal/backoff"
)

// DefaultAWSFlushTimeout is the default FlushTimeout of the AWS sinks
// (LogsSink, MetricDataSink): long enough for a call that takes its whole
// Throttle.Timeout and a retry or two.
const DefaultAWSFlushTimeout = 30 * time.Second

// ErrCircuitOpen is returned by the Write of an AWS sink whose Throttle has
// DropWhenOpen set while its circuit breaker is open: the service kept
// failing, so the document is dropped and counted instead of held.
var ErrCircuitOpen = errors.New("circuit breaker open")

// Throttle configures how an AWS sink (LogsSink, MetricDataSink) paces and
// retries its calls, after the serverless throttling pattern: a token bucket
// on calls, exponential backoff with full jitter on throttling and server
// errors retrying only the call that failed, a bound on retries, and a
// circuit breaker that stops calling a service that keeps failing. Zero
// fields take their defaults. A Throttle is a plain value; each sink builds
// its own state from it. Its functions must be safe for concurrent use.
type Throttle struct {
	// CallsPerSecond is the rate of the token bucket on calls, default 5.
	CallsPerSecond rate.Limit
	// Burst is the bucket's size: calls that may be made at once after a
	// quiet spell, default 1.
	Burst int
	// MaxRetries is how many times one call is repeated after a retryable
	// error before its documents are dropped, default 5; -1 means never.
	MaxRetries int
	BaseDelay  time.Duration // first backoff bound (full jitter), default 100ms
	MaxDelay   time.Duration // largest backoff bound, default 10s
	Timeout    time.Duration // deadline of one call, default 10s
	// BreakerFailures is how many consecutive retryable failures open the
	// circuit breaker, default 5. While open no call is made; after
	// BreakerCooldown one probe call is let through (half-open): success
	// closes the breaker, failure opens it for another cooldown.
	BreakerFailures int
	BreakerCooldown time.Duration // default 30s
	// DropWhenOpen makes Write drop (and count) documents while the breaker
	// is open. By default they are held in the sink's bounded buffer, which
	// drops only when full.
	DropWhenOpen bool

	// Now and Sleep are the clock, default time.Now and a timer honouring
	// ctx; tests inject a fake clock so that backoff and cooldown take no
	// real time. Jitter returns a uniform value in [0, n], default
	// math/rand/v2.
	Now    func() time.Time
	Sleep  func(ctx context.Context, d time.Duration) error
	Jitter func(n int64) int64
}

func (t *Throttle) setDefaults() {
	if t.CallsPerSecond == 0 {
		t.CallsPerSecond = 5
	}
	if t.Burst == 0 {
		t.Burst = 1
	}
	switch t.MaxRetries {
	case 0:
		t.MaxRetries = 5
	case -1:
		t.MaxRetries = 0
	}
	if t.BaseDelay == 0 {
		t.BaseDelay = 100 * time.Millisecond
	}
	if t.MaxDelay == 0 {
		t.MaxDelay = 10 * time.Second
	}
	if t.Timeout == 0 {
		t.Timeout = 10 * time.Second
	}
	if t.BreakerFailures == 0 {
		t.BreakerFailures = 5
	}
	if t.BreakerCooldown == 0 {
		t.BreakerCooldown = 30 * time.Second
	}
	if t.Now == nil {
		t.Now = time.Now
	}
	if t.Sleep == nil {
		t.Sleep = backoff.Sleep
	}
	if t.Jitter == nil {
		t.Jitter = backoff.Uniform
	}
}

// Validate reports the first field out of range, after defaults.
func (t *Throttle) Validate() error {
	switch {
	case t.CallsPerSecond <= 0:
		return fmt.Errorf("throttle.calls_per_second: %v, want more than 0", t.CallsPerSecond)
	case t.Burst < 1:
		return fmt.Errorf("throttle.burst: %d, want 1 or more", t.Burst)
	case t.MaxRetries < 0 || t.MaxRetries > 100:
		return fmt.Errorf("throttle.max_retries: %d, want -1 to 100", t.MaxRetries)
	case t.BaseDelay < 0 || t.MaxDelay < t.BaseDelay:
		return fmt.Errorf("throttle.base_delay, max_delay: %v, %v, want 0 <= base_delay <= max_delay", t.BaseDelay, t.MaxDelay)
	case t.Timeout < 0:
		return fmt.Errorf("throttle.timeout: %v, want more than 0", t.Timeout)
	case t.BreakerFailures < 1:
		return fmt.Errorf("throttle.breaker_failures: %d, want 1 or more", t.BreakerFailures)
	case t.BreakerCooldown < 0:
		return fmt.Errorf("throttle.breaker_cooldown: %v, want 0 or more", t.BreakerCooldown)
	}
	return nil
}

// throttleCounters are the counters a throttler shares with its sink.
type throttleCounters struct {
	retries, errors atomic.Uint64
}

// throttler is the state of one sink's Throttle. It is used by the sink's
// one sender goroutine; only open is read by others.
type throttler struct {
	cfg      Throttle
	lim      *rate.Limiter
	counters *throttleCounters

	fails     int          // consecutive retryable failures
	openUntil time.Time    // zero while closed
	openNanos atomic.Int64 // openUntil for Write, 0 while closed
	admitted  bool         // a call was admitted ahead of its batch
}

func newThrottler(cfg Throttle, c *throttleCounters) *throttler {
	return &throttler{cfg: cfg, lim: rate.NewLimiter(cfg.CallsPerSecond, cfg.Burst), counters: c}
}

// admit waits until a call may be made: the breaker, if open, has cooled
// down, and the bucket has a token. With DropWhenOpen an open breaker
// returns ErrCircuitOpen instead of waiting.
func (t *throttler) admit(ctx context.Context) error {
	if t.admitted {
		return nil
	}
	if !t.openUntil.IsZero() {
		if t.cfg.DropWhenOpen && t.cfg.Now().Before(t.openUntil) {
			return ErrCircuitOpen
		}
		if err := t.cfg.Sleep(ctx, t.openUntil.Sub(t.cfg.Now())); err != nil {
			return err
		}
		// Half-open: this call is the probe; Write holds again until it
		// succeeds.
	}
	now := t.cfg.Now()
	r := t.lim.ReserveN(now, 1)
	if err := t.cfg.Sleep(ctx, r.DelayFrom(now)); err != nil {
		r.CancelAt(t.cfg.Now())
		return err
	}
	t.admitted = true
	return nil
}

// do makes call until it succeeds, fails with an error that retrying will
// not cure, or has been retried MaxRetries times; it returns the last
// error. When the call failed, unanswered reports whether one of its
// attempts had sent its request whole and got no answer from the service
// (it timed out, its connection broke, the context ended): the service may
// have taken that request. An attempt the service answered with an error
// status, or whose request was not sent whole, took nothing.
func (t *throttler) do(ctx context.Context, call func(ctx context.Context) error) (unanswered bool, err error) {
	for attempt := 0; ; attempt++ {
		// A sink that shed its batch (a Flush out of time) makes no
		// more calls for it, so counts no more errors.
		if err := ctx.Err(); err != nil {
			return unanswered, err
		}
		if err := t.admit(ctx); err != nil {
			return unanswered, err
		}
		t.admitted = false
		if attempt > 0 {
			t.counters.retries.Add(1)
		}
		cctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
		var sent atomic.Bool // set by the transport's goroutine
		cctx = httptrace.WithClientTrace(cctx, &httptrace.ClientTrace{WroteRequest: func(w httptrace.WroteRequestInfo) {
			if w.Err == nil {
				sent.Store(true)
			}
		}})
		err := call(cctx)
		cancel()
		if err == nil {
			t.fails, t.openUntil = 0, time.Time{}
			t.openNanos.Store(0)
			return false, nil
		}
		if sent.Load() && !throttleAnswered(err) {
			unanswered = true
		}
		t.counters.errors.Add(1)
		if ctx.Err() != nil {
			return unanswered, err
		}
		if !throttleRetryable(err) {
			return unanswered, err
		}
		t.fails++
		if t.fails >= t.cfg.BreakerFailures {
			t.openUntil = t.cfg.Now().Add(t.cfg.BreakerCooldown)
			t.openNanos.Store(t.openUntil.UnixNano())
		}
		if attempt >= t.cfg.MaxRetries {
			return unanswered, err
		}
		if err := t.cfg.Sleep(ctx, t.backoff(attempt+1)); err != nil {
			return unanswered, err
		}
	}
}

// throttleAnswered reports whether err carries the service's answer: an
// HTTP response with an error status.
func throttleAnswered(err error) bool {
	var re *smithyhttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() >= 400
}

// isOpen reports whether the breaker is open and cooling down at now; it
// is safe for concurrent use.
func (t *throttler) isOpen(now time.Time) bool {
	u := t.openNanos.Load()
	return u != 0 && now.UnixNano() < u
}

// backoff returns a full-jitter delay after attempts failures: uniform in
// [0, min(MaxDelay, BaseDelay·2^(attempts-1))].
func (t *throttler) backoff(attempts int) time.Duration {
	return backoff.FullJitter(t.cfg.BaseDelay, t.cfg.MaxDelay, attempts, t.cfg.Jitter)
}

// cloudWatchRetryCodes are the codes of CloudWatch's that the shared
// classification (awserr.Retryable) does not retry by itself:
// LimitExceeded, the query API's spelling of a limit reached (the SDK
// lists only LimitExceededException).
var cloudWatchRetryCodes = []string{"LimitExceeded"}

// throttleRetryable reports whether a failed call may succeed if made
// again, by awserr.Retryable with CloudWatch's own codes: throttling,
// server errors (5xx), timeouts and transport errors may; a refused request
// (bad argument, access denied, missing resource) will not.
func throttleRetryable(err error) bool {
	return awserr.Retryable(err, cloudWatchRetryCodes...)
}
