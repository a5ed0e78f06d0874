package report

import (
	"cmp"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/decisions"
)

// Options shape a report. The zero value takes every default but the range.
type Options struct {
	From, To time.Time // the range; Build widens it to whole windows
	Title    string    // default "Abuse report"
	Source   string    // what was read, for the header, such as "partials dir:/var/lib/ratewarden/partials"
	Top      int       // rows of each top table; default 10; AllRows for every row
	// TopK is how many clients the range's merged top-K lists hold;
	// default 100, the aggregator's.
	TopK int
	// Points is how many points a trend chart has at most: windows are
	// summed into that many buckets of equal length. Default 360.
	Points int
}

// AllRows, as Options.Top, lists every row of each top table: every
// client the range's merged top-K lists hold, every rule.
const AllRows = math.MaxInt

func (o Options) withDefaults() Options {
	if o.Title == "" {
		o.Title = "Abuse report"
	}
	if o.Top <= 0 {
		o.Top = 10
	}
	if o.TopK <= 0 {
		o.TopK = 100
	}
	if o.Points <= 0 {
		o.Points = 360
	}
	return o
}

// Report is the abuse report of a time range: what Build makes of the
// merged partials and the alert records, ready to render. Its JSON form is
// the json format.
type Report struct {
	Title    string     `json:"title"`
	Source   string     `json:"source,omitempty"`
	From     time.Time  `json:"from"`
	To       time.Time  `json:"to"`
	Window   string     `json:"window"`
	Coverage Coverage   `json:"coverage"`
	Summary  Summary    `json:"summary"`
	ByIP     []Offender `json:"offenders_by_ip"`
	ByUser   []Offender `json:"offenders_by_user"`
	ByPath   []Path     `json:"offenders_by_path"`
	// NeverSolved are the clients most challenged that were never among a
	// window's top-K by token passes: the clients a challenge loops on.
	NeverSolved []Offender      `json:"never_solved"`
	Feedback    []FeedbackRow   `json:"feedback_events"`
	Actions     []alerts.Action `json:"actions"`
	Alerts      []alerts.Alert  `json:"alerts"`
	Trend       []Point         `json:"trend"`
	Tiers       []Tier          `json:"tiers"`
}

// Coverage says which windows of the range the report rests on.
type Coverage struct {
	Windows int `json:"windows"`      // windows in the range
	Read    int `json:"windows_read"` // windows with a partial
	// Empty are the windows without a partial known to have had no
	// events: a report of the log itself (Windows.Rolled) has no other.
	Empty      int       `json:"windows_empty"`
	Missing    int       `json:"windows_missing"` // windows without a partial, not known empty
	Gaps       []Gap     `json:"gaps"`            // runs of missing windows, oldest first
	MoreGaps   int       `json:"more_gaps"`       // gaps beyond those listed
	Unreadable []Problem `json:"unreadable"`      // partial files or log records skipped
	AlertLines int       `json:"alert_lines"`     // lines of the alerts file read
	AlertSkips []Problem `json:"alert_lines_skipped"`
	AlertSkipN int       `json:"alert_lines_skipped_count"`
	// NoClientChallenges counts the windows with challenges or token
	// passes whose partial lists no client by either (partial encoding
	// version 1): per-client challenges and solve rates leave them out.
	NoClientChallenges int `json:"windows_without_client_challenges"`
	// Complete is false when a window is missing or an input could not be
	// read: the totals may then undercount, and the report says so.
	Complete bool `json:"complete"`
}

// Gap is a run of consecutive windows without a partial: [From, To).
type Gap struct {
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	Windows int       `json:"windows"`
}

