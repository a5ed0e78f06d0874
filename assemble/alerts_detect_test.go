package assemble_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge/lists"
)

// TestScraperIsAHeavyHitter: one address at 800 requests a second against
// a limit of 120 a minute is a heavy hitter within two windows of the
// start, and resolves once it stops; the background raises nothing.
func TestScraperIsAHeavyHitter(t *testing.T) {
	var out bytes.Buffer
	cfg := loadSimConfig(t, "")
	s := newSim(t, cfg, time.Minute, &out, "", nil)
	rng := rand.New(rand.NewPCG(1, 2))
	attack := t0.Add(10 * time.Minute)
	s.run(t0, t0.Add(20*time.Minute), rng, background, func(sec time.Time) {
		if sec.Before(attack) || !sec.Before(attack.Add(3*time.Minute)) {
			return
		}
		for i := range 800 {
			s.do(sec.Add(time.Duration(i)*time.Second/800), "203.0.113.7", "", "", "/")
		}
	})
	as, _ := records(t, out.Bytes())
	const key = "heavy_hitter/anonymous:global/203.0.113.7"
	a, ok := find(as, key, alerts.Firing)
	if !ok {
		t.Fatalf("no %s among:%s", key, keys(as))
	}
	if n := windowsAfter(attack, a.WindowEnd, time.Minute); n > 2 {
		t.Errorf("fired on the window ending %v, %d windows after the attack began", a.WindowEnd, n)
	}
	if a.Evidence.Observed < 40_000 || a.Evidence.Baseline != 120 || !slices.Equal(a.Identities, []string{"203.0.113.7"}) {
		t.Errorf("evidence %+v, identities %v", a.Evidence, a.Identities)
	}
	if _, ok := find(as, key, alerts.Resolved); !ok {
		t.Errorf("never resolved:%s", keys(as))
	}
	for _, a := range as {
		if a.Type == alerts.TypeHeavyHitter && a.Key != key {
			t.Errorf("a heavy hitter of the background: %s", a.Key)
		}
	}
}

// TestCredentialStuffing: 500 addresses, each under the login limit,
// together far above the login rule's baseline, fire within two windows.
func TestCredentialStuffing(t *testing.T) {
	var out bytes.Buffer
	s := newSim(t, loadSimConfig(t, ""), time.Minute, &out, "", nil)
	rng := rand.New(rand.NewPCG(3, 4))
	attack := t0.Add(10 * time.Minute)
	s.run(t0, t0.Add(16*time.Minute), rng, background, func(sec time.Time) {
		if sec.Before(attack) || !sec.Before(attack.Add(2*time.Minute)) {
			return
		}
		// 500 addresses, 5 tries a minute each: one in twelve a second.
		for i := range 500 {
			if (i+int(sec.Unix()))%12 == 0 {
				s.do(sec, addr(i), "", "", "/api/login")
			}
		}
	})
	as, _ := records(t, out.Bytes())
	const key = "credential_stuffing/anonymous/anonymous:/api/login"
	a, ok := find(as, key, alerts.Firing)
	if !ok {
		t.Fatalf("no %s among:%s", key, keys(as))
	}
	if n := windowsAfter(attack, a.WindowEnd, time.Minute); n > 2 {
		t.Errorf("fired %d windows after the attack began", n)
	}
	if a.Severity != alerts.Critical || a.Evidence.Counts["clients"] < 400 || len(a.Identities) == 0 {
		t.Errorf("severity %s, evidence %+v, identities %v", a.Severity, a.Evidence, a.Identities)
	}
	for _, a := range as {
		if a.Type == alerts.TypeHeavyHitter {
			t.Errorf("each client was under the limit, yet %s", a.Key)
		}
	}
}

// TestPartnerOnTheAllowList: a partner on the allow list with traffic far
// over its tier's limit, steady from the start, raises nothing.
func TestPartnerOnTheAllowList(t *testing.T) {
	var out bytes.Buffer
	s := newSim(t, loadSimConfig(t, "", "user:partner"), time.Minute, &out, "", nil)
	rng := rand.New(rand.NewPCG(5, 6))
	s.run(t0, t0.Add(20*time.Minute), rng, background, func(sec time.Time) {
		for i := range 80 {
			s.do(sec.Add(time.Duration(i)*time.Millisecond), "203.0.113.50", "partner", "pro", "/api/items")
		}
	})
	s.do(t0.Add(20*time.Minute), "203.0.113.50", "partner", "pro", "/api/items")
	if s.v.Outcome != decisions.AllowListed {
		t.Fatalf("the partner's requests are %s: the allow list did not apply", s.v.Outcome)
	}
	if as, _ := records(t, out.Bytes()); len(as) > 0 {
		t.Errorf("alerts for legitimate traffic:%s", keys(as))
	}
}

