package main

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
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/report"
	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	dkinesis "github.com/ratewarden/ratewarden/decisions/kinesis"
	"github.com/ratewarden/ratewarden/decisions/seglog"
	emf "github.com/ratewarden/ratewarden/embedded-metrics"
	"github.com/ratewarden/ratewarden/internal/dirlock"
)

func runAggregate(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("aggregate", "aggregate (--decisions-dir DIR --state-dir DIR | --kinesis-stream NAME (--state-dir DIR | --state-table NAME) | --stdin) [--partials dir:PATH|dynamodb:TABLE] [--emf SINK] [flags]", stderr)
	dir := fs.String("decisions-dir", "", "the decision log `directory` to read (and follow)")
	stream := fs.String("kinesis-stream", "", "read the Kinesis stream `name` instead, sharing its shards with the other aggregators of --consumer-group (AWS SDK credentials, region and endpoints)")
	leasesTable := fs.String("leases-table", defaultLeasesTable, "with --kinesis-stream: the lease and checkpoint table `name` (aws init creates it)")
	group := fs.String("consumer-group", "ratewarden-aggregate", "with --kinesis-stream: the aggregators sharing the stream's shards (`name`)")
	leaseDuration := fs.Duration("lease-duration", 10*time.Second, "with --kinesis-stream: how long a shard whose lease stops moving stays with its holder before another aggregator takes it (`duration`, 100ms or more)")
	poll := fs.Duration("poll", dkinesis.DefaultPoll, "with --kinesis-stream: how long to wait after a read that found a shard caught up (`duration`, 200ms to 1m); every read counts against the shard's five a second, shared by all its consumers")
	stdinSrc := fs.Bool("stdin", false, "read decisions as JSON lines from standard input instead, a live source (no state: closed windows leave as the watermark passes them, after --idle without input it follows the clock, and the open windows leave at the end of the input)")
	stateDir := fs.String("state-dir", "", "where the aggregator keeps each partition's position and open windows (`directory`); with --kinesis-stream every aggregator of the group must see the same one")
	stateTable := fs.String("state-table", "", "with --kinesis-stream: keep the shards' states in the DynamoDB table `name` instead (aws init creates "+defaultStateTable+"), for aggregators on several machines")
	af := rollupFlags(fs)
	fs.StringVar(&af.o.Partials, "partials", "", "store each window's partial aggregates in `store`: "+assemble.PartialsSpecs+" (aws init creates "+defaultPartialsTable+")")
	fs.StringVar(&af.o.EMF, "emf", "", "write each window's CloudWatch EMF documents to `sink`: "+assemble.EMFSinkSpecs)
	af.emfTimeoutFlag(fs)
	af.namespaceFlag(fs)
	af.ruleBudgetFlag(fs)
	af.idleFlag(fs)
	af.ruleFlags(fs)
	noFollow := fs.Bool("no-follow", false, "stop at the end of the log instead of waiting for new events")
	linger := fs.Duration("linger", decisionlog.DefaultLinger, "with --decisions-dir, following: how long a batch of the log's tail waits for more events before it is rolled up and the state saved (`duration`, 1ms to 10s)")
	admin := fs.String("admin-listen", "127.0.0.1:9091", "serve /metrics and /healthz on `address`; \"off\" to disable")
	alertsCfg := fs.String("alerts", "", "run the anomaly detectors and feedback policies of the configuration `file` (its alerts and feedback sections) over every window, keeping their state in --state-dir; the local log only (with a Kinesis stream, run `ratewarden alerts` over the merged partials)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	if err := (aggregateSource{fs}).check(); err != nil {
		if err == errUsage {
			fs.Usage()
		}
		return err
	}
	source := "log"
	if *stdinSrc {
		source = "stdin"
	}
	if *stream != "" {
		source = *stream
	}
	ao, ro, err := af.options()
	if err != nil {
		return err
	}
	if *linger < time.Millisecond || *linger > 10*time.Second {
		return badFlag(fmt.Errorf("aggregate: --linger %v: want 1ms to 10s", *linger))
	}
	if *poll < 200*time.Millisecond || *poll > time.Minute {
		return badFlag(fmt.Errorf("aggregate: --poll %v: want 200ms to 1m", *poll))
	}
	if *admin != "off" && *admin != "" {
		if err := config.CheckListen(*admin); err != nil {
			return badFlag(fmt.Errorf("aggregate: --admin-listen %q: %w", *admin, err))
		}
	}
	// The source would take an empty group or a zero lease for its own
	// defaults, not the flags': another group, which reads the stream again.
	if *group == "" {
		return badFlag(errors.New(`aggregate: --consumer-group "": want the name of the group of aggregators sharing the stream's shards`))
	}
	if *leaseDuration < 100*time.Millisecond {
		return badFlag(fmt.Errorf("aggregate: --lease-duration %v: want 100ms or more", *leaseDuration))
	}
	if af.o.Partials == "" && af.o.EMF == "" && *alertsCfg == "" {
		return badFlag(errors.New("aggregate: nothing to write: give --partials, --emf, --alerts or several"))
	}
	// The alerts' configuration is read before any sink is opened: what
	// it asks of stdout may rule out --emf stdout.
	var alertsConf *config.Config
	if *alertsCfg != "" { // with --decisions-dir and --state-dir (aggregateSource.check)
		if alertsConf, err = config.Load(*alertsCfg); err != nil {
			return err
		}
		// The alerts' configuration is the edges' too: the rollup counts
		// an IPv6 client by the prefix it says the edge counts it under,
		// as its detectors and policies do.
		switch p := alertsConf.Identity.IPv6Prefix; {
		case *af.cfgPath == "":
			ao.IPv6Prefix, ro.IPv6Prefix = p, p
		case p != ro.IPv6Prefix:
			return badFlag(fmt.Errorf("aggregate: --alerts %s counts an IPv6 client by its /%d (identity.ipv6_prefix), --config %s by its /%d: give the edges' configuration to both",
				*alertsCfg, p, *af.cfgPath, ro.IPv6Prefix))
		}
		if ao.EMF == "stdout" && assemble.AlertsToStdout(alertsConf) {
			why := `its alerts.sinks.file is "-"`
			if alertsConf.Alerts.Sinks.File == "" {
				why = "it sets no alerts sink, so its alerts go there"
			}
			return stdoutTwice("aggregate", "--alerts "+*alertsCfg, " ("+why+")")
		}
	}
	if *dir != "" && *noFollow {
		// Following, it waits for the edge to make the log; read once, a
		// directory that holds none is a mistake, not an empty log.
		if err := isLog("aggregate", *dir); err != nil {
			return err
		}
	}
	if *dir != "" {
		// The log's aggregator (and its alerts) own the state directory:
		// a second process there would overwrite its position and open
		// windows. Taken before anything is written, released last.
		// Kinesis aggregators share theirs, a shard each, and lock none.
		if dirlock.Same(*stateDir, *dir) {
			return badFlag(fmt.Errorf("aggregate: --state-dir %s is the decision log's directory (--decisions-dir %s): "+
				"the process that writes the log (edge, serve) locks it, and the aggregator its state directory, so the two could not run together; "+
				"give --state-dir a directory of its own", *stateDir, *dir))
		}
		lk, err := aggregator.LockStateDir(*stateDir)
		if err != nil {
			return fmt.Errorf("aggregate: %w", err)
		}
		defer lk.Close()
	}
	opened, err := ao.OpenSinks(ctx, stdout, source)
	defer closeSinks(ctx, opened, stderr)
	if err != nil {
		return err
	}
	sinks, emfWriter := opened.Sinks, opened.EMF
	if opened.EMFSink != nil {
		opened.EMFSink.Warn = emfWarn(stderr, "aggregate")
	}
	var extraMetrics []func(metric.Meter) error
	if alertsConf != nil {
		al, err := assemble.NewAlerts(ctx, alertsConf, assemble.AlertsOptions{Window: ro.Window, StateDir: *stateDir, Stdout: stdout,
			Log: slog.New(slog.NewTextHandler(stderr, nil))})
		if err != nil {
			return err
		}
		defer func() {
			if cerr := al.Close(context.WithoutCancel(ctx)); cerr != nil {
				fmt.Fprintln(stderr, "aggregate: alerts:", cerr)
			}
			al.Report(stderr, "aggregate: alerts")
		}()
		sinks = append(sinks, al.Runner)
		extraMetrics = append(extraMetrics, al.RegisterMetrics)
	}
	if *stdinSrc {
		problems := newProblemPrinter(stderr, "aggregate: stdin")
		st, err := (&aggregator.Lines{Rollup: ro, Sinks: sinks, Problem: func(p aggregator.LineProblem) { problems.Problem(p) }}).Run(ctx, stdin)
		fmt.Fprintf(stderr, "aggregate: lines %d (blank %d), skipped %d (too long %d), events %d, late %d (dropped %d), %s, windows %d, outputs %d%s\n",
			st.Lines, st.Blank, st.Skipped, st.TooLong, st.Rollup.Events, st.Rollup.Late, st.Rollup.LateDropped, heldBack(st.Rollup), st.Rollup.Windows, st.Outputs, emfRejected(opened.EMFRejected()))
		problems.summary()
		return err
	}
	var latest atomic.Pointer[aggregator.RunStats]
	var live atomic.Pointer[aggregator.Kinesis] // while a Kinesis run runs
	if *admin != "off" && *admin != "" {
		h, err := assemble.AggregatorMetrics(func() aggregator.RunStats {
			if k := live.Load(); k != nil {
				return k.Stats().RunStats()
			}
			if p := latest.Load(); p != nil {
				return *p
			}
			return aggregator.RunStats{}
		}, emfWriter, time.Now, extraMetrics...)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", *admin)
		if err != nil {
			return fmt.Errorf("admin listen: %w", err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		fmt.Fprintf(stderr, "aggregate: metrics on http://%s/metrics\n", ln.Addr())
	}
	if *stream != "" {
		return aggregateKinesis(ctx, stderr, aggregator.KinesisOptions{
			Source: dkinesis.SourceOptions{Stream: *stream, Table: *leasesTable, Group: *group, LeaseDuration: *leaseDuration, Poll: *poll},
			Rollup: ro, Sinks: sinks,
		}, *stateDir, *stateTable, &live, opened)
	}
	// On a terminal, a backlog shows as a bar; the plain lines go on once
	// the log is caught up (following) or at the end.
	bar := newProgressBar(stderr, *dir)
	var printed, barRead uint64
	problems := newProblemPrinter(stderr, "aggregate")
	st, err := aggregator.RunLog(ctx, aggregator.LogOptions{Dir: *dir, StateDir: *stateDir, Follow: !*noFollow, Linger: *linger,
		Problem: problems.Problem, Consumer: "aggregate", Rollup: ro, Sinks: sinks, Progress: func(s aggregator.RunStats) {
			latest.Store(&s)
			if bar != nil {
				// A report with no new bytes comes from the end of the
				// log: the backlog is read.
				caughtUp := s.Read.Bytes == barRead && s.Read.Records > 0
				barRead = s.Read.Bytes
				bar.update(time.Now(), s.Read.Bytes, s.Rollup.Events, s.Watermark, caughtUp)
				if !caughtUp {
					return
				}
				bar = nil
			}
			if s.Outputs != printed {
				printed = s.Outputs
				printRun(stderr, "aggregate", s, opened.EMFRejected())
			}
		}})
	if bar != nil {
		bar.update(time.Now(), st.Read.Bytes, st.Rollup.Events, st.Watermark, true)
	}
	printRun(stderr, "aggregate", st, opened.EMFRejected())
	problems.summary()
	return err
}

// stdoutTwice is the bad flags of cmd whose --emf stdout and alerts
// (named by alerts, why they go there) both write to standard output.
func stdoutTwice(cmd, alerts, why string) error {
	return badFlag(fmt.Errorf("%s: --emf stdout and %s both write to standard output%s: the alert lines would interleave with the EMF documents; "+
		"give --emf a sink other than stdout, or alerts.sinks.file a file", cmd, alerts, why))
}

// closeSinks closes the EMF sink of opened, which delivers what it holds
// (the CloudWatch agent's and API's sinks wait no longer than their flush
// timeout, --emf-timeout),
// and prints what the sink did when it did not deliver everything: the
// documents dropped and counted while the run went on (a sink that is
// behind, a full buffer) and at the end. The exit status stays the run's.
func closeSinks(ctx context.Context, opened *assemble.AggregatorSinks, stderr io.Writer) {
	if err := opened.Close(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, emf.ErrSinkBehind) {
		fmt.Fprintln(stderr, "aggregate:", err)
	}
	if opened.EMF == nil {
		return
	}
	for _, r := range opened.EMF.Stats().Sinks {
		if st := r.Sink; st.Dropped+st.Buffered > 0 {
			maybe := ""
			if st.Unconfirmed > 0 {
				maybe = fmt.Sprintf(" (%d of them sent, not acknowledged: they may have arrived)", st.Unconfirmed)
			}
			fmt.Fprintf(stderr, "aggregate: emf %s: written %d, not delivered %d%s, errors %d, retries %d\n",
				st.Sink, st.Written, st.Dropped+st.Buffered, maybe, st.Errors, st.Retries)
		}
		if r.CutTail > 0 {
			fmt.Fprintf(stderr, "aggregate: emf %s: cut an unfinished last document of %d bytes off the file (a write a kill cut short; its output was delivered again)\n", r.Sink.Sink, r.CutTail)
		}
		if r.Held > 0 {
			fmt.Fprintf(stderr, "aggregate: emf %s: %d documents of the outputs delivered again were in it already, not written twice\n", r.Sink.Sink, r.Held)
		}
	}
}

// aggregateKinesis runs RunKinesis with the SDK's clients, printing a line
// after every delivery, with what the EMF sink of opened rejected.
// The shards' states are in stateDir, or in the DynamoDB table stateTable
// under "<consumer group>/<stream>".
func aggregateKinesis(ctx context.Context, stderr io.Writer, o aggregator.KinesisOptions, stateDir, stateTable string, live *atomic.Pointer[aggregator.Kinesis],
	opened *assemble.AggregatorSinks) error {
	if err := assemble.AggregatorKinesis(ctx, &o, stateDir, stateTable); err != nil {
		return err
	}
	var mu sync.Mutex
	report := func(s aggregator.KinesisStats) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stderr, "aggregate: kinesis %s: events %d (skipped again %d, %s), corrupt %d, outputs %d (again %d, by the previous holder %d), shards held %d, ended %d, leases taken %d, batches %d, checkpoints %d, reopened %d%s\n",
			o.Source.Stream, s.Rollup.Events, s.Skipped, heldBack(s.Rollup), s.Source.Corrupt, s.Outputs, s.Redeliver, s.Awaited, s.Source.Held, s.Ended, s.Source.Taken,
			s.Source.Batches, s.Source.Checkpoints, s.Source.Reopened, heartbeats(s.Heartbeats)+leftovers(s.Leftovers)+emfRejected(opened.EMFRejected()))
	}
	o.Progress = report
	k, err := aggregator.NewKinesis(o)
	if err != nil {
		return err
	}
	live.Store(k)
	st, err := k.Run(ctx)
	report(st)
	return err
}

