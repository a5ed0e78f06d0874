package assemble

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/dashboards"
	"github.com/ratewarden/ratewarden/edge/lists"
	"github.com/ratewarden/ratewarden/internal/dirlock"
)

// DefaultServeLog is the decision log `ratewarden serve` writes when
// decisions.dir is unset: serve always records, since its aggregator and
// dashboard read the log.
const DefaultServeLog = "decision-log"

// ServeAddrs are the addresses `ratewarden serve` listens on.
type ServeAddrs struct {
	Edge      string
	Dashboard string // "" when serve.dashboard.listen is ""
}

// ServeOptions are what `ratewarden serve` adds to the configuration.
type ServeOptions struct {
	Options
	// Ready, if set, is called once every listener is up.
	Ready func(ServeAddrs)
	// Sinks are more aggregator sinks beside the partials and the
	// dashboard: an EMF sink, or the alert detectors.
	Sinks []aggregator.Sink
	// Alerts, if set, is told of every alert and feedback action of the
	// alerts runner serve runs when the configuration has an alerts or a
	// feedback section.
	Alerts AlertWatcher
	// Partials, if set, is where the aggregator stores its partials and
	// the dashboard reads them (a Partials spec's store) instead of the
	// directory serve.partials_dir.
	Partials PartialsStore
	// Aggregator are the aggregator's settings beyond the configuration
	// (nil: DefaultAggregatorOptions): its idle time, max skew, max keys,
	// EMF sink and namespace. The window, lateness and top-K are the
	// configuration's serve.window, serve.lateness and serve.top_k, and
	// the configured rules (config.Config.RuleIDs) get EMF documents of
	// their own.
	Aggregator *AggregatorOptions
	// Stdout is where the EMF sink "stdout" writes; default os.Stdout.
	Stdout io.Writer
	Now    func() time.Time // default time.Now
	// LogPoll is how often the aggregator looks at the decision log's
	// files for appends (seglog.Options.FollowPoll); default 50 ms. It
	// reads through the edge's own Log, whose appends wake it at once.
	LogPoll time.Duration
	// Tick is how often the aggregator, at the end of the log, advances an
	// idle watermark (aggregator.LogOptions.Tick), and looks at the files
	// again; default 200 ms.
	Tick time.Duration
	// CaughtUp, if set, is called each time the aggregator has read the
	// decision log to the end the edge had written and delivered every
	// window that closed to the sinks, the alerts runner and its policies
	// included: after a batch, and every Tick at the log's end. The demo's
	// story clock waits for it. It must not block.
	CaughtUp func()
}

// ServeAggregator returns the options of serve's aggregator: o (nil:
// DefaultAggregatorOptions) with the window, lateness and top-K of the
// configuration's serve section, its rules (config.Config.RuleIDs) and
// the prefix its edge counts an IPv6 client under (identity.ipv6_prefix).
func ServeAggregator(cfg *config.Config, o *AggregatorOptions) AggregatorOptions {
	ao := DefaultAggregatorOptions()
	if o != nil {
		ao = *o
	}
	ao.Window, ao.Lateness, ao.TopK, ao.Rules = cfg.Serve.Window, cfg.Serve.Lateness, cfg.Serve.TopK, cfg.RuleIDs()
	ao.IPv6Prefix = cfg.Identity.IPv6Prefix
	return ao
}

