package alerts

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/config"
)

// The alert states and severities.
const (
	Firing   = "firing"
	Resolved = "resolved"

	Info     = "info"
	Warning  = "warning"
	Critical = "critical"
)

// The alert types, one per detector.
const (
	TypeRequestRate        = "request_rate"
	TypeRefusalRate        = "refusal_rate"
	TypeHeavyHitter        = "heavy_hitter"
	TypeCredentialStuffing = "credential_stuffing"
	TypeFalsePositive      = "false_positive"
	TypeFailOpenSurge      = "fail_open_surge"
	TypeDrops              = "drops"
	TypeLowSolveRate       = "low_solve_rate"
	TypeUnsolved           = "unsolved_challenges"
)

// severityRank orders severities, least first; an unknown one ranks 0.
func severityRank(s string) int { return slices.Index(config.AlertSeverities, s) + 1 }

// RuleLimit is a rule's limit: Limit requests per Window.
type RuleLimit struct {
	Limit  int64
	Window time.Duration
}

// RuleLimits returns the limit of every rule of c's tiers, by the rule id
// the edge writes in decisions (config.RuleID); rules of
// the concurrency algorithm, which count requests in flight rather than
// per window, are left out.
func RuleLimits(c *config.Config) map[string]RuleLimit {
	out := map[string]RuleLimit{}
	add := func(id string, r *config.Rule) {
		if r != nil && r.Algorithm != "concurrency" && r.Limit > 0 && r.Window > 0 {
			out[id] = RuleLimit{Limit: r.Limit, Window: r.Window}
		}
	}
	for name, t := range c.ResolvedTiers() {
		add(config.RuleID(name, config.GlobalRule), t.Global)
		for prefix, r := range t.Paths {
			add(config.RuleID(name, prefix), r)
		}
	}
	return out
}

// Options configure an Engine.
type Options struct {
	Config config.Alerts
	// Window is the length of the windows the engine is given; required.
	Window time.Duration
	// Limits are the rules' limits (RuleLimits), for the heavy-hitter and
	// credential-stuffing detectors; a rule missing here has neither.
	Limits map[string]RuleLimit
	// IPv6Prefix is the length of the prefix the edge counts an anonymous
	// IPv6 client under (identity.ipv6_prefix; 0 takes 64): the
	// heavy-hitter detector adds up the addresses of one prefix and names
	// the prefix, as the limiter counts them.
	IPv6Prefix int
}

// Engine runs every detector over complete windows, given in order of
// their start, and turns their findings into alerts: raised once (State
// firing) when a condition first holds, resolved once it has been clear
// for ResolveAfter windows, and kept quiet for Cooldown after that. It
// reads no clock: every time is a window's, so the same windows give the
// same alerts, and its State, saved and restored, carries on where it
// stopped. It is not safe for concurrent use.
type Engine struct {
	o      Options
	c      config.Alerts
	paying map[string]bool
	watch  map[string]bool // false_positive tiers, paying included
	st     *State
}

// State is what an Engine remembers between windows, saved as JSON (maps
// encode in key order, floats exactly), so that a restart carries on as if
// it had not stopped.
type State struct {
	Version int           `json:"version"`
	Window  time.Duration `json:"window"`
	// Last is the start of the last window processed; windows at or before
	// it are skipped (a replay, or outputs delivered again after a crash).
	Last   time.Time            `json:"last"`
	Series map[string]*Series   `json:"series"`
	Open   map[string]*Open     `json:"open"`
	Quiet  map[string]time.Time `json:"quiet"` // alert key → end of its cooldown
	Stats  Stats                `json:"stats"`
	// Applied are the event times of the list entries the feedback
	// policies wrote in the last hour, for the cap per hour.
	Applied []time.Time `json:"applied,omitempty"`
}

// stateVersion is the version of State's encoding.
const stateVersion = 1

