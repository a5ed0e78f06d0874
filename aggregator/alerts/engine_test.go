package alerts_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/decisions"
)

// hourly returns a window of an hour from start with n allowed requests
// spread over 50 addresses.
func hourly(start time.Time, n int) *aggregator.Partial {
	p := aggregator.NewPartial(start, time.Hour, 100)
	for i := range n {
		d := decisions.Decision{Time: start, Tier: "anonymous", Rule: "anonymous:global", Outcome: decisions.Allow,
			ClientIP: netip.AddrFrom4([4]byte{198, 51, 100, byte(i % 50)})}
		p.Update(&d)
	}
	return p
}

// TestSeasonalProfile: a batch job every Monday at 09:00 is a jump the
// first week, and the hour-of-week profile expects it from the second week
// on (seasonal_weeks 1), while the same jump at another hour still alerts.
func TestSeasonalProfile(t *testing.T) {
	cfg := testConfig(t)
	e, err := alerts.NewEngine(alerts.Options{Config: cfg.Alerts, Window: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	byWeek := map[int][]string{}
	for h := range 3 * 7 * 24 {
		start := t0.Add(time.Duration(h) * time.Hour) // t0 is a Monday 00:00
		n := 200
		if h%(7*24) == 9 || h == 2*7*24+15 { // Mondays 09:00, and once a Monday 15:00
			n = 2000
		}
		as, err := e.Window(hourly(start, n))
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if a.State == alerts.Firing {
				byWeek[h/(7*24)] = append(byWeek[h/(7*24)], a.WindowStart.Format("Mon 15:04"))
			}
		}
	}
	want := map[int][]string{0: {"Mon 09:00"}, 2: {"Mon 15:00"}}
	if len(byWeek) != len(want) || len(byWeek[0]) != 1 || byWeek[0][0] != want[0][0] || len(byWeek[2]) != 1 || byWeek[2][0] != want[2][0] {
		t.Errorf("alerts by week %v, want %v", byWeek, want)
	}
}

// TestCooldownAndResolve: a condition that clears for resolve_after
// windows resolves; when it comes back within the cooldown it is not
// raised again (counted as suppressed); after it, it is.
func TestCooldownAndResolve(t *testing.T) {
	cfg := testConfig(t)
	cfg.Alerts.Cooldown = 5 * time.Minute
	e, err := alerts.NewEngine(alerts.Options{Config: cfg.Alerts, Window: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Drops in the windows of minutes 0 and 1 (raised at 01, the end of
	// window 0), clear in 2 and 3 (resolved at 04), again in 6 (within the
	// cooldown, which ends at 09: suppressed) and in 10 (raised at 11).
	var got []string
	for m := range 12 {
		p := aggregator.NewPartial(t0.Add(time.Duration(m)*time.Minute), time.Minute, 10)
		if m == 0 || m == 1 || m == 6 || m == 10 {
			d := decisions.Decision{Kind: decisions.KindDrops, Time: p.Start, Dropped: 5}
			p.Update(&d)
		}
		as, err := e.Window(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			got = append(got, a.Time.Format("04")+" "+a.State)
		}
	}
	want := []string{"01 firing", "04 resolved", "11 firing"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("got %v, want %v", got, want)
	}
	if s := e.State().Stats.Suppressed; s != 1 {
		t.Errorf("suppressed %d, want 1", s)
	}
}