// Serve runs, in one process and until ctx is done, what `ratewarden
// edge` and `ratewarden aggregate --decisions-dir` run apart: the edge
// (NewEdge, StartEdgeServer) writing the decision log, the aggregator
// following that log (aggregator.RunLog, with the partials in
// serve.partials_dir and its metrics as AggregatorMetrics serves them) and
// the live dashboard (dashboards.Live) reading the aggregator's outputs.
// The edge and the aggregator share one seglog.Log of the decision log, so
// each append the edge makes wakes the aggregator at once (it lingers
// then, as `aggregate` does, for more events to share the batch).
// When the configuration has an alerts or a feedback section, the alerts
// runner and the feedback policies (NewAlerts, as `aggregate --alerts`
// runs them) are one more sink of the aggregator, their state in
// serve.state_dir; their JSON lines go to alerts.sinks.file, by default
// serve.dashboard.alerts_file or else alerts.jsonl in serve.state_dir,
// which the dashboard then shows; their metrics join the aggregator's on
// the dashboard's /metrics. The edge reads a list again as soon as a
// policy has written it, not at its next lists.refresh. The dashboard's lists view reads the list
// store the lists section names (OpenLists), the challenge list included.
// It holds serve.state_dir while it runs (aggregator.LockStateDir), and
// refuses to start on one another process holds. A start that fails (a
// port in use, say) removes what it made (a missing decision log, state
// or partials directory, alerts or EMF file, with the parents it made)
// and nothing that was there before. Shutting down, it
// drains the edge, flushes its decisions to the log, lets the aggregator
// read them to the log's end and emit every open window, closes the
// alerts' sinks (the webhook's queue flushed), then stops the dashboard
// and closes the log.
func Serve(ctx context.Context, cfg *config.Config, o ServeOptions) (err error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	o.Log = log
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	if cfg.Decisions.Dir == "" {
		cfg.Decisions.Dir = DefaultServeLog
	}
	sv := cfg.Serve
	if dirlock.Same(sv.StateDir, cfg.Decisions.Dir) {
		// Each is locked by its owner, both in this process: the second
		// lock would be refused as if another serve held it.
		return fmt.Errorf("serve: the aggregator's state directory (serve.state_dir, --state-dir) %s is the decision log's (decisions.dir, --decisions-dir) %s: "+
			"give each a directory of its own", sv.StateDir, cfg.Decisions.Dir)
	}
	// A start that fails leaves nothing it made (StartUndo).
	emfFile, _ := strings.CutPrefix(cmp.Or(o.Aggregator, &AggregatorOptions{}).EMF, "file:")
	undo := NewStartUndo(append(EdgePaths(cfg), sv.StateDir, sv.PartialsDir, cfg.Alerts.Sinks.File, sv.Dashboard.AlertsFile, emfFile)...)
	defer func() { undo.Undo(err) }()
	token := ""
	if sv.Dashboard.TokenEnv != "" {
		token = getenv(sv.Dashboard.TokenEnv)
	}
	// The dashboard's address first: a refusal or a port in use stops
	// serve before anything else starts.
	var dashLn net.Listener
	if sv.Dashboard.Listen != "" {
		if err := dashboards.CheckListen(sv.Dashboard.Listen, token != "", sv.Dashboard.AllowRemote); err != nil {
			return err
		}
		if dashLn, err = net.Listen("tcp", sv.Dashboard.Listen); err != nil {
			return fmt.Errorf("dashboard listen: %w", err)
		}
		defer dashLn.Close() // after a failed start; Serve closes it otherwise
	}
	// The aggregator and the alerts own the state directory: a second
	// serve (or aggregate) there would overwrite their states. Released
	// last, once everything that saves there has stopped.
	stateLock, err := aggregator.LockStateDir(sv.StateDir)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer stateLock.Close()
	toEdge := &edgeLists{log: log}
	al, err := serveAlerts(ctx, cfg, &sv, o, toEdge)
	if err != nil {
		return err
	}
	var extraMetrics []func(metric.Meter) error
	alertsClosed := al == nil
	closeAlerts := func() {
		if alertsClosed {
			return
		}
		alertsClosed = true
		actx, cancel := context.WithTimeout(context.Background(), cfg.Edge.ShutdownGrace)
		defer cancel()
		if cerr := al.Close(actx); cerr != nil {
			log.Error("alerts: close", "err", cerr)
		}
		var b strings.Builder
		al.Report(&b, "alerts")
		for line := range strings.Lines(b.String()) {
			log.Info(strings.TrimSpace(line))
		}
	}
	defer closeAlerts()
	ao := ServeAggregator(cfg, o.Aggregator)
	rollup, err := ao.Rollup()
	if err != nil {
		return fmt.Errorf("serve: aggregator: %w", err)
	}
	opened, err := ao.OpenSinks(ctx, cmp.Or[io.Writer](o.Stdout, os.Stdout), "log")
	defer opened.Close(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	if opened.EMFSink != nil {
		opened.EMFSink.Warn = func(reason string, err error) {
			log.Warn("emf documents rejected; counted, not written, and not said again", "reason", reason, "first", err.Error())
		}
	}
	o.Sinks = append(o.Sinks[:len(o.Sinks):len(o.Sinks)], opened.Sinks...)
	if al != nil {
		o.Sinks = append(o.Sinks[:len(o.Sinks):len(o.Sinks)], al.Runner)
		extraMetrics = append(extraMetrics, al.RegisterMetrics)
	}
	var latest atomic.Pointer[aggregator.RunStats]
	metrics, err := AggregatorMetrics(func() aggregator.RunStats {
		if p := latest.Load(); p != nil {
			return *p
		}
		return aggregator.RunStats{}
	}, opened.EMF, now, extraMetrics...)
	if err != nil {
		return err
	}

	// The dashboard's index starts with what the partials hold.
	var partials PartialsStore = &aggregator.PartialsDir{Dir: sv.PartialsDir}
	if o.Partials != nil {
		partials = o.Partials
	}
	index := dashboards.NewIndex(sv.Window, sv.Dashboard.Retain)
	problems, err := index.Load(ctx, partials, now().Add(-sv.Dashboard.Retain-sv.Window), now().Add(24*time.Hour))
	if err != nil {
		return err
	}
	for _, p := range problems {
		log.Warn("partial skipped", "path", p.Path, "err", p.Err)
	}

	// The log is opened here, not by the edge: the aggregator reads
	// through the same Log, and it stays open until the aggregator has
	// read it to its end (a follower of a closed Log stops there).
	dlog, err := openDecisionLog(cfg.Decisions, log, o.LogPoll)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := dlog.Close(); cerr != nil {
			log.Error("decision log: close", "err", cerr)
		}
	}()
	o.DecisionLog = dlog
	e, err := NewEdge(ctx, cfg, o.Options)
	if err != nil {
		return err
	}
	toEdge.edge = e // before the aggregator, which runs the policies, starts
	edgeClosed := false
	closeEdge := func() {
		if edgeClosed {
			return
		}
		edgeClosed = true
		sctx, cancel := context.WithTimeout(context.Background(), cfg.Edge.ShutdownGrace)
		defer cancel()
		if cerr := e.Close(sctx); cerr != nil {
			log.Error("shutdown", "err", cerr)
		}
	}
	defer closeEdge()

	// The aggregator, as `aggregate --decisions-dir` runs it.
	progress := make(chan aggregator.RunStats, 1)
	aggCtx, stopAgg := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAgg()
	aggDone := make(chan error, 1)
	sinks := append([]aggregator.Sink{partials, index}, o.Sinks...)
	// What the aggregator cannot read of the log goes to the log, as
	// `aggregate` prints it; its position is the log's consumer offset
	// "serve", which retention reports against.
	aggProblems := NewProblemLog(func(err error) { log.Error("aggregator: skipped", "problem", err.Error()) }, now)
	go func() {
		st, err := aggregator.RunLog(aggCtx, aggregator.LogOptions{
			Dir: cfg.Decisions.Dir, StateDir: sv.StateDir, Follow: true, Now: now,
			Log: dlog, Tick: o.Tick,
			Problem: aggProblems.Problem, Consumer: "serve",
			Rollup: rollup,
			Sinks:  sinks,
			Progress: func(s aggregator.RunStats) {
				latest.Store(&s)
				select {
				case <-progress:
				default:
				}
				progress <- s
				if o.CaughtUp != nil && s.Next >= dlog.NextOffset() {
					o.CaughtUp()
				}
			},
		})
		latest.Store(&st)
		aggDone <- err
	}()

	srv, err := StartEdgeServer(cfg, e, log)
	if err != nil {
		stopAgg()
		<-aggDone
		return err
	}
	addrs := ServeAddrs{Edge: srv.Addr().String()}

	var dash *http.Server
	dashErr := make(chan error, 1)
	if dashLn != nil {
		var lists dashboards.ListSource
		if len(ListFiles(cfg.Lists)) > 0 || cfg.Lists.Table != "" {
			store, names, _, err := OpenLists(ctx, cfg, now)
			if err != nil {
				stopAgg()
				<-aggDone
				srv.Close()
				return err
			}
			lists = storeLists{store, names}
		}
		live := dashboards.Live(dashboards.LiveOptions{Index: index, Token: token, AlertsFile: sv.Dashboard.AlertsFile, Lists: lists, Now: now,
			Metrics: metrics,
			Run: func() (aggregator.RunStats, bool) {
				p := latest.Load()
				if p == nil {
					return aggregator.RunStats{}, false
				}
				return *p, true
			}})
		addrs.Dashboard = dashLn.Addr().String()
		dash = &http.Server{Handler: live, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
		go func() { dashErr <- dash.Serve(dashLn) }()
		log.Info("dashboard listening", "addr", addrs.Dashboard, "url", "http://"+addrs.Dashboard+"/", "token", token != "")
	}
	undo.Started()
	if o.Ready != nil {
		o.Ready(addrs)
	}

	var runErr, aggErr error
	aggStopped := false
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-srv.Err():
		runErr = fmt.Errorf("serve: %w", err)
	case err := <-dashErr:
		runErr = fmt.Errorf("dashboard: %w", err)
	case err := <-aggDone:
		aggStopped = true
		runErr = fmt.Errorf("aggregator stopped: %w", err)
	}
	// The edge first: its last decisions reach the log.
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Edge.ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	closeEdge()
	// Then the aggregator reads them, and emits every open window.
	if !aggStopped {
		if runErr == nil {
			catchUp(sctx, dlog.NextOffset(), progress, aggDone)
		}
		stopAgg()
		if aggErr = <-aggDone; errors.Is(aggErr, context.Canceled) {
			aggErr = nil
		}
	}
	// Every window has reached the alerts: their sinks flush.
	closeAlerts()
	if st := latest.Load(); st != nil {
		args := []any{"events", st.Rollup.Events, "windows", st.Rollup.Windows, "outputs", st.Outputs, "next_offset", st.Next}
		if opened.EMFSink != nil {
			args = append(args, "emf_rejected", opened.EMFRejected().Total())
		}
		log.Info("aggregator stopped", args...)
	}
	if dash != nil {
		// The page's requests are short; whatever is left of the grace
		// may be spent, so a second of its own.
		dctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		dash.Shutdown(dctx)
	}
	return errors.Join(runErr, aggErr)
}

