package edge

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratewarden/ratewarden/decisions"
)

// latencyBounds are the store-latency histogram's bucket upper bounds.
var latencyBounds = [...]time.Duration{
	250 * time.Microsecond, 500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond,
	5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond,
}

// counters are the limiter's own instruments: one atomic add each on the
// request path, read by the metrics exporter when it collects.
type counters struct {
	outcomes      [decisions.NumOutcomes]atomic.Uint64
	dropped       atomic.Uint64 // decisions the sink refused
	storeErrors   atomic.Uint64
	tokenRejected atomic.Uint64
	tokensIssued  atomic.Uint64
	// tokenEndpointDenied counts token requests without a valid verifier secret.
	tokenEndpointDenied atomic.Uint64

	latBuckets [len(latencyBounds) + 1]atomic.Uint64
	latSum     atomic.Int64 // ns

	// responseErrors counts failed responses by responseErrors' index.
	responseErrors [len(responseErrors)]atomic.Uint64
}

// responseErrors are the values of Decision.ResponseError the edge
// records, in the order of counters.responseErrors.
var responseErrors = [...]string{
	decisions.UpstreamTimeout, decisions.UpstreamReadTimeout, decisions.UpstreamUnreachable, decisions.UpstreamFailed,
	decisions.BodyTimeout, decisions.BodyTooLarge, decisions.ClientClosed, decisions.SendTimeout,
}

func (c *counters) responseError(e string) {
	for i, name := range responseErrors {
		if name == e {
			c.responseErrors[i].Add(1)
			return
		}
	}
}

func (c *counters) storeLatency(d time.Duration) {
	i := 0
	for i < len(latencyBounds) && d > latencyBounds[i] {
		i++
	}
	c.latBuckets[i].Add(1)
	c.latSum.Add(int64(d))
}

// Stats is a snapshot of the limiter's counters.
type Stats struct {
	Outcomes      map[string]uint64 // decisions by outcome name
	Dropped       uint64            // decisions the sink dropped
	StoreErrors   uint64            // failed store calls
	TokenRejected uint64            // challenge tokens that failed verification
	TokensIssued  uint64            // challenge tokens issued by the token endpoint
	TokenDenied   uint64            // token requests without a valid verifier secret
	BreakerState  int               // 0 closed, 1 open, 2 half-open
	BreakerOpened uint64            // times the breaker opened
	// Concurrency releases the store did not take (it failed, or the
	// breaker was open): queued, sent once it answered again, or lost (the
	// queue was full, the store kept refusing one, or Close could not send
	// it), each lost one leaving a slot counted as in flight.
	ReleasesPending uint64
	ReleasesRetried uint64
	ReleasesLost    uint64
	// ResponseErrors are failed responses by Decision.ResponseError:
	// upstream_timeout (504), upstream_read_timeout (the origin stalled
	// mid-body), upstream_unreachable and upstream_error (502),
	// body_timeout (408), body_too_large (413), client_closed,
	// send_timeout.
	ResponseErrors map[string]uint64
}

// Stats returns a snapshot of the limiter's counters.
func (l *Limiter) Stats() Stats {
	s := Stats{Outcomes: make(map[string]uint64), Dropped: l.metrics.dropped.Load(),
		StoreErrors: l.metrics.storeErrors.Load(), TokenRejected: l.metrics.tokenRejected.Load(),
		TokensIssued: l.metrics.tokensIssued.Load(), TokenDenied: l.metrics.tokenEndpointDenied.Load(),
		ReleasesPending: uint64(l.releases.pending.Load()), ReleasesRetried: l.releases.retried.Load(),
		ReleasesLost: l.releases.lost.Load(), ResponseErrors: make(map[string]uint64, len(responseErrors))}
	for i, name := range responseErrors {
		s.ResponseErrors[name] = l.metrics.responseErrors[i].Load()
	}
	for o := decisions.Outcome(1); int(o) < decisions.NumOutcomes; o++ {
		s.Outcomes[o.String()] = l.metrics.outcomes[o].Load()
	}
	if l.breaker != nil {
		s.BreakerState = int(l.breaker.state.Load())
		s.BreakerOpened = l.breaker.opened.Load()
	}
	return s
}

