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
	"github.com/ratewarden/ratewarden/aggregator/report"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/demo"
)

// DemoOptions configure RunDemo. The zero value runs a minute of the
// story in a temporary directory.
type DemoOptions struct {
	// Duration is how much of the story runs, in story time; default 1m.
	Duration time.Duration
	// Speed runs the story on an accelerated clock (demo.Story): story
	// time passes Speed times as fast as wall time, so a minute of the
	// story takes a minute ÷ Speed. The edge stamps its decisions, the
	// aggregator closes its windows, the traffic keeps its rates per second
	// and the origin counts its peak in story time. The story waits for
	// the aggregator (at any speed): it runs at most a window past what the
	// aggregator had read and run through the alerts and the policies, so
	// a slow or busy machine makes it take longer, not the loop fail.
	// Default 1.
	Speed float64
	// Dir keeps the decision log, the aggregator's state and partials,
	// the alerts and the challenge list (emptied at the start), made if it
	// does not exist; one holding an earlier run's decision log or state
	// is refused. "" uses a temporary directory, removed at the end.
	Dir string
	// Stall is how long the story may wait for the aggregator at once
	// (demo.Story.Stalled) before the demo stops and fails, naming it: a
	// stuck aggregator would otherwise hold the story, and the demo, until
	// interrupted. Default DefaultDemoStall.
	Stall           time.Duration
	DashboardListen string    // default 127.0.0.1:9092; "" for none
	Out             io.Writer // a line per window, and the report; default discard
	Log             *slog.Logger
	Getenv          func(string) string
}

// DefaultDemoStall is DemoOptions.Stall's default: the aggregator
// catches up with the edge within a second on a busy machine.
const DefaultDemoStall = 30 * time.Second