// Summary are the range's totals.
type Summary struct {
	Events         uint64         `json:"events"` // of every kind
	Requests       uint64         `json:"requests"`
	Passed         uint64         `json:"passed"`
	Refused        uint64         `json:"refused"`
	Outcomes       []OutcomeCount `json:"outcomes"`
	Challenges     uint64         `json:"challenges"`
	TokenPasses    uint64         `json:"token_passes"`
	SolveRate      *float64       `json:"solve_rate"` // token passes ÷ (challenges + token passes); null without either
	Clients        uint64         `json:"distinct_clients"`
	RefusedClients uint64         `json:"distinct_refused_clients"`
	StoreP50Ms     float64        `json:"store_latency_p50_ms"`
	StoreP99Ms     float64        `json:"store_latency_p99_ms"`
	UpstreamP50Ms  float64        `json:"upstream_latency_p50_ms"`
	UpstreamP99Ms  float64        `json:"upstream_latency_p99_ms"`
	Dropped        uint64         `json:"dropped_at_edge"`
	FirstWindow    *time.Time     `json:"first_window,omitempty"`
	LastWindowEnd  *time.Time     `json:"last_window_end,omitempty"`
}

// OutcomeCount is the requests of one outcome.
type OutcomeCount struct {
	Outcome  string `json:"outcome"`
	Requests uint64 `json:"requests"`
}

// Offender is one client among the heaviest: counts from the range's
// merged top-K lists, so Requests and Refusals are upper bounds and
// RequestsMin and RefusalsMin lower ones (equal while no list overflowed).
// A client not among the top refusers (requesters) has RefusalsMin
// (RequestsMin) 0, or what the other list proves, and Refusals (Requests)
// the most an unlisted client may have: the floors of the windows' lists,
// so 0 exactly while no list of refusals overflowed. First and last seen are the first window's
// start and the last window's end in which the client was among that
// window's top-K by requests.
type Offender struct {
	Identity    string    `json:"identity"` // an address or user:<id>
	Requests    uint64    `json:"requests"`
	RequestsMin uint64    `json:"requests_min"`
	Refusals    uint64    `json:"refusals"`
	RefusalsMin uint64    `json:"refusals_min"`
	FirstSeen   time.Time `json:"first_seen"`
	LastSeen    time.Time `json:"last_seen"`
	Actions     []string  `json:"actions"` // "list:applied" or "list:why" of actions on it, in time order
	// Challenges and TokenPasses bound the client's requests with outcome
	// challenge and token_pass, from the merged challenged and
	// token-passing top-K lists as requests are: upper bounds, and the
	// (min) fields lower ones. A client never listed has a lower bound of
	// 0 and an upper bound of the lists' floors.
	Challenges     uint64 `json:"challenges"`
	ChallengesMin  uint64 `json:"challenges_min"`
	TokenPasses    uint64 `json:"token_passes"`
	TokenPassesMin uint64 `json:"token_passes_min"`
	// SolveRateMin and SolveRateMax bound token passes ÷ (challenges +
	// token passes), the solve rate of the summary and of each rule, over
	// the counts' bounds; both null when the client was never among a
	// window's most challenged (its rate is then unknown, or undefined).
	SolveRateMin *float64 `json:"solve_rate_min"`
	SolveRateMax *float64 `json:"solve_rate_max"`
	// RefusalsUnknown is set in a tier's table when some of the tier's
	// windows come from partials of encoding version 1 or 2 (or of a
	// later version merged or restored from one, which carry their mark:
	// Offenders.TiersUnlisted), which list no client by refusals per tier
	// (Tier.RefusalsUnlisted): RefusalsMin
	// is then the bound of the other windows alone and Refusals the one
	// bound that still holds, Requests; the tables show refusals as
	// unknown.
	RefusalsUnknown bool `json:"refusals_unknown,omitempty"`

	client aggregator.Client
}

