package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
)

// runAlerts runs the detectors and policies over the merged partials of a
// directory or a table: the place alerts run when several aggregators (Kinesis
// shards) each store part of every window.
func runAlerts(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("alerts", "alerts --config FILE --partials dir:PATH|dynamodb:TABLE --state-dir DIR [--follow] [flags]", stderr)
	cfgPath := fs.String("config", "", "the configuration `file` whose alerts and feedback sections apply")
	partials := fs.String("partials", "", "the stored partials to read, a `store`: "+assemble.PartialsSpecs+" (as aggregate --partials writes them)")
	stateDir := fs.String("state-dir", "", "where the detectors keep their state (`directory`), so that a rerun goes on where the last stopped")
	window := fs.Duration("window", time.Minute, "the partials' window length (`duration`; as aggregate --window: "+assemble.WindowRange+")")
	follow := fs.Bool("follow", false, "keep running windows as their partials arrive")
	settle := fs.Int("settle", 2, "with --follow: a window runs once a partial `n` windows later is stored (partitions lag one another)")
	poll := fs.Duration("poll", time.Second, "with --follow: how often to look for new partials")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *cfgPath == "" || *partials == "" || *stateDir == "" || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	if err := assemble.CheckWindow(*window); err != nil {
		return badFlag(fmt.Errorf("alerts: %w", err))
	}
	if *settle < 1 || *poll <= 0 {
		return badFlag(fmt.Errorf("alerts: --settle and --poll must be positive"))
	}
	if err := assemble.CheckPartialsSpec(*partials); err != nil {
		return badFlag(fmt.Errorf("alerts: %w", err))
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	store, err := assemble.Partials(ctx, *partials)
	if err != nil {
		return err
	}
	// A store without partials of --window would run nothing and exit
	// 0, as if there had been no traffic. Following, a store with none
	// yet is waited on (the aggregators may not have stored their first
	// window); one holding only other lengths never will.
	if c, ok := store.(interface {
		HasWindow(context.Context, time.Duration) error
	}); ok {
		if err := c.HasWindow(ctx, *window); err != nil && !(*follow && errors.Is(err, aggregator.ErrNoPartials)) {
			return fmt.Errorf("alerts: %w", err)
		}
	}
	// Two runners on one state would each save over the other's open
	// alerts and series, and fire and resolve alerts twice.
	lk, err := aggregator.LockStateDir(*stateDir)
	if err != nil {
		return fmt.Errorf("alerts: %w", err)
	}
	defer lk.Close()
	al, err := assemble.NewAlerts(ctx, cfg, assemble.AlertsOptions{Window: *window, StateDir: *stateDir, Stdout: stdout,
		Log: slog.New(slog.NewTextHandler(stderr, nil)), Archive: !*follow})
	if err != nil {
		return err
	}
	reported := map[string]bool{} // a file is named once, not on every poll
	err = al.Runner.Follow(ctx, alerts.FollowOptions{Partials: store, Follow: *follow, Settle: *settle, Poll: *poll,
		Problems: func(ps []aggregator.ReadProblem) {
			for _, p := range ps {
				if !reported[p.Path] {
					reported[p.Path] = true
					fmt.Fprintf(stderr, "alerts: %s: skipped: %v\n", p.Path, p.Err)
				}
			}
		}})
	if cerr := al.Close(context.WithoutCancel(ctx)); err == nil {
		err = cerr
	}
	al.Report(stderr, "alerts")
	return err
}
