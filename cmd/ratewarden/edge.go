package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	dkinesis "github.com/ratewarden/ratewarden/decisions/kinesis"
	"github.com/ratewarden/ratewarden/decisions/seglog"
	"github.com/ratewarden/ratewarden/edge"
	"github.com/ratewarden/ratewarden/edge/challenge"
	"github.com/ratewarden/ratewarden/edge/config"
	"github.com/ratewarden/ratewarden/edge/lists"
	"github.com/ratewarden/ratewarden/examples"
)

// builtinUpstream makes the edge serve a small demo origin itself, so the
// quick start runs on a machine with nothing else.
const builtinUpstream = "builtin"

func runEdge(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlags("edge", "edge [--config FILE] [--listen ADDR] [--upstream URL|builtin] [flags]", stderr)
	cfgPath := fs.String("config", "", "configuration `file` (default: the built-in seed configuration)")
	listen := fs.String("listen", "", "listen `address` (overrides edge.listen)")
	upstream := fs.String("upstream", "", "origin `URL`, or \"builtin\" for a demo origin (overrides edge.upstream)")
	admin := fs.String("admin-listen", "", "metrics and health `address`, \"off\" to disable (overrides edge.admin_listen)")
	decisionsFile := fs.String("decisions-file", "", "append decisions as JSON lines to `path` (overrides edge.decisions_file)")
	decisionsDir := fs.String("decisions-dir", "", "write the decision log to `directory` (overrides decisions.dir)")
	node := fs.String("node", "", "edge node `name` recorded in decisions (overrides edge.node)")
	kinesisStream := fs.String("kinesis-stream", "", "ship decisions to the Kinesis stream `name` too (overrides decisions.kinesis.stream)")
	spillDir := fs.String("kinesis-spill-dir", "", "keep what the stream cannot take in `directory` (overrides decisions.kinesis.spill_dir)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	if *cfgPath == "" && *upstream == "" {
		*upstream = builtinUpstream
	}
	override(&cfg.Edge.Listen, *listen)
	override(&cfg.Edge.Upstream, *upstream)
	override(&cfg.Edge.AdminListen, *admin)
	override(&cfg.Edge.DecisionsFile, *decisionsFile)
	override(&cfg.Decisions.Dir, *decisionsDir)
	override(&cfg.Edge.Node, *node)
	override(&cfg.Decisions.Kinesis.Stream, *kinesisStream)
	override(&cfg.Decisions.Kinesis.SpillDir, *spillDir)
	if cfg.Edge.AdminListen == "off" {
		cfg.Edge.AdminListen = ""
	}
	if cfg.Edge.Upstream != builtinUpstream {
		// Flags bypass the file's validation: check the merged result.
		if err := cfg.Validate(); err != nil {
			return err
		}
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	return serveEdge(ctx, cfg, log, getenv)
}

func override(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

// loadConfig reads path, or the built-in seed configuration.
func loadConfig(path string) (*config.Config, error) {
	if path != "" {
		return config.Load(path)
	}
	cfg, err := config.Parse(examples.Seed, "built-in seed.yaml")
	if err != nil {
		return nil, err
	}
	cfg.Defaults()
	return cfg, cfg.Validate()
}

func serveEdge(ctx context.Context, cfg *config.Config, log *slog.Logger, getenv func(string) string) error {
	var cleanup []func(context.Context) error
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.Edge.ShutdownGrace)
		defer cancel()
		for i := len(cleanup) - 1; i >= 0; i-- {
			if err := cleanup[i](sctx); err != nil {
				log.Error("shutdown", "err", err)
			}
		}
	}()

	opts := edge.Options{Env: getenv}
	sinks, err := openDecisionSinks(ctx, cfg, log, getenv)
	if err != nil {
		return err
	}
	emitter := sinks.emitter
	if emitter != nil {
		opts.Sink = emitter
		cleanup = append(cleanup, sinks.close)
	}
	watchers := map[string]*lists.Watcher{}
	for _, l := range []struct {
		path string
		dst  *edge.ListSource
		name string
	}{{cfg.Lists.AllowFile, &opts.Allow, "allow"}, {cfg.Lists.DenyFile, &opts.Deny, "deny"}} {
		if l.path == "" {
			continue
		}
		name := l.name
		w, err := lists.Watch(l.path, cfg.Lists.Refresh, func(err error) {
			log.Error("list refresh failed; keeping the last good list", "list", name, "err", err)
		})
		if err != nil {
			return fmt.Errorf("%s list: %w", l.name, err)
		}
		*l.dst = w
		watchers[l.name] = w
		cleanup = append(cleanup, w.Close)
	}
	var secret string
	if cfg.Challenge.Enabled {
		if raw := getenv(cfg.Challenge.KeysEnv); raw != "" {
			keys, err := challenge.ParseKeys(raw)
			if err != nil {
				return fmt.Errorf("%s: %w", cfg.Challenge.KeysEnv, err)
			}
			opts.Keys = keys
			secret = getenv(cfg.Challenge.VerifierSecretEnv)
			if secret == "" {
				log.Warn("no verifier secret: the token endpoint is disabled", "env", cfg.Challenge.VerifierSecretEnv)
			}
		} else {
			log.Warn("no challenge keys: challenges redirect, but no token can pass them", "env", cfg.Challenge.KeysEnv)
		}
	}
	store, closeStore, err := openStore(ctx, cfg, log, getenv)
	if err != nil {
		return err
	}
	if store != nil {
		opts.Store = store
		cleanup = append(cleanup, closeStore)
	}
	lim, err := edge.New(cfg, opts)
	if err != nil {
		return err
	}
	cleanup = append(cleanup, lim.Close)

	origin, err := upstreamHandler(cfg.Edge.Upstream)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           lim.Handler(origin, secret),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	ln, err := net.Listen("tcp", cfg.Edge.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("edge listening", "addr", ln.Addr().String(), "upstream", cfg.Edge.Upstream, "node", cfg.Edge.Node)

	var adminSrv *http.Server
	if cfg.Edge.AdminListen != "" {
		h, err := adminHandler(lim, sinks, watchers)
		if err != nil {
			return err
		}
		aln, err := net.Listen("tcp", cfg.Edge.AdminListen)
		if err != nil {
			srv.Close()
			return fmt.Errorf("admin listen: %w", err)
		}
		adminSrv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- adminSrv.Serve(aln) }()
		log.Info("admin listening", "addr", aln.Addr().String(), "metrics", "/metrics")
	}

	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-errc:
		srv.Close()
		return fmt.Errorf("serve: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Edge.ShutdownGrace)
	defer cancel()
	err = srv.Shutdown(sctx)
	if adminSrv != nil {
		adminSrv.Shutdown(sctx)
	}
	return err
}

// upstreamHandler is the reverse proxy to the origin, or the demo origin.
func upstreamHandler(upstream string) (http.Handler, error) {
	if upstream == builtinUpstream {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, "{\"origin\":\"builtin\",\"path\":%q}\n", r.URL.Path)
		}), nil
	}
	u, err := url.Parse(upstream)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("upstream %q: want an absolute http or https URL", upstream)
	}
	return edge.NewReverseProxy(u), nil
}

