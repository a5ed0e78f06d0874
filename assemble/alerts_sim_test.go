package assemble_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge"
)

// t0 is the simulations' first instant: a Monday at midnight.
var t0 = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)

// simConfig is the configuration of the simulations: anonymous clients by
// address, users and their plans from a trusted proxy (127.0.0.1), a
// paying tier, a login path with a tight limit, and an allow list.
const simConfig = `
edge:
  upstream: ORIGIN
identity:
  trusted_proxies: [127.0.0.1/32]
lists:
  allow_file: ALLOW
tiers:
  anonymous:
    global: {limit: 120, window: 1m}
    paths:
      /api/login: {limit: 10, window: 1m}
  authenticated:
    global: {limit: 600, window: 1m}
  pro:
    extends: authenticated
    global: {limit: 2000, window: 1m}
    paths:
      /api/export: {limit: 5, window: 1m}
alerts:
  paying_tiers: [pro]
`

// loadSimConfig returns simConfig with extra appended (more top-level
// keys, or keys of alerts: indented by two) and an allow list holding
// allow.
func loadSimConfig(t testing.TB, extra string, allow ...string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "allow.txt")
	if err := os.WriteFile(path, []byte(strings.Join(allow, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return loadConfig(t, strings.Replace(simConfig, "ALLOW", path, 1)+extra)
}

// sim drives synthetic traffic through the assembled edge's limiter at
// event times it chooses, rolls the decisions up with the aggregator's
// Rollup as `ratewarden aggregate` does (a window closes when the
// watermark passes it), and hands every window to an alerts Runner.
type sim struct {
	t      testing.TB
	edge   *assemble.Edge
	rollup *aggregator.Rollup
	runner *alerts.Runner
	seq    uint64
	v      edge.Verdict
	req    edge.Request
	ctx    context.Context
	// partials, if set, stores every window as `ratewarden aggregate
	// --partials` does.
	partials *aggregator.PartialsDir
	// keep, if set, sees every output; restart, if set, runs once, after
	// the output of the window starting at restartAt.
	keep      func(aggregator.Output)
	restart   func()
	restartAt time.Time
}

// newSim assembles the edge of cfg and a runner writing alerts and
// actions as JSON lines to out, keeping its state in stateDir ("" none).
func newSim(t testing.TB, cfg *config.Config, window time.Duration, out *bytes.Buffer, stateDir string, pol *alerts.Policies) *sim {
	t.Helper()
	e, err := assemble.NewEdge(context.Background(), cfg, assemble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	s := &sim{t: t, edge: e, ctx: context.Background(),
		rollup: aggregator.NewRollup(aggregator.Options{Window: window, Lateness: time.Second, TopK: 100})}
	s.runner = newRunner(t, cfg, window, out, stateDir, pol)
	s.req.Header = http.Header{}
	return s
}

func newRunner(t testing.TB, cfg *config.Config, window time.Duration, out *bytes.Buffer, stateDir string, pol *alerts.Policies) *alerts.Runner {
	t.Helper()
	jl := alerts.NewJSONLines(out, nil)
	r, err := alerts.NewRunner(alerts.RunnerOptions{
		Engine:   alerts.Options{Config: cfg.Alerts, Window: window, Limits: alerts.RuleLimits(cfg)},
		StateDir: stateDir, Sinks: []alerts.Sink{jl}, Actions: jl, Policies: pol,
		Report: func(err error) { t.Errorf("sink: %v", err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// do makes one request at now from ip (and, when user is set, as user on
// plan through the trusted proxy) to path.
func (s *sim) do(now time.Time, ip, user, plan, path string) {
	r := &s.req
	clear(r.Header)
	r.Method, r.Host, r.Path, r.URI = http.MethodGet, "app.example", path, path
	r.RemoteAddr = ip + ":40000"
	if user != "" {
		r.RemoteAddr = "127.0.0.1:40000"
		r.Header.Set("X-Forwarded-For", ip)
		r.Header.Set("X-User-Id", user)
		r.Header.Set("X-User-Plan", plan)
	}
	s.edge.Limiter.Begin(s.ctx, now, r, &s.v)
	s.edge.Limiter.Release(s.ctx, now, &s.v)
	s.add(&s.v.Decision)
}

func (s *sim) add(d *decisions.Decision) {
	s.rollup.Add(d, s.seq)
	s.seq++
	if s.rollup.Due() {
		s.flush(false)
	}
}

// flush hands the windows the rollup closed (every open one, when final)
// to the runner.
func (s *sim) flush(final bool) {
	s.t.Helper()
	err := s.rollup.Flush(final, func(o aggregator.Output) error {
		if s.partials != nil {
			if err := s.partials.Write(s.ctx, "log", o); err != nil {
				return err
			}
		}
		if s.keep != nil {
			s.keep(o)
		}
		if err := s.runner.Write(s.ctx, "log", o); err != nil {
			return err
		}
		if s.restart != nil && !o.Partial.Start.Before(s.restartAt) {
			r := s.restart
			s.restart = nil
			r()
		}
		return nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// records reads the alert and action records of out.
func records(t testing.TB, out []byte) (as []alerts.Alert, acts []alerts.Action) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var kind struct{ Kind string }
		if err := json.Unmarshal(sc.Bytes(), &kind); err != nil {
			t.Fatalf("%s: %v", sc.Bytes(), err)
		}
		switch kind.Kind {
		case "alert":
			var a alerts.Alert
			if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
				t.Fatal(err)
			}
			as = append(as, a)
		case "action":
			var a alerts.Action
			if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
				t.Fatal(err)
			}
			acts = append(acts, a)
		default:
			t.Fatalf("a record of kind %q", kind.Kind)
		}
	}
	return as, acts
}

// find returns the first alert of as with key and state.
func find(as []alerts.Alert, key, state string) (alerts.Alert, bool) {
	for _, a := range as {
		if a.Key == key && a.State == state {
			return a, true
		}
	}
	return alerts.Alert{}, false
}

// keys lists the alerts' states and keys, for messages.
func keys(as []alerts.Alert) string {
	var b strings.Builder
	for _, a := range as {
		b.WriteString("\n  " + a.Time.Format(time.RFC3339) + " " + a.State + " " + a.Key)
	}
	return b.String()
}
