package alerts_test

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/decisions"
)

// TestMaxOpenCapsOpenAlerts: a client who makes new identities each
// window, every one a heavy hitter, is held to alerts.max_open open alerts
// (25 here): the alerts already open are kept, a new one past the cap is
// neither opened nor raised and is counted as dropped, and the state saved
// after every window stays the size it had at the cap. When a window's
// new alerts do not all fit, the critical ones are opened first. Before,
// every identity's alert stayed open for resolve_after windows (1000
// here), and the state grew by ten alerts a window.
func TestMaxOpenCapsOpenAlerts(t *testing.T) {
	cfg := configOf(t, "tiers:\n  anonymous:\n    global: {limit: 120, window: 1m}\nalerts:\n  max_open: 25\n  resolve_after: 1000\n")
	dir := t.TempDir()
	var out bytes.Buffer
	r, err := alerts.NewRunner(alerts.RunnerOptions{
		Engine:   alerts.Options{Config: cfg.Alerts, Window: time.Minute, Limits: alerts.RuleLimits(cfg)},
		StateDir: dir, Sinks: []alerts.Sink{alerts.NewJSONLines(&out, nil)},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Window w: ten new clients of 700 requests each (over 5 × 120: a
	// warning), but in window 2 the last of them (by key, the last to
	// fit in window 2) makes 3000 (over 4 × 600: critical).
	window := func(w int) {
		p := aggregator.NewPartial(t0.Add(time.Duration(w)*time.Minute), time.Minute, 100)
		for i := range 10 {
			n := 700
			if w == 2 && i == 9 {
				n = 3000
			}
			d := decisions.Decision{Time: p.Start, Tier: "anonymous", Rule: "anonymous:global",
				ClientIP: netip.MustParseAddr(addr(100*w + i)), Outcome: decisions.Block}
			for range n {
				p.Update(&d)
			}
		}
		if err := r.Window(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	size := func() int64 {
		fi, err := os.Stat(filepath.Join(dir, alerts.StateFile))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	for w := range 3 {
		window(w)
	}
	atCap := size()
	for w := 3; w < 30; w++ {
		window(w)
	}

	s := r.Stats()
	if s.Open != 25 || s.Total.Firing != 25 || s.Total.Dropped != 30*10-25 || s.Run.Dropped != s.Total.Dropped {
		t.Errorf("open %d, raised %d, dropped %d (this run %d); want 25 open, 25 raised, %d dropped",
			s.Open, s.Total.Firing, s.Total.Dropped, s.Run.Dropped, 30*10-25)
	}
	if got := strings.Count(out.String(), `"state":"firing"`); got != 25 {
		t.Errorf("%d alerts raised to the sink, want 25", got)
	}
	st, err := alerts.LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Open) != 25 || st.Stats.Dropped != s.Total.Dropped {
		t.Errorf("state: %d open, %d dropped; want 25 and %d", len(st.Open), st.Stats.Dropped, s.Total.Dropped)
	}
	for _, k := range []string{
		"heavy_hitter/anonymous:global/" + addr(0),   // window 0: kept
		"heavy_hitter/anonymous:global/" + addr(109), // window 1: kept
		"heavy_hitter/anonymous:global/" + addr(209), // window 2's critical one, last by key
		"heavy_hitter/anonymous:global/" + addr(203), // window 2: the first four warnings by key, which fit
	} {
		if st.Open[k] == nil {
			t.Errorf("%s not open", k)
		}
	}
	if st.Open["heavy_hitter/anonymous:global/"+addr(204)] != nil || st.Open["heavy_hitter/anonymous:global/"+addr(300)] != nil {
		t.Errorf("an alert past the cap is open")
	}
	if got := size(); got > atCap+atCap/10 {
		t.Errorf("state file %d bytes after 30 windows, %d at the cap: it grows", got, atCap)
	}
}

// TestMaxOpenCapsCooldowns: the cooldowns kept (resolved alerts staying
// quiet) are held to max_open too: a client making new heavy-hitter
// identities each window, each resolving the next (resolve_after 1) and
// quiet for a week, leaves at most 25 cooldowns in the state, those ending
// soonest dropped first and counted. Before, every resolved identity's
// key stayed in the state for the whole cooldown, ten more a window.
func TestMaxOpenCapsCooldowns(t *testing.T) {
	cfg := configOf(t, "tiers:\n  anonymous:\n    global: {limit: 120, window: 1m}\nalerts:\n  max_open: 25\n  resolve_after: 1\n  cooldown: 168h\n")
	e, err := alerts.NewEngine(alerts.Options{Config: cfg.Alerts, Window: time.Minute, Limits: alerts.RuleLimits(cfg)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for w := range 30 {
		p := aggregator.NewPartial(t0.Add(time.Duration(w)*time.Minute), time.Minute, 100)
		for i := range 10 {
			d := decisions.Decision{Time: p.Start, Tier: "anonymous", Rule: "anonymous:global",
				ClientIP: netip.MustParseAddr(addr(100*w + i)), Outcome: decisions.Block}
			for range 700 {
				p.Update(&d)
			}
		}
		if _, err := e.Window(p); err != nil {
			t.Fatal(err)
		}
	}
	st := e.State()
	if len(st.Quiet) != 25 || st.Stats.Resolved != 290 || st.Stats.CooldownsDropped != 290-25 {
		t.Errorf("%d cooldowns kept, %d resolved, %d cooldowns dropped; want 25, 290, %d", len(st.Quiet), st.Stats.Resolved, st.Stats.CooldownsDropped, 290-25)
	}
	// The latest to end are kept: those of window 28's identities.
	if _, ok := st.Quiet["heavy_hitter/anonymous:global/"+addr(2809)]; !ok {
		t.Errorf("the cooldown of window 28's last identity was dropped")
	}
}
