package alerts_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/config"
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

func (s *listStore) Remove(_ context.Context, list, target, _, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.entries, [2]string{list, target})
	return nil
}

func (s *listStore) Entries(_ context.Context, list string) ([]lists.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []lists.Entry
	for k, e := range s.entries {
		if k[0] == list {
			out = append(out, e)
		}
	}
	return out, nil
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
	}{
		{"applied", false, challengeHitters, hitter("203.0.113.7", "anonymous", at), true, "", true, false},
		{"dry run", true, challengeHitters, hitter("203.0.113.7", "anonymous", at), false, alerts.WhyDryRun, false, false},
		{"allow-listed user", false, challengeHitters, hitter("user:partner", "authenticated", at), false, alerts.WhyAllowListed, true, true},
		{"allow-listed prefix", false, challengeHitters, hitter("198.51.100.9", "anonymous", at), false, alerts.WhyAllowListed, true, true},
		{"paying tier", false, challengeHitters, hitter("user:p-1", "pro", at), false, alerts.WhyPayingTier, true, true},
		{"allow is a proposal", false, config.FeedbackPolicy{Name: "propose", Alerts: []string{alerts.TypeHeavyHitter}, MinSeverity: alerts.Info,
			Action: lists.Allow, TTL: time.Hour}, hitter("user:u-1", "authenticated", at), false, alerts.WhyNeedsApproval, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &listStore{}
			p := alerts.NewPolicies(feedbackConfig(tc.dry, 10, tc.pol), store, allow, paying, 64)
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
		})
	}
}

// TestPolicyCap: at most max_per_hour entries an hour of event time; the
// rest are recorded as cap_reached, and the hour after, entries are
// written again.
func TestPolicyCap(t *testing.T) {
	store := &listStore{}
	p := alerts.NewPolicies(feedbackConfig(false, 3, challengeHitters), store, nil, func(string) bool { return false }, 64)
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
	p := alerts.NewPolicies(feedbackConfig(false, 10, pol), store, nil, func(string) bool { return false }, 64)
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

// fileLists is a list store of real files, challenge and deny, read at
// now.
func fileLists(t *testing.T, now time.Time, challenge, deny string) *lists.FileStore {
	t.Helper()
	dir := t.TempDir()
	paths := map[string]string{lists.Challenge: filepath.Join(dir, "challenge.txt"), lists.Deny: filepath.Join(dir, "deny.txt")}
	for path, text := range map[string]string{paths[lists.Challenge]: challenge, paths[lists.Deny]: deny} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return lists.NewFileStore(paths, func() time.Time { return now })
}

// TestPolicyNeverWeakens: a store's Put replaces the entry of its target,
// so a policy looks first: an entry at least as strong (deny over
// challenge, permanent or longer over shorter, a prefix over its
// addresses), whoever wrote it, is kept, and the action says why it was
// not applied; a weaker, expired or removed entry is replaced.
func TestPolicyNeverWeakens(t *testing.T) {
	at := t0.Add(time.Hour)
	exp := func(d time.Duration) string { return at.Add(d).Format(time.RFC3339) }
	for _, tc := range []struct {
		name, challenge, deny string
		applied               bool
		kept                  string // the challenge list's entry for the target afterwards: its by
	}{
		{"permanent challenge by a person", "203.0.113.7 by=alice reason=scraper\n", "", false, "alice"},
		{"longer challenge", "203.0.113.7 by=alice expires=" + exp(2*time.Hour) + "\n", "", false, "alice"},
		{"equal challenge", "203.0.113.7 by=alice expires=" + exp(time.Hour) + "\n", "", false, "alice"},
		{"denied", "", "203.0.113.7 by=alice\n", false, ""},
		{"denied prefix", "", "203.0.113.0/24 by=alice expires=" + exp(3*time.Hour) + "\n", false, ""},
		{"shorter challenge", "203.0.113.7 by=alice expires=" + exp(10*time.Minute) + "\n", "", true, "policy:challenge-hitters"},
		{"shorter deny", "", "203.0.113.7 by=alice expires=" + exp(10*time.Minute) + "\n", true, "policy:challenge-hitters"},
		{"expired challenge", "203.0.113.7 by=alice expires=" + exp(-time.Minute) + "\n", "", true, "policy:challenge-hitters"},
		{"removed challenge", "203.0.113.7 by=alice removed=" + exp(-time.Minute) + "\n", "", true, "policy:challenge-hitters"},
		{"another target", "203.0.113.8 by=alice\n", "", true, "policy:challenge-hitters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := fileLists(t, at, tc.challenge, tc.deny)
			p := alerts.NewPolicies(feedbackConfig(false, 10, challengeHitters), store, nil, func(string) bool { return false }, 64)
			var applied []time.Time
			acts := p.Act(context.Background(), hitter("203.0.113.7", "anonymous", at), &applied)
			wantWhy := ""
			if !tc.applied {
				wantWhy = alerts.WhyStronger
			}
			if len(acts) != 1 || acts[0].Applied != tc.applied || acts[0].Why != wantWhy {
				t.Fatalf("actions %+v, want applied %v", acts, tc.applied)
			}
			es, err := store.Entries(context.Background(), lists.Challenge)
			if err != nil {
				t.Fatal(err)
			}
			by := ""
			for _, e := range es {
				if e.Target == "203.0.113.7" {
					by = e.By
				}
			}
			if by != tc.kept {
				t.Errorf("challenge entry by %q, want %q (entries %+v)", by, tc.kept, es)
			}
			if !tc.applied && len(applied) != 0 {
				t.Errorf("a kept entry counts against the cap: %v", applied)
			}
		})
	}
}

