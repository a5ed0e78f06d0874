package alerts_test

import (
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/decisions"
)

// BenchmarkEngineWindow is the engine's work on one window: 20 tiers ×
// rules with 300 clients each (top-K of 100), every detector, and the
// baselines of some 100 series with a full history of 60 windows. It is
// what an alerts runner adds per window to the aggregator, once a window.
func BenchmarkEngineWindow(b *testing.B) {
	cfg := testConfig(b)
	limits := map[string]alerts.RuleLimit{}
	ps := make([]*aggregator.Partial, 128)
	for w := range ps {
		start := t0.Add(time.Duration(w) * time.Minute)
		p := aggregator.NewPartial(start, time.Minute, 100)
		for r := range 20 {
			rule := "anonymous:/r" + strconv.Itoa(r)
			limits[rule] = alerts.RuleLimit{Limit: 100, Window: time.Minute}
			for c := range 300 {
				d := decisions.Decision{Time: start, Tier: "anonymous", Rule: rule, Outcome: decisions.Allow,
					ClientIP: netip.AddrFrom4([4]byte{10, byte(r), byte(c >> 8), byte(c)})}
				if c%50 == 0 {
					d.Outcome = decisions.Challenge
				}
				p.Update(&d)
			}
		}
		ps[w] = p
	}
	e, err := alerts.NewEngine(alerts.Options{Config: cfg.Alerts, Window: time.Minute, Limits: limits}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p := ps[i%len(ps)]
		p.Start = t0.Add(time.Duration(i) * time.Minute)
		if _, err := e.Window(p); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
