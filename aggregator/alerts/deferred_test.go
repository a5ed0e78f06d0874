package alerts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge/lists"
)

// TestCappedActionIsTakenOnceTheCapFrees: a decoy that becomes a heavy
// hitter first spends the hour's cap (max_per_hour 1), so the action on
// the scraper of the same window is cap_reached; the scraper keeps going,
// its alert stays open, and once the hour is over the policy takes the
// action it held back: the scraper is on the challenge list file, expiring
// a TTL after the window that wrote it. While the cap is full nothing more
// is recorded.
func TestCappedActionIsTakenOnceTheCapFrees(t *testing.T) {
	cfg := configOf(t, "tiers:\n  anonymous:\n    global: {limit: 1, window: 1m}\n")
	dir := t.TempDir()
	path := filepath.Join(dir, "challenge.list")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	store := lists.NewFileStore(map[string]string{lists.Challenge: path}, func() time.Time { return t0 })
	var log bytes.Buffer
	r, err := alerts.NewRunner(alerts.RunnerOptions{
		Engine:   alerts.Options{Config: cfg.Alerts, Window: time.Minute, Limits: alerts.RuleLimits(cfg)},
		Policies: alerts.NewPolicies(feedbackConfig(false, 1, challengeHitters), store, nil, func(string) bool { return false }, 64),
		Actions:  alerts.NewJSONLines(&log, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	const decoy, scraper = "203.0.113.1", "203.0.113.2"
	rule := config.RuleID("anonymous", config.GlobalRule)
	const windows = 70
	for w := range windows {
		start := t0.Add(time.Duration(w) * time.Minute)
		p := aggregator.NewPartial(start, time.Minute, 100)
		for range 10 { // 10× the limit of 1 a minute: the threshold is 5
			for _, ip := range []string{decoy, scraper}[min(w, 1):] {
				d := decisions.Decision{Time: start, Tier: "anonymous", Rule: rule, ClientIP: netip.MustParseAddr(ip), Outcome: decisions.Block}
				p.Update(&d)
			}
		}
		if err := r.Window(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		var a alerts.Action
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		got = append(got, fmt.Sprintf("%s %s %v %s", a.Time.Sub(t0), a.Target, a.Applied, a.Why))
	}
	// The first window ends at 1m; the hour's cap frees at 1h1m, an hour after it.
	want := []string{"1m0s 203.0.113.1 true ", "1m0s 203.0.113.2 false cap_reached", "1h1m0s 203.0.113.2 true "}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("actions:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	es, err := store.Entries(context.Background(), lists.Challenge)
	if err != nil {
		t.Fatal(err)
	}
	var entries []string
	for _, e := range es {
		entries = append(entries, fmt.Sprintf("%s %s", e.Target, e.Expires.Sub(t0)))
	}
	if want := "203.0.113.1 1h1m0s, 203.0.113.2 2h1m0s"; strings.Join(entries, ", ") != want {
		t.Errorf("challenge list %q, want %q", strings.Join(entries, ", "), want)
	}
}

// TestLongestPolicyName: a policy named with config.MaxPolicyNameLen bytes,
// the most the configuration takes, writes its entries (by="policy:NAME"
// fills the list's 128 bytes); one byte more, which the configuration
// refuses, would fail every write. Before the configuration checked the
// length, such a policy passed `config check` and wrote nothing.
func TestLongestPolicyName(t *testing.T) {
	for _, n := range []int{config.MaxPolicyNameLen, config.MaxPolicyNameLen + 1} {
		path := filepath.Join(t.TempDir(), "challenge.list")
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		store := lists.NewFileStore(map[string]string{lists.Challenge: path}, func() time.Time { return t0 })
		pol := challengeHitters
		pol.Name = strings.Repeat("p", n)
		ps := alerts.NewPolicies(feedbackConfig(false, 10, pol), store, nil, func(string) bool { return false }, 64)
		var applied []time.Time
		acts := ps.Act(context.Background(), hitter("203.0.113.9", "anonymous", t0), &applied)
		if ok := len(acts) == 1 && acts[0].Applied; ok != (n <= config.MaxPolicyNameLen) {
			t.Errorf("a policy name of %d bytes: actions %+v", n, acts)
		}
	}
}
