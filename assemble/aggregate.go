package assemble

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"golang.org/x/time/rate"

	"github.com/ratewarden/ratewarden/aggregator"
	emf "github.com/ratewarden/ratewarden/embedded-metrics"
)

// AggregatorMetrics serves /metrics (Prometheus, from OpenTelemetry
// instruments) and /healthz for `ratewarden aggregate`: what the run read,
// rolled up and delivered, its watermark and its lag behind the wall
// clock, per Kinesis shard held how far its reads are behind the stream
// (MillisBehindLatest) and its lag in event time, and what the EMF writer
// (nil without one) wrote and dropped. stats returns the run's latest
// figures; it is called at each collection. extra registers more
// instruments on the same meter (the alerts', Alerts.RegisterMetrics).
func AggregatorMetrics(stats func() aggregator.RunStats, w *emf.Writer, now func() time.Time, extra ...func(metric.Meter) error) (http.Handler, error) {
	// snapshot is what one collection reads: the latest progress report and
	// the EMF writer's counts.
	type snapshot struct {
		run                        aggregator.RunStats
		written, dropped, buffered uint64
		unconfirmed                uint64 // of dropped
	}
	take := func() snapshot {
		s := snapshot{run: stats()}
		if w != nil {
			// Invalid documents are counted once, by the writer. The rest
			// is the sink's own account: delivered, held, and dropped
			// whether at the write (a full buffer) or later (retries
			// exhausted, a flush out of time), which the writer never
			// sees.
			st := w.Stats()
			s.dropped = st.Rejected
			for _, r := range st.Sinks {
				s.written += r.Sink.Written
				s.dropped += r.Sink.Dropped
				s.buffered += r.Sink.Buffered
				s.unconfirmed += r.Sink.Unconfirmed
			}
		}
		return s
	}
	insts := []observable[snapshot]{
		{"ratewarden.aggregator.events", "Events rolled up.", "{event}", false, func(s snapshot) int64 { return int64(s.run.Rollup.Events) }},
		{"ratewarden.aggregator.late", "Events whose window had been emitted.", "{event}", false, func(s snapshot) int64 { return int64(s.run.Rollup.Late) }},
		{"ratewarden.aggregator.late.dropped", "Late events dropped (--late drop).", "{event}", false, func(s snapshot) int64 { return int64(s.run.Rollup.LateDropped) }},
		{"ratewarden.aggregator.future", "Events more than --max-skew ahead of the latest event time: rolled up, but they did not move the watermark.", "{event}", false, func(s snapshot) int64 { return int64(s.run.Rollup.Future) }},
		{"ratewarden.aggregator.ahead.dropped", "Events dropped rather than open one more window ahead of the latest event time, past the cap (256).", "{event}", false, func(s snapshot) int64 { return int64(s.run.Rollup.AheadDropped) }},
		{"ratewarden.aggregator.corrections.dropped", "Late events dropped rather than open one more pending correction, past the cap (256).", "{event}", false, func(s snapshot) int64 { return int64(s.run.Rollup.CorrectionsDropped) }},
		{"ratewarden.aggregator.bad.time", "Events skipped for their time: none (the zero time) or in the last window before the end of int64 nanoseconds (2262-04-11T23:47:16Z); in no window.", "{event}", false, func(s snapshot) int64 { return int64(s.run.Rollup.BadTime) }},
		{"ratewarden.aggregator.bad.latency", "Latencies below 0 (the store's or the origin's), which no edge measures: left out of the latency sketches; their decisions are counted.", "{latency}", false, func(s snapshot) int64 { return int64(s.run.Rollup.BadLatency) }},
		{"ratewarden.aggregator.folded", "Decisions counted under __other__: a tier, rule, node or reason past a window's distinct names (4096 each).", "{event}", false, func(s snapshot) int64 { return int64(s.run.Rollup.Folded) }},
		{"ratewarden.aggregator.windows", "Windows emitted.", "{window}", false, func(s snapshot) int64 { return int64(s.run.Rollup.Windows) }},
		{"ratewarden.aggregator.corrections", "Corrections of windows emitted.", "{window}", false, func(s snapshot) int64 { return int64(s.run.Rollup.Corrections) }},
		{"ratewarden.aggregator.outputs", "Outputs delivered to every sink.", "{output}", false, func(s snapshot) int64 { return int64(s.run.Outputs) }},
		{"ratewarden.aggregator.records", "Decision log records read.", "{record}", false, func(s snapshot) int64 { return int64(s.run.Read.Records) }},
		{"ratewarden.aggregator.corrupt.events", "Events in log records that could not be decoded, skipped.", "{event}", false, func(s snapshot) int64 { return int64(s.run.Read.BadEvents) }},
		{"ratewarden.aggregator.corrupt.regions", "Corrupt regions of the decision log skipped.", "{region}", false, func(s snapshot) int64 { return int64(s.run.Lost.Problems - s.run.Lost.Gaps) }},
		{"ratewarden.aggregator.corrupt.bytes", "Bytes of the decision log skipped as corrupt.", "By", false, func(s snapshot) int64 { return s.run.Lost.Bytes }},
		{"ratewarden.aggregator.lost.events", "Events lost in corrupt regions and missing segments of the decision log.", "{event}", false, func(s snapshot) int64 { return int64(s.run.Lost.Events) }},
		{"ratewarden.aggregator.missing.segments", "Places where segments of the decision log were missing between two others.", "{gap}", false, func(s snapshot) int64 { return int64(s.run.Lost.Gaps) }},
		{"ratewarden.aggregator.removed.events", "Events removed from the decision log (retention) after the saved position and before the aggregator read them.", "{event}", false, func(s snapshot) int64 { return int64(s.run.Lost.Removed) }},
		{"ratewarden.aggregator.watermark", "The watermark, Unix seconds.", "s", true, func(s snapshot) int64 { return unixOrZero(s.run.Watermark) }},
		{"ratewarden.aggregator.lag", "How far the watermark is behind the wall clock.", "s", true, func(s snapshot) int64 {
			if s.run.Watermark.IsZero() {
				return 0
			}
			return int64(now().Sub(s.run.Watermark) / time.Second)
		}},
		{"ratewarden.aggregator.emf.written", "EMF documents the sink delivered.", "{document}", false, func(s snapshot) int64 { return int64(s.written) }},
		{"ratewarden.aggregator.emf.dropped", "EMF documents refused as invalid, refused by the sink, or given up by it later (retries exhausted, a flush out of time).", "{document}", false, func(s snapshot) int64 { return int64(s.dropped) }},
		{"ratewarden.aggregator.emf.unconfirmed", "Of the EMF documents dropped, those sent whole to the CloudWatch agent and not acknowledged when the sink gave up on them: they may have arrived.", "{document}", false, func(s snapshot) int64 { return int64(s.unconfirmed) }},
		{"ratewarden.aggregator.emf.buffered", "EMF documents the sink holds, not yet delivered.", "{document}", true, func(s snapshot) int64 { return int64(s.buffered) }},
	}
	return metricsHandler("github.com/ratewarden/ratewarden/aggregator", func(meter metric.Meter) error {
		for _, r := range extra {
			if err := r(meter); err != nil {
				return err
			}
		}
		if err := registerObservables(meter, take, insts); err != nil {
			return err
		}
		return registerShardMetrics(meter, stats, now)
	})
}

