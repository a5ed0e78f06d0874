package alerts_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/edge/lists"
)

// TestPolicySparesAllowListedInsideItsPrefix: a deny policy acting on an
// IPv6 scraper lists its /64; when an allow-listed partner's address is
// inside that /64 (a hosting provider's shared /64), the entry would
// refuse the partner too, since the edge reads the deny list before the
// allow list. So the entry is a pending one for a person, as for an
// allow-listed identity; a /64 holding no allow-listed address is applied.
func TestPolicySparesAllowListedInsideItsPrefix(t *testing.T) {
	at := t0.Add(time.Hour)
	allow := parseAllow(t, "2001:db8:1:2::5\n2001:db8:9::/48\n")
	deny := config.FeedbackPolicy{Name: "deny-hitters", Alerts: []string{alerts.TypeHeavyHitter}, MinSeverity: alerts.Warning,
		Action: lists.Deny, TTL: time.Hour}
	for _, tc := range []struct {
		id, target, why string
		applied         bool
	}{
		{"2001:db8:1:2:aaaa::7", "2001:db8:1:2::/64", alerts.WhyAllowListed, false}, // the partner's /64
		{"2001:db8:9:1::7", "2001:db8:9:1::/64", alerts.WhyAllowListed, false},      // inside an allowed /48
		{"2001:db8:1:3::7", "2001:db8:1:3::/64", "", true},                          // the /64 next to it
	} {
		store := fileLists(t, at, "", "")
		p := alerts.NewPolicies(feedbackConfig(false, 10, deny), store, allow, func(string) bool { return false }, 64)
		var applied []time.Time
		acts := p.Act(context.Background(), hitter(tc.id, "anonymous", at), &applied)
		if len(acts) != 1 || acts[0].Target != tc.target || acts[0].Applied != tc.applied || acts[0].Why != tc.why {
			t.Errorf("%s: actions %+v, want %s applied %v why %q", tc.id, acts, tc.target, tc.applied, tc.why)
		}
		es, err := store.Entries(context.Background(), lists.Deny)
		if err != nil {
			t.Fatal(err)
		}
		if l := lists.New(es, at); l.ContainsAt(netip.MustParseAddr("2001:db8:1:2::5"), "", at) {
			t.Errorf("%s: the allow-listed partner 2001:db8:1:2::5 is denied: %+v", tc.id, es)
		}
	}
}
