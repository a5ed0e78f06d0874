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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge/lists"
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
	scrapeThrough(t, cfg, al, 14, 2, 41)

	h, err := assemble.AggregatorMetrics(func() aggregator.RunStats { return aggregator.RunStats{} }, nil, time.Now, al.RegisterMetrics)
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

// entries is a list store of the test's own, in memory.
type entries struct {
	mu sync.Mutex
	m  map[string]lists.Entry
}

func (s *entries) Put(_ context.Context, e lists.Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[e.List+" "+e.Target] = e
	return nil
}

func (s *entries) Remove(_ context.Context, list, target, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, list+" "+target)
	return nil
}

// TestNewAlertsWritesEntriesAndEvents: with dry_run false, the policy's
// entry goes to the list writer and its feedback event, a decision of kind
// feedback, to feedback.events, readable by the decision codecs.
func TestNewAlertsWritesEntriesAndEvents(t *testing.T) {
	dir := t.TempDir()
	events := filepath.Join(dir, "feedback.jsonl")
	cfg := loadSimConfig(t, `  sinks: {file: `+filepath.Join(dir, "alerts.jsonl")+`}
feedback:
  dry_run: false
  events: `+events+`
  policies:
    - {name: challenge-hitters, alerts: [heavy_hitter], action: challenge, ttl: 30m}
`)
	store := &entries{m: map[string]lists.Entry{}}
	al, err := assemble.NewAlerts(context.Background(), cfg, assemble.AlertsOptions{Window: time.Minute, StateDir: dir, Lists: store})
	if err != nil {
		t.Fatal(err)
	}
	scrapeThrough(t, cfg, al, 12, 1, 51)
	if err := al.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	e, ok := store.m["challenge 203.0.113.7"]
	if !ok || e.Pending || e.By != "policy:challenge-hitters" || !e.Expires.Equal(t0.Add(9*time.Minute+30*time.Minute)) {
		t.Errorf("entry %+v (written %v)", e, ok)
	}
	b, err := os.ReadFile(events)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	d, _, err := decisions.ParseJSON([]byte(lines[0]))
	if err != nil || len(lines) != 1 || d.Kind != decisions.KindFeedback || d.List != "challenge" || d.Action != "add" ||
		d.Target != "203.0.113.7" || d.TTL != 30*time.Minute {
		t.Errorf("events %q: %+v, %v", lines, d, err)
	}
	if st := al.Runner.Stats(); st.Applied != 1 {
		t.Errorf("stats %+v", st)
	}
}

// scrapeThrough runs minutes of the background through the assembled
// alerts al, with the scraper (800 requests a second) from minute 8 for
// scraping minutes.
func scrapeThrough(t *testing.T, cfg *config.Config, al *assemble.Alerts, minutes, scraping int, seed uint64) {
	t.Helper()
	var unused bytes.Buffer
	s := newSim(t, cfg, time.Minute, &unused, "", nil)
	s.runner = al.Runner
	s.run(t0, t0.Add(time.Duration(minutes)*time.Minute), rand.New(rand.NewPCG(seed, seed+1)), background, func(sec time.Time) {
		if m := int(sec.Sub(t0) / time.Minute); m >= 8 && m < 8+scraping {
			for i := range 800 {
				s.do(sec.Add(time.Duration(i)*time.Second/800), "203.0.113.7", "", "", "/")
			}
		}
	})
}
