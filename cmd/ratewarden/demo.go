package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlags("demo", "demo [--duration D] [--speed X] [--dashboard-listen ADDR|off] [--dir DIR]", stderr)
	duration := fs.Duration("duration", time.Minute, "how long the simulated traffic runs, in story time (`duration`)")
	speed := fs.Float64("speed", 1, "run the story on a clock `X` times as fast as wall time: --duration of story in duration ÷ X, decisions, windows and rates in story time; the story waits when the aggregator falls behind")
	dash := fs.String("dashboard-listen", "127.0.0.1:9092", "the live dashboard's `address`, \"off\" for none")
	dir := fs.String("dir", "", "keep the decision log, state, partials, alerts and challenge list in `directory`, new or without an earlier run's (default: a temporary one, removed)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	switch {
	case *duration < time.Second || *duration > 24*time.Hour:
		return badFlag(fmt.Errorf("demo: --duration %v: want 1s to 24h", *duration))
	case !(*speed >= 1 && *speed <= 1000):
		return badFlag(fmt.Errorf("demo: --speed %v: want 1 to 1000", *speed))
	}
	if *dash == "off" {
		*dash = ""
	}
	if *dash != "" {
		if err := config.CheckListen(*dash); err != nil {
			return badFlag(fmt.Errorf("demo: --dashboard-listen %q: %w", *dash, err))
		}
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	return assemble.RunDemo(ctx, assemble.DemoOptions{Duration: *duration, Speed: *speed, Dir: *dir,
		DashboardListen: *dash, Out: stdout, Log: log, Getenv: getenv})
}