// adminHandler serves /metrics (Prometheus, from OpenTelemetry
// instruments) and /healthz.
func adminHandler(lim *edge.Limiter, sinks *decisionSinks, watchers map[string]*lists.Watcher) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	meter := mp.Meter("github.com/ratewarden/ratewarden/edge")
	if err := lim.RegisterMetrics(meter); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if sinks.emitter != nil {
		if err := registerEmitterMetrics(meter, sinks.emitter); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	if sinks.kinesis != nil {
		if err := registerKinesisMetrics(meter, sinks.kinesis, sinks.spill); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	if len(watchers) > 0 {
		if err := registerListMetrics(meter, watchers); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	return mux, nil
}

func registerEmitterMetrics(meter metric.Meter, e *decisions.Emitter) error {
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
		metric.WithDescription("Decisions waiting in the emitter queue."), metric.WithUnit("{decision}"))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := e.Stats()
		o.ObserveInt64(written, int64(s.Written))
		o.ObserveInt64(errs, int64(s.Errors))
		o.ObserveInt64(queued, int64(s.Queued))
		return nil
	}, written, errs, queued)
	return err
}

// registerKinesisMetrics exports what the Kinesis sink and its spill did.
func registerKinesisMetrics(meter metric.Meter, sink *dkinesis.Sink, spill *dkinesis.Spill) error {
	type inst struct {
		name, desc, unit string
		gauge            bool
		value            func(dkinesis.Stats, dkinesis.SpillStats) uint64
	}
	insts := []inst{
		{"ratewarden.decisions.kinesis.delivered", "Decisions put on the Kinesis stream.", "{decision}", false, func(k dkinesis.Stats, _ dkinesis.SpillStats) uint64 { return k.Events }},
		{"ratewarden.decisions.kinesis.records", "Kinesis records put.", "{record}", false, func(k dkinesis.Stats, _ dkinesis.SpillStats) uint64 { return k.Records }},
		{"ratewarden.decisions.kinesis.bytes", "Payload bytes put on the stream, partition keys included.", "By", false, func(k dkinesis.Stats, _ dkinesis.SpillStats) uint64 { return k.Bytes }},
		{"ratewarden.decisions.kinesis.retried", "Kinesis records sent again after a failure.", "{record}", false, func(k dkinesis.Stats, _ dkinesis.SpillStats) uint64 { return k.Retried }},
		{"ratewarden.decisions.kinesis.throttled", "Throttled PutRecords calls and records.", "{response}", false, func(k dkinesis.Stats, _ dkinesis.SpillStats) uint64 { return k.Throttled }},
		{"ratewarden.decisions.kinesis.spilled", "Decisions the stream could not take, written to the spill directory.", "{decision}", false, func(_ dkinesis.Stats, s dkinesis.SpillStats) uint64 { return s.Spilled }},
		{"ratewarden.decisions.kinesis.drained", "Spilled decisions since delivered.", "{decision}", false, func(_ dkinesis.Stats, s dkinesis.SpillStats) uint64 { return s.Drained }},
		{"ratewarden.decisions.kinesis.dropped", "Decisions neither delivered nor spilled.", "{decision}", false, func(k dkinesis.Stats, s dkinesis.SpillStats) uint64 { return s.Dropped + k.Failed }},
		{"ratewarden.decisions.kinesis.backlog", "Spilled decisions waiting for the stream.", "{decision}", true, func(_ dkinesis.Stats, s dkinesis.SpillStats) uint64 { return s.Backlog }},
	}
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
		k, s := sink.Stats(), spill.Stats()
		for i, in := range insts {
			o.ObserveInt64(obs[i].(metric.Int64Observable), int64(in.value(k, s)))
		}
		return nil
	}, obs...)
	return err
}

