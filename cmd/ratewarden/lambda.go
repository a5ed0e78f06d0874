package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	awslambda "github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/report"
	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
	edgelambda "github.com/ratewarden/ratewarden/edge/lambda"
)

// runLambda serves API Gateway and ALB events: the limiter in front of a
// reverse proxy to edge.upstream. Decisions go to stdout as JSON lines
// (CloudWatch Logs) unless the configuration names sinks, and every
// invocation's decisions are flushed before it returns: Lambda freezes the
// process between invocations and sends no SIGTERM without an extension.
func runLambda(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlags("lambda", "lambda [--config FILE] [--upstream URL] | lambda --aggregate [--config FILE] [--partials dir:PATH|dynamodb:TABLE] [--window D] [--top-k N] [--max-names N] [--max-ahead N] [--max-corrections N] [--rules LIST] [--namespace NS] [--rule-budget N] [--commit-records N] [--ignore-time] | lambda --report --partials dir:PATH|dynamodb:TABLE [--report-range D] [--format F] [--out FILE]", stderr)
	cfgPath := fs.String("config", getenv("RATEWARDEN_CONFIG"), "configuration `file` (default $RATEWARDEN_CONFIG, else the built-in seed configuration)")
	upstream := fs.String("upstream", getenv("RATEWARDEN_UPSTREAM"), "origin `URL` (default $RATEWARDEN_UPSTREAM, else edge.upstream)")
	aggregate := fs.Bool("aggregate", getenv("RATEWARDEN_LAMBDA_MODE") == "aggregate", "serve a Kinesis event-source mapping instead: roll each invocation's decisions up and write their EMF to stdout (default: $RATEWARDEN_LAMBDA_MODE=aggregate)")
	af := newAggregatorFlags("with --aggregate: ")
	fs.DurationVar(&af.o.Window, "window", af.o.Window, "with --aggregate and --report: window length (`duration`, "+assemble.WindowRange+")")
	af.topKFlag(fs)
	af.lambdaCapFlags(fs)
	af.rulesFlag(fs, cfgPath)
	af.namespaceFlag(fs)
	af.ruleBudgetFlag(fs)
	reportMode := fs.Bool("report", getenv("RATEWARDEN_LAMBDA_MODE") == "report", "serve an EventBridge schedule instead: each scheduled event writes the abuse report of --report-range before it to stdout (CloudWatch Logs) and --out (default: $RATEWARDEN_LAMBDA_MODE=report)")
	fs.StringVar(&af.o.Partials, "partials", getenv("RATEWARDEN_PARTIALS"), "with --report: the stored partials, a `store`: dir:PATH (an EFS mount) or dynamodb:TABLE (default $RATEWARDEN_PARTIALS); with --aggregate: also store each batch's partials there, as aggregate --partials does")
	commitRecords := fs.Int("commit-records", 0, "with --aggregate: records per commit group, on average (groups end where a record's sequence number says, the same in every retry), each written on its own so a sink failure is retried from its group (`n`; default: the whole batch)")
	fs.BoolVar(&af.o.Archive, "ignore-time", false, "with --aggregate: write EMF for windows of any age (a backlog older than CloudWatch's 14 days) instead of dropping and counting them")
	alertsFile := fs.String("alerts", "", "with --report: JSON lines `file` of alerts and actions")
	reportRange := fs.Duration("report-range", 24*time.Hour, "with --report: the length of time each report covers, ending two windows before the event (`duration`)")
	format := fs.String("format", "md", "with --report: output `format`: md, html, json or csv")
	out := fs.String("out", "", "with --report: also write the report to `file`, replaced whole")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *commitRecords < 0 || *commitRecords > 10_000 {
		return badFlag(fmt.Errorf("lambda: --commit-records %d: want 0 (the whole batch) to 10000", *commitRecords))
	}
	// Everything that can be checked without Lambda is, before the
	// runtime is required: a bad flag or configuration tried on a laptop
	// says so, not that this is not Lambda.
	var (
		f   report.Format
		ao  assemble.AggregatorOptions
		cfg *config.Config
		err error
	)
	if *reportMode && *aggregate {
		return badFlag(errors.New("lambda: --aggregate and --report: give one mode, not both"))
	}
	if err := checkLambdaMode(fs, *aggregate, *reportMode); err != nil {
		return err
	}
	switch {
	case *reportMode:
		if f, err = report.ParseFormat(*format); err != nil {
			return badFlag(fmt.Errorf("--%w", err))
		}
		if err := assemble.CheckWindow(af.o.Window); err != nil {
			return badFlag(err)
		}
		if *reportRange < af.o.Window {
			return badFlag(fmt.Errorf("--report-range %v: want at least one window (--window %v)", *reportRange, af.o.Window))
		}
		if err := assemble.CheckPartialsSpec(af.o.Partials); err != nil {
			return badFlag(fmt.Errorf("lambda --report: %w", err))
		}
	case *aggregate:
		af.o.EMF = assemble.LambdaEMF
		if ao, _, err = af.options(); err != nil {
			return err
		}
	default:
		if cfg, err = loadConfig(*cfgPath); err != nil {
			return err
		}
		override(&cfg.Edge.Upstream, *upstream)
		if err := checkOverrides(cfg, fs, ""); err != nil {
			return err
		}
	}
	if getenv("AWS_LAMBDA_RUNTIME_API") == "" {
		return errors.New("lambda: AWS_LAMBDA_RUNTIME_API is not set: run this inside AWS Lambda (use \"ratewarden edge\" elsewhere)")
	}
	// JSON lines on stderr (CloudWatch Logs), the AWS SDK's too.
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	ctx = assemble.WithLog(ctx, log)
	if *reportMode {
		store, err := assemble.Partials(ctx, af.o.Partials)
		if err != nil {
			return fmt.Errorf("lambda --report: %w", err)
		}
		s := &report.Scheduled{Job: report.Job{Partials: store, Rollup: aggregator.Options{Window: af.o.Window}, AlertsFile: *alertsFile, Format: f,
			Options: report.Options{Source: "partials " + af.o.Partials}}, Range: *reportRange, Out: stdout, OutFile: *out}
		awslambda.StartWithOptions(s.Handle, awslambda.WithContext(ctx))
		return nil
	}
	if *aggregate {
		kl, sinks, err := ao.Lambda(ctx, stdout)
		defer sinks.Close(context.Background())
		if err != nil {
			return err
		}
		kl.CommitRecords = *commitRecords
		kl.OnInvocation = func(ctx context.Context, inv aggregator.Invocation) {
			logInvocation(ctx, log, inv, sinks.EMF.Stats().Rejected)
		}
		awslambda.StartWithOptions(kl.Handle, awslambda.WithContext(ctx))
		return nil
	}
	e, err := assemble.NewEdge(ctx, cfg, assemble.Options{Log: log, Getenv: getenv, Fallback: stdout})
	if err != nil {
		return err
	}
	defer e.Close(context.Background())
	h := e.Lambda(edgelambda.Options{
		OnError:     func(err error) { log.Error("decisions", "err", err) },
		OnNoAddress: func(err error) { log.Error("no client address", "err", err) },
	})
	awslambda.StartWithOptions(h.Invoke, awslambda.WithContext(ctx))
	return nil
}