// runReplay rebuilds every output of a time range from the log into a new
// directory: the same log and flags give byte-identical files.
func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("replay", "replay --decisions-dir DIR --out DIR [--from T] [--to T] [flags]", stderr)
	dir := fs.String("decisions-dir", "", "the decision log `directory`")
	out := fs.String("out", "", "write the outputs under `directory`: partials/ and emf.jsonl")
	now := onceNow()
	from, to := &timeFlag{now: now}, &timeFlag{now: now}
	fs.Var(from, "from", "events at or after `T` (RFC 3339, or a duration before now)")
	fs.Var(to, "to", "events before `T`")
	af := rollupFlags(fs)
	af.ruleFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" || *out == "" || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	// The partials of a replay go under out/partials, as aggregate
	// --partials dir: stores them. Its EMF goes to a file, stamped with the windows' own
	// times however old, and with a clock fixed at the end of the range so
	// that the same range gives the same bytes.
	af.o.EMF, af.o.Archive = "file:"+filepath.Join(*out, "emf.jsonl"), true
	af.o.Partials = "dir:" + filepath.Join(*out, "partials")
	ao, ro, err := af.options()
	if err != nil {
		return err
	}
	if err := checkRange("from", from.t, "to", to.t); err != nil {
		return err
	}
	// outUsed refuses an --out holding anything but a LOCK file, which
	// every replay leaves there (a failed one too) and is no output.
	outUsed := func() error {
		ents, err := os.ReadDir(*out)
		if err == nil && slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.Name() != dirlock.File }) {
			return fmt.Errorf("replay: --out %s is not empty: give a new directory", *out)
		}
		return nil
	}
	if err := outUsed(); err != nil {
		return err
	}
	if err := isLog("replay", *dir); err != nil {
		return err
	}
	// A window the range cuts would be stored under the window's key as
	// if it were whole, and a report over it would call it complete: the
	// range is widened to whole windows, as report widens its own.
	size := ro.Window
	if f, t := wholeWindows(from.t, to.t, size); !f.Equal(from.t) || !t.Equal(to.t) {
		from.t, to.t = f, t
		fmt.Fprintf(stderr, "replay: range widened to whole %v windows: %s\n", size, rangeString(f, t))
	}
	// Two replays into one --out, both past the check above, would write
	// each other's files: --out is locked (and made), then checked again
	// for a replay that ended in between.
	lk, err := dirlock.Acquire(*out)
	if err != nil {
		return fmt.Errorf("replay: --out: %w", err)
	}
	defer lk.Close()
	if err := outUsed(); err != nil {
		return err
	}
	st, rejected, err := replayInto(ctx, *out, *dir, from.t, to.t, ao, ro, stdout, stderr)
	printRun(stderr, "replay", st, rejected)
	if err != nil {
		// What a failed replay wrote is not the range's outputs, and
		// left there it would make the retry refuse --out as not empty.
		if ents, rerr := os.ReadDir(*out); rerr == nil {
			for _, e := range ents {
				if e.Name() != dirlock.File { // held until the return
					os.RemoveAll(filepath.Join(*out, e.Name()))
				}
			}
		}
	}
	return err
}