func registerListMetrics(meter metric.Meter, watchers map[string]*lists.Watcher) error {
	loads, err := meter.Int64ObservableCounter("ratewarden.edge.lists.loads",
		metric.WithDescription("Allow/deny list loads that succeeded."), metric.WithUnit("{load}"))
	if err != nil {
		return err
	}
	failures, err := meter.Int64ObservableCounter("ratewarden.edge.lists.failures",
		metric.WithDescription("Allow/deny list refreshes that failed (the last good list stays)."), metric.WithUnit("{load}"))
	if err != nil {
		return err
	}
	entries, err := meter.Int64ObservableGauge("ratewarden.edge.lists.entries",
		metric.WithDescription("Entries in the current allow/deny list."), metric.WithUnit("{entry}"))
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
		}
		return nil
	}, loads, failures, entries)
	return err
}

// openDecisionSinks opens what edge.decisions_file and decisions.dir ask
// for behind one emitter; close flushes the emitter, then the sinks.
func openDecisionSinks(ctx context.Context, cfg *config.Config, log *slog.Logger, getenv func(string) string) (*decisionSinks, error) {
	var writers []decisions.BatchWriter
	var closers []func(context.Context) error
	out := &decisionSinks{}
	fail := func(err error) (*decisionSinks, error) {
		for _, c := range closers {
			c(context.Background())
		}
		return nil, err
	}
	privacy, err := newPrivacy(cfg.Decisions.Privacy, getenv)
	if err != nil {
		return fail(err)
	}
	if cfg.Decisions.Dir != "" {
		l, err := seglog.Open(cfg.Decisions.Dir, logOptions(cfg.Decisions, func(p seglog.Problem) {
			log.Error("decision log: skipped a corrupt region", "problem", p.Error())
		}))
		if err != nil {
			return fail(fmt.Errorf("open decision log: %w", err))
		}
		codec := decisionlog.CodecArrow
		if cfg.Decisions.Codec == "json" {
			codec = decisionlog.CodecJSON
		}
		writers = append(writers, decisionlog.NewWriter(l, decisionlog.WriterOptions{Codec: codec}))
		closers = append(closers, func(context.Context) error { return l.Close() })
	}
	if cfg.Edge.DecisionsFile != "" {
		f, err := decisions.OpenJSONLines(cfg.Edge.DecisionsFile)
		if err != nil {
			return fail(err)
		}
		writers = append(writers, f)
		closers = append(closers, func(context.Context) error { return f.Close() })
	}
	if k := cfg.Decisions.Kinesis; k.Stream != "" {
		acfg, err := loadAWS(ctx, "")
		if err != nil {
			return fail(fmt.Errorf("decisions.kinesis: %w", err))
		}
		// Few retries: what the stream does not take soon goes to the spill
		// and is retried from there, so the emitter's queue does not fill
		// while a dead stream is retried.
		sink, err := dkinesis.New(kinesis.NewFromConfig(acfg), dkinesis.Options{Stream: k.Stream, Partitions: k.Partitions,
			JSON: k.Codec == "json", MaxRetries: 3})
		if err != nil {
			return fail(err)
		}
		spill, err := dkinesis.NewSpill(sink, dkinesis.SpillOptions{Dir: k.SpillDir, Retry: k.Retry})
		if err != nil {
			return fail(fmt.Errorf("decisions.kinesis.spill_dir: %w", err))
		}
		out.kinesis, out.spill = sink, spill
		writers = append(writers, spill)
		closers = append(closers, spill.Close)
		log.Info("shipping decisions to Kinesis", "stream", k.Stream, "region", acfg.Region, "spill_dir", k.SpillDir)
	}
	if len(writers) == 0 {
		return out, nil
	}
	w := writers[0]
	if len(writers) > 1 {
		w = decisions.Tee(writers...)
	}
	// Privacy applies to everything recorded, log and file alike.
	em := decisions.NewEmitter(decisions.Private(privacy, w), decisions.EmitterOptions{Queue: cfg.Edge.DecisionQueue, Node: cfg.Edge.Node,
		OnError: func(err error) { log.Error("decisions", "err", err) }})
	out.emitter = em
	out.close = func(ctx context.Context) error {
		errs := []error{em.Close(ctx)}
		for _, c := range closers {
			errs = append(errs, c(ctx))
		}
		return errors.Join(errs...)
	}
	return out, nil
}