// challengeBounds fills in o's challenges, token passes and solve rate
// from the range's merged challenged (ch) and token-passing (tp) lists.
func (o *Offender) challengeBounds(ch, tp *rangeTopK) {
	var listed bool
	o.Challenges, o.ChallengesMin, listed = ch.bounds(o.client)
	o.TokenPasses, o.TokenPassesMin, _ = tp.bounds(o.client)
	if !listed {
		return
	}
	lo := round4(float64(o.TokenPassesMin) / float64(o.TokenPassesMin+o.Challenges)) // Challenges ≥ 1: listed
	hi := 0.0
	if o.TokenPasses+o.ChallengesMin > 0 {
		hi = round4(float64(o.TokenPasses) / float64(o.TokenPasses+o.ChallengesMin))
	}
	o.SolveRateMin, o.SolveRateMax = &lo, &hi
}

// NoRule names the requests no rule decided: the allow and deny lists,
// rejected paths, unidentifiable clients.
const NoRule = "(no rule)"

// Path is one rule (a tier's path rule or global rule) with its exact
// counts; first and last seen are the first and last windows it counted in.
type Path struct {
	Rule        string    `json:"rule"`
	Tier        string    `json:"tier"`
	Requests    uint64    `json:"requests"`
	Refused     uint64    `json:"refused"`
	Challenges  uint64    `json:"challenges"`
	TokenPasses uint64    `json:"token_passes"`
	SolveRate   *float64  `json:"solve_rate"`
	FirstSeen   time.Time `json:"first_seen"`
	LastSeen    time.Time `json:"last_seen"`
}

// FeedbackRow counts the feedback events of the log by list and action.
type FeedbackRow struct {
	List   string `json:"list"`
	Action string `json:"action"`
	Events uint64 `json:"events"`
}

// Point is one bucket of a trend: the windows starting in [Start, End).
type Point struct {
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	Requests   uint64    `json:"requests"`
	Refused    uint64    `json:"refused"`
	Challenged uint64    `json:"challenged"`
	Missing    int       `json:"windows_missing"`
}

// Tier is the report's section of one tier.
type Tier struct {
	Name      string         `json:"name"`
	Requests  uint64         `json:"requests"`
	Refused   uint64         `json:"refused"`
	Outcomes  []OutcomeCount `json:"outcomes"`
	SolveRate *float64       `json:"solve_rate"`
	Clients   uint64         `json:"distinct_clients"`
	Rules     []Path         `json:"rules"`
	// Top are the tier's heaviest clients by requests and by refusals
	// (Options.Top of each, so up to twice that), most refusals first.
	Top   []Offender `json:"top_clients"`
	Trend []Point    `json:"trend"`
	// RefusalsUnlisted counts the windows in which the tier refused
	// requests that their partials list no client for by refusals in the
	// tier (Offenders.TiersUnlisted: partials of encoding version 1 or 2,
	// or merged or restored from one): Top's refusals are then unknown
	// (Offender.RefusalsUnknown).
	RefusalsUnlisted int `json:"windows_without_tier_refusal_lists,omitempty"`
}

