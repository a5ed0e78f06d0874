package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/seglog"
	"github.com/ratewarden/ratewarden/edge"
)

// TestAggregateAlertsAndAlertsCommand: an assembled edge writes a scraper
// and its background to a decision log (event time accelerated);
// `ratewarden aggregate --alerts` raises the heavy hitter on stdout while
// it rolls the log up, and `ratewarden alerts` over the partials it stored
// raises the same alerts, byte for byte; run again, it raises nothing new.
func TestAggregateAlertsAndAlertsCommand(t *testing.T) {
	tmp := t.TempDir()
	logDir := filepath.Join(tmp, "log")
	cfgPath := filepath.Join(tmp, "ratewarden.yaml")
	yaml := `
edge:
  upstream: http://127.0.0.1:1
  decision_queue: 200000              # the test sends faster than any edge serves: keep every decision
decisions:
  dir: ` + logDir + `
tiers:
  anonymous:
    global: {limit: 120, window: 1m}
alerts:
  sinks:
    file: "-"
    emf: file:` + filepath.Join(tmp, "alerts-emf.jsonl") + `
`
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	e, err := assemble.NewEdge(context.Background(), cfg, assemble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	var v edge.Verdict
	for sec := range 15 * 60 {
		now := t0.Add(time.Duration(sec) * time.Second)
		n, ip := 2, func(i int) string { return "198.51.100." + strconv.Itoa(1+(sec+i)%50) }
		if sec >= 8*60 && sec < 10*60 {
			n, ip = 802, func(i int) string {
				if i < 800 {
					return "203.0.113.7"
				}
				return "198.51.100." + strconv.Itoa(1+(sec+i)%50)
			}
		}
		for i := range n {
			r := &edge.Request{RemoteAddr: ip(i) + ":4000", Method: http.MethodGet, Host: "app.example", Path: "/", URI: "/", Header: http.Header{}}
			e.Limiter.Decide(context.Background(), now.Add(time.Duration(i)*time.Millisecond), r, &v)
		}
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	partials := filepath.Join(tmp, "partials")
	code, live, errs := runCLI(t, nil, "aggregate", "--no-follow", "--admin-listen", "off", "--decisions-dir", logDir,
		"--state-dir", filepath.Join(tmp, "state"), "--partials", "dir:"+partials, "--alerts", cfgPath)
	if code != 0 {
		t.Fatalf("aggregate: exit %d\n%s", code, errs)
	}
	var fired []alerts.Alert
	sc := bufio.NewScanner(strings.NewReader(live))
	for sc.Scan() {
		var a alerts.Alert
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("%s: %v", sc.Bytes(), err)
		}
		fired = append(fired, a)
	}
	var hh *alerts.Alert
	for i, a := range fired {
		if a.Key == "heavy_hitter/anonymous:global/203.0.113.7" && a.State == alerts.Firing {
			hh = &fired[i]
		}
	}
	if hh == nil || !hh.WindowStart.Equal(t0.Add(8*time.Minute)) {
		t.Fatalf("no heavy hitter on the scraper's first window; stdout:\n%s\nstderr:\n%s", live, errs)
	}
	if !strings.Contains(errs, "aggregate: alerts: this run: windows 15 (empty 0") {
		t.Errorf("stderr lacks the alerts' report:\n%s", errs)
	}

	state := filepath.Join(tmp, "alerts-state")
	code, again, errs := runCLI(t, nil, "alerts", "--config", cfgPath, "--partials", "dir:"+partials, "--state-dir", state)
	if code != 0 || again != live {
		t.Errorf("alerts: exit %d, stdout:\n%s\nwant:\n%s\nstderr:\n%s", code, again, live, errs)
	}
	code, third, errs := runCLI(t, nil, "alerts", "--config", cfgPath, "--partials", "dir:"+partials, "--state-dir", state)
	if code != 0 || third != "" {
		t.Errorf("alerts again: exit %d, stdout:\n%s\nstderr:\n%s", code, third, errs)
	}
	// The Alerts metric's documents, of both runs, pass the validator.
	emfPath := filepath.Join(tmp, "alerts-emf.jsonl")
	if b, err := os.ReadFile(emfPath); err != nil || strings.Count(string(b), `"Alerts"`) < 2 {
		t.Fatalf("EMF file: %v\n%s", err, b)
	}
	if code, out, errs := runCLI(t, nil, "emf", "validate", "--ignore-time", emfPath); code != 0 {
		t.Errorf("emf validate: exit %d\n%s%s", code, out, errs)
	}
}

// TestAlertsWindowFlag: alerts --window takes the lengths aggregate
// --window takes (assemble.CheckWindow), and refuses the others as a bad
// flag (exit 2) naming the flag and what it wants, where alerts took any
// positive length and ran, finding no partials of it.
func TestAlertsWindowFlag(t *testing.T) {
	const want = "want 1s to 24h, dividing an hour or a multiple of one"
	for _, w := range []string{"0s", "-1m", "500ms", "7s", "90m", "25h"} {
		t.Run(w, func(t *testing.T) {
			code, out, errs := runCLI(t, nil, "alerts", "--config", "x.yaml", "--partials", "dir:p", "--state-dir", "s", "--window", w)
			if code != 2 || !strings.Contains(errs, "alerts: --window ") || !strings.Contains(errs, want) {
				t.Errorf("alerts --window %s: exit %d, want 2 and %q:\n%s%s", w, code, want, out, errs)
			}
			// aggregate refuses the same length with the same words.
			code, out, errs = runCLI(t, nil, "aggregate", "--stdin", "--emf", "stdout", "--window", w)
			if code != 2 || !strings.Contains(errs, want) {
				t.Errorf("aggregate --window %s: exit %d, want 2 and %q:\n%s%s", w, code, want, out, errs)
			}
		})
	}
	// A length aggregate takes passes the flags; the missing --config is
	// then an error in what was read (exit 1).
	for _, w := range []string{"1s", "10s", "1m", "2h"} {
		code, out, errs := runCLI(t, nil, "alerts", "--config", filepath.Join(t.TempDir(), "none.yaml"), "--partials", "dir:p", "--state-dir", "s", "--window", w)
		if code != 1 || strings.Contains(errs, "--window") {
			t.Errorf("alerts --window %s: exit %d, want 1 (no such --config):\n%s%s", w, code, out, errs)
		}
	}
}

// TestAlertsRefusesWhatItCannotRead: alerts over a partials directory
// that is missing, empty, or holds windows of another length than
// --window exits 1 naming the directory and the lengths asked and found,
// where it ran no window and exited 0, as if there had been no traffic;
// report says the same of the same directories (PartialsDir.HasWindow).
func TestAlertsRefusesWhatItCannotRead(t *testing.T) {
	tmp := t.TempDir()
	cfgPath := filepath.Join(tmp, "ratewarden.yaml")
	yaml := `
tiers:
  anonymous:
    global: {limit: 120, window: 1m}
alerts:
  sinks:
    file: "-"
`
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	missing, empty, tens := filepath.Join(tmp, "missing"), filepath.Join(tmp, "empty"), filepath.Join(tmp, "tens")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	store := &aggregator.PartialsDir{Dir: tens}
	for i := range 4 {
		o := aggregator.Output{Partial: aggregator.NewPartial(t0.Add(time.Duration(i)*10*time.Second), 10*time.Second, 10), From: uint64(i), To: uint64(i + 1)}
		if err := store.Write(context.Background(), "log", o); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		dir    string
		follow bool
		want   []string
	}{
		{missing, false, []string{missing, "does not exist", "1m0s windows"}},
		{empty, false, []string{empty, "holds no partials", "1m0s windows"}},
		{tens, false, []string{tens, "holds no partials of 1m0s windows; it holds 10s: give --window"}},
		// Following waits for a directory's first partials, but not for a
		// length the aggregators do not write.
		{tens, true, []string{tens, "holds no partials of 1m0s windows; it holds 10s"}},
	}
	for _, c := range cases {
		args := []string{"alerts", "--config", cfgPath, "--partials", "dir:" + c.dir, "--state-dir", filepath.Join(t.TempDir(), "state")}
		if c.follow {
			args = append(args, "--follow")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		code, out, errs := runCLIContext(t, ctx, nil, args...)
		cancel()
		for _, w := range c.want {
			if code != 1 || !strings.Contains(errs, w) {
				t.Errorf("%s: exit %d, want 1 and %q:\n%s%s", strings.Join(args, " "), code, w, out, errs)
			}
		}
	}
	// The same directory read at its own length runs its windows.
	code, out, errs := runCLI(t, nil, "alerts", "--config", cfgPath, "--partials", "dir:"+tens, "--state-dir", filepath.Join(tmp, "state"), "--window", "10s")
	if code != 0 || !strings.Contains(errs, "windows 4") {
		t.Errorf("alerts --window 10s: exit %d, want 0 and 4 windows:\n%s%s", code, out, errs)
	}
	// report names what it does not find the same way.
	for _, dir := range []string{missing, empty} {
		code, out, errs := runCLI(t, nil, "report", "--partials", "dir:"+dir, "--from", t0.Format(time.RFC3339), "--to", t0.Add(time.Hour).Format(time.RFC3339))
		if code != 1 || !strings.Contains(errs, "report: partials directory "+dir) || !strings.Contains(errs, "want partials of 1m0s windows") {
			t.Errorf("report --partials dir:%s: exit %d, want 1 naming the directory and 1m0s:\n%s%s", dir, code, out, errs)
		}
	}
}

// TestAlertsMaxOpen: `ratewarden alerts` with alerts.max_open 10 over
// windows of five new heavy hitters each raises ten alerts, keeps ten
// open, and says on standard error how many it dropped at the cap; before,
// every heavy hitter stayed open for resolve_after windows (100 here).
func TestAlertsMaxOpen(t *testing.T) {
	cfgPath, partials, state := alertsOver(t, "max_open: 10\n  resolve_after: 100", 5, func(p *aggregator.Partial, w int) {
		for i := range 5 {
			d := decisions.Decision{Time: p.Start, Tier: "anonymous", Rule: "anonymous:global",
				ClientIP: netip.AddrFrom4([4]byte{203, 0, byte(w), byte(i)}), Outcome: decisions.Block}
			for range 700 {
				p.Update(&d)
			}
		}
	})
	code, out, errs := runCLI(t, nil, "alerts", "--config", cfgPath, "--partials", "dir:"+partials.Dir, "--state-dir", state)
	if n := strings.Count(out, `"state":"firing"`); code != 0 || n != 10 ||
		!strings.Contains(errs, "alerts: this run: windows 5 (empty 0, seen before 0, corrections left out 0), raised 10, resolved 0, suppressed 0, dropped at max_open: alerts 15, cooldowns 0, series evicted at max_series 0,") ||
		!strings.Contains(errs, "alerts: state: windows 5 (empty 0), raised 10, resolved 0, suppressed 0, dropped at max_open: alerts 15, cooldowns 0, series evicted at max_series 0, open 10\n") {
		t.Errorf("alerts: exit %d, %d raised, want 0 and 10 raised, 15 dropped, 10 open:\n%s", code, n, errs)
	}
	st, err := alerts.LoadState(state)
	if err != nil || st == nil || len(st.Open) != 10 || st.Stats.Dropped != 15 {
		t.Errorf("state: %v, want 10 open, 15 dropped", err)
	}
}

// TestAlertsSummaryIsThisRun: the summary of alerts says what this run
// did on one line and what its state holds on another, where one line
// mixed them: a rerun that ran no window and raised nothing said
// "windows 6 ..., raised 6", the counts of the runs before it.
func TestAlertsSummaryIsThisRun(t *testing.T) {
	tmp := t.TempDir()
	cfgPath := filepath.Join(tmp, "ratewarden.yaml")
	yaml := "tiers:\n  anonymous:\n    global: {limit: 120, window: 1m}\nalerts:\n  sinks:\n    file: \"-\"\n"
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	partials := &aggregator.PartialsDir{Dir: filepath.Join(tmp, "partials")}
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	// Window i holds a scraper of its own, 700 requests against a limit
	// of 120: a heavy hitter each.
	store := func(from, to int) {
		for i := from; i < to; i++ {
			p := aggregator.NewPartial(t0.Add(time.Duration(i)*time.Minute), time.Minute, 10)
			for range 700 {
				d := decisions.Decision{Time: p.Start, Tier: "anonymous", Rule: "anonymous:global",
					ClientIP: netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}), Outcome: decisions.Block}
				p.Update(&d)
			}
			if err := partials.Write(context.Background(), "log", aggregator.Output{Partial: p, From: uint64(i), To: uint64(i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	state := filepath.Join(tmp, "state")
	alertsRun := func() (string, string) {
		t.Helper()
		code, out, errs := runCLI(t, nil, "alerts", "--config", cfgPath, "--partials", "dir:"+partials.Dir, "--state-dir", state)
		if code != 0 {
			t.Fatalf("alerts: exit %d\n%s%s", code, out, errs)
		}
		return out, errs
	}
	lines := func(errs string) (run, st string) {
		for l := range strings.Lines(errs) {
			if after, ok := strings.CutPrefix(l, "alerts: this run: "); ok {
				run = strings.TrimSpace(after)
			}
			if after, ok := strings.CutPrefix(l, "alerts: state: "); ok {
				st = strings.TrimSpace(after)
			}
		}
		return run, st
	}
	raised := func(out string) int { return strings.Count(out, `"state":"firing"`) }

	store(0, 6)
	out, errs := alertsRun()
	run, st := lines(errs)
	n := raised(out)
	if n < 6 || !strings.HasPrefix(run, "windows 6 (empty 0, seen before 0, corrections left out 0), raised "+strconv.Itoa(n)+",") ||
		!strings.HasPrefix(st, "windows 6 (empty 0), raised "+strconv.Itoa(n)+",") || !strings.Contains(st, ", open ") {
		t.Errorf("first run raised %d; summary:\n%s", n, errs)
	}

	// Nothing new: this run ran nothing, the state is as it was.
	out, errs = alertsRun()
	run2, st2 := lines(errs)
	if out != "" || run2 != "windows 0 (empty 0, seen before 0, corrections left out 0), raised 0, resolved 0, suppressed 0, dropped at max_open: alerts 0, cooldowns 0, series evicted at max_series 0, actions 0 (applied 0), sink errors 0" || st2 != st {
		t.Errorf("rerun with no new window: stdout %q; summary:\n%s\nwant this run empty and the state line %q", out, errs, st)
	}

	// Two windows more: this run counts those two, the state all eight.
	store(6, 8)
	out, errs = alertsRun()
	run3, st3 := lines(errs)
	m := raised(out)
	if m < 2 || !strings.HasPrefix(run3, "windows 2 (empty 0, seen before 0, corrections left out 0), raised "+strconv.Itoa(m)+",") ||
		!strings.HasPrefix(st3, "windows 8 (empty 0), raised "+strconv.Itoa(n+m)+",") {
		t.Errorf("third run raised %d (%d before); summary:\n%s", m, n, errs)
	}
}

// TestAggregateEMFStdoutRefusesAlertsThere: aggregate --emf stdout with
// --alerts whose JSON lines go to standard output too (alerts.sinks.file
// "-", or no sink set) is refused as bad flags (exit 2) naming both, before
// anything is read or written, where the alert lines were interleaved with
// the EMF documents, which CloudWatch's agent then read as EMF. Either
// written elsewhere runs.
func TestAggregateEMFStdoutRefusesAlertsThere(t *testing.T) {
	tmp := t.TempDir()
	logDir := filepath.Join(tmp, "log")
	l, err := seglog.Open(logDir, seglog.Options{}) // an empty log
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	config := func(name, sinks string) string {
		path := filepath.Join(tmp, name)
		yaml := "tiers:\n  anonymous:\n    global: {limit: 120, window: 1m}\nalerts:\n" + sinks
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	dash := config("dash.yaml", "  sinks:\n    file: \"-\"\n")
	none := config("none.yaml", "  min_history: 3\n")
	file := config("file.yaml", "  sinks:\n    file: "+filepath.Join(tmp, "alerts.jsonl")+"\n")
	aggregate := func(emf, alertsCfg string) (int, string, string) {
		return runCLI(t, nil, "aggregate", "--no-follow", "--admin-listen", "off", "--decisions-dir", logDir,
			"--state-dir", filepath.Join(t.TempDir(), "state"), "--emf", emf, "--alerts", alertsCfg)
	}
	for _, c := range []struct{ cfg, why string }{{dash, `alerts.sinks.file is "-"`}, {none, "sets no alerts sink"}} {
		code, out, errs := aggregate("stdout", c.cfg)
		want := "aggregate: --emf stdout and --alerts " + c.cfg + " both write to standard output"
		if code != 2 || !strings.Contains(errs, want) || !strings.Contains(errs, c.why) || out != "" {
			t.Errorf("--emf stdout --alerts %s: exit %d, want 2 and %q (%s):\n%s%s", c.cfg, code, want, c.why, out, errs)
		}
	}
	for _, c := range []struct{ emf, cfg string }{{"stdout", file}, {"file:" + filepath.Join(tmp, "emf.jsonl"), dash}} {
		if code, out, errs := aggregate(c.emf, c.cfg); code != 0 {
			t.Errorf("--emf %s --alerts %s: exit %d, want 0:\n%s%s", c.emf, c.cfg, code, out, errs)
		}
	}
}

// TestServeEMFStdoutRefusesAlertsThere: serve --emf stdout with a
// configuration whose alerts.sinks.file is "-" is refused before anything
// starts (exit 2), as aggregate refuses it: both would write lines to
// standard output.
func TestServeEMFStdoutRefusesAlertsThere(t *testing.T) {
	tmp := t.TempDir()
	cfg := filepath.Join(tmp, "dash.yaml")
	yaml := "tiers:\n  anonymous:\n    global: {limit: 120, window: 1m}\nalerts:\n  sinks:\n    file: \"-\"\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	// Bounded: a serve that is not refused runs until its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	code, out, errs := runCLIContext(t, ctx, nil, "serve", "--config", cfg, "--emf", "stdout", "--listen", "127.0.0.1:0", "--admin-listen", "off",
		"--dashboard-listen", "off", "--decisions-dir", filepath.Join(tmp, "log"), "--state-dir", filepath.Join(tmp, "state"), "--partials-dir", filepath.Join(tmp, "partials"))
	want := `serve: --emf stdout and the configuration's alerts.sinks.file "-" both write to standard output`
	if code != 2 || !strings.Contains(errs, want) || out != "" {
		t.Errorf("serve --emf stdout with alerts.sinks.file \"-\": exit %d, want 2 and %q:\n%s%s", code, want, out, errs)
	}
	if _, err := os.Stat(filepath.Join(tmp, "log")); !os.IsNotExist(err) {
		t.Errorf("the refused serve made its decision log: %v", err)
	}
}

// TestAlertsSeriesEvicted: past alerts.max_series the series dropped are
// counted on both summary lines, as the state counts them; before, only
// the state file held the count.
func TestAlertsSeriesEvicted(t *testing.T) {
	cfgPath, partials, state := alertsOver(t, "max_series: 10", 3, func(p *aggregator.Partial, _ int) {
		for r := range 20 {
			d := decisions.Decision{Time: p.Start, Tier: "anonymous", Rule: fmt.Sprintf("anonymous:/p%d", r),
				ClientIP: netip.AddrFrom4([4]byte{203, 0, 113, byte(r)}), Outcome: decisions.Allow}
			p.Update(&d)
		}
	})
	code, _, errs := runCLI(t, nil, "alerts", "--config", cfgPath, "--partials", "dir:"+partials.Dir, "--state-dir", state)
	st, err := alerts.LoadState(state)
	if err != nil || st == nil || st.Stats.Evicted == 0 {
		t.Fatalf("state: %v; want series evicted (exit %d):\n%s", err, code, errs)
	}
	want := fmt.Sprintf("series evicted at max_series %d,", st.Stats.Evicted)
	if code != 0 || strings.Count(errs, want) != 2 {
		t.Errorf("alerts: exit %d; want 0 and %q on both summary lines:\n%s", code, want, errs)
	}
}

// alertsOver writes a configuration whose alerts section has settings
// (YAML lines under alerts:) and a file sink to standard output, and the
// partials of windows one-minute windows from 2026-11-02 09:00 UTC, each
// filled by fill; it returns the configuration's path, the partials and
// a state directory.
func alertsOver(t *testing.T, settings string, windows int, fill func(p *aggregator.Partial, w int)) (string, *aggregator.PartialsDir, string) {
	t.Helper()
	tmp := t.TempDir()
	cfgPath := filepath.Join(tmp, "ratewarden.yaml")
	yaml := "tiers:\n  anonymous:\n    global: {limit: 120, window: 1m}\nalerts:\n  " + settings + "\n  sinks:\n    file: \"-\"\n"
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	partials := &aggregator.PartialsDir{Dir: filepath.Join(tmp, "partials")}
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	for w := range windows {
		p := aggregator.NewPartial(t0.Add(time.Duration(w)*time.Minute), time.Minute, 10)
		fill(p, w)
		if err := partials.Write(context.Background(), "log", aggregator.Output{Partial: p, From: uint64(w), To: uint64(w)}); err != nil {
			t.Fatal(err)
		}
	}
	return cfgPath, partials, filepath.Join(tmp, "state")
}
