package assemble

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/ratewarden/ratewarden/decisions"
	dkinesis "github.com/ratewarden/ratewarden/decisions/kinesis"
	"github.com/ratewarden/ratewarden/edge"
	"github.com/ratewarden/ratewarden/edge/lists"
)

// metricsHandler serves /metrics (Prometheus, from the OpenTelemetry
// instruments register makes on the meter named scope) and /healthz: the
// admin surface of every long-running command.
func metricsHandler(scope string, register func(metric.Meter) error) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)).Meter(scope)
	if err := register(meter); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	return mux, nil
}

// adminHandler serves the edge's /metrics and /healthz, with the
// listener's when ln is not nil.
func adminHandler(lim *edge.Limiter, sinks *Sinks, watchers map[string]*lists.Watcher, ln *Listener) (http.Handler, error) {
	return metricsHandler("github.com/ratewarden/ratewarden/edge", func(meter metric.Meter) error {
		if err := registerEdgeMetrics(meter, lim, sinks, watchers); err != nil || ln == nil {
			return err
		}
		type conns struct{ open, drained, refused int64 }
		return registerObservables(meter, func() conns {
			return conns{int64(ln.limit.Open()), ln.limit.Drained(), ln.refused()}
		}, []observable[conns]{{
			name: "ratewarden.edge.connections.open", gauge: true,
			desc:  "Client connections open, at most edge.client.max_connections.",
			unit:  "{connection}",
			value: func(c conns) int64 { return c.open },
		}, {
			name:  "ratewarden.edge.connections.drained",
			desc:  "Idle client connections closed to make room for a new one, all edge.client.max_connections being open.",
			unit:  "{connection}",
			value: func(c conns) int64 { return c.drained },
		}, {
			name:  "ratewarden.edge.connections.refused",
			desc:  "Client connections reset at accept for being over edge.client.max_connections_per_address.",
			unit:  "{connection}",
			value: func(c conns) int64 { return c.refused },
		}})
	})
}

// registerEdgeMetrics makes the instruments of the limiter, the sinks and
// the lists: what every command that decides exports.
func registerEdgeMetrics(meter metric.Meter, lim *edge.Limiter, sinks *Sinks, watchers map[string]*lists.Watcher) error {
	if err := lim.RegisterMetrics(meter); err != nil {
		return err
	}
	if sinks.Emitter != nil {
		if err := registerEmitterMetrics(meter, sinks.Emitter); err != nil {
			return err
		}
	}
	if sinks.Kinesis != nil {
		if err := registerKinesisMetrics(meter, sinks.Kinesis, sinks.Spill); err != nil {
			return err
		}
	}
	if len(watchers) > 0 {
		return registerListMetrics(meter, watchers)
	}
	return nil
}

// observable is one int64 instrument whose value is read from a snapshot S
// at each collection.
type observable[S any] struct {
	name, desc, unit string
	gauge            bool
	value            func(S) int64
}

// registerObservables makes insts on meter and one callback that takes a
// snapshot and observes every instrument from it.
func registerObservables[S any](meter metric.Meter, snapshot func() S, insts []observable[S]) error {
	obs := make([]metric.Observable, len(insts))
	for i, in := range insts {
		var err error
		if in.gauge {
			obs[i], err = meter.Int64ObservableGauge(in.name, metric.WithDescription(in.desc), metric.WithUnit(in.unit))
		} else {
			obs[i], err = meter.Int64ObservableCounter(in.name, metric.WithDescription(in.desc), metric.WithUnit(in.unit))
		}
		if err != nil {
			return err
		}
	}
	_, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := snapshot()
		for i, in := range insts {
			o.ObserveInt64(obs[i].(metric.Int64Observable), in.value(s))
		}
		return nil
	}, obs...)
	return err
}

// registerEmitterMetrics exports each lane's counters, by sink.
func registerEmitterMetrics(meter metric.Meter, f *decisions.Fanout) error {
	written, err := meter.Int64ObservableCounter("ratewarden.decisions.written",
		metric.WithDescription("Decisions written to the decision sink."), metric.WithUnit("{decision}"))
	if err != nil {
		return err
	}
	errs, err := meter.Int64ObservableCounter("ratewarden.decisions.write.errors",
		metric.WithDescription("Decision sink write errors."), metric.WithUnit("{error}"))
	if err != nil {
		return err
	}
	queued, err := meter.Int64ObservableGauge("ratewarden.decisions.queued",
		metric.WithDescription("Decisions waiting in the sink's queue."), metric.WithUnit("{decision}"))
	if err != nil {
		return err
	}
	dropped, err := meter.Int64ObservableCounter("ratewarden.decisions.dropped",
		metric.WithDescription("Decisions the sink's full queue refused."), metric.WithUnit("{decision}"))
	if err != nil {
		return err
	}
	clamped, err := meter.Int64ObservableCounter("ratewarden.decisions.clamped",
		metric.WithDescription("Decisions written with a field cut to what readers take, rather than make them refuse the record."), metric.WithUnit("{decision}"))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		f.Lanes(func(name string, e *decisions.Emitter) {
			s, attrs := e.Stats(), metric.WithAttributes(attribute.String("sink", name))
			o.ObserveInt64(written, int64(s.Written), attrs)
			o.ObserveInt64(errs, int64(s.Errors), attrs)
			o.ObserveInt64(queued, int64(s.Queued), attrs)
			o.ObserveInt64(dropped, int64(s.Dropped), attrs)
			o.ObserveInt64(clamped, int64(s.Clamped), attrs)
		})
		return nil
	}, written, errs, queued, dropped, clamped)
	return err
}