// lambdaModes are the modes each of lambda's flags applies to (edge: the
// edge's Lambda, neither --aggregate nor --report).
var lambdaModes = map[string][]string{
	"upstream":        {"edge"},
	"config":          {"edge", "aggregate"},
	"window":          {"aggregate", "report"},
	"partials":        {"aggregate", "report"},
	"top-k":           {"aggregate"},
	"max-names":       {"aggregate"},
	"max-ahead":       {"aggregate"},
	"max-corrections": {"aggregate"},
	"rules":           {"aggregate"},
	"namespace":       {"aggregate"},
	"rule-budget":     {"aggregate"},
	"commit-records":  {"aggregate"},
	"ignore-time":     {"aggregate"},
	"alerts":          {"report"},
	"report-range":    {"report"},
	"format":          {"report"},
	"out":             {"report"},
}

// checkLambdaMode refuses a flag given for another mode than the one
// lambda runs in, as a bad flag: ignored, it would hide a missing
// --aggregate or --report, and the function would serve the wrong events.
func checkLambdaMode(fs *flag.FlagSet, aggregate, report bool) error {
	mode := "edge"
	switch {
	case aggregate:
		mode = "aggregate"
	case report:
		mode = "report"
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		modes, ok := lambdaModes[f.Name]
		if !ok || err != nil || slices.Contains(modes, mode) {
			return
		}
		names := make([]string, len(modes))
		for i, m := range modes {
			names[i] = map[string]string{"edge": "the edge's Lambda (neither --aggregate nor --report)", "aggregate": "--aggregate", "report": "--report"}[m]
		}
		only := ""
		if len(modes) == 1 && modes[0] != "edge" {
			only = " only"
		}
		err = badFlag(fmt.Errorf("lambda: --%s is for %s%s", f.Name, strings.Join(names, " and "), only))
	})
	return err
}

// logInvocation writes one JSON line of what a Kinesis aggregate invocation
// did to the function's log (stderr; its EMF is on stdout).
func logInvocation(ctx context.Context, log *slog.Logger, inv aggregator.Invocation, emfRejected uint64) {
	problems := make([]string, len(inv.Problems))
	for i, p := range inv.Problems {
		problems[i] = p.Error()
	}
	level, errText := slog.LevelInfo, ""
	if inv.Err != nil {
		level, errText = slog.LevelError, inv.Err.Error()
	}
	var requestID string
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		requestID = lc.AwsRequestID
	}
	log.LogAttrs(ctx, level, "lambda aggregate",
		slog.String("request_id", requestID), slog.String("shard", inv.Shard), slog.String("from", inv.From), slog.String("to", inv.To),
		slog.Uint64("records", inv.Records), slog.Uint64("events", inv.Events), slog.Uint64("corrupt", inv.Corrupt),
		slog.Int("outputs", inv.Outputs), slog.Uint64("folded", inv.Folded), slog.Uint64("early_writes", inv.EarlyWrites),
		slog.Uint64("bad_time", inv.BadTime),
		slog.Uint64("bad_latency", inv.BadLatency), slog.Uint64("leftovers", inv.Leftovers),
		slog.String("failed_at", inv.FailedAt), slog.String("err", errText),
		slog.Uint64("emf_rejected_total", emfRejected), slog.Any("problems", problems))
}