// TestProUserRefusedIsAFalsePositive: a pro user refused by the export
// rule raises a critical false_positive naming the user.
func TestProUserRefusedIsAFalsePositive(t *testing.T) {
	var out bytes.Buffer
	s := newSim(t, loadSimConfig(t, ""), time.Minute, &out, "", nil)
	rng := rand.New(rand.NewPCG(7, 8))
	at := t0.Add(7 * time.Minute)
	s.run(t0, t0.Add(12*time.Minute), rng, background, func(sec time.Time) {
		if sec.Equal(at) {
			for range 8 { // the limit is 5 a minute
				s.do(sec, "192.0.2.107", "p-7", "pro", "/api/export")
			}
		}
	})
	as, _ := records(t, out.Bytes())
	const key = "false_positive/pro/pro:/api/export"
	a, ok := find(as, key, alerts.Firing)
	if !ok {
		t.Fatalf("no %s among:%s", key, keys(as))
	}
	if a.Severity != alerts.Critical || a.Evidence.Observed != 3 || !slices.Contains(a.Identities, "user:p-7") {
		t.Errorf("severity %s, evidence %+v, identities %v", a.Severity, a.Evidence, a.Identities)
	}
	if n := windowsAfter(at, a.WindowEnd, time.Minute); n > 1 {
		t.Errorf("fired %d windows after the refusal", n)
	}
}

// TestDiurnalWeekRaisesNothing: a week of legitimate traffic that rises and
// falls with the day (in windows of 10 minutes, event time accelerated)
// raises no alert at all, though the rate detectors saw every window.
func TestDiurnalWeekRaisesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("a week of traffic")
	}
	var out bytes.Buffer
	cfg := loadSimConfig(t, "  history: 6\n  min_history: 3\n")
	s := newSim(t, cfg, 10*time.Minute, &out, "", nil)
	rng := rand.New(rand.NewPCG(9, 10))
	week := traffic{anon: 1, login: 0.1, users: 0.5, pro: 0.2, diurnal: true}
	s.run(t0, t0.Add(7*24*time.Hour), rng, week, nil)
	as, _ := records(t, out.Bytes())
	if len(as) > 0 {
		t.Errorf("%d alerts for a week of legitimate traffic:%s", len(as), keys(as))
	}
	st := s.runner.Stats().Total
	if st.Windows != 7*24*6 {
		t.Errorf("%d windows, want %d", st.Windows, 7*24*6)
	}
}

// TestIPv6ScraperIsListedByPrefix: the edge counts an IPv6 client per
// /64, so a scraper rotating over 20 addresses of one /64, none of them
// over the heavy-hitter threshold alone (10 requests a second each, 600 a
// minute against 5 × 120), is one heavy hitter named by its prefix (one
// client of the aggregator's lists, as of the edge's counters), and
// the challenge policy lists the prefix: every address of the /64 is
// challenged, none outside it.
func TestIPv6ScraperIsListedByPrefix(t *testing.T) {
	var out bytes.Buffer
	cfg := loadSimConfig(t, "")
	attack := t0.Add(10 * time.Minute)
	now := func() time.Time { return attack }
	store := lists.NewFileStore(map[string]string{lists.Challenge: filepath.Join(t.TempDir(), "challenge.list")}, now)
	dry := false
	pol := alerts.NewPolicies(config.Feedback{DryRun: &dry, MaxPerHour: 10, Policies: []config.FeedbackPolicy{{Name: "challenge-scrapers",
		Alerts: []string{alerts.TypeHeavyHitter}, MinSeverity: alerts.Warning, Action: lists.Challenge, TTL: time.Hour}}},
		store, nil, func(string) bool { return false }, cfg.Identity.IPv6Prefix)
	s := newSim(t, cfg, time.Minute, &out, "", pol)
	rng := rand.New(rand.NewPCG(9, 10))
	s.run(t0, t0.Add(14*time.Minute), rng, background, func(sec time.Time) {
		if sec.Before(attack) || !sec.Before(attack.Add(2*time.Minute)) {
			return
		}
		for i := range 200 {
			s.do(sec.Add(time.Duration(i)*time.Second/200), fmt.Sprintf("2001:db8:1:2::a:%x", i%20), "", "", "/")
		}
	})
	as, acts := records(t, out.Bytes())
	const key = "heavy_hitter/anonymous:global/2001:db8:1:2::/64"
	a, ok := find(as, key, alerts.Firing)
	if !ok {
		t.Fatalf("no %s among:%s", key, keys(as))
	}
	if !slices.Equal(a.Identities, []string{"2001:db8:1:2::/64"}) || a.Evidence.Observed < 10_000 {
		t.Errorf("identities %v, evidence %+v", a.Identities, a.Evidence)
	}
	for _, x := range as {
		if x.Type == alerts.TypeHeavyHitter && x.Key != key {
			t.Errorf("another heavy hitter: %s", x.Key)
		}
	}
	if len(acts) != 1 || !acts[0].Applied || acts[0].Target != "2001:db8:1:2::/64" {
		t.Errorf("actions %+v", acts)
	}
	es, err := store.Entries(context.Background(), lists.Challenge)
	if err != nil {
		t.Fatal(err)
	}
	l := lists.New(es, attack)
	for ip, want := range map[string]bool{"2001:db8:1:2::a:3": true, "2001:db8:1:2:ffff::1": true, "2001:db8:1:3::a:3": false} {
		if got := l.ContainsAt(netip.MustParseAddr(ip), "", attack.Add(5*time.Minute)); got != want {
			t.Errorf("%s on the challenge list: %v, want %v (entries %+v)", ip, got, want, es)
		}
	}
}