// Build makes the report of w's windows in o's range, with the alerts and
// actions of a (which may be nil) whose time is in the range.
func Build(w *Windows, a *Alerts, o Options) *Report {
	o = o.withDefaults()
	from, to := Align(o.From, o.To, w.Size)
	// Lists are empty, not null, in the JSON of a range with nothing.
	r := &Report{Title: o.Title, Source: o.Source, From: from, To: to, Window: w.Size.String(),
		Feedback: []FeedbackRow{}, Alerts: []alerts.Alert{}, Tiers: []Tier{}}
	starts := make([]time.Time, 0, len(w.Parts))
	for _, s := range sortedStarts(w.Parts) {
		if !s.Before(from) && s.Before(to) {
			starts = append(starts, s)
		}
	}
	total := aggregator.NewPartial(from, w.Size, o.TopK)
	reqs, refs := newRangeTopK(o.TopK), newRangeTopK(o.TopK)
	byTier, refsByTier := map[string]*rangeTopK{}, map[string]*rangeTopK{}
	unlisted := map[string]int{} // windows by tier, see Tier.RefusalsUnlisted
	chal, pass := newRangeTopK(o.TopK), newRangeTopK(o.TopK)
	var unmerged []Problem
	noClientChallenges := 0
	for _, s := range starts {
		p := w.Parts[s]
		if !listsChallenges(p) {
			noClientChallenges++
		}
		reqs.add(p.Offenders.Requests)
		refs.add(p.Offenders.Refusals)
		chal.add(p.Offenders.Challenged) // empty in partials of encoding version 1 (listsChallenges)
		pass.add(p.Offenders.TokenPassed)
		addTiers(byTier, p.Offenders.RequestsByTier, o.TopK)
		addTiers(refsByTier, p.Offenders.RefusalsByTier, o.TopK) // empty before partial encoding version 3
		for tier := range p.Offenders.TiersUnlisted {
			unlisted[tier]++
		}
		if err := mergeInto(total, p); err != nil {
			// Only sketches of another precision get here; the counts
			// merged before the sketch that failed.
			unmerged = append(unmerged, Problem{Source: "window " + stamp(s), Error: err.Error()})
		}
	}
	r.Coverage = coverage(w, a, from, to, starts, unmerged)
	r.Coverage.NoClientChallenges = noClientChallenges
	r.Summary = summary(total)
	if len(starts) > 0 {
		f, l := starts[0], starts[len(starts)-1].Add(w.Size)
		r.Summary.FirstWindow, r.Summary.LastWindowEnd = &f, &l
	}
	actions := []alerts.Action{}
	if a != nil {
		for _, ac := range a.Actions {
			if inRange(ac.Time, from, to) {
				actions = append(actions, ac)
			}
		}
		for _, al := range a.Alerts {
			if inRange(al.Time, from, to) {
				r.Alerts = append(r.Alerts, al)
			}
		}
	}
	slices.SortStableFunc(actions, func(x, y alerts.Action) int {
		return cmp.Or(x.Time.Compare(y.Time), cmp.Compare(x.Target, y.Target), cmp.Compare(x.List, y.List))
	})
	slices.SortStableFunc(r.Alerts, func(x, y alerts.Alert) int {
		return cmp.Or(x.Time.Compare(y.Time), cmp.Compare(x.Key, y.Key), cmp.Compare(x.State, y.State))
	})
	r.Actions = actions
	ws := scan(w, starts)
	offenders := rankOffenders(reqs, refs, o.TopK)
	r.ByIP = pick(offenders, false, o.Top)
	r.ByUser = pick(offenders, true, o.Top)
	r.NeverSolved = neverSolved(chal, pass, o.Top)
	rules := ws.rules(total, "")
	r.ByPath = rules[:min(o.Top, len(rules))]
	for _, k := range sortedKeys(total.Counts.Feedback) {
		list, action, _ := strings.Cut(k, "/")
		r.Feedback = append(r.Feedback, FeedbackRow{List: list, Action: action, Events: total.Counts.Feedback[k]})
	}
	trends := trends(w, from, to, o.Points)
	r.Trend = trends[allTiers]
	for _, name := range tierNames(total) {
		t := Tier{Name: name, Rules: ws.rules(total, name), Top: []Offender{}}
		var oc [decisions.NumOutcomes]uint64
		for k, n := range total.Counts.Cells {
			if k.Tier == name {
				oc[aggregator.OutcomeIndex(k.Outcome)] += n
			}
		}
		t.Requests, _, t.Refused, t.Outcomes = outcomeTotals(oc)
		t.SolveRate = solveRate(oc[decisions.Challenge], oc[decisions.TokenPass])
		if sk := total.Clients.ByTier[name]; sk != nil {
			t.Clients = aggregator.Estimate(sk)
		}
		if acc := byTier[name]; acc != nil {
			t.Top = rankOffenders(acc, refsByTier[name], o.Top)
		}
		if t.RefusalsUnlisted = unlisted[name]; t.RefusalsUnlisted > 0 {
			for i := range t.Top {
				t.Top[i].RefusalsUnknown, t.Top[i].Refusals = true, t.Top[i].Requests
			}
		}
		t.Trend = trends[name]
		r.Tiers = append(r.Tiers, t)
	}
	// When each listed client was seen: one pass over the windows for all
	// the tables.
	tables := [][]Offender{r.ByIP, r.ByUser, r.NeverSolved}
	for _, t := range r.Tiers {
		tables = append(tables, t.Top)
	}
	ws.seen(tables, actions)
	// Challenges are kept per client over every tier, not per tier.
	for _, os := range tables {
		for i := range os {
			os[i].challengeBounds(chal, pass)
		}
	}
	return r
}