// Stats count what an Engine did.
type Stats struct {
	Windows    uint64 `json:"windows"`    // windows processed
	Empty      uint64 `json:"empty"`      // of those, gaps filled as empty windows
	Skipped    uint64 `json:"skipped"`    // windows given again (at or before Last), skipped
	Firing     uint64 `json:"firing"`     // alerts raised
	Resolved   uint64 `json:"resolved"`   // alerts resolved
	Suppressed uint64 `json:"suppressed"` // alerts not raised: their key was cooling down
	Evicted    uint64 `json:"evicted"`    // series dropped for max_series
	Dropped    uint64 `json:"dropped"`    // alerts not raised: max_open alerts were open
	// CooldownsDropped are cooldowns dropped for max_open, those ending
	// soonest first: their alerts may be raised again before they end.
	CooldownsDropped uint64 `json:"cooldowns_dropped"`
}

// sub returns s less t: what an engine did between t and s, two of its
// Stats.
func (s Stats) sub(t Stats) Stats {
	return Stats{Windows: s.Windows - t.Windows, Empty: s.Empty - t.Empty, Skipped: s.Skipped - t.Skipped, Firing: s.Firing - t.Firing,
		Resolved: s.Resolved - t.Resolved, Suppressed: s.Suppressed - t.Suppressed, Evicted: s.Evicted - t.Evicted,
		Dropped: s.Dropped - t.Dropped, CooldownsDropped: s.CooldownsDropped - t.CooldownsDropped}
}

// Series is one measure of one tier and rule over time: its recent values
// (the median/MAD baseline), a moving mean, and an hour-of-week profile.
type Series struct {
	Recent   []float64 `json:"recent"` // oldest first, at most History
	EWMA     float64   `json:"ewma"`
	N        int       `json:"n"`     // windows observed, gaps included
	First    time.Time `json:"first"` // start of the first window observed
	Seen     time.Time `json:"seen"`  // start of the last window with a non-zero value
	Seasonal []float64 `json:"seasonal,omitempty"`
	SeasonN  []int32   `json:"season_n,omitempty"`
}

// Open is an alert that is firing.
type Open struct {
	Alert Alert     `json:"alert"`
	Clear int       `json:"clear"` // windows in a row its condition was clear
	Held  time.Time `json:"held"`  // end of the last window its condition held
	// Deferred are the feedback actions on it that the cap or the store
	// kept from being written, taken again in later windows while it
	// fires (Policies.Retry).
	Deferred []Action `json:"deferred,omitempty"`
}

// NewEngine returns an engine starting from st (nil: from nothing). It
// checks that st was saved for windows of the same length.
func NewEngine(o Options, st *State) (*Engine, error) {
	if o.Window <= 0 {
		return nil, errors.New("alerts: window length not positive")
	}
	if st == nil {
		st = &State{}
	}
	if st.Version == 0 {
		st.Version, st.Window = stateVersion, o.Window
	}
	switch {
	case st.Version != stateVersion:
		return nil, fmt.Errorf("alerts: state version %d, want %d", st.Version, stateVersion)
	case st.Window != o.Window:
		return nil, fmt.Errorf("alerts: state kept for windows of %v, not %v: give another state directory", st.Window, o.Window)
	}
	if st.Series == nil {
		st.Series = map[string]*Series{}
	}
	if st.Open == nil {
		st.Open = map[string]*Open{}
	}
	if st.Quiet == nil {
		st.Quiet = map[string]time.Time{}
	}
	// A state file edited by hand or damaged must not take the engine
	// down: what does not hold together is dropped.
	for k, s := range st.Series {
		switch {
		case s == nil:
			delete(st.Series, k)
		case len(s.Seasonal) != hoursPerWeek || len(s.SeasonN) != hoursPerWeek:
			s.Seasonal, s.SeasonN = nil, nil
		}
	}
	for k, o := range st.Open {
		if o == nil {
			delete(st.Open, k)
		}
	}
	e := &Engine{o: o, c: o.Config, st: st, paying: map[string]bool{}, watch: map[string]bool{}}
	for _, t := range o.Config.PayingTiers {
		e.paying[t], e.watch[t] = true, true
	}
	for _, t := range o.Config.FalsePositive.Tiers {
		e.watch[t] = true
	}
	return e, nil
}

// State returns the engine's state, to save. It stays the engine's: save
// it before the next window.
func (e *Engine) State() *State { return e.st }

