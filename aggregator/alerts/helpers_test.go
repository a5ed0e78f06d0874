package alerts_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
)

// t0 is the tests' first instant: a Monday at midnight.
var t0 = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)

// addr returns the i-th address of 10.0.0.0/16.
func addr(i int) string { return netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}).String() }

// testConfig is a configuration with one tier, its alerts section at the
// defaults.
func testConfig(t testing.TB) *config.Config {
	t.Helper()
	return configOf(t, "tiers:\n  anonymous:\n    global: {limit: 120, window: 1m}\n")
}

// configOf is the configuration of text, with its defaults, validated.
func configOf(t testing.TB, text string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(text), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// decisionOf is a decision of rule at at from ip, blocked, or every
// 100th a drops report.
func decisionOf(at time.Time, ip, rule string, i int) decisions.Decision {
	d := decisions.Decision{Time: at, Tier: "anonymous", Rule: rule, ClientIP: netip.MustParseAddr(ip), Outcome: decisions.Block}
	if i%100 == 99 {
		d = decisions.Decision{Kind: decisions.KindDrops, Time: at, Dropped: 1}
	}
	return d
}
