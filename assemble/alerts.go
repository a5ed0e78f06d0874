package assemble

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/edge/lists"
	emf "github.com/ratewarden/ratewarden/embedded-metrics"
)

// AlertsOptions are what a command adds to the configuration's alerts and
// feedback sections.
type AlertsOptions struct {
	Window   time.Duration // the aggregator's window length; required
	StateDir string        // where the engine's state is kept; required
	Stdout   io.Writer     // JSON lines when alerts.sinks.file is "-" or no sink is set
	Log      *slog.Logger  // sink failures; default: discard
	// Lists writes the feedback policies' entries; nil takes the store
	// lists section names (FeedbackLists).
	Lists alerts.ListWriter
	// Archive accepts EMF documents stamped any time (windows read back
	// from stored partials into a file).
	Archive bool
	// Watch, if set, is told of every alert and action as well, after the
	// configured sinks (the demo prints them).
	Watch AlertWatcher
}

// AlertWatcher is told of alerts and feedback actions as they are
// recorded. It must not block.
type AlertWatcher interface {
	Alert(ctx context.Context, a alerts.Alert) error
	Action(ctx context.Context, a alerts.Action) error
}

// watchSink is an AlertWatcher as an alerts.Sink.
type watchSink struct{ w AlertWatcher }

func (s watchSink) Alert(ctx context.Context, a alerts.Alert) error { return s.w.Alert(ctx, a) }
func (watchSink) Close(context.Context) error                       { return nil }

// teeActions records each action in the log, then tells the watcher.
type teeActions struct {
	log   alerts.ActionLog
	watch AlertWatcher
}

func (t teeActions) Action(ctx context.Context, a alerts.Action) error {
	return errors.Join(t.log.Action(ctx, a), t.watch.Action(ctx, a))
}

// Alerts is the alerts runner of a configuration with everything it
// opened: its sinks, the allow list the policies consult and the file of
// actions. Close flushes and closes them.
type Alerts struct {
	Runner  *alerts.Runner
	Webhook *alerts.Webhook // nil without alerts.sinks.webhook.url
	EMF     *emf.Writer     // nil without alerts.sinks.emf
	closers []func(context.Context) error
}