// Paying reports whether tier is a paying tier.
func (e *Engine) Paying(tier string) bool { return e.paying[tier] }

// maxGap bounds the empty windows a gap is filled with: past the history
// they change nothing but the alerts' resolution, which is done by then.
func (e *Engine) maxGap() int { return e.c.History + e.c.ResolveAfter + 1 }

// Window processes the complete window p (all partitions merged) and
// returns the alerts it raised and resolved, in a fixed order. A window at
// or before the last one processed is skipped; a gap since the last one is
// filled with empty windows first, so that quiet rules count as zero and
// alerts resolve.
func (e *Engine) Window(p *aggregator.Partial) ([]Alert, error) {
	if p.Size != e.o.Window {
		return nil, fmt.Errorf("alerts: window of %v, want %v", p.Size, e.o.Window)
	}
	start := p.Start.UTC()
	if !e.st.Last.IsZero() && !start.After(e.st.Last) {
		e.st.Stats.Skipped++
		return nil, nil
	}
	var out []Alert
	if !e.st.Last.IsZero() {
		gap := int(start.Sub(e.st.Last)/e.o.Window) - 1
		first := start.Add(-time.Duration(min(gap, e.maxGap())) * e.o.Window)
		for t := first; t.Before(start); t = t.Add(e.o.Window) {
			e.st.Stats.Empty++
			out = append(out, e.window(aggregator.NewPartial(t, e.o.Window, 1))...)
		}
	}
	return append(out, e.window(p)...), nil
}

// window runs the detectors over p and steps every alert's state.
func (e *Engine) window(p *aggregator.Partial) []Alert {
	e.st.Stats.Windows++
	f := e.detect(p)
	e.observe(p.Start, f.values)
	end := p.End()
	var out []Alert
	for k, until := range e.st.Quiet {
		if !until.After(end) {
			delete(e.st.Quiet, k)
		}
	}
	slices.SortFunc(f.alerts, func(a, b Alert) int { return cmp.Compare(a.Key, b.Key) })
	held := map[string]bool{}
	var fresh []Alert
	for _, a := range f.alerts {
		if held[a.Key] {
			continue
		}
		held[a.Key] = true
		if o := e.st.Open[a.Key]; o != nil {
			o.Clear, o.Held = 0, end
			continue
		}
		if _, quiet := e.st.Quiet[a.Key]; quiet {
			e.st.Stats.Suppressed++
			continue
		}
		fresh = append(fresh, a)
	}
	// Past MaxOpen the open alerts are kept and the new ones dropped, the
	// least severe first; the rest are raised in key order.
	if over := len(e.st.Open) + len(fresh) - e.c.MaxOpen; over > 0 {
		byRank := slices.Clone(fresh)
		slices.SortStableFunc(byRank, func(a, b Alert) int { return severityRank(b.Severity) - severityRank(a.Severity) })
		dropped := map[string]bool{}
		for _, a := range byRank[max(len(byRank)-over, 0):] {
			dropped[a.Key] = true
		}
		fresh = slices.DeleteFunc(fresh, func(a Alert) bool { return dropped[a.Key] })
		e.st.Stats.Dropped += uint64(len(dropped))
	}
	for _, a := range fresh {
		a.Kind, a.State, a.Time = "alert", Firing, end
		e.st.Open[a.Key] = &Open{Alert: a, Held: end}
		e.st.Stats.Firing++
		out = append(out, a)
	}
	for _, k := range sortedKeys(e.st.Open) {
		o := e.st.Open[k]
		if held[k] {
			continue
		}
		if o.Clear++; o.Clear < e.c.ResolveAfter {
			continue
		}
		r := o.Alert
		r.State, r.Time = Resolved, end
		r.Summary = "resolved: " + r.Summary
		r.WindowEnd = o.Held
		delete(e.st.Open, k)
		if e.c.Cooldown > 0 {
			e.st.Quiet[k] = end.Add(e.c.Cooldown)
		}
		e.st.Stats.Resolved++
		out = append(out, r)
	}
	// Past MaxOpen the cooldowns ending soonest go first: their alerts
	// may be raised again early, which is noise, not a miss.
	if over := len(e.st.Quiet) - e.c.MaxOpen; over > 0 {
		keys := sortedKeys(e.st.Quiet)
		slices.SortStableFunc(keys, func(a, b string) int { return e.st.Quiet[a].Compare(e.st.Quiet[b]) })
		for _, k := range keys[:over] {
			delete(e.st.Quiet, k)
		}
		e.st.Stats.CooldownsDropped += uint64(over)
	}
	e.st.Last = p.Start.UTC()
	return out
}

