package alerts_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge/lists"
)

// listStore is a small list store of this test's own: entries by list and
// target, in memory, as the file and DynamoDB stores keep them.
type listStore struct {
	mu      sync.Mutex
	entries map[[2]string]lists.Entry
	fail    bool
}

var _ alerts.ListWriter = (*listStore)(nil)

func (s *listStore) Put(_ context.Context, e lists.Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return errors.New("store unavailable")
	}
	if s.entries == nil {
		s.entries = map[[2]string]lists.Entry{}
	}
	s.entries[[2]string{e.List, e.Target}] = e
	return nil
}

func (s *listStore) Remove(_ context.Context, list, target, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.entries, [2]string{list, target})
	return nil
}

// eventLog keeps the feedback events.
type eventLog struct{ ds []decisions.Decision }

func (l *eventLog) Feedback(_ context.Context, d decisions.Decision) error {
	l.ds = append(l.ds, d)
	return nil
}

// allowFile is an allow list read from a file, as the edge reads it.
type allowFile struct{ l *lists.List }

func (a allowFile) List() *lists.List { return a.l }

func parseAllow(t *testing.T, entries string) allowFile {
	t.Helper()
	path := filepath.Join(t.TempDir(), "allow.txt")
	if err := os.WriteFile(path, []byte(entries), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, err := lists.Parse(f, path)
	if err != nil {
		t.Fatal(err)
	}
	return allowFile{l}
}

func feedbackConfig(dry bool, perHour int, pols ...config.FeedbackPolicy) config.Feedback {
	return config.Feedback{DryRun: &dry, MaxPerHour: perHour, Policies: pols}
}

var challengeHitters = config.FeedbackPolicy{Name: "challenge-hitters", Alerts: []string{alerts.TypeHeavyHitter},
	MinSeverity: alerts.Warning, Action: lists.Challenge, TTL: time.Hour}

func hitter(id, tier string, at time.Time) alerts.Alert {
	return alerts.Alert{Kind: "alert", Time: at, Type: alerts.TypeHeavyHitter, Severity: alerts.Critical, State: alerts.Firing,
		Key: "heavy_hitter/" + tier + ":global/" + id, Tier: tier, Identities: []string{id}}
}

// TestPolicyGuardRails: what a policy does to each kind of target, in one
// table: applied, a pending entry for approval, or nothing.
func TestPolicyGuardRails(t *testing.T) {
	allow := parseAllow(t, "user:partner\n198.51.100.0/24\n")
	paying := func(tier string) bool { return tier == "pro" }
	at := t0.Add(time.Hour)
	for _, tc := range []struct {
		name    string
		dry     bool
		pol     config.FeedbackPolicy
		alert   alerts.Alert
		applied bool
		why     string
		entry   bool // an entry was written
		pending bool
		event   string // the feedback event's action, "" none
	}{
		{"applied", false, challengeHitters, hitter("203.0.113.7", "anonymous", at), true, "", true, false, "add"},
		{"dry run", true, challengeHitters, hitter("203.0.113.7", "anonymous", at), false, alerts.WhyDryRun, false, false, ""},
		{"allow-listed user", false, challengeHitters, hitter("user:partner", "authenticated", at), false, alerts.WhyAllowListed, true, true, alerts.FeedbackAction},
		{"allow-listed prefix", false, challengeHitters, hitter("198.51.100.9", "anonymous", at), false, alerts.WhyAllowListed, true, true, alerts.FeedbackAction},
		{"paying tier", false, challengeHitters, hitter("user:p-1", "pro", at), false, alerts.WhyPayingTier, true, true, alerts.FeedbackAction},
		{"allow is a proposal", false, config.FeedbackPolicy{Name: "propose", Alerts: []string{alerts.TypeHeavyHitter}, MinSeverity: alerts.Info,
			Action: lists.Allow, TTL: time.Hour}, hitter("user:u-1", "authenticated", at), false, alerts.WhyNeedsApproval, true, true, alerts.FeedbackAction},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, events := &listStore{}, &eventLog{}
			p := alerts.NewPolicies(feedbackConfig(tc.dry, 10, tc.pol), store, events, allow, paying)
			var applied []time.Time
			acts := p.Act(context.Background(), tc.alert, &applied)
			if len(acts) != 1 {
				t.Fatalf("%d actions, want 1", len(acts))
			}
			a := acts[0]
			target := tc.alert.Identities[0]
			if a.Applied != tc.applied || a.Why != tc.why || a.Target != target || a.Policy != tc.pol.Name || a.List != tc.pol.Action || a.TTL != "1h0m0s" {
				t.Errorf("action %+v", a)
			}
			e, ok := store.entries[[2]string{tc.pol.Action, target}]
			if ok != tc.entry || ok && (e.Pending != tc.pending || !e.Expires.Equal(at.Add(time.Hour)) || e.By != "policy:"+tc.pol.Name) {
				t.Errorf("entry %+v (written %v)", e, ok)
			}
			var got string
			if len(events.ds) == 1 {
				d := events.ds[0]
				got = d.Action
				if d.Kind != decisions.KindFeedback || d.Target != target || d.List != tc.pol.Action || d.TTL != time.Hour || !d.Time.Equal(at) {
					t.Errorf("event %+v", d)
				}
			}
			if got != tc.event || len(events.ds) > 1 {
				t.Errorf("events %+v, want one of action %q", events.ds, tc.event)
			}
		})
	}
}

// TestPolicyCap: at most max_per_hour entries an hour of event time; the
// rest are recorded as cap_reached, and the hour after, entries are
// written again.
func TestPolicyCap(t *testing.T) {
	store := &listStore{}
	p := alerts.NewPolicies(feedbackConfig(false, 3, challengeHitters), store, nil, nil, func(string) bool { return false })
	var applied []time.Time
	var whys []string
	for i, at := range []time.Duration{0, time.Minute, 2 * time.Minute, 3 * time.Minute, 59 * time.Minute, 61 * time.Minute} {
		acts := p.Act(context.Background(), hitter(addr(i), "anonymous", t0.Add(at)), &applied)
		whys = append(whys, acts[0].Why)
	}
	want := []string{"", "", "", alerts.WhyCapReached, alerts.WhyCapReached, ""}
	if !slices.Equal(whys, want) {
		t.Errorf("why %q, want %q", whys, want)
	}
	if len(store.entries) != 4 {
		t.Errorf("%d entries written, want 4", len(store.entries))
	}
}

// TestPolicySeverityAndState: a policy acts only on firing alerts of its
// types at or above its severity; a store that fails is recorded.
func TestPolicySeverityAndState(t *testing.T) {
	store := &listStore{}
	pol := challengeHitters
	pol.MinSeverity = alerts.Critical
	p := alerts.NewPolicies(feedbackConfig(false, 10, pol), store, nil, nil, func(string) bool { return false })
	var applied []time.Time
	a := hitter("203.0.113.7", "anonymous", t0)
	warn := a
	warn.Severity = alerts.Warning
	res := a
	res.State = alerts.Resolved
	other := a
	other.Type = alerts.TypeDrops
	for _, x := range []alerts.Alert{warn, res, other} {
		if acts := p.Act(context.Background(), x, &applied); len(acts) != 0 {
			t.Errorf("acted on %s %s %s: %+v", x.Type, x.Severity, x.State, acts)
		}
	}
	store.fail = true
	if acts := p.Act(context.Background(), a, &applied); len(acts) != 1 || acts[0].Applied || acts[0].Why != alerts.WhyWriteFailed {
		t.Errorf("with the store down: %+v", acts)
	}
}