// addTiers merges the lists of one window's tiers into acc's, made with
// k clients where missing.
func addTiers(acc map[string]*rangeTopK, tiers map[string]*aggregator.TopK, k int) {
	for tier, tk := range tiers {
		if acc[tier] == nil {
			acc[tier] = newRangeTopK(k)
		}
		acc[tier].add(tk)
	}
}

// listsChallenges is false for a window that counted challenges or token
// passes but lists no client by them, as partials of encoding version 1.
func listsChallenges(p *aggregator.Partial) bool {
	oc := p.Counts.ByOutcome()
	if oc[decisions.Challenge]+oc[decisions.TokenPass] == 0 {
		return true
	}
	o := p.Offenders
	return o.Challenged != nil && o.Challenged.Len() > 0 || o.TokenPassed != nil && o.TokenPassed.Len() > 0
}

// mergeInto merges the counts, sketches and latencies of p into total,
// windows of one range; the top-K lists are merged apart (rangeTopK).
func mergeInto(total, p *aggregator.Partial) error {
	total.Events += p.Events
	const m = aggregator.MergeOverlapping // windows of one range
	if err := total.Counts.Merge(&p.Counts, m); err != nil {
		return err
	}
	if err := total.Clients.Merge(&p.Clients, m); err != nil {
		return err
	}
	if err := total.Latency.Merge(&p.Latency, m); err != nil {
		return err
	}
	return total.Upstream.Merge(&p.Upstream, m)
}

func inRange(t, from, to time.Time) bool { return !t.Before(from) && t.Before(to) }

// maxListed bounds the gaps and problems a report lists; the rest are
// counted.
const maxListed = 50

func coverage(w *Windows, a *Alerts, from, to time.Time, starts []time.Time, unmerged []Problem) Coverage {
	c := Coverage{Windows: int(to.Sub(from) / w.Size), Read: len(starts), Gaps: []Gap{}}
	if w.Rolled {
		c.Empty = c.Windows - c.Read
	}
	c.Missing = c.Windows - c.Read - c.Empty
	i := 0
	var open *Gap
	for s := from; c.Missing > 0 && s.Before(to); s = s.Add(w.Size) {
		if i < len(starts) && starts[i].Equal(s) {
			i++
			open = nil
			continue
		}
		if open != nil {
			open.To, open.Windows = s.Add(w.Size), open.Windows+1
			continue
		}
		if len(c.Gaps) == maxListed {
			c.MoreGaps++
			open = &Gap{} // counted, not listed
			continue
		}
		c.Gaps = append(c.Gaps, Gap{From: s, To: s.Add(w.Size), Windows: 1})
		open = &c.Gaps[len(c.Gaps)-1]
	}
	c.Unreadable = append(append([]Problem{}, w.Problems...), unmerged...)
	c.AlertSkips = []Problem{}
	if a != nil {
		c.AlertLines, c.AlertSkipN = a.Lines, a.Skipped
		c.AlertSkips = append(c.AlertSkips, a.Problems...)
	}
	c.Complete = c.Missing == 0 && len(c.Unreadable) == 0
	return c
}

