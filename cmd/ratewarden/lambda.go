package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	awslambda "github.com/aws/aws-lambda-go/lambda"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge"
	"github.com/ratewarden/ratewarden/edge/challenge"
	"github.com/ratewarden/ratewarden/edge/lambda"
)

// runLambda serves API Gateway and ALB events: the limiter in front of a
// reverse proxy to edge.upstream. Decisions go to stdout as JSON lines
// (CloudWatch Logs) unless edge.decisions_file says otherwise.
func runLambda(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlags("lambda", "lambda [--config FILE] [--upstream URL]", stderr)
	cfgPath := fs.String("config", getenv("RATEWARDEN_CONFIG"), "configuration `file` (default $RATEWARDEN_CONFIG, else the built-in seed configuration)")
	upstream := fs.String("upstream", getenv("RATEWARDEN_UPSTREAM"), "origin `URL` (default $RATEWARDEN_UPSTREAM, else edge.upstream)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if getenv("AWS_LAMBDA_RUNTIME_API") == "" {
		return errors.New("lambda: AWS_LAMBDA_RUNTIME_API is not set: run this inside AWS Lambda (use \"ratewarden edge\" elsewhere)")
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	override(&cfg.Edge.Upstream, *upstream)
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	opts := edge.Options{Env: getenv}
	em := decisions.NewEmitter(decisions.NewJSONLinesWriter(stdout), decisions.EmitterOptions{Queue: cfg.Edge.DecisionQueue,
		OnError: func(err error) { log.Error("decisions", "err", err) }})
	defer em.Close(context.Background())
	opts.Sink = em
	var secret string
	if raw := getenv(cfg.Challenge.KeysEnv); cfg.Challenge.Enabled && raw != "" {
		if opts.Keys, err = challenge.ParseKeys(raw); err != nil {
			return fmt.Errorf("%s: %w", cfg.Challenge.KeysEnv, err)
		}
		secret = getenv(cfg.Challenge.VerifierSecretEnv)
	}
	store, closeStore, err := openStore(ctx, cfg, log, getenv)
	if err != nil {
		return err
	}
	if store != nil {
		opts.Store = store
		defer closeStore(context.Background())
	}
	lim, err := edge.New(cfg, opts)
	if err != nil {
		return err
	}
	defer lim.Close(context.Background())
	origin, err := upstreamHandler(cfg.Edge.Upstream)
	if err != nil {
		return err
	}
	awslambda.StartWithOptions(lambda.New(lim.Handler(origin, secret)).Invoke, awslambda.WithContext(ctx))
	return nil
}