// registerShardMetrics exports each Kinesis shard's lags, by shard.
func registerShardMetrics(meter metric.Meter, stats func() aggregator.RunStats, now func() time.Time) error {
	behind, err := meter.Int64ObservableGauge("ratewarden.aggregator.shard.behind",
		metric.WithDescription("How far a shard's last read is behind the newest record of the shard (Kinesis MillisBehindLatest)."), metric.WithUnit("ms"))
	if err != nil {
		return err
	}
	lag, err := meter.Int64ObservableGauge("ratewarden.aggregator.shard.lag",
		metric.WithDescription("How far a shard's watermark is behind the wall clock: its lag in event time."), metric.WithUnit("ms"))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		t := now()
		for _, sh := range stats().Shards {
			attrs := metric.WithAttributes(attribute.String("shard", sh.Shard))
			if sh.Read {
				o.ObserveInt64(behind, sh.Behind.Milliseconds(), attrs)
			}
			if !sh.Watermark.IsZero() {
				o.ObserveInt64(lag, t.Sub(sh.Watermark).Milliseconds(), attrs)
			}
		}
		return nil
	}, behind, lag)
	return err
}

func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

// ProblemLog passes a run's problems (LogOptions.Problem, Lines.Problem)
// on to print one at a time, at most a burst of 20 and then 2 a second, so
// that a badly damaged log cannot flood a terminal or a log file; the
// run's counts hold every problem, and Held says how many it did not
// print. It is not safe for concurrent use, as a run calls it from one
// goroutine.
type ProblemLog struct {
	print func(error)
	lim   *rate.Limiter
	now   func() time.Time
	held  uint64
}

// NewProblemLog returns a ProblemLog printing with print, timed by now.
func NewProblemLog(print func(error), now func() time.Time) *ProblemLog {
	return &ProblemLog{print: print, lim: rate.NewLimiter(2, 20), now: now}
}

// Problem prints err, or counts it as held back.
func (p *ProblemLog) Problem(err error) {
	if !p.lim.AllowN(p.now(), 1) {
		p.held++
		return
	}
	p.print(err)
}

// Held returns how many problems were not printed.
func (p *ProblemLog) Held() uint64 { return p.held }
