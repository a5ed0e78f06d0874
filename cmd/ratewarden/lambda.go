package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	awslambda "github.com/aws/aws-lambda-go/lambda"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/report"
	"github.com/ratewarden/ratewarden/assemble"
	emf "github.com/ratewarden/ratewarden/embedded-metrics"
)

// runLambda serves API Gateway and ALB events: the limiter in front of a
// reverse proxy to edge.upstream. Decisions go to stdout as JSON lines
// (CloudWatch Logs) unless the configuration names sinks, and every
// invocation's decisions are flushed before it returns: Lambda freezes the
// process between invocations and sends no SIGTERM without an extension.
func runLambda(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlags("lambda", "lambda [--config FILE] [--upstream URL] | lambda --aggregate [--window D] [--namespace NS] | lambda --report --partials dir:PATH|dynamodb:TABLE [--report-range D] [--format F] [--out FILE]", stderr)
	cfgPath := fs.String("config", getenv("RATEWARDEN_CONFIG"), "configuration `file` (default $RATEWARDEN_CONFIG, else the built-in seed configuration)")
	upstream := fs.String("upstream", getenv("RATEWARDEN_UPSTREAM"), "origin `URL` (default $RATEWARDEN_UPSTREAM, else edge.upstream)")
	aggregate := fs.Bool("aggregate", getenv("RATEWARDEN_LAMBDA_MODE") == "aggregate", "serve a Kinesis event-source mapping instead: roll each invocation's decisions up and write their EMF to stdout (default: $RATEWARDEN_LAMBDA_MODE=aggregate)")
	window := fs.Duration("window", time.Minute, "with --aggregate and --report: window `length`")
	namespace := fs.String("namespace", "Ratewarden", "with --aggregate: CloudWatch `namespace`")
	reportMode := fs.Bool("report", getenv("RATEWARDEN_LAMBDA_MODE") == "report", "serve an EventBridge schedule instead: each scheduled event writes the abuse report of --report-range before it to stdout (CloudWatch Logs) and --out (default: $RATEWARDEN_LAMBDA_MODE=report)")
	partials := fs.String("partials", getenv("RATEWARDEN_PARTIALS"), "with --report: the stored partials, dir:`PATH` (an EFS mount) or dynamodb:TABLE (default $RATEWARDEN_PARTIALS)")
	alertsFile := fs.String("alerts", "", "with --report: JSON lines `file` of alerts and actions")
	reportRange := fs.Duration("report-range", 24*time.Hour, "with --report: the `length` of time each report covers, ending two windows before the event")
	format := fs.String("format", "md", "with --report: md, html, json or csv")
	out := fs.String("out", "", "with --report: also write the report to `file`, replaced whole")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if getenv("AWS_LAMBDA_RUNTIME_API") == "" {
		return errors.New("lambda: AWS_LAMBDA_RUNTIME_API is not set: run this inside AWS Lambda (use \"ratewarden edge\" elsewhere)")
	}
	if *reportMode {
		f, err := report.ParseFormat(*format)
		if err != nil {
			return fmt.Errorf("--%w", err)
		}
		store, err := assemble.Partials(ctx, *partials)
		if err != nil {
			return fmt.Errorf("lambda --report: %w", err)
		}
		s := &report.Scheduled{Job: report.Job{Partials: store, Rollup: aggregator.Options{Window: *window}, AlertsFile: *alertsFile, Format: f,
			Options: report.Options{Source: "partials " + *partials}}, Range: *reportRange, Out: stdout, OutFile: *out}
		awslambda.StartWithOptions(s.Handle, awslambda.WithContext(ctx))
		return nil
	}
	if *aggregate {
		w, err := emf.NewWriter(emf.WriterOptions{}, emf.NewStdoutSink(stdout))
		if err != nil {
			return err
		}
		defer w.Close(context.Background())
		kl := &aggregator.KinesisLambda{Window: *window,
			Sinks: []aggregator.Sink{&aggregator.EMFSink{W: w, Opts: aggregator.EMFOptions{Namespace: *namespace, Source: "kinesis"}}}}
		awslambda.StartWithOptions(kl.Handle, awslambda.WithContext(ctx))
		return nil
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	override(&cfg.Edge.Upstream, *upstream)
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	e, err := assemble.NewEdge(ctx, cfg, assemble.Options{Log: log, Getenv: getenv, Fallback: stdout})
	if err != nil {
		return err
	}
	defer e.Close(context.Background())
	h := e.Lambda(func(err error) { log.Error("decisions", "err", err) })
	awslambda.StartWithOptions(h.Invoke, awslambda.WithContext(ctx))
	return nil
}