// TestPolicyProposesOnce: a pending proposal is not written again while it
// waits for approval.
func TestPolicyProposesOnce(t *testing.T) {
	at := t0.Add(time.Hour)
	store := fileLists(t, at, "", "")
	p := alerts.NewPolicies(feedbackConfig(false, 10, challengeHitters), store, nil, func(t string) bool { return t == "pro" }, 64)
	var applied []time.Time
	var whys []string
	for i := range 2 {
		acts := p.Act(context.Background(), hitter("user:p-1", "pro", at.Add(time.Duration(i)*time.Minute)), &applied)
		whys = append(whys, acts[0].Why)
	}
	if want := []string{alerts.WhyPayingTier, alerts.WhyStronger}; !slices.Equal(whys, want) {
		t.Errorf("why %q, want %q", whys, want)
	}
}

// TestPolicyListsIPv6Prefix: the edge counts an IPv6 client under its
// /identity.ipv6_prefix, so a policy lists that prefix, not the address:
// the client cannot step around its entry by moving within its prefix,
// and the edge's challenge list holds every address of it.
func TestPolicyListsIPv6Prefix(t *testing.T) {
	at := t0.Add(time.Hour)
	for _, tc := range []struct {
		id     string
		bits   int
		target string
		inside string // another address of the client's prefix
	}{
		{"2001:db8:1:2:aaaa::7", 64, "2001:db8:1:2::/64", "2001:db8:1:2:ffff::1"},
		{"2001:db8:1:2:aaaa::7", 48, "2001:db8:1::/48", "2001:db8:1:9::1"},
		{"2001:db8:1:2:aaaa::7", 128, "2001:db8:1:2:aaaa::7", "2001:db8:1:2:aaaa::7"},
		{"203.0.113.7", 64, "203.0.113.7", "203.0.113.7"},
		{"user:u-1", 64, "user:u-1", ""},
	} {
		store := fileLists(t, at, "", "")
		p := alerts.NewPolicies(feedbackConfig(false, 10, challengeHitters), store, nil, func(string) bool { return false }, tc.bits)
		var applied []time.Time
		acts := p.Act(context.Background(), hitter(tc.id, "anonymous", at), &applied)
		if len(acts) != 1 || !acts[0].Applied || acts[0].Target != tc.target {
			t.Errorf("%s /%d: actions %+v, want %s applied", tc.id, tc.bits, acts, tc.target)
			continue
		}
		es, err := store.Entries(context.Background(), lists.Challenge)
		if err != nil || len(es) != 1 || es[0].Target != tc.target {
			t.Errorf("%s /%d: entries %+v, %v", tc.id, tc.bits, es, err)
			continue
		}
		if tc.inside == "" {
			continue
		}
		if l := lists.New(es, at); !l.ContainsAt(netip.MustParseAddr(tc.inside), "", at) {
			t.Errorf("%s /%d: %s is not on the list", tc.id, tc.bits, tc.inside)
		}
	}
}
