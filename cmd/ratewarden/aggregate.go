package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
)

// rollupFlags adds the window flags that aggregate and replay share.
func rollupFlags(fs *flag.FlagSet) func() (aggregator.Options, error) {
	window := fs.Duration("window", time.Minute, "window `length` in event time (1s, 10s, 1m, ...)")
	lateness := fs.Duration("lateness", time.Second, "how far behind the latest event an event may be and still join its `window`")
	late := fs.String("late", "correct", "events later than that: \"correct\" (a correction of their window) or \"drop\" (counted)")
	topK := fs.Int("top-k", 100, "clients held by each top-offenders `list`")
	return func() (aggregator.Options, error) {
		p, ok := aggregator.ParseLatePolicy(*late)
		switch {
		case !ok:
			return aggregator.Options{}, fmt.Errorf("--late %q: want correct or drop", *late)
		case *window < time.Second || *window > 24*time.Hour || time.Hour%*window != 0 && *window%time.Hour != 0:
			return aggregator.Options{}, fmt.Errorf("--window %v: want 1s to 24h, dividing an hour or a multiple of one", *window)
		case *lateness < 0 || *lateness > *window*10:
			return aggregator.Options{}, fmt.Errorf("--lateness %v: want 0 to ten windows", *lateness)
		case *topK < 1 || *topK > 100_000:
			return aggregator.Options{}, fmt.Errorf("--top-k %d: want 1 to 100000", *topK)
		}
		return aggregator.Options{Window: *window, Lateness: *lateness, Late: p, TopK: *topK}, nil
	}
}

// partialsSink parses --partials: dir:PATH.
func partialsSink(spec string) (aggregator.Sink, error) {
	if path, ok := strings.CutPrefix(spec, "dir:"); ok && path != "" {
		return &aggregator.PartialsDir{Dir: path}, nil
	}
	return nil, fmt.Errorf("--partials %q: want dir:PATH", spec)
}

func runAggregate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("aggregate", "aggregate --decisions-dir DIR --state-dir DIR [--partials dir:PATH] [flags]", stderr)
	dir := fs.String("decisions-dir", "", "the decision log `directory` to read (and follow)")
	stateDir := fs.String("state-dir", "", "where the aggregator keeps its position and open windows (`directory`)")
	partials := fs.String("partials", "", "store each window's partial aggregates: dir:`PATH`")
	noFollow := fs.Bool("no-follow", false, "stop at the end of the log instead of waiting for new events")
	opts := rollupFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" || *stateDir == "" || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	ro, err := opts()
	if err != nil {
		return err
	}
	var sinks []aggregator.Sink
	if *partials != "" {
		s, err := partialsSink(*partials)
		if err != nil {
			return err
		}
		sinks = append(sinks, s)
	}
	st, err := aggregator.RunLog(ctx, aggregator.LogOptions{Dir: *dir, StateDir: *stateDir, Follow: !*noFollow,
		Rollup: ro, Sinks: sinks, OnFlush: func(s aggregator.RunStats) { printRun(stderr, s) }})
	printRun(stderr, st)
	return err
}

// runReplay rebuilds every output of a time range from the log into a new
// directory: the same log and flags give byte-identical files.
func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("replay", "replay --decisions-dir DIR --out DIR [--from T] [--to T] [flags]", stderr)
	dir := fs.String("decisions-dir", "", "the decision log `directory`")
	out := fs.String("out", "", "write the outputs under `directory` (partials/)")
	from, to := &timeFlag{now: time.Now}, &timeFlag{now: time.Now}
	fs.Var(from, "from", "events at or after `T` (RFC 3339, or a duration before now)")
	fs.Var(to, "to", "events before `T`")
	opts := rollupFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" || *out == "" || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	ro, err := opts()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	state, err := os.MkdirTemp(*out, ".state-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	st, err := aggregator.RunLog(ctx, aggregator.LogOptions{Dir: *dir, StateDir: state, Since: from.t, Until: to.t,
		Rollup: ro, Sinks: []aggregator.Sink{&aggregator.PartialsDir{Dir: filepath.Join(*out, "partials")}}})
	printRun(stderr, st)
	return err
}

func printRun(w io.Writer, s aggregator.RunStats) {
	wm := "-"
	if !s.Watermark.IsZero() {
		wm = s.Watermark.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "aggregate: events %d, late %d (dropped %d), windows %d, corrections %d, outputs %d, next offset %d, watermark %s\n",
		s.Rollup.Events, s.Rollup.Late, s.Rollup.LateDropped, s.Rollup.Windows, s.Rollup.Corrections, s.Outputs, s.Next, wm)
}