// catchUp waits until the aggregator has read the log to its end, the
// log's end once the edge has flushed its decisions: until the position
// of its latest progress report is there. It gives up when ctx is done or
// the run stopped. What it does not wait for stays in the log, and the
// next start reads it. Each report replaces the one still on progress,
// and only catchUp takes them: the first it receives is the latest.
func catchUp(ctx context.Context, end uint64, progress <-chan aggregator.RunStats, done chan error) {
	for {
		select {
		case s := <-progress:
			if s.Next >= end {
				return
			}
		case err := <-done:
			done <- err
			return
		case <-ctx.Done():
			return
		}
	}
}

// storeLists reads the feedback lists for the dashboard from their store
// (the list files or the lists table), at most maxListEntries of each.
type storeLists struct {
	store interface {
		Entries(ctx context.Context, list string) ([]lists.Entry, error)
	}
	names []string
}

var _ dashboards.ListSource = storeLists{}

// maxListEntries bounds what the dashboard shows of one list.
const maxListEntries = 10_000

func (s storeLists) Entries(ctx context.Context) ([]dashboards.ListEntry, error) {
	var out []dashboards.ListEntry
	for _, name := range s.names {
		es, err := s.store.Entries(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("%s list: %w", name, err)
		}
		for _, e := range es[:min(len(es), maxListEntries)] {
			out = append(out, dashboards.ListEntry{List: name, Target: e.Target, Expires: e.Expires, Reason: e.Reason,
				By: e.By, Added: e.Added, Pending: e.Pending})
		}
	}
	return out, nil
}

