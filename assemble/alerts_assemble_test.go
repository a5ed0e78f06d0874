package assemble_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
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
	for _, want := range []string{"ratewarden_alerts_raised_total", "ratewarden_alerts_dropped_total", "ratewarden_alerts_cooldowns_dropped_total", "ratewarden_alerts_webhook_dropped_total", "ratewarden_alerts_actions_total"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestNewAlertsRefusesAListWithoutAStore: with dry_run false, a policy
// whose list has no store is refused, naming the policy's key; the same
// configuration read from a file is refused with its file and line.
func TestNewAlertsRefusesAListWithoutAStore(t *testing.T) {
	const policy = "feedback:\n  dry_run: DRY\n  policies:\n    - {name: p, alerts: [drops], action: deny}\n"
	cfg := loadSimConfig(t, strings.Replace(policy, "DRY", "true", 1))
	*cfg.Feedback.DryRun = false
	_, err := assemble.NewAlerts(context.Background(), cfg, assemble.AlertsOptions{Window: time.Minute, StateDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "feedback.policies[0].action") || !strings.Contains(err.Error(), "lists.deny_file or lists.table") {
		t.Errorf("error %v", err)
	}
	y := strings.Replace(simConfig, "ALLOW", "allow.txt", 1) + strings.Replace(policy, "DRY", "false", 1)
	c, err := config.Parse([]byte(y), "ratewarden.yaml")
	if err == nil {
		c.Defaults()
		err = c.Validate()
	}
	line := strings.Count(y[:strings.Index(y, "    - {name: p")], "\n") + 1
	if want := fmt.Sprintf("ratewarden.yaml:%d: feedback.policies[0].action", line); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want %s", err, want)
	}
}

// recorded collects the feedback events a list watcher records, as the
// edge's decision emitter takes them.
type recorded struct {
	mu sync.Mutex
	ds []decisions.Decision
}

func (r *recorded) Emit(d decisions.Decision) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ds = append(r.ds, d)
	return true
}

// TestNewAlertsWritesTheListOnceRecorded: with dry_run false, the policy's
// entry goes to the challenge list file the configuration names (the
// FileStore, as FeedbackLists opens it), the policy itself records no
// feedback event, and a watcher of that file, as the edge runs it, records
// the change as exactly one feedback event, however often it reads.
func TestNewAlertsWritesTheListOnceRecorded(t *testing.T) {
	dir := t.TempDir()
	challenge := filepath.Join(dir, "challenge.list")
	if err := os.WriteFile(challenge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	allow := filepath.Join(dir, "allow.list")
	if err := os.WriteFile(allow, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sim := strings.Replace(simConfig, "  allow_file: ALLOW\n", "  allow_file: "+allow+"\n  challenge_file: "+challenge+"\n", 1)
	cfg := loadConfig(t, sim+`  sinks: {file: `+filepath.Join(dir, "alerts.jsonl")+`}
challenge: {enabled: true}
feedback:
  dry_run: false
  policies:
    - {name: challenge-hitters, alerts: [heavy_hitter], action: challenge, ttl: 30m}
`)
	if _, err := assemble.FeedbackLists(context.Background(), cfg); err != nil {
		t.Fatalf("FeedbackLists: %v", err)
	}
	// The simulation's event time is in the past; the store's clock goes
	// with it, so that the entry's expiry is in its future.
	now := func() time.Time { return t0.Add(9 * time.Minute) }
	store := lists.NewFileStore(assemble.ListFiles(cfg.Lists), now)
	rec := &recorded{}
	w, err := lists.WatchSource(store.Source(lists.Challenge), lists.WatchOptions{List: lists.Challenge, Record: rec, Now: now,
		StateFile: filepath.Join(dir, "challenge.recorded")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(context.Background())
	al, err := assemble.NewAlerts(context.Background(), cfg, assemble.AlertsOptions{Window: time.Minute, StateDir: dir, Lists: store})
	if err != nil {
		t.Fatal(err)
	}
	scrapeThrough(t, cfg, al, 12, 1, 51)
	if err := al.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	es, err := store.Entries(context.Background(), lists.Challenge)
	if err != nil || len(es) != 1 || es[0].Target != "203.0.113.7" || es[0].Pending || es[0].By != "policy:challenge-hitters" ||
		!es[0].Expires.Equal(t0.Add(9*time.Minute+30*time.Minute)) {
		t.Errorf("entries %+v, %v", es, err)
	}
	for range 3 {
		if err := w.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	if len(rec.ds) != 1 {
		t.Fatalf("%d feedback events, want 1: %+v", len(rec.ds), rec.ds)
	}
	d := rec.ds[0]
	if d.Kind != decisions.KindFeedback || d.List != "challenge" || d.Action != "add" || d.Target != "203.0.113.7" ||
		d.TTL != 30*time.Minute || d.Node != "policy:challenge-hitters" {
		t.Errorf("event %+v", d)
	}
	if !w.List().ContainsAt(netip.MustParseAddr("203.0.113.7"), "", now()) {
		t.Error("the edge's challenge list lacks the scraper")
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

// TestFeedbackListsOpensTheStore: FeedbackLists opens the store the lists
// section names, the files or the DynamoDB table (dynalite), and the
// policies write through it within the guard rails: a person's permanent
// deny entry is kept (stronger_entry), another client is challenged.
func TestFeedbackListsOpensTheStore(t *testing.T) {
	for _, kind := range []string{"file", "table"} {
		t.Run(kind, func(t *testing.T) {
			cfg := loadConfig(t, listsConfig(t, kind, t.TempDir(), time.Second)+
				"feedback:\n  dry_run: false\n  policies:\n    - {name: challenge-hitters, alerts: [heavy_hitter], action: challenge, ttl: 30m}\n")
			ctx := context.Background()
			w, err := assemble.FeedbackLists(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Put(ctx, lists.Entry{List: lists.Deny, Target: "203.0.113.7", By: "alice", Reason: "abuse"}); err != nil {
				t.Fatal(err)
			}
			pol := alerts.NewPolicies(cfg.Feedback, w, nil, func(string) bool { return false }, cfg.Identity.IPv6Prefix)
			now := time.Now().UTC().Truncate(time.Second)
			var applied []time.Time
			var got []string
			for _, id := range []string{"203.0.113.7", "203.0.113.8"} {
				for _, a := range pol.Act(ctx, alerts.Alert{Time: now, Type: alerts.TypeHeavyHitter, Severity: alerts.Critical,
					State: alerts.Firing, Key: "heavy_hitter/anonymous:global/" + id, Tier: "anonymous", Identities: []string{id}}, &applied) {
					got = append(got, fmt.Sprintf("%s %v %s", a.Target, a.Applied, a.Why))
				}
			}
			if want := []string{"203.0.113.7 false stronger_entry", "203.0.113.8 true "}; !slices.Equal(got, want) {
				t.Errorf("actions %q, want %q", got, want)
			}
			es, err := w.Entries(ctx, lists.Challenge)
			if err != nil || len(es) != 1 || es[0].Target != "203.0.113.8" || es[0].By != "policy:challenge-hitters" {
				t.Errorf("challenge list %+v, %v", es, err)
			}
		})
	}
}
