package assemble_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/assemble"
)

const serveYAML = `
edge: {upstream: ORIGIN, listen: "127.0.0.1:0", admin_listen: ""}
decisions: {linger: 10ms}
serve: {window: 1s, lateness: 0s, dashboard: {listen: "127.0.0.1:0"}}
tiers:
  anonymous:
    global: {limit: 3, window: 1m}
`

// TestServeRunsAndStops: Serve answers through the edge and the dashboard,
// and when ctx is done it returns with every decision in the partials,
// the open window included.
func TestServeRunsAndStops(t *testing.T) {
	dir := t.TempDir()
	cfg := loadConfig(t, serveYAML)
	cfg.Decisions.Dir, cfg.Serve.StateDir, cfg.Serve.PartialsDir = filepath.Join(dir, "log"), filepath.Join(dir, "state"), filepath.Join(dir, "partials")
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan assemble.ServeAddrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- assemble.Serve(ctx, cfg, assemble.ServeOptions{Ready: func(a assemble.ServeAddrs) { ready <- a }})
	}()
	var a assemble.ServeAddrs
	select {
	case a = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	codes := map[int]int{}
	for range 5 {
		resp, err := http.Get("http://" + a.Edge + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	if codes[200] != 3 || codes[429] != 2 {
		t.Errorf("statuses %v, want 3×200 and 2×429", codes)
	}
	resp, err := http.Get("http://" + a.Dashboard + "/api/lists")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("dashboard: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ps, problems, err := (&aggregator.PartialsDir{Dir: cfg.Serve.PartialsDir}).Read(time.Second, time.Time{}, time.Now().Add(time.Hour))
	if err != nil || len(problems) > 0 {
		t.Fatal(err, problems)
	}
	var total uint64
	for _, p := range ps {
		total += p.Counts.Total()
	}
	if total != 5 {
		t.Errorf("the partials hold %d decisions, want 5", total)
	}
}

// TestServeAggregatorFails: an aggregator that cannot start (its state
// directory is a file) stops serve with its error, and the edge with it.
func TestServeAggregatorFails(t *testing.T) {
	dir := t.TempDir()
	cfg := loadConfig(t, serveYAML)
	cfg.Decisions.Dir, cfg.Serve.PartialsDir = filepath.Join(dir, "log"), filepath.Join(dir, "partials")
	cfg.Serve.StateDir = filepath.Join(dir, "file")
	os.WriteFile(cfg.Serve.StateDir, []byte("not a directory"), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := assemble.Serve(ctx, cfg, assemble.ServeOptions{})
	if err == nil || !strings.Contains(err.Error(), "aggregator stopped") || ctx.Err() != nil {
		t.Errorf("Serve = %v, want the aggregator's error before the deadline", err)
	}
}
