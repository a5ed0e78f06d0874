package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/edge"
)

// TestAggregateCountsIPv6ByConfiguredPrefix: aggregate counts an IPv6
// client in its top-K lists by the prefix the edges' configuration
// (identity.ipv6_prefix) says the edge counts it under, read from --config
// or else --alerts, and by its /64 without either: a client moving over
// the /64s of its /56 is one client, 2001:db8:1:200::/56, to an edge and
// an aggregator configured with 56. A --config and an --alerts file that
// disagree are refused, naming both. report --decisions-dir counts them
// by its --config likewise.
func TestAggregateCountsIPv6ByConfiguredPrefix(t *testing.T) {
	tmp := t.TempDir()
	logDir := filepath.Join(tmp, "log")
	write := func(name, yaml string) string {
		path := filepath.Join(tmp, name)
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	base := "edge: {upstream: \"http://127.0.0.1:1\"}\ndecisions: {dir: " + logDir + "}\ntiers:\n  anonymous:\n    global: {limit: 120, window: 1m}\n"
	cfg56 := write("56.yaml", base+"identity: {ipv6_prefix: 56}\n")
	alerts56 := write("alerts56.yaml", base+"identity: {ipv6_prefix: 56}\nalerts: {sinks: {file: "+filepath.Join(tmp, "alerts.jsonl")+"}}\n")
	cfg64 := write("64.yaml", base)
	cfg, err := config.Load(cfg56)
	if err != nil {
		t.Fatal(err)
	}
	e, err := assemble.NewEdge(context.Background(), cfg, assemble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	var v edge.Verdict
	for i := range 256 {
		r := &edge.Request{RemoteAddr: fmt.Sprintf("[2001:db8:1:2%02x::%x]:4000", i, i), Method: http.MethodGet, Host: "app.example", Path: "/", URI: "/", Header: http.Header{}}
		e.Limiter.Decide(context.Background(), t0.Add(time.Duration(i)*time.Millisecond), r, &v)
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"--config", []string{"--config", cfg56}, "2001:db8:1:200::/56 256"},
		{"--alerts", []string{"--alerts", alerts56}, "2001:db8:1:200::/56 256"},
		{"neither", nil, "256 clients of 1: 2001:db8:1:200::/64 1"},
	} {
		partials := filepath.Join(tmp, "partials-"+c.name)
		args := append([]string{"aggregate", "--no-follow", "--admin-listen", "off", "--decisions-dir", logDir,
			"--state-dir", filepath.Join(tmp, "state-"+c.name), "--partials", "dir:" + partials, "--top-k", "1000"}, c.args...)
		if code, _, errs := runCLI(t, nil, args...); code != 0 {
			t.Fatalf("%s: exit %d\n%s", c.name, code, errs)
		}
		ps, _, err := (&aggregator.PartialsDir{Dir: partials}).Read(t.Context(), time.Minute, t0.Add(-time.Hour), t0.Add(time.Hour))
		if err != nil || len(ps) != 1 || ps[t0] == nil {
			t.Fatalf("%s: %d partials, %v", c.name, len(ps), err)
		}
		top := ps[t0].Offenders.Requests.Top(1000)
		got := fmt.Sprintf("%s %d", top[0].Client, top[0].Count-top[0].Err)
		if len(top) > 1 {
			got = fmt.Sprintf("%d clients of %d: %s", len(top), top[0].Count, got)
		}
		if got != c.want {
			t.Errorf("%s: requests %s, want %s", c.name, got, c.want)
		}
	}
	// report --decisions-dir rolls the log up by the same prefix.
	for _, c := range []struct {
		args      []string
		want, not string
	}{
		{[]string{"--config", cfg56}, "| `2001:db8:1:200::/56` | 256 |", "::/64"},
		{nil, "::/64` | 1 |", "::/56"},
	} {
		args := append([]string{"report", "--decisions-dir", logDir, "--from", t0.Format(time.RFC3339), "--to", t0.Add(time.Minute).Format(time.RFC3339), "--format", "md"}, c.args...)
		code, out, errs := runCLI(t, nil, args...)
		if code != 0 || !strings.Contains(out, c.want) || strings.Contains(out, c.not) {
			t.Errorf("report %v: exit %d, want %q and no %q in:\n%s%s", c.args, code, c.want, c.not, out, errs)
		}
	}
	if code, _, errs := runCLI(t, nil, "report", "--partials", "dir:"+filepath.Join(tmp, "partials---config"), "--from", t0.Format(time.RFC3339), "--config", cfg56); code != 2 || !strings.Contains(errs, "--config with --partials") {
		t.Errorf("report --partials --config: exit %d, want 2:\n%s", code, errs)
	}
	code, _, errs := runCLI(t, nil, "aggregate", "--no-follow", "--admin-listen", "off", "--decisions-dir", logDir,
		"--state-dir", filepath.Join(tmp, "state-both"), "--partials", "dir:"+filepath.Join(tmp, "partials-both"), "--config", cfg64, "--alerts", alerts56)
	if want := "counts an IPv6 client by its /56 (identity.ipv6_prefix), --config " + cfg64 + " by its /64"; code != 2 || !strings.Contains(errs, want) {
		t.Errorf("--config and --alerts that disagree: exit %d, want 2 and %q:\n%s", code, want, errs)
	}
}
