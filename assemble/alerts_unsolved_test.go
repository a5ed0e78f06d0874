package assemble_test

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/edge/lists"
)

// TestUnsolvedChallengesEscalateToDeny: a client the edge challenges again
// and again that never presents a token is flagged, and a policy puts it
// on the deny list (dry run: recorded, not written); the low solve rate of
// its rule is reported too.
func TestUnsolvedChallengesEscalateToDeny(t *testing.T) {
	var out bytes.Buffer
	cfg := loadSimConfig(t, "challenge:\n  enabled: true\n")
	deny := config.FeedbackPolicy{Name: "deny-unsolved", Alerts: []string{alerts.TypeUnsolved}, MinSeverity: alerts.Warning,
		Action: lists.Deny, TTL: 24 * time.Hour}
	dry := true
	pol := alerts.NewPolicies(config.Feedback{DryRun: &dry, MaxPerHour: 10, Policies: []config.FeedbackPolicy{deny}}, nil, nil,
		func(string) bool { return false }, 64)
	s := newSim(t, cfg, time.Minute, &out, "", pol)
	rng := rand.New(rand.NewPCG(31, 32))
	s.run(t0, t0.Add(10*time.Minute), rng, background, func(sec time.Time) {
		if sec.Sub(t0) >= 5*time.Minute && sec.Sub(t0) < 7*time.Minute {
			// 3 a second against 120 a minute: challenged (up to twice
			// the limit), then blocked.
			for range 3 {
				s.do(sec, "203.0.113.99", "", "", "/")
			}
		}
	})
	as, acts := records(t, out.Bytes())
	const key = "unsolved_challenges/203.0.113.99"
	if _, ok := find(as, key, alerts.Firing); !ok {
		t.Fatalf("no %s among:%s", key, keys(as))
	}
	if _, ok := find(as, "low_solve_rate/anonymous/anonymous:global", alerts.Firing); !ok {
		t.Errorf("no low solve rate among:%s", keys(as))
	}
	if len(acts) != 1 || acts[0].List != lists.Deny || acts[0].Target != "203.0.113.99" || acts[0].Why != alerts.WhyDryRun ||
		acts[0].Policy != "deny-unsolved" || acts[0].TTL != "24h0m0s" {
		t.Errorf("actions %+v, want the address put on the deny list (dry run)", acts)
	}
}