func summary(p *aggregator.Partial) Summary {
	oc := p.Counts.ByOutcome()
	s := Summary{Events: p.Events, Dropped: p.Counts.Dropped}
	s.Requests, s.Passed, s.Refused, s.Outcomes = outcomeTotals(oc)
	s.Challenges, s.TokenPasses = oc[decisions.Challenge], oc[decisions.TokenPass]
	s.SolveRate = solveRate(s.Challenges, s.TokenPasses)
	if p.Clients.All != nil {
		s.Clients = aggregator.Estimate(p.Clients.All)
	}
	if p.Clients.Refused != nil {
		s.RefusedClients = aggregator.Estimate(p.Clients.Refused)
	}
	s.StoreP50Ms, s.StoreP99Ms = round2(p.Latency.Quantile(0.5)), round2(p.Latency.Quantile(0.99))
	s.UpstreamP50Ms, s.UpstreamP99Ms = round2(p.Upstream.Quantile(0.5)), round2(p.Upstream.Quantile(0.99))
	return s
}

// outcomeTotals sums counts by outcome into requests, passed and refused,
// and lists the outcomes seen in the schema's order; the unknown outcomes
// count among the requests only.
func outcomeTotals(oc [decisions.NumOutcomes]uint64) (requests, passed, refused uint64, list []OutcomeCount) {
	list = []OutcomeCount{}
	for i, n := range oc {
		if n == 0 {
			continue
		}
		o := decisions.Outcome(i)
		requests += n
		switch {
		case i == 0: // unknown (aggregator.OutcomeIndex): neither passed nor refused
		case aggregator.Refused(o):
			refused += n
		default:
			passed += n
		}
		list = append(list, OutcomeCount{Outcome: o.String(), Requests: n})
	}
	return requests, passed, refused, list
}

// solveRate is the share of requests over a challenge rule's limit that
// carried a valid token: token passes ÷ (challenges + token passes).
func solveRate(challenges, passes uint64) *float64 {
	if challenges+passes == 0 {
		return nil
	}
	v := round4(float64(passes) / float64(challenges+passes))
	return &v
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }
func round4(v float64) float64 { return float64(int64(v*10000+0.5)) / 10000 }

// rankOffenders lists the n heaviest clients of reqs by requests and of
// refs by refusals (refs may be nil: no window listed refusals), most
// refusals for sure first, then most requests for sure (lower bounds: a
// merged list's upper bounds carry the floors of the windows a client was
// not listed in), then by identity. Each client's requests and refusals
// are its bounds in both lists, whichever it was ranked by: a client
// missing from one has 0 for sure and at most what any unlisted client may
// have (the floors of that list's windows, 0 while none overflowed), and
// refusals are requests too.
func rankOffenders(reqs, refs *rangeTopK, n int) []Offender {
	if refs == nil {
		refs = newRangeTopK(1)
	}
	var clients []aggregator.Client
	seen := map[aggregator.Client]bool{}
	for _, hs := range [][]aggregator.Hitter{reqs.top(n), refs.top(n)} {
		for _, h := range hs {
			if !seen[h.Client] {
				seen[h.Client] = true
				clients = append(clients, h.Client)
			}
		}
	}
	out := make([]Offender, 0, len(clients))
	for _, c := range clients {
		o := Offender{Identity: c.String(), client: c}
		o.Requests, o.RequestsMin, _ = reqs.bounds(c)
		o.Refusals, o.RefusalsMin, _ = refs.bounds(c)
		o.RequestsMin = max(o.RequestsMin, o.RefusalsMin)
		o.Refusals = min(o.Refusals, o.Requests)
		// Both upper bounds hold, so neither goes below its lower bound;
		// keep the table readable should pruning (rangeTopK.prune) make
		// one do.
		o.Requests, o.Refusals = max(o.Requests, o.RequestsMin), max(o.Refusals, o.RefusalsMin)
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b Offender) int {
		return cmp.Or(cmp.Compare(b.RefusalsMin, a.RefusalsMin), cmp.Compare(b.Refusals, a.Refusals), cmp.Compare(b.RequestsMin, a.RequestsMin),
			cmp.Compare(b.Requests, a.Requests), cmp.Compare(a.Identity, b.Identity))
	})
	return out
}