// serveAlerts assembles the alerts runner when cfg has an alerts or a
// feedback section (nil otherwise), defaulting where its JSON lines go
// and what the dashboard sv shows. Policies that write (feedback.dry_run
// false) write through toEdge.
func serveAlerts(ctx context.Context, cfg *config.Config, sv *config.Serve, o ServeOptions, toEdge *edgeLists) (*Alerts, error) {
	if !cfg.Has("alerts") && !cfg.Has("feedback") {
		return nil, nil
	}
	s := &cfg.Alerts.Sinks
	if s.File == "" {
		s.File = cmp.Or(sv.Dashboard.AlertsFile, filepath.Join(sv.StateDir, "alerts.jsonl"))
	}
	if sv.Dashboard.AlertsFile == "" && s.File != "-" {
		sv.Dashboard.AlertsFile = s.File
	}
	dirs := []string{sv.StateDir}
	if s.File != "-" {
		dirs = append(dirs, filepath.Dir(s.File))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("alerts: %w", err)
		}
	}
	ao := AlertsOptions{Window: sv.Window, StateDir: sv.StateDir, Log: o.Log, Watch: o.Alerts}
	if len(cfg.Feedback.Policies) > 0 && !*cfg.Feedback.DryRun {
		w, err := FeedbackLists(ctx, cfg)
		if err != nil {
			return nil, err
		}
		toEdge.ListWriter = w
		ao.Lists = toEdge
	}
	return NewAlerts(ctx, cfg, ao)
}

