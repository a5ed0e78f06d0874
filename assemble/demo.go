package assemble

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/demo"
)

// DemoOptions configure RunDemo. The zero value runs a minute of the
// story in a temporary directory.
type DemoOptions struct {
	Duration time.Duration // default 1m
	Speed    float64       // the story's phases come Speed times sooner; default 1
	// Dir keeps the decision log, the aggregator's state and partials;
	// "" uses a temporary directory, removed at the end.
	Dir             string
	DashboardListen string    // default 127.0.0.1:9092; "" for none
	Out             io.Writer // a line per window, and the report; default discard
	Log             *slog.Logger
	Getenv          func(string) string
}

// RunDemo runs `ratewarden serve` (Serve, the same assembly) on the demo
// configuration in front of the demo's sample origin, sends the story's
// traffic through the edge for o.Duration, prints a line per aggregated
// window while it runs, then stops serve cleanly and prints what happened
// to each actor, what reached the origin and the clients refused most.
func RunDemo(ctx context.Context, o DemoOptions) error {
	if o.Duration <= 0 {
		o.Duration = time.Minute
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	cfg, err := config.Parse(demo.Config, "built-in demo.yaml")
	if err != nil {
		return err
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "ratewarden-demo-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	cfg.Decisions.Dir = filepath.Join(dir, "decision-log")
	cfg.Serve.StateDir = filepath.Join(dir, "state")
	cfg.Serve.PartialsDir = filepath.Join(dir, "partials")
	cfg.Serve.Dashboard.Listen = o.DashboardListen

	origin := demo.NewOrigin(time.Now)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo origin: %w", err)
	}
	originSrv := &http.Server{Handler: origin, ReadHeaderTimeout: 10 * time.Second}
	go originSrv.Serve(ln)
	defer originSrv.Close()
	cfg.Edge.Upstream = "http://" + ln.Addr().String()

	ready := make(chan ServeAddrs, 1)
	serveCtx, stopServe := context.WithCancel(ctx)
	defer stopServe()
	done := make(chan error, 1)
	go func() {
		done <- Serve(serveCtx, cfg, ServeOptions{Options: Options{Log: o.Log, Getenv: o.Getenv},
			Ready: func(a ServeAddrs) { ready <- a },
			Sinks: []aggregator.Sink{&demo.Windows{W: o.Out}}})
	}()
	var addrs ServeAddrs
	select {
	case addrs = <-ready:
	case err := <-done:
		return err
	}
	speed := max(o.Speed, 1)
	fmt.Fprintf(o.Out, "demo: edge on http://%s/ in front of the sample origin on %s", addrs.Edge, cfg.Edge.Upstream)
	if addrs.Dashboard != "" {
		fmt.Fprintf(o.Out, "; dashboard on http://%s/", addrs.Dashboard)
	}
	fmt.Fprintf(o.Out, "\ndemo: for %v: users of every tier throughout; the scraper %s at %d requests/s from %v; credential stuffing from %s0/24 at %d/s from %v\n",
		o.Duration, demo.ScraperAddr, demo.ScraperRate, scaled(demo.ScraperStart, speed), demo.StuffingNet, demo.StuffingRate, scaled(demo.StuffingStart, speed))

	traffic := &demo.Traffic{Target: "http://" + addrs.Edge, Speed: speed}
	traffic.Run(ctx, o.Duration, time.Now)
	stopServe()
	if err := <-done; err != nil {
		return err
	}

	fmt.Fprintln(o.Out, "\ndemo: what the edge answered")
	for _, a := range []string{demo.ActorUsers, demo.ActorScraper, demo.ActorStuffing} {
		fmt.Fprintf(o.Out, "  %-8s %s\n", a, traffic.Stats(a))
	}
	st := origin.Stats()
	fmt.Fprintf(o.Out, "demo: the origin served %d requests, at most %d in one second; %d logins, %d with a wrong password\n",
		st.Requests, st.PeakPerSec, st.Logins, st.FailedLogins)
	return demoReport(o.Out, &aggregator.PartialsDir{Dir: cfg.Serve.PartialsDir}, cfg.Serve.Window)
}

func scaled(d time.Duration, speed float64) time.Duration {
	return time.Duration(float64(d) / speed).Round(time.Millisecond)
}

// demoReport prints the decisions of every window the aggregator wrote,
// by outcome, and the clients refused most.
func demoReport(w io.Writer, dir *aggregator.PartialsDir, window time.Duration) error {
	ps, problems, err := dir.Read(window, time.Time{}, time.Now().Add(time.Hour))
	if err != nil {
		return err
	}
	for _, p := range problems {
		fmt.Fprintf(w, "demo: partial skipped: %s: %v\n", p.Path, p.Err)
	}
	var all *aggregator.Partial
	for _, p := range ps {
		if all == nil {
			all = aggregator.NewPartial(p.Start, window, 100)
		}
		if err := all.Merge(p, false); err != nil {
			return err
		}
	}
	if all == nil {
		fmt.Fprintln(w, "demo: no window was aggregated")
		return nil
	}
	fmt.Fprintf(w, "demo: the aggregator's %d windows:", len(ps))
	for oc, n := range all.Counts.ByOutcome() {
		if n > 0 {
			fmt.Fprintf(w, " %s %d", decisions.Outcome(oc), n)
		}
	}
	fmt.Fprintln(w, "\ndemo: clients refused most (challenged, blocked or denied):")
	for _, h := range all.Offenders.Refusals.Top(5) {
		fmt.Fprintf(w, "  %-18s %d\n", h.Client, h.Count)
	}
	return nil
}
