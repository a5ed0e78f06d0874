package alerts_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
)

// TestUnsolvedIPv6ByPrefix: a client that rotates over the addresses of
// its IPv6 /64 (the edge's identity.ipv6_prefix, under which it counts
// and challenges the client as one) is challenged 40 times in a window
// and never passes: it is flagged by its /64, though no address alone was
// challenged unsolved.min (10) times; a /64 whose challenged addresses
// passed on a token is not, and an IPv4 address stays its own client.
func TestUnsolvedIPv6ByPrefix(t *testing.T) {
	cfg := testConfig(t)
	e, err := alerts.NewEngine(alerts.Options{Config: cfg.Alerts, Window: time.Minute, Limits: alerts.RuleLimits(cfg)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rule := config.RuleID("anonymous", config.GlobalRule)
	p := aggregator.NewPartial(t0, time.Minute, 100)
	do := func(ip string, oc decisions.Outcome) {
		d := decisions.Decision{Time: t0, Tier: "anonymous", Rule: rule, ClientIP: netip.MustParseAddr(ip), Outcome: oc}
		p.Update(&d)
	}
	for i := range 40 {
		do(fmt.Sprintf("2001:db8:7:7::%x", i), decisions.Challenge) // the bot, one address a request
		do(fmt.Sprintf("2001:db8:9:9::%x", i%20), decisions.Challenge)
	}
	for i := range 20 {
		do(fmt.Sprintf("2001:db8:9:9::%x", i), decisions.TokenPass) // a solver, on each of its addresses
	}
	for range 5 {
		do("203.0.113.1", decisions.Challenge)
		do("203.0.113.2", decisions.Challenge)
	}
	as, err := e.Window(p)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range as {
		if a.Type == alerts.TypeUnsolved {
			got = append(got, fmt.Sprintf("%s %v %d", a.Key, a.Identities, a.Evidence.Counts["challenges"]))
		}
	}
	want := "[unsolved_challenges/2001:db8:7:7::/64 [2001:db8:7:7::/64] 40]"
	if fmt.Sprint(got) != want {
		t.Errorf("unsolved alerts %v, want %s", got, want)
	}
}
