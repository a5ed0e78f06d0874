package assemble

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/ratewarden/ratewarden/aggregator"
	emf "github.com/ratewarden/ratewarden/embedded-metrics"
)

// AggregatorMetrics serves /metrics (Prometheus, from OpenTelemetry
// instruments) and /healthz for `ratewarden aggregate`: what the run read,
// rolled up and delivered, its watermark and its lag behind the wall
// clock, and what the EMF writer (nil without one) wrote and dropped.
// stats holds the latest progress report.
func AggregatorMetrics(stats *atomic.Pointer[aggregator.RunStats], w *emf.Writer, now func() time.Time) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)).Meter("github.com/ratewarden/ratewarden/aggregator")
	type inst struct {
		name, desc, unit string
		gauge            bool
		value            func(aggregator.RunStats) int64
	}
	insts := []inst{
		{"ratewarden.aggregator.events", "Events rolled up.", "{event}", false, func(s aggregator.RunStats) int64 { return int64(s.Rollup.Events) }},
		{"ratewarden.aggregator.late", "Events whose window had been emitted.", "{event}", false, func(s aggregator.RunStats) int64 { return int64(s.Rollup.Late) }},
		{"ratewarden.aggregator.late.dropped", "Late events dropped (--late drop).", "{event}", false, func(s aggregator.RunStats) int64 { return int64(s.Rollup.LateDropped) }},
		{"ratewarden.aggregator.windows", "Windows emitted.", "{window}", false, func(s aggregator.RunStats) int64 { return int64(s.Rollup.Windows) }},
		{"ratewarden.aggregator.corrections", "Corrections of windows emitted.", "{window}", false, func(s aggregator.RunStats) int64 { return int64(s.Rollup.Corrections) }},
		{"ratewarden.aggregator.outputs", "Outputs delivered to every sink.", "{output}", false, func(s aggregator.RunStats) int64 { return int64(s.Outputs) }},
		{"ratewarden.aggregator.records", "Decision log records read.", "{record}", false, func(s aggregator.RunStats) int64 { return int64(s.Read.Records) }},
		{"ratewarden.aggregator.corrupt.events", "Events in log records that could not be decoded, skipped.", "{event}", false, func(s aggregator.RunStats) int64 { return int64(s.Read.BadEvents) }},
		{"ratewarden.aggregator.watermark", "The watermark, Unix seconds.", "s", true, func(s aggregator.RunStats) int64 { return unixOrZero(s.Watermark) }},
		{"ratewarden.aggregator.lag", "How far the watermark is behind the wall clock.", "s", true, func(s aggregator.RunStats) int64 {
			if s.Watermark.IsZero() {
				return 0
			}
			return int64(now().Sub(s.Watermark) / time.Second)
		}},
	}
	obs := make([]metric.Observable, 0, len(insts)+2)
	for _, in := range insts {
		var o metric.Observable
		if in.gauge {
			o, err = meter.Int64ObservableGauge(in.name, metric.WithDescription(in.desc), metric.WithUnit(in.unit))
		} else {
			o, err = meter.Int64ObservableCounter(in.name, metric.WithDescription(in.desc), metric.WithUnit(in.unit))
		}
		if err != nil {
			return nil, err
		}
		obs = append(obs, o)
	}
	written, err := meter.Int64ObservableCounter("ratewarden.aggregator.emf.written", metric.WithDescription("EMF documents the sink accepted."), metric.WithUnit("{document}"))
	if err != nil {
		return nil, err
	}
	dropped, err := meter.Int64ObservableCounter("ratewarden.aggregator.emf.dropped", metric.WithDescription("EMF documents refused as invalid or by the sink."), metric.WithUnit("{document}"))
	if err != nil {
		return nil, err
	}
	obs = append(obs, written, dropped)
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		var s aggregator.RunStats
		if p := stats.Load(); p != nil {
			s = *p
		}
		for i, in := range insts {
			o.ObserveInt64(obs[i].(metric.Int64Observable), in.value(s))
		}
		if w != nil {
			var wr, dr uint64
			st := w.Stats()
			for _, r := range st.Sinks {
				wr += r.Written
				dr += r.Dropped + r.Rejected
			}
			o.ObserveInt64(written, int64(wr))
			o.ObserveInt64(dropped, int64(dr+st.Rejected))
		}
		return nil
	}, obs...)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	return mux, nil
}

func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}
