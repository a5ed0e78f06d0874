package assemble

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	dkinesis "github.com/ratewarden/ratewarden/decisions/kinesis"
	"github.com/ratewarden/ratewarden/decisions/seglog"
)

// DecisionSinks opens what edge.decisions_file, decisions.dir and
// decisions.kinesis ask for, each a lane of one Fanout (its own queue,
// goroutine and linger, so that a slow or hung stream never holds up the
// local log), with decisions.privacy applied to all of them. When none is
// configured and fallback is not nil, decisions go to fallback as JSON
// lines (Lambda's stdout); otherwise the result has no emitter. Close
// flushes the lanes, then closes the sinks.
func DecisionSinks(ctx context.Context, cfg *config.Config, log *slog.Logger, getenv func(string) string, fallback io.Writer) (*Sinks, error) {
	return decisionSinks(ctx, cfg, log, getenv, fallback, nil)
}

// decisionSinks is DecisionSinks writing decisions.dir through dlog when
// it is not nil (Options.DecisionLog), which the caller closes.
func decisionSinks(ctx context.Context, cfg *config.Config, log *slog.Logger, getenv func(string) string, fallback io.Writer, dlog *seglog.Log) (*Sinks, error) {
	var lanes []decisions.Lane
	var closers []func(context.Context) error
	out := &Sinks{close: func(context.Context) error { return nil }}
	fail := func(err error) (*Sinks, error) {
		for _, c := range closers {
			c(context.Background())
		}
		return nil, err
	}
	privacy, err := newPrivacy(cfg.Decisions.Privacy, getenv)
	if err != nil {
		return fail(err)
	}
	// Privacy applies to everything recorded, log and file alike.
	lane := func(name string, w decisions.BatchWriter, linger time.Duration, batch int) {
		lanes = append(lanes, decisions.Lane{Name: name, Writer: decisions.Private(privacy, w), Options: decisions.EmitterOptions{
			Queue: cfg.Edge.DecisionQueue, Node: cfg.Edge.Node, Linger: linger, Batch: batch,
			OnError: func(err error) { log.Error("decisions", "sink", name, "err", err) }}})
	}
	if cfg.Decisions.Dir != "" {
		l := dlog
		if l == nil {
			if l, err = openDecisionLog(cfg.Decisions, log, 0); err != nil {
				return fail(err)
			}
			closers = append(closers, func(context.Context) error { return l.Close() })
		}
		lane("log", decisionlog.NewWriter(l, decisionlog.WriterOptions{Codec: cfg.Decisions.Codec}), cfg.Decisions.Linger, cfg.Decisions.Batch)
	}
	if cfg.Edge.DecisionsFile != "" {
		f, err := decisions.OpenJSONLines(cfg.Edge.DecisionsFile)
		if err != nil {
			return fail(err)
		}
		lane("file", f, 0, 0)
		closers = append(closers, func(context.Context) error { return f.Close() })
	}
	if k := cfg.Decisions.Kinesis; k.Stream != "" {
		acfg, err := AWS(ctx, "")
		if err != nil {
			return fail(fmt.Errorf("decisions.kinesis: %w", err))
		}
		// Few retries: what the stream does not take soon goes to the spill
		// and is retried from there, so the lane's queue does not fill
		// while a dead stream is retried.
		sink, err := dkinesis.New(kinesis.NewFromConfig(acfg), dkinesis.Options{Stream: k.Stream, Partitions: k.Partitions,
			JSON: k.Codec == columnar.CodecJSON, MaxRetries: 3})
		if err != nil {
			return fail(err)
		}
		spill, err := dkinesis.NewSpill(sink, dkinesis.SpillOptions{Dir: k.SpillDir, Retry: k.Retry})
		if err != nil {
			return fail(fmt.Errorf("decisions.kinesis.spill_dir: %w", err))
		}
		out.Kinesis, out.Spill = sink, spill
		lane("kinesis", spill, k.Linger, k.Batch)
		closers = append(closers, spill.Close)
		log.Info("shipping decisions to Kinesis", "stream", k.Stream, "region", acfg.Region, "spill_dir", k.SpillDir)
	}
	if len(lanes) == 0 && fallback != nil {
		lane("stdout", decisions.NewJSONLinesWriter(fallback), 0, 0)
	}
	if len(lanes) == 0 {
		return out, nil
	}
	em := decisions.NewFanout(lanes...)
	out.Emitter = em
	out.close = func(ctx context.Context) error {
		errs := []error{closeLanes(ctx, em, out.Spill)}
		for _, c := range closers {
			errs = append(errs, c(ctx))
		}
		return errors.Join(errs...)
	}
	return out, nil
}

// closeLanes flushes every lane. The lanes close at once, so a hung
// stream does not hold up the log; and if they are not done within half
// of what is left of ctx, calls to the stream are cut short, so that the
// Kinesis lane spills what it holds instead of losing it when ctx ends.
func closeLanes(ctx context.Context, f *decisions.Fanout, spill *dkinesis.Spill) error {
	if spill == nil {
		return f.Close(ctx)
	}
	first := ctx
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		first, cancel = context.WithDeadline(ctx, deadline.Add(-time.Until(deadline)/2))
		defer cancel()
	}
	if f.Close(first) == nil {
		return nil
	}
	spill.Interrupt()
	return f.Close(ctx)
}

// Sinks are the destinations of decisions DecisionSinks opened, each a
// lane of one Fanout.
type Sinks struct {
	Emitter *decisions.Fanout // nil: decisions are not recorded
	Kinesis *dkinesis.Sink    // nil without decisions.kinesis.stream
	Spill   *dkinesis.Spill
	close   func(context.Context) error // closes the emitter, then the sinks
}

// Close flushes the emitter, then closes the sinks.
func (s *Sinks) Close(ctx context.Context) error { return s.close(ctx) }

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

// openDecisionLog opens the decision log of d (decisions.dir) to write,
// with the segment, sync and retention settings of d, reporting its
// problems to log. followPoll is how often its readers (Log.Reader) look
// at the files for appends another process made; 0 is seglog's default.
func openDecisionLog(d config.Decisions, log *slog.Logger, followPoll time.Duration) (*seglog.Log, error) {
	report := func(p seglog.Problem) {
		if errors.Is(p, seglog.ErrNotSegment) {
			log.Warn("decision log: a file named like a segment is not one; no events lost", "problem", p.Error())
			return
		}
		if errors.Is(p, seglog.ErrUnread) {
			log.Error("decision log: retention removed events a consumer had not read", "problem", p.Error())
			return
		}
		log.Error("decision log: skipped a corrupt region", "problem", p.Error())
	}
	l, err := seglog.Open(d.Dir, seglog.Options{
		SegmentBytes: d.SegmentBytes, SegmentAge: d.SegmentAge,
		Sync:      seglog.SyncPolicy{Mode: d.Sync, Interval: d.SyncInterval},
		RetainAge: d.RetainAge, RetainBytes: d.RetainBytes, Report: report, FollowPoll: followPoll,
	})
	if err != nil {
		return nil, fmt.Errorf("open decision log: %w", err)
	}
	return l, nil
}