// NewAlerts assembles the alerts runner cfg describes: detectors with the
// tiers' limits, the JSON-lines, webhook and EMF sinks, and the feedback
// policies (dry run unless feedback.dry_run is false). On error, whatever
// was opened is closed again.
func NewAlerts(ctx context.Context, cfg *config.Config, o AlertsOptions) (_ *Alerts, err error) {
	if o.StateDir == "" {
		return nil, errors.New("alerts: a state directory is required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	a := &Alerts{}
	defer func() {
		if err != nil {
			a.Close(context.WithoutCancel(ctx))
		}
	}()
	s := cfg.Alerts.Sinks
	var sinks []alerts.Sink
	var jl *alerts.JSONLines
	switch {
	case AlertsToStdout(cfg):
		jl = alerts.NewJSONLines(o.Stdout, nil)
	case s.File != "":
		f, err := os.OpenFile(s.File, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("alerts: %w", err)
		}
		jl = alerts.NewJSONLines(f, f)
	}
	if jl != nil {
		sinks = append(sinks, jl)
	}
	if w := s.Webhook; w.URL != "" {
		a.Webhook = alerts.NewWebhook(alerts.WebhookOptions{URL: w.URL, Queue: w.Queue, Timeout: w.Timeout,
			Attempts: w.Attempts, Backoff: w.Backoff, MaxDelay: w.MaxDelay})
		sinks = append(sinks, a.Webhook)
	}
	if s.EMF != "" {
		sink, err := EMFSink(ctx, s.EMF, o.Stdout, 0)
		if err != nil {
			return nil, fmt.Errorf("alerts: %w", err)
		}
		w, err := emf.NewWriter(emf.WriterOptions{IgnoreTimestampWindow: o.Archive}, sink)
		if err != nil {
			return nil, fmt.Errorf("alerts: %w", err)
		}
		a.EMF = w
		a.closers = append(a.closers, w.Close)
		sinks = append(sinks, &alerts.EMF{W: w})
	}
	var actions alerts.ActionLog = jl
	if path := cfg.Feedback.Actions; path != "" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("feedback: %w", err)
		}
		log := alerts.NewJSONLines(f, f)
		a.closers = append(a.closers, log.Close)
		actions = log
	}
	actions = actionsOrNil(actions)
	if o.Watch != nil {
		sinks = append(sinks, watchSink{o.Watch})
		if actions == nil {
			actions = o.Watch
		} else {
			actions = teeActions{actions, o.Watch}
		}
	}
	var policies *alerts.Policies
	if len(cfg.Feedback.Policies) > 0 {
		if policies, err = a.policies(ctx, cfg, o); err != nil {
			return nil, err
		}
	}
	a.closers = append(a.closers, func(ctx context.Context) error {
		if a.Runner != nil {
			return nil // the runner closes its sinks
		}
		var errs []error
		for _, s := range sinks {
			errs = append(errs, s.Close(ctx))
		}
		return errors.Join(errs...)
	})
	a.Runner, err = alerts.NewRunner(alerts.RunnerOptions{
		Engine: alerts.Options{Config: cfg.Alerts, Window: o.Window, Limits: alerts.RuleLimits(cfg),
			IPv6Prefix: cfg.Identity.IPv6Prefix},
		StateDir: o.StateDir, Sinks: sinks, Policies: policies, Actions: actionsOrNil(actions),
		Report: func(err error) { o.Log.Warn("alert sink failed", "error", err) },
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// AlertsToStdout reports whether the alerts runner of cfg writes its JSON
// lines (alerts, and actions without feedback.actions) to standard
// output: alerts.sinks.file is "-", or no sink is set. A command that
// writes something else there (aggregate --emf stdout) refuses that
// configuration, since the two would interleave line by line.
func AlertsToStdout(cfg *config.Config) bool {
	s := cfg.Alerts.Sinks
	return s.File == "-" || s.File == "" && s.Webhook.URL == "" && s.EMF == ""
}

// actionsOrNil keeps a nil *JSONLines from becoming a non-nil interface.
func actionsOrNil(l alerts.ActionLog) alerts.ActionLog {
	if j, ok := l.(*alerts.JSONLines); ok && j == nil {
		return nil
	}
	return l
}

// policies assembles the feedback policies: the list store (unless dry
// run) and the allow list. The policies record no feedback events: the
// edge records each list change it reads (package lists).
func (a *Alerts) policies(ctx context.Context, cfg *config.Config, o AlertsOptions) (*alerts.Policies, error) {
	f := cfg.Feedback
	var w alerts.ListWriter
	if !*f.DryRun {
		w = o.Lists
		if w == nil {
			var err error
			if w, err = FeedbackLists(ctx, cfg); err != nil {
				return nil, err
			}
		}
	}
	var allow alerts.AllowList
	if path := cfg.Lists.AllowFile; path != "" {
		// Read as the edge reads it, so that a client it lets through
		// unlimited is one the policies leave alone.
		watch, err := lists.WatchSource(lists.NewFileSource(path), lists.WatchOptions{List: lists.Allow, Every: cfg.Lists.Refresh,
			Report: func(err error) { o.Log.Warn("allow list", "error", err) }, NAT64: cfg.Identity.NAT64()})
		if err != nil {
			return nil, fmt.Errorf("feedback: %w", err)
		}
		a.closers = append(a.closers, watch.Close)
		allow = watch
	}
	paying := map[string]bool{}
	for _, t := range cfg.Alerts.PayingTiers {
		paying[t] = true
	}
	return alerts.NewPolicies(f, w, allow, func(t string) bool { return paying[t] }, cfg.Identity.IPv6Prefix), nil
}

// FeedbackLists returns the store of the lists the lists section names
// (OpenLists: lists.table or the list files), which the feedback policies
// write. It refuses a policy whose list has no store, naming the policy's
// key: the configuration's own validation reports the same with its file
// and line.
func FeedbackLists(ctx context.Context, cfg *config.Config) (alerts.ListWriter, error) {
	files := ListFiles(cfg.Lists)
	for i, p := range cfg.Feedback.Policies {
		if _, ok := files[p.Action]; !ok && cfg.Lists.Table == "" {
			return nil, fmt.Errorf("feedback.policies[%d].action: %q names a list with no store, and feedback.dry_run is false; set lists.%s_file or lists.table, or keep feedback.dry_run: true",
				i, p.Action, p.Action)
		}
	}
	store, _, _, err := OpenLists(ctx, cfg, nil)
	if err != nil {
		return nil, fmt.Errorf("feedback: %w", err)
	}
	return store, nil
}

// Report writes a line of what the runner did in this run, one of its
// state (the counts since the state began, across runs, and the alerts
// firing now), and one of the webhook's deliveries (drops included) when
// there is a webhook. The first two are kept apart because a rerun that
// raised nothing would otherwise repeat the raised alerts of the runs
// before it.
func (a *Alerts) Report(w io.Writer, prefix string) {
	st := a.Runner.Stats()
	run, total := st.Run, st.Total
	fmt.Fprintf(w, "%s: this run: windows %d (empty %d, seen before %d, corrections left out %d), raised %d, resolved %d, suppressed %d, dropped at max_open: alerts %d, cooldowns %d, series evicted at max_series %d, actions %d (applied %d), sink errors %d\n",
		prefix, run.Windows, run.Empty, run.Skipped, st.Corrections, run.Firing, run.Resolved,
		run.Suppressed, run.Dropped, run.CooldownsDropped, run.Evicted, st.Actions, st.Applied, st.SinkErrors)
	fmt.Fprintf(w, "%s: state: windows %d (empty %d), raised %d, resolved %d, suppressed %d, dropped at max_open: alerts %d, cooldowns %d, series evicted at max_series %d, open %d\n",
		prefix, total.Windows, total.Empty, total.Firing, total.Resolved, total.Suppressed, total.Dropped, total.CooldownsDropped, total.Evicted, st.Open)
	if a.Webhook != nil {
		h := a.Webhook.Stats()
		fmt.Fprintf(w, "%s: webhook sent %d, retries %d, failed %d, dropped %d\n", prefix, h.Sent, h.Retries, h.Failed, h.Dropped)
	}
}

// RegisterMetrics makes the alerts' instruments on meter: alerts raised,
// resolved, suppressed and dropped at alerts.max_open, cooldowns dropped, series evicted at alerts.max_series, actions, sink errors, and the webhook's sent,
// failed and dropped alerts.
func (a *Alerts) RegisterMetrics(meter metric.Meter) error {
	type snapshot struct {
		run  alerts.RunnerStats
		hook alerts.WebhookStats
	}
	take := func() snapshot {
		s := snapshot{run: a.Runner.Stats()}
		if a.Webhook != nil {
			s.hook = a.Webhook.Stats()
		}
		return s
	}
	return registerObservables(meter, take, []observable[snapshot]{
		{"ratewarden.alerts.windows", "Windows the detectors ran.", "{window}", false, func(s snapshot) int64 { return int64(s.run.Total.Windows) }},
		{"ratewarden.alerts.raised", "Alerts raised.", "{alert}", false, func(s snapshot) int64 { return int64(s.run.Total.Firing) }},
		{"ratewarden.alerts.resolved", "Alerts resolved.", "{alert}", false, func(s snapshot) int64 { return int64(s.run.Total.Resolved) }},
		{"ratewarden.alerts.suppressed", "Alerts not raised during their cooldown.", "{alert}", false, func(s snapshot) int64 { return int64(s.run.Total.Suppressed) }},
		{"ratewarden.alerts.dropped", "Alerts not raised: alerts.max_open alerts were open.", "{alert}", false, func(s snapshot) int64 { return int64(s.run.Total.Dropped) }},
		{"ratewarden.alerts.cooldowns.dropped", "Cooldowns dropped past alerts.max_open, those ending soonest first.", "{alert}", false, func(s snapshot) int64 { return int64(s.run.Total.CooldownsDropped) }},
		{"ratewarden.alerts.series.evicted", "Series dropped past alerts.max_series, the least recently non-zero first: their history starts again.", "{series}", false, func(s snapshot) int64 { return int64(s.run.Total.Evicted) }},
		{"ratewarden.alerts.actions", "Feedback actions recorded.", "{action}", false, func(s snapshot) int64 { return int64(s.run.Actions) }},
		{"ratewarden.alerts.actions.applied", "Feedback actions applied to a list.", "{action}", false, func(s snapshot) int64 { return int64(s.run.Applied) }},
		{"ratewarden.alerts.sink.errors", "Alerts a sink failed to take.", "{alert}", false, func(s snapshot) int64 { return int64(s.run.SinkErrors) }},
		{"ratewarden.alerts.webhook.sent", "Alerts the webhook delivered.", "{alert}", false, func(s snapshot) int64 { return int64(s.hook.Sent) }},
		{"ratewarden.alerts.webhook.failed", "Alerts the webhook gave up on.", "{alert}", false, func(s snapshot) int64 { return int64(s.hook.Failed) }},
		{"ratewarden.alerts.webhook.dropped", "Alerts dropped: the webhook's queue was full.", "{alert}", false, func(s snapshot) int64 { return int64(s.hook.Dropped) }},
	})
}

// Close closes the runner's sinks, then what the assembly opened.
func (a *Alerts) Close(ctx context.Context) error {
	var errs []error
	if a.Runner != nil {
		errs = append(errs, a.Runner.Close(ctx))
	}
	for i := len(a.closers) - 1; i >= 0; i-- {
		errs = append(errs, a.closers[i](ctx))
	}
	return errors.Join(errs...)
}