// edgeLists is the list store serve's feedback policies write: after each
// change it has serve's own edge read that list again at once
// (lists.Watcher.Reload, which records the change as a refresh does)
// rather than at its next lists.refresh, so that in one process the loop
// closes in the aggregator's pass that raised the alert. The policies run
// in the aggregator's goroutine, so a lists table costs that goroutine a
// read after each write. Set edge before the aggregator starts.
type edgeLists struct {
	alerts.ListWriter
	edge *Edge
	log  *slog.Logger
}

var _ alerts.ListWriter = (*edgeLists)(nil)

// Put writes e, then has the edge read its list.
func (l *edgeLists) Put(ctx context.Context, e lists.Entry) error {
	if err := l.ListWriter.Put(ctx, e); err != nil {
		return err
	}
	l.reload(e.List)
	return nil
}

// Remove removes the entry, then has the edge read its list.
func (l *edgeLists) Remove(ctx context.Context, list, target, by, reason string) error {
	if err := l.ListWriter.Remove(ctx, list, target, by, reason); err != nil {
		return err
	}
	l.reload(list)
	return nil
}

// reload has the edge read list, if it reads it (the challenge list is
// not read with challenges off); a failed read leaves it to the next
// refresh.
func (l *edgeLists) reload(list string) {
	if l.edge == nil || l.edge.Lists[list] == nil {
		return
	}
	if err := l.edge.Lists[list].Reload(); err != nil {
		l.log.Error("list reload after a policy's change failed; the edge reads it at its next refresh", "list", list, "err", err)
	}
}