// decisionSinks are the destinations of decisions openDecisionSinks
// opened, behind one emitter.
type decisionSinks struct {
	emitter *decisions.Emitter // nil: decisions are not recorded
	kinesis *dkinesis.Sink     // nil without decisions.kinesis.stream
	spill   *dkinesis.Spill
	close   func(context.Context) error // closes the emitter, then the sinks
}

// newPrivacy builds the configured privacy treatment; the HMAC key comes
// from the environment, base64-encoded.
func newPrivacy(p config.Privacy, getenv func(string) string) (*decisions.Privacy, error) {
	var key []byte
	if p.Addresses == decisions.HMAC || p.Users == decisions.HMAC {
		raw := getenv(p.KeyEnv)
		if raw == "" {
			return nil, fmt.Errorf("decisions.privacy: hmac needs a key in %s (base64, 32 bytes or more)", p.KeyEnv)
		}
		k, err := base64.StdEncoding.DecodeString(raw)
		if err != nil {
			return nil, fmt.Errorf("decisions.privacy: %s: not base64: %w", p.KeyEnv, err)
		}
		key = k
	}
	return decisions.NewPrivacy(p.Addresses, p.Users, key)
}

// logOptions turns the decisions section into the log's options.
func logOptions(d config.Decisions, report func(seglog.Problem)) seglog.Options {
	mode := seglog.SyncInterval
	switch d.Sync {
	case "batch":
		mode = seglog.SyncEveryBatch
	case "never":
		mode = seglog.SyncNever
	}
	return seglog.Options{
		SegmentBytes: d.SegmentBytes, SegmentAge: d.SegmentAge,
		Sync:      seglog.SyncPolicy{Mode: mode, Interval: d.SyncInterval},
		RetainAge: d.RetainAge, RetainBytes: d.RetainBytes, Report: report,
	}
}