// replayInto runs a replay of the log dir's events in [since, until) into
// out, an empty directory, and returns what its EMF sink rejected too.
func replayInto(ctx context.Context, out, dir string, since, until time.Time, ao assemble.AggregatorOptions, ro aggregator.Options,
	stdout, stderr io.Writer) (aggregator.RunStats, aggregator.EMFRejected, error) {
	state, err := os.MkdirTemp(out, ".state-")
	if err != nil {
		return aggregator.RunStats{}, aggregator.EMFRejected{}, err
	}
	defer os.RemoveAll(state)
	opened, err := ao.OpenSinks(ctx, stdout, "log")
	if err != nil {
		opened.Close(context.WithoutCancel(ctx))
		return aggregator.RunStats{}, aggregator.EMFRejected{}, err
	}
	if opened.EMFSink != nil {
		opened.EMFSink.Warn = emfWarn(stderr, "replay")
	}
	problems := newProblemPrinter(stderr, "replay")
	defer problems.summary()
	st, err := aggregator.RunLog(ctx, aggregator.LogOptions{Dir: dir, StateDir: state, Since: since, Until: until,
		Problem: problems.Problem, Rollup: ro, Sinks: opened.Sinks})
	if cerr := opened.Close(context.WithoutCancel(ctx)); err == nil {
		err = cerr
	}
	return st, opened.EMFRejected(), err
}