// registerKinesisMetrics exports what the Kinesis sink and its spill did.
func registerKinesisMetrics(meter metric.Meter, sink *dkinesis.Sink, spill *dkinesis.Spill) error {
	type stats struct {
		k dkinesis.Stats
		s dkinesis.SpillStats
	}
	return registerObservables(meter, func() stats { return stats{sink.Stats(), spill.Stats()} }, []observable[stats]{
		{"ratewarden.decisions.kinesis.delivered", "Decisions put on the Kinesis stream.", "{decision}", false, func(x stats) int64 { return int64(x.k.Events) }},
		{"ratewarden.decisions.kinesis.records", "Kinesis records put.", "{record}", false, func(x stats) int64 { return int64(x.k.Records) }},
		{"ratewarden.decisions.kinesis.bytes", "Payload bytes put on the stream, partition keys included.", "By", false, func(x stats) int64 { return int64(x.k.Bytes) }},
		{"ratewarden.decisions.kinesis.retried", "Kinesis records sent again after a failure.", "{record}", false, func(x stats) int64 { return int64(x.k.Retried) }},
		{"ratewarden.decisions.kinesis.throttled", "Throttled PutRecords calls and records.", "{response}", false, func(x stats) int64 { return int64(x.k.Throttled) }},
		{"ratewarden.decisions.kinesis.spilled", "Decisions the stream could not take, written to the spill directory.", "{decision}", false, func(x stats) int64 { return int64(x.s.Spilled) }},
		{"ratewarden.decisions.kinesis.drained", "Spilled decisions since delivered.", "{decision}", false, func(x stats) int64 { return int64(x.s.Drained) }},
		{"ratewarden.decisions.kinesis.dropped", "Decisions neither delivered nor spilled.", "{decision}", false, func(x stats) int64 { return int64(x.s.Dropped + x.k.Failed) }},
		{"ratewarden.decisions.kinesis.backlog", "Spilled decisions waiting for the stream.", "{decision}", true, func(x stats) int64 { return int64(x.s.Backlog) }},
	})
}

func registerListMetrics(meter metric.Meter, watchers map[string]*lists.Watcher) error {
	loads, err := meter.Int64ObservableCounter("ratewarden.edge.lists.loads",
		metric.WithDescription("Allow/deny/challenge list loads that succeeded."), metric.WithUnit("{load}"))
	if err != nil {
		return err
	}
	failures, err := meter.Int64ObservableCounter("ratewarden.edge.lists.failures",
		metric.WithDescription("Allow/deny/challenge list refreshes that failed (the last good list stays)."), metric.WithUnit("{load}"))
	if err != nil {
		return err
	}
	entries, err := meter.Int64ObservableGauge("ratewarden.edge.lists.entries",
		metric.WithDescription("Entries in the current allow/deny/challenge list."), metric.WithUnit("{entry}"))
	if err != nil {
		return err
	}
	changes, err := meter.Int64ObservableCounter("ratewarden.edge.lists.changes",
		metric.WithDescription("List changes recorded as feedback events."), metric.WithUnit("{event}"))
	if err != nil {
		return err
	}
	changeDrops, err := meter.Int64ObservableCounter("ratewarden.edge.lists.changes_dropped",
		metric.WithDescription("Feedback events of list changes the decision queue dropped."), metric.WithUnit("{event}"))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for name, w := range watchers {
			attrs := metric.WithAttributes(attribute.String("list", name))
			l, f := w.Stats()
			o.ObserveInt64(loads, int64(l), attrs)
			o.ObserveInt64(failures, int64(f), attrs)
			o.ObserveInt64(entries, int64(w.List().Len()), attrs)
			c, d := w.Changes()
			o.ObserveInt64(changes, int64(c), attrs)
			o.ObserveInt64(changeDrops, int64(d), attrs)
		}
		return nil
	}, loads, failures, entries, changes, changeDrops)
	return err
}