// RegisterMetrics registers the limiter's instruments with meter as
// asynchronous instruments, so the request path pays one atomic add and the
// exporter reads the values when it collects.
func (l *Limiter) RegisterMetrics(meter metric.Meter) error {
	decided, err := meter.Int64ObservableCounter("ratewarden.edge.decisions",
		metric.WithDescription("Decisions by outcome."), metric.WithUnit("{decision}"))
	if err != nil {
		return err
	}
	dropped, err := meter.Int64ObservableCounter("ratewarden.edge.decisions.dropped",
		metric.WithDescription("Decisions the sink dropped (queue full or closed)."), metric.WithUnit("{decision}"))
	if err != nil {
		return err
	}
	storeErrs, err := meter.Int64ObservableCounter("ratewarden.edge.store.errors",
		metric.WithDescription("Failed counter-store calls (errors and timeouts)."), metric.WithUnit("{call}"))
	if err != nil {
		return err
	}
	tokens, err := meter.Int64ObservableCounter("ratewarden.edge.challenge.tokens.rejected",
		metric.WithDescription("Challenge tokens that failed verification."), metric.WithUnit("{token}"))
	if err != nil {
		return err
	}
	issued, err := meter.Int64ObservableCounter("ratewarden.edge.challenge.tokens.issued",
		metric.WithDescription("Challenge tokens issued by the token endpoint."), metric.WithUnit("{token}"))
	if err != nil {
		return err
	}
	denied, err := meter.Int64ObservableCounter("ratewarden.edge.challenge.token_requests.denied",
		metric.WithDescription("Token endpoint requests without a valid verifier secret."), metric.WithUnit("{request}"))
	if err != nil {
		return err
	}
	breakerState, err := meter.Int64ObservableGauge("ratewarden.edge.store.breaker.state",
		metric.WithDescription("Store circuit breaker: 0 closed, 1 open, 2 half-open."))
	if err != nil {
		return err
	}
	breakerOpened, err := meter.Int64ObservableCounter("ratewarden.edge.store.breaker.opened",
		metric.WithDescription("Times the store circuit breaker opened."), metric.WithUnit("{event}"))
	if err != nil {
		return err
	}
	relPending, err := meter.Int64ObservableGauge("ratewarden.edge.store.releases.pending",
		metric.WithDescription("Concurrency releases the store did not take yet, queued until it answers again."), metric.WithUnit("{release}"))
	if err != nil {
		return err
	}
	relRetried, err := meter.Int64ObservableCounter("ratewarden.edge.store.releases.retried",
		metric.WithDescription("Queued concurrency releases sent to the store once it answered again."), metric.WithUnit("{release}"))
	if err != nil {
		return err
	}
	relLost, err := meter.Int64ObservableCounter("ratewarden.edge.store.releases.lost",
		metric.WithDescription("Concurrency releases never sent to the store (queue full, refused on every retry, or pending at shutdown): slots it still counts as in flight."), metric.WithUnit("{release}"))
	if err != nil {
		return err
	}
	latCount, err := meter.Int64ObservableCounter("ratewarden.edge.store.latency.calls",
		metric.WithDescription("Store calls by latency bucket upper bound (le, seconds; +Inf for the rest)."), metric.WithUnit("{call}"))
	if err != nil {
		return err
	}
	latSum, err := meter.Float64ObservableCounter("ratewarden.edge.store.latency.sum",
		metric.WithDescription("Total time spent in store calls."), metric.WithUnit("s"))
	if err != nil {
		return err
	}
	respErrs, err := meter.Int64ObservableCounter("ratewarden.edge.response.errors",
		metric.WithDescription("Responses that are not the origin's whole answer, by error: upstream_timeout (504), upstream_read_timeout (the origin stalled mid-body), upstream_unreachable and upstream_error (502), body_timeout (408), body_too_large (413), client_closed, send_timeout."), metric.WithUnit("{response}"))
	if err != nil {
		return err
	}
	var errAttrs [len(responseErrors)]metric.ObserveOption
	for i, name := range responseErrors {
		errAttrs[i] = metric.WithAttributes(attribute.String("error", name))
	}
	var outcomeAttrs [decisions.NumOutcomes]metric.ObserveOption
	for o := decisions.Outcome(1); int(o) < decisions.NumOutcomes; o++ {
		outcomeAttrs[o] = metric.WithAttributes(attribute.String("outcome", o.String()))
	}
	var leAttrs [len(latencyBounds) + 1]metric.ObserveOption
	for i := range leAttrs {
		le := "+Inf"
		if i < len(latencyBounds) {
			le = formatSeconds(latencyBounds[i])
		}
		leAttrs[i] = metric.WithAttributes(attribute.String("le", le))
	}
	_, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		s := l.Stats()
		for oc := decisions.Outcome(1); int(oc) < decisions.NumOutcomes; oc++ {
			o.ObserveInt64(decided, int64(l.metrics.outcomes[oc].Load()), outcomeAttrs[oc])
		}
		o.ObserveInt64(dropped, int64(s.Dropped))
		o.ObserveInt64(storeErrs, int64(s.StoreErrors))
		o.ObserveInt64(tokens, int64(s.TokenRejected))
		o.ObserveInt64(issued, int64(s.TokensIssued))
		o.ObserveInt64(denied, int64(s.TokenDenied))
		o.ObserveInt64(breakerState, int64(s.BreakerState))
		o.ObserveInt64(breakerOpened, int64(s.BreakerOpened))
		o.ObserveInt64(relPending, int64(s.ReleasesPending))
		o.ObserveInt64(relRetried, int64(s.ReleasesRetried))
		o.ObserveInt64(relLost, int64(s.ReleasesLost))
		var cum uint64
		for i := range l.metrics.latBuckets {
			cum += l.metrics.latBuckets[i].Load()
			o.ObserveInt64(latCount, int64(cum), leAttrs[i])
		}
		o.ObserveFloat64(latSum, time.Duration(l.metrics.latSum.Load()).Seconds())
		for i := range l.metrics.responseErrors {
			o.ObserveInt64(respErrs, int64(l.metrics.responseErrors[i].Load()), errAttrs[i])
		}
		return nil
	}, decided, dropped, storeErrs, tokens, issued, denied, breakerState, breakerOpened,
		relPending, relRetried, relLost, latCount, latSum, respErrs)
	return err
}

func formatSeconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'g', -1, 64)
}