// wholeWindows returns [from, to) widened to whole windows of size, a
// bound left zero (none) left zero.
func wholeWindows(from, to time.Time, size time.Duration) (time.Time, time.Time) {
	f, t := report.Align(cmp.Or(from, to), cmp.Or(to, from), size)
	if from.IsZero() {
		f = time.Time{}
	}
	if to.IsZero() {
		t = time.Time{}
	}
	return f, t
}

// rangeString says [from, to) in RFC 3339, a zero bound as the log's
// start or end.
func rangeString(from, to time.Time) string {
	f, t := "the log's start", "its end"
	if !from.IsZero() {
		f = from.UTC().Format(time.RFC3339Nano)
	}
	if !to.IsZero() {
		t = to.UTC().Format(time.RFC3339Nano)
	}
	return "from " + f + " to " + t
}

// printRun prints the summary line of a run of the command cmd, and
// what its EMF sink rejected.
func printRun(w io.Writer, cmd string, s aggregator.RunStats, rejected aggregator.EMFRejected) {
	wm := "-"
	if !s.Watermark.IsZero() {
		wm = s.Watermark.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "%s: events %d, late %d (dropped %d), %s, windows %d, corrections %d, outputs %d, next offset %d, watermark %s, %s%s\n",
		cmd, s.Rollup.Events, s.Rollup.Late, s.Rollup.LateDropped, heldBack(s.Rollup), s.Rollup.Windows, s.Rollup.Corrections, s.Outputs, s.Next, wm, lossSummary(s),
		leftovers(s.Leftovers)+emfRejected(rejected))
}