// RunDemo runs `ratewarden serve` (Serve, the same assembly) on the demo
// configuration in front of the demo's sample origin, sends the story's
// traffic through the edge for o.Duration, prints a line per aggregated
// window and one per alert and feedback action while it runs, then stops
// serve cleanly and prints what happened to each actor, what reached the
// origin, when each step of the feedback loop happened and the abuse
// report (report.Job, as `ratewarden report` makes it, in Markdown). It
// returns an error when the loop was not shown: the scraper challenged
// and blocked by its limits, a heavy_hitter alert for it, its entry on the
// challenge list by a policy, and its requests challenged by the list.
func RunDemo(ctx context.Context, o DemoOptions) error {
	if o.Duration <= 0 {
		o.Duration = time.Minute
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Stall <= 0 {
		o.Stall = DefaultDemoStall
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
	} else {
		// A run beside an earlier one's alert state would raise no
		// alert the earlier run raised, and so show no loop.
		for _, held := range []string{"decision-log", "state"} {
			if _, err := os.Lstat(filepath.Join(dir, held)); err == nil {
				return fmt.Errorf("demo: --dir %s holds an earlier run's %s: give a new or empty directory, or remove it", dir, held)
			}
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	cfg.Decisions.Dir = filepath.Join(dir, "decision-log")
	cfg.Serve.StateDir = filepath.Join(dir, "state")
	cfg.Serve.PartialsDir = filepath.Join(dir, "partials")
	cfg.Serve.Dashboard.Listen = o.DashboardListen
	// The loop's files: the challenge list the policies write and the edge
	// reads (empty at the start of every run, so the scraper is listed
	// anew), and the alerts and actions.
	cfg.Lists.ChallengeFile = filepath.Join(dir, "challenge.list")
	cfg.Alerts.Sinks.File = filepath.Join(dir, "alerts.jsonl")
	if err := os.WriteFile(cfg.Lists.ChallengeFile, nil, 0o644); err != nil {
		return err
	}

	speed := max(o.Speed, 1)
	// The aggregator, the alerts and the policies take wall time, speed
	// times as much story time: on a busy machine the scraper's 30 s could
	// end before its alert. The story waits for them instead.
	story := demo.NewStory(time.Now(), speed, cfg.Serve.Window, time.Now)
	origin := demo.NewOrigin(story.Now)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo origin: %w", err)
	}
	originSrv := &http.Server{Handler: origin, ReadHeaderTimeout: 10 * time.Second}
	go originSrv.Serve(ln)
	defer originSrv.Close()
	cfg.Edge.Upstream = "http://" + ln.Addr().String()

	traffic := &demo.Traffic{}
	// Serve's edge reads the challenge list as soon as the policy has
	// written it, before the loop hears of the listing: the 302s of
	// requests sent after that are the list's.
	loop := &demo.Loop{W: o.Out, Now: story.Now, Listed: traffic.Mark}
	ready := make(chan ServeAddrs, 1)
	serveCtx, stopServe := context.WithCancel(ctx)
	defer stopServe()
	// Serve stopping early stops the traffic too: its story would wait
	// for an aggregator that is gone.
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	done := make(chan error, 1)
	go func() {
		done <- Serve(serveCtx, cfg, ServeOptions{Options: Options{Log: o.Log, Getenv: o.Getenv, Clock: story.Now},
			Ready: func(a ServeAddrs) { ready <- a }, Now: story.Now, CaughtUp: story.CaughtUp,
			Sinks: []aggregator.Sink{&demo.Windows{W: o.Out}}, Alerts: loop})
		stopTraffic()
	}()
	var addrs ServeAddrs
	select {
	case addrs = <-ready:
	case err := <-done:
		return err
	}
	fmt.Fprintf(o.Out, "demo: edge on http://%s/ in front of the sample origin on %s", addrs.Edge, cfg.Edge.Upstream)
	if addrs.Dashboard != "" {
		fmt.Fprintf(o.Out, "; dashboard on http://%s/", addrs.Dashboard)
	}
	fmt.Fprintln(o.Out)
	if speed > 1 {
		fmt.Fprintf(o.Out, "demo: story time runs %g times as fast as wall time: every time and rate below is story time, and %v of the story takes %v, or longer when it waits for the aggregator\n",
			speed, o.Duration, time.Duration(float64(o.Duration)/speed).Round(time.Millisecond))
	}
	fmt.Fprintf(o.Out, "demo: for %v: users of every tier throughout; the scraper %s at %d requests/s from %v; credential stuffing from %s0/24 at %d/s from %v\n",
		o.Duration, demo.ScraperAddr, demo.ScraperRate, demo.ScraperStart, demo.StuffingNet, demo.StuffingRate, demo.StuffingStart)
	fmt.Fprintf(o.Out, "demo: windows of %v; alerts and the policies' actions in %s; the challenge list in %s, which the edge reads as soon as a policy writes it\n",
		cfg.Serve.Window, cfg.Alerts.Sinks.File, cfg.Lists.ChallengeFile)
	traffic.Target = "http://" + addrs.Edge
	start := story.Now()
	// A stuck aggregator would hold the story, and serve's shutdown, for
	// ever: the demo stops once the story has waited o.Stall at once, and
	// gives serve what an edge gets to drain.
	stalled := make(chan struct{})
	go watchStall(trafficCtx, story, o.Stall, func() { close(stalled); stopTraffic() })
	traffic.Run(trafficCtx, o.Duration, story.Now)
	stopServe()
	select {
	case err := <-done:
		if err != nil {
			return err
		}
	case <-stalled:
		select {
		case <-done:
		case <-time.After(cfg.Edge.ShutdownGrace + time.Second):
		}
		return fmt.Errorf("demo: the aggregator did not catch up with the edge's decisions for %v, and the story waited for it: stopped", o.Stall)
	}

	fmt.Fprintln(o.Out, "\ndemo: what the edge answered")
	for _, a := range []string{demo.ActorUsers, demo.ActorScraper, demo.ActorStuffing} {
		fmt.Fprintf(o.Out, "  %-8s %s\n", a, traffic.Stats(a))
	}
	st := origin.Stats()
	fmt.Fprintf(o.Out, "demo: the origin served %d requests, at most %d in one second; %d logins, %d with a wrong password\n",
		st.Requests, st.PeakPerSec, st.Logins, st.FailedLogins)
	if held := story.Held(); held > 0 {
		fmt.Fprintf(o.Out, "demo: the story waited %v of wall time for the aggregator\n", held.Round(time.Millisecond))
	}
	scraper := traffic.Stats(demo.ActorScraper)
	ls := loop.State()
	printLoop(o.Out, start, scraper, ls)

	// The abuse report, as `ratewarden report` makes it.
	job := &report.Job{PartialsDir: cfg.Serve.PartialsDir, AlertsFile: cfg.Alerts.Sinks.File, Format: report.Markdown,
		Rollup: aggregator.Options{Window: cfg.Serve.Window, TopK: cfg.Serve.TopK, IPv6Prefix: cfg.Identity.IPv6Prefix},
		Options: report.Options{From: start, To: story.Now(), Title: "ratewarden demo: abuse report",
			Source: "partials " + cfg.Serve.PartialsDir, Top: 5, TopK: cfg.Serve.TopK}}
	if _, b, err := job.Run(ctx); err != nil {
		fmt.Fprintln(o.Out, "demo: report:", err)
	} else {
		fmt.Fprintf(o.Out, "\n%s", b)
	}
	if err := demo.Check(scraper, ls); err != nil {
		return fmt.Errorf("demo: %w (give it --duration 60s or more)", err)
	}
	fmt.Fprintln(o.Out, "demo: the loop was shown: the scraper challenged, blocked, alerted, put on the challenge list and challenged by it")
	return nil
}

// watchStall calls stop once story has waited stall for the pipeline at
// once, checking ten times a stall, until ctx is done.
func watchStall(ctx context.Context, story *demo.Story, stall time.Duration, stop func()) {
	tick := time.NewTicker(stall / 10)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if story.Stalled() >= stall {
				stop()
				return
			}
		}
	}
}

// printLoop prints when each step of the loop happened, from the demo's
// start.
func printLoop(w io.Writer, start time.Time, scraper *demo.ActorStats, s demo.LoopState) {
	f := scraper.Firsts()
	at := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return "+" + t.Sub(start).Round(100*time.Millisecond).String()
	}
	fmt.Fprintf(w, "demo: the loop: the scraper from %s, first challenged %s, first blocked %s; heavy_hitter on the window ending %s, raised %s; listed %s (%s); first challenged by the list %s (%d requests since); credential_stuffing raised %s; alerts raised %d, actions applied %d\n",
		at(f.Sent), at(f.Challenged), at(f.Blocked), at(s.AlertWindow), at(s.Alerted), at(s.Listed), s.ListedBy,
		at(f.ChallengedSinceMark), scraper.ChallengedSinceMark.Load(), at(s.Stuffing), s.Alerts, s.Applied)
}