// observe adds this window's value of every series (zero for a known
// series absent from it) once the detectors have compared them with the
// history, and keeps the number of series within MaxSeries.
func (e *Engine) observe(start time.Time, values map[string]float64) {
	// Every measure of a tier and rule seen in the window starts its
	// series, zero or not: refusals that begin later have a history.
	for k := range values {
		if e.st.Series[k] == nil {
			e.st.Series[k] = &Series{First: start}
		}
	}
	how := hourOfWeek(start)
	alpha := 1 / max(2*float64(time.Hour/e.o.Window), 1)
	for k, s := range e.st.Series {
		v := values[k]
		s.Recent = append(s.Recent, v)
		if len(s.Recent) > e.c.History {
			s.Recent = slices.Delete(s.Recent, 0, len(s.Recent)-e.c.History)
		}
		if s.N == 0 {
			s.EWMA = v
		} else {
			s.EWMA += e.c.EWMAAlpha * (v - s.EWMA)
		}
		s.N++
		if v != 0 {
			s.Seen = start
		}
		if s.Seasonal == nil {
			s.Seasonal, s.SeasonN = make([]float64, hoursPerWeek), make([]int32, hoursPerWeek)
		}
		n := s.SeasonN[how]
		s.Seasonal[how] += (v - s.Seasonal[how]) * max(1/float64(n+1), alpha)
		s.SeasonN[how] = n + 1
	}
	if over := len(e.st.Series) - e.c.MaxSeries; over > 0 {
		keys := sortedKeys(e.st.Series)
		slices.SortStableFunc(keys, func(a, b string) int { return e.st.Series[a].Seen.Compare(e.st.Series[b].Seen) })
		for _, k := range keys[:over] {
			delete(e.st.Series, k)
			e.st.Stats.Evicted++
		}
	}
}

const hoursPerWeek = 7 * 24

func hourOfWeek(t time.Time) int {
	t = t.UTC()
	return int(t.Weekday())*24 + t.Hour()
}

// baseline is what a series' next value is compared with.
type baseline struct {
	n        int     // windows of history
	median   float64 // of the recent values
	sigma    float64 // robust spread: 1.4826 × MAD, at least Poisson's √median, at least 1
	ewma     float64
	seasonal float64 // the hour of the week's profile, when old enough (else 0)
	expected float64 // the larger of the median and the seasonal profile
}

// z is v's robust z-score against b.
func (b baseline) z(v float64) float64 { return (v - b.expected) / b.sigma }

// baseline returns the series' baseline at start; a series never seen has
// n 0 and zeros.
func (e *Engine) baseline(key string, start time.Time) baseline {
	s := e.st.Series[key]
	if s == nil || len(s.Recent) == 0 {
		return baseline{sigma: 1}
	}
	med := median(s.Recent)
	dev := make([]float64, len(s.Recent))
	for i, v := range s.Recent {
		dev[i] = math.Abs(v - med)
	}
	b := baseline{n: s.N, median: med, ewma: s.EWMA}
	b.sigma = max(1.4826*median(dev), math.Sqrt(med), 1)
	b.expected = med
	week := 7 * 24 * time.Hour * time.Duration(e.c.SeasonalWeeks)
	if how := hourOfWeek(start); s.Seasonal != nil && s.SeasonN[how] > 0 && start.Sub(s.First) >= week {
		b.seasonal = s.Seasonal[how]
		b.expected = max(b.expected, b.seasonal)
	}
	return b
}

// median returns the median of vs, which it does not modify.
func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// tierOf returns the tier of a rule id ("tier:..."), or "" for the empty rule.
func tierOf(rule string) string {
	t, _, _ := strings.Cut(rule, ":")
	return t
}