// neverSolved lists up to n of the clients of ch never listed in tp, most
// challenges for sure first, then by upper bound, then by identity.
func neverSolved(ch, tp *rangeTopK, n int) []Offender {
	out := []Offender{}
	for _, h := range ch.top(len(ch.held)) {
		if _, ok := tp.held[h.Client]; ok {
			continue
		}
		o := Offender{Identity: h.Client.String(), client: h.Client}
		o.challengeBounds(ch, tp)
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b Offender) int {
		return cmp.Or(cmp.Compare(b.ChallengesMin, a.ChallengesMin), cmp.Compare(b.Challenges, a.Challenges), cmp.Compare(a.Identity, b.Identity))
	})
	return out[:min(n, len(out))]
}

// pick returns the first n offenders that are users (or addresses).
func pick(os []Offender, users bool, n int) []Offender {
	out := []Offender{}
	for _, o := range os {
		if strings.HasPrefix(o.Identity, "user:") == users && len(out) < n {
			out = append(out, o)
		}
	}
	return out
}

// windowSeq is the range's windows in order, for when things were seen,
// with the first and last window of every (tier, rule), found in one pass.
type windowSeq struct {
	w        *Windows
	starts   []time.Time
	ruleSeen map[[2]string][2]time.Time // (tier, rule) → first start, last end
}

func scan(w *Windows, starts []time.Time) windowSeq {
	ws := windowSeq{w: w, starts: starts, ruleSeen: map[[2]string][2]time.Time{}}
	for _, s := range starts {
		for k := range w.Parts[s].Counts.Cells {
			key := [2]string{k.Tier, k.Rule}
			fl, ok := ws.ruleSeen[key]
			if !ok {
				fl[0] = s
			}
			fl[1] = s.Add(w.Size)
			ws.ruleSeen[key] = fl
		}
	}
	return ws
}

// seen fills in the first and last seen of the offenders of tables (the
// windows in whose top-K by requests or by refusals each was) and the
// actions on each, in one pass over the windows.
func (ws windowSeq) seen(tables [][]Offender, actions []alerts.Action) {
	when := map[string]*[2]time.Time{}
	for _, os := range tables {
		for i := range os {
			when[os[i].Identity] = new([2]time.Time)
			os[i].Actions = actionsOn(os[i].Identity, actions)
		}
	}
	for _, s := range ws.starts {
		p := ws.w.Parts[s]
		for _, tk := range []*aggregator.TopK{p.Offenders.Requests, p.Offenders.Refusals} {
			for _, h := range tk.Top(tk.Len()) {
				fl := when[h.Client.String()]
				if fl == nil {
					continue
				}
				if fl[0].IsZero() {
					fl[0] = s
				}
				fl[1] = s.Add(ws.w.Size)
			}
		}
	}
	for _, os := range tables {
		for i := range os {
			fl := when[os[i].Identity]
			os[i].FirstSeen, os[i].LastSeen = fl[0], fl[1]
		}
	}
}

// actionsOn lists the actions whose target is identity or a prefix that
// holds it; for an identity that is an IPv6 prefix (a client the edge
// counts by its prefix), also a target inside it, such as one of its
// addresses.
func actionsOn(identity string, actions []alerts.Action) []string {
	out := []string{}
	addr, addrErr := netip.ParseAddr(identity)
	prefix, prefixErr := netip.ParsePrefix(identity)
	for _, a := range actions {
		hit := a.Target == identity
		if !hit && addrErr == nil {
			if p, err := netip.ParsePrefix(a.Target); err == nil && p.Contains(addr) {
				hit = true
			}
		}
		if !hit && prefixErr == nil {
			if p, err := netip.ParsePrefix(a.Target); err == nil {
				hit = p.Overlaps(prefix)
			} else if t, err := netip.ParseAddr(a.Target); err == nil {
				hit = prefix.Contains(t)
			}
		}
		if !hit {
			continue
		}
		state := "applied"
		if !a.Applied {
			state = cmp.Or(a.Why, "not applied")
		}
		out = append(out, a.List+":"+state)
	}
	return out
}