// leftovers says, at the end of a summary line, how many temporary files
// that writes cut short by a crash had left the run removed as it started
// (aggregator.RunStats.Leftovers), or nothing when none.
// heartbeats says, at the end of a Kinesis progress line, how many times
// a delivery went on in a shard another process took (the state written
// again so that it waits: KinesisStats.Heartbeats), or nothing.
func heartbeats(n uint64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", heartbeats to a shard's new holder %d", n)
}

func leftovers(n uint64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", temporary files a crash left removed %d", n)
}

// emfRejected says what an EMF sink rejected at the end of a summary
// line: ", emf rejected N (older than 14 days N, over 2h ahead N,
// invalid N)", or nothing when it rejected none.
func emfRejected(r aggregator.EMFRejected) string {
	if r.Total() == 0 {
		return ""
	}
	return ", " + r.String()
}

// emfWarn returns the aggregator.EMFSink.Warn of the command cmd: a line
// on w the first time documents are rejected for each reason, saying
// what to do about it; the summary line counts them.
func emfWarn(w io.Writer, cmd string) func(reason string, err error) {
	advice := [aggregator.NumEMFRejects]string{
		aggregator.EMFTooOld:  "CloudWatch takes documents of the last 14 days only; to write an old log's EMF to a file, stamped with its windows' times, use ratewarden replay",
		aggregator.EMFTooNew:  "CloudWatch takes documents up to 2 hours ahead only; is this host's clock behind the edges'?",
		aggregator.EMFInvalid: "CloudWatch would refuse them",
	}
	return func(reason string, err error) {
		i := slices.Index(aggregator.EMFRejectReasons[:], reason)
		if i < 0 {
			i = aggregator.EMFInvalid
		}
		fmt.Fprintf(w, "%s: warning: emf documents %s are counted, not written (said once): %s; the first: %v\n", cmd, reason, advice[i], err)
	}
}

