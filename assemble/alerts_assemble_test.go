package assemble_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/assemble"
)

// TestNewAlertsFromConfig: the alerts section's sinks (a file, a webhook,
// EMF to a file) and a dry-run policy, assembled from the configuration,
// see the scraper; the actions go to their own file, and the alerts'
// counts are on the aggregator's /metrics.
func TestNewAlertsFromConfig(t *testing.T) {
	var posts atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { posts.Add(1) }))
	defer hook.Close()
	dir := t.TempDir()
	file, actions, emfFile := filepath.Join(dir, "alerts.jsonl"), filepath.Join(dir, "actions.jsonl"), filepath.Join(dir, "emf.jsonl")
	cfg := loadSimConfig(t, `  sinks:
    file: `+file+`
    webhook: {url: "`+hook.URL+`"}
    emf: file:`+emfFile+`
feedback:
  actions: `+actions+`
  policies:
    - {name: challenge-hitters, alerts: [heavy_hitter], action: challenge, ttl: 30m}
`)
	al, err := assemble.NewAlerts(context.Background(), cfg, assemble.AlertsOptions{Window: time.Minute, StateDir: dir, Archive: true})
	if err != nil {
		t.Fatal(err)
	}
	var unused bytes.Buffer
	s := newSim(t, cfg, time.Minute, &unused, "", nil)
	s.runner = al.Runner
	s.run(t0, t0.Add(14*time.Minute), rand.New(rand.NewPCG(41, 42)), background, func(sec time.Time) {
		if m := sec.Sub(t0) / time.Minute; m >= 8 && m < 10 {
			for i := range 800 {
				s.do(sec.Add(time.Duration(i)*time.Second/800), "203.0.113.7", "", "", "/")
			}
		}
	})

	var latest atomic.Pointer[aggregator.RunStats]
	h, err := assemble.AggregatorMetrics(&latest, nil, time.Now, al.RegisterMetrics)
	if err != nil {
		t.Fatal(err)
	}
	if err := al.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	read := func(path string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	as, _ := records(t, read(file))
	if _, ok := find(as, "heavy_hitter/anonymous:global/203.0.113.7", alerts.Firing); !ok {
		t.Fatalf("no heavy hitter in the alerts file:%s", keys(as))
	}
	_, acts := records(t, read(actions))
	if len(acts) != 1 || acts[0].Why != alerts.WhyDryRun || acts[0].Target != "203.0.113.7" || acts[0].List != "challenge" {
		t.Errorf("actions %+v", acts)
	}
	if n := strings.Count(string(read(emfFile)), `"Alerts"`); n < 1 {
		t.Errorf("%d EMF documents with the Alerts metric", n)
	}
	if int(posts.Load()) != len(as) {
		t.Errorf("%d webhook posts for %d alerts", posts.Load(), len(as))
	}
	for _, want := range []string{"ratewarden_alerts_raised_total", "ratewarden_alerts_webhook_dropped_total", "ratewarden_alerts_actions_total"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestNewAlertsRefusesAWriteWithoutAWriter: with dry_run false and no
// list writer, assembling fails and says why.
func TestNewAlertsRefusesAWriteWithoutAWriter(t *testing.T) {
	cfg := loadSimConfig(t, "feedback:\n  dry_run: false\n  policies:\n    - {name: p, alerts: [drops], action: deny}\n")
	_, err := assemble.NewAlerts(context.Background(), cfg, assemble.AlertsOptions{Window: time.Minute, StateDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "feedback.dry_run") {
		t.Errorf("error %v", err)
	}
}