// rules lists the rules of tier (every tier when ""), most refused first.
func (ws windowSeq) rules(total *aggregator.Partial, tier string) []Path {
	byRule := map[string]*Path{}
	counts := map[string]*[decisions.NumOutcomes]uint64{}
	for k, n := range total.Counts.Cells {
		if tier != "" && k.Tier != tier {
			continue
		}
		p := byRule[k.Rule]
		if p == nil {
			p = &Path{Rule: cmp.Or(k.Rule, NoRule), Tier: k.Tier}
			byRule[k.Rule] = p
			counts[k.Rule] = new([decisions.NumOutcomes]uint64)
		}
		if k.Tier < p.Tier {
			p.Tier = k.Tier // a rule shared by tiers (lists, rejections) names the first
		}
		counts[k.Rule][aggregator.OutcomeIndex(k.Outcome)] += n
	}
	for rule, p := range byRule {
		p.Requests, _, p.Refused, _ = outcomeTotals(*counts[rule])
		p.Challenges, p.TokenPasses = counts[rule][decisions.Challenge], counts[rule][decisions.TokenPass]
		p.SolveRate = solveRate(p.Challenges, p.TokenPasses)
	}
	for key, fl := range ws.ruleSeen {
		p := byRule[key[1]]
		if p == nil || tier != "" && key[0] != tier {
			continue
		}
		if p.FirstSeen.IsZero() || fl[0].Before(p.FirstSeen) {
			p.FirstSeen = fl[0]
		}
		if fl[1].After(p.LastSeen) {
			p.LastSeen = fl[1]
		}
	}
	out := make([]Path, 0, len(byRule))
	for _, p := range byRule {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b Path) int {
		return cmp.Or(cmp.Compare(b.Refused, a.Refused), cmp.Compare(b.Requests, a.Requests), cmp.Compare(a.Rule, b.Rule))
	})
	return out
}

func tierNames(p *aggregator.Partial) []string {
	seen := map[string]bool{}
	for k := range p.Counts.Cells {
		seen[k.Tier] = true
	}
	return sortedKeys(seen)
}

// allTiers keys the trend of every tier in trends' result.
const allTiers = "\x00all"

// trends sums the cells of every window into at most points buckets of
// equal length, for all tiers (allTiers) and for each tier, in one pass.
func trends(w *Windows, from, to time.Time, points int) map[string][]Point {
	n := int(to.Sub(from) / w.Size)
	per := max(1, (n+points-1)/points)
	buckets := (n + per - 1) / per
	out := map[string][]Point{}
	series := func(tier string) []Point {
		ps := out[tier]
		if ps == nil {
			ps = make([]Point, buckets)
			for b := range ps {
				ps[b] = Point{Start: from.Add(time.Duration(b*per) * w.Size), End: from.Add(time.Duration(min((b+1)*per, n)) * w.Size)}
			}
			out[tier] = ps
		}
		return ps
	}
	series(allTiers)
	missing := make([]int, buckets)
	for i := range n {
		b := i / per
		p := w.Parts[from.Add(time.Duration(i)*w.Size)]
		if p == nil {
			if !w.Rolled { // else the window is empty: a zero, not a blank
				missing[b]++
			}
			continue
		}
		for k, c := range p.Counts.Cells {
			for _, ps := range [][]Point{out[allTiers], series(k.Tier)} {
				pt := &ps[b]
				pt.Requests += c
				switch {
				case k.Outcome == decisions.Challenge:
					pt.Challenged += c
					pt.Refused += c
				case aggregator.Refused(k.Outcome):
					pt.Refused += c
				}
			}
		}
	}
	for _, ps := range out {
		for b := range ps {
			ps[b].Missing = missing[b]
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