// isLog refuses dir, the --decisions-dir of cmd, unless it is a decision
// log's directory: one that holds a segment (the edge's log makes one
// when it opens), where another directory would be read as an empty log,
// and the run would end with nothing and say nothing was wrong.
func isLog(cmd, dir string) error {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s: --decisions-dir %s is not a decision log directory", cmd, dir)
	}
	ok, err := seglog.HasSegments(dir)
	if err != nil {
		return fmt.Errorf("%s: --decisions-dir %s: %w", cmd, dir, err)
	}
	if !ok {
		return fmt.Errorf("%s: --decisions-dir %s is not a decision log directory: it holds no segment (NNNNNNNNNNNNNNNNNNNN.seg); give the directory the edge writes (edge --decisions-dir, serve's decision-log)", cmd, dir)
	}
	return nil
}

// heldBack says what a run's rollup took in but did not count as it
// came, as every summary line (log, stdin, Kinesis) shows it: the events
// too far ahead to move the watermark, the decisions folded into
// __other__, the events dropped past the caps, and the events skipped
// for their time (none, or past the last window of int64 nanoseconds).
func heldBack(r aggregator.RollupStats) string {
	return fmt.Sprintf("future %d, folded %d, over cap %d, bad time %d, bad latency %d", r.Future, r.Folded, r.OverCap(), r.BadTime, r.BadLatency)
}

// lossSummary says what the run could not read: "lost 0 events", or the
// events lost with where they went.
func lossSummary(s aggregator.RunStats) string {
	lo := s.Lost
	lost := lo.Events + lo.Removed + s.Read.BadEvents
	out := ""
	if o := s.Outside; o.Problems > 0 {
		out = fmt.Sprintf("; outside the time range, not counted: corrupt regions %d, corrupt bytes %d, missing segments %d, events %d",
			o.Problems-o.Gaps, o.Bytes, o.Gaps, o.Events)
	}
	if lost == 0 && lo.Problems == 0 && s.Read.BadBatch == 0 {
		return "lost 0 events" + out
	}
	return fmt.Sprintf("lost %d events (corrupt regions %d, corrupt bytes %d, missing segments %d, undecodable records %d, removed before read %d)%s",
		lost, lo.Problems-lo.Gaps, lo.Bytes, lo.Gaps, s.Read.BadBatch, lo.Removed, out)
}

// problemPrinter prints the problems of a run on stderr as they come, one
// line each, rate-limited (assemble.ProblemLog); summary says how many
// lines it held back.
type problemPrinter struct {
	*assemble.ProblemLog
	w      io.Writer
	prefix string
}

func newProblemPrinter(w io.Writer, prefix string) *problemPrinter {
	return &problemPrinter{assemble.NewProblemLog(func(err error) { fmt.Fprintf(w, "%s: skipped: %v\n", prefix, err) }, time.Now), w, prefix}
}

func (p *problemPrinter) summary() {
	if n := p.Held(); n > 0 {
		fmt.Fprintf(p.w, "%s: %d more problems not printed (counted above)\n", p.prefix, n)
	}
}
