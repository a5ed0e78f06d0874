package report

import (
	"io"
	"strconv"
	"strings"
)

// Render writes the report in format f.
func (r *Report) Render(w io.Writer, f Format) error { return render(w, f, r, r.document()) }

func (r *Report) document() *document {
	d := &document{title: r.Title}
	if r.Source != "" {
		d.meta = append(d.meta, [2]string{"Source", r.Source})
	}
	c := r.Coverage
	d.meta = append(d.meta,
		[2]string{"Range", stamp(r.From) + " to " + stamp(r.To)},
		[2]string{"Window", r.Window},
		[2]string{"Windows read", c.WindowsRead()},
	)
	if !c.Complete {
		missing := ""
		if c.Missing > 0 {
			missing = strconv.Itoa(c.Missing) + " of " + strconv.Itoa(c.Windows) + " windows have no partial (no traffic, or not aggregated) and "
		}
		d.warnings = append(d.warnings, "totals are partial: "+missing+strconv.Itoa(len(c.Unreadable))+
			" inputs could not be read; see Coverage. Nothing missing is estimated.")
	}
	if c.NoClientChallenges > 0 {
		d.warnings = append(d.warnings, strconv.Itoa(c.NoClientChallenges)+" windows' partials list no client by challenges (partial encoding version 1): per-client challenges, token passes and solve rates leave them out.")
	}
	if c.AlertSkipN > 0 {
		d.warnings = append(d.warnings, strconv.Itoa(c.AlertSkipN)+" lines of the alerts file were skipped; see Coverage.")
	}
	s := r.Summary
	sum := table{name: "summary", cols: []string{"measure", "value"}}
	add := func(k, v string) { sum.rows = append(sum.rows, []string{k, v}) }
	add("requests", u(s.Requests))
	add("passed", u(s.Passed))
	add("refused", u(s.Refused))
	for _, o := range s.Outcomes {
		add("outcome "+o.Outcome, u(o.Requests))
	}
	add("challenges", u(s.Challenges))
	add("token passes", u(s.TokenPasses))
	add("challenge solve rate", rate(s.SolveRate))
	add("distinct clients", u(s.Clients))
	add("distinct refused clients", u(s.RefusedClients))
	add("store latency p50", ms(s.StoreP50Ms))
	add("store latency p99", ms(s.StoreP99Ms))
	add("upstream latency p50", ms(s.UpstreamP50Ms))
	add("upstream latency p99", ms(s.UpstreamP99Ms))
	add("decisions dropped at the edge", u(s.Dropped))
	add("events", u(s.Events))
	if s.FirstWindow != nil {
		add("first window", stamp(*s.FirstWindow))
		add("last window end", stamp(*s.LastWindowEnd))
	}
	d.sections = append(d.sections, section{title: "Summary", tables: []table{sum},
		text: []string{"Solve rate: of the requests over a challenge rule's limit, the share that carried a valid challenge token (token passes ÷ (challenges + token passes)). Distinct clients are HyperLogLog estimates."}})

	cov := section{title: "Coverage", text: []string{coverageText(c)}}
	gaps := table{name: "gaps", title: "Missing windows", cols: []string{"from", "to", "windows"}}
	for _, g := range c.Gaps {
		gaps.rows = append(gaps.rows, []string{stamp(g.From), stamp(g.To), strconv.Itoa(g.Windows)})
	}
	if c.MoreGaps > 0 {
		cov.text = append(cov.text, strconv.Itoa(c.MoreGaps)+" more gaps are not listed.")
	}
	cov.tables = append(cov.tables, gaps, problemTable("unreadable", "Unreadable inputs", c.Unreadable), problemTable("alert_lines_skipped", "Skipped alert lines", c.AlertSkips))
	d.sections = append(d.sections, cov)

	d.sections = append(d.sections, section{title: "Trends", charts: []chart{{name: "trend", title: "Requests, refused and challenged per " + pointLen(r.Trend), points: r.Trend}}})

	note := "Counts come from the merged top-K lists: requests and refusals are upper bounds and the (min) columns lower ones, equal while no list overflowed. A client not among the top refusers has refusals (min) 0 and refusals the most an unlisted client may have (the lists' floors: 0 while no list of refusals overflowed), and a client not among the top requesters the same of requests, at least its refusals. First and last seen are the first and last windows in whose top-K the client was. Challenges and token passes are bounded the same way from the merged lists of the most challenged and the most token-passing clients, over every tier; the solve rate is token passes ÷ (challenges + token passes) over those bounds, one figure when they agree, else its lowest and highest; - when the client was never among a window's most challenged."
	d.sections = append(d.sections,
		section{title: "Top offenders by IP", text: []string{note}, tables: []table{offenderTable("offenders_ip", r.ByIP)}},
		section{title: "Top offenders by user", tables: []table{offenderTable("offenders_user", r.ByUser)}},
		section{title: "Never solved", text: []string{"The clients most challenged that were never among a window's top-K by token passes (token passes (max) bounds what they may have passed unlisted): a challenge they do not solve, or a loop."},
			tables: []table{neverSolvedTable("never_solved", r.NeverSolved)}},
		section{title: "Top offenders by path", text: []string{"Each rule is a tier's path rule or global rule; counts are exact."}, tables: []table{pathTable("offenders_path", r.ByPath)}},
	)

	acts := table{name: "actions", title: "Policy actions", cols: []string{"time", "policy", "list", "target", "ttl", "applied", "why", "alert"}, code: []string{"target", "alert"}}
	for _, a := range r.Actions {
		acts.rows = append(acts.rows, []string{stamp(a.Time), a.Policy, a.List, a.Target, a.TTL, strconv.FormatBool(a.Applied), a.Why, a.Alert})
	}
	fb := table{name: "feedback_events", title: "Feedback events", cols: []string{"list", "action", "events"}}
	for _, f := range r.Feedback {
		fb.rows = append(fb.rows, []string{f.List, f.Action, u(f.Events)})
	}
	d.sections = append(d.sections, section{title: "Actions taken",
		text:   []string{"Policy actions from the alerts file, then the feedback events of the decision log (list changes) by list and action."},
		tables: []table{acts, fb}})

	al := table{name: "alerts", cols: []string{"time", "state", "severity", "type", "key", "tier", "rule", "summary", "identities"},
		code: []string{"key", "rule", "summary", "identities"}}
	for _, a := range r.Alerts {
		al.rows = append(al.rows, []string{stamp(a.Time), a.State, a.Severity, a.Type, a.Key, a.Tier, a.Rule, a.Summary, strings.Join(a.Identities, " ")})
	}
	d.sections = append(d.sections, section{title: "Alerts", tables: []table{al}})

	for _, t := range r.Tiers {
		oc := table{name: "tier_outcomes", cols: []string{"tier", "outcome", "requests"}}
		for _, o := range t.Outcomes {
			oc.rows = append(oc.rows, []string{t.Name, o.Outcome, u(o.Requests)})
		}
		top := offenderTable("tier_top_clients", t.Top)
		top.cols = append([]string{"tier"}, top.cols...)
		for i := range top.rows {
			top.rows[i] = append([]string{t.Name}, top.rows[i]...)
		}
		text := []string{"Requests " + u(t.Requests) + ", refused " + u(t.Refused) + ", distinct clients " + u(t.Clients) + ", challenge solve rate " + rate(t.SolveRate) + "."}
		if t.RefusalsUnlisted > 0 {
			text = append(text, strconv.Itoa(t.RefusalsUnlisted)+" windows' partials (of encoding version 1 or 2, or merged or restored from one) list no client by refusals in this tier: "+
				"each client's refusals are unknown (-), and refusals (min) counts only the windows that list them.")
		}
		d.sections = append(d.sections, section{title: "Tier " + t.Name, sub: true,
			text:   text,
			charts: []chart{{name: "tier_trend:" + t.Name, title: "Tier " + t.Name + ": requests, refused and challenged per " + pointLen(t.Trend), points: t.Trend}},
			tables: []table{oc, pathTable("tier_rules", t.Rules), top}})
	}
	return d
}

func coverageText(c Coverage) string {
	s := strconv.Itoa(c.Read) + " of " + strconv.Itoa(c.Windows) + " windows have a partial" + emptyWindows(c) + "; " + strconv.Itoa(len(c.Gaps)+c.MoreGaps) + " gaps."
	switch {
	case c.Complete:
		return s + " The totals are complete."
	case c.Missing == 0:
		return s + " Some input could not be read: the totals are marked partial and nothing is estimated for it."
	}
	return s + " A window without a partial had no traffic or was not aggregated: the partials cannot tell which, so the totals are marked partial and nothing is estimated for it."
}

// WindowsRead says how many windows of the range have a partial, and how
// many of the others had no events, if any: "2 of 10 (8 had no events)".
func (c Coverage) WindowsRead() string {
	return strconv.Itoa(c.Read) + " of " + strconv.Itoa(c.Windows) + emptyWindows(c)
}

// emptyWindows says how many windows are known to have had no events, if
// any: " (8 had no events)".
func emptyWindows(c Coverage) string {
	if c.Empty == 0 {
		return ""
	}
	return " (" + strconv.Itoa(c.Empty) + " had no events)"
}

func problemTable(name, title string, ps []Problem) table {
	t := table{name: name, title: title, cols: []string{"source", "error"}, code: []string{"source"}}
	for _, p := range ps {
		t.rows = append(t.rows, []string{p.Source, p.Error})
	}
	return t
}

func offenderTable(name string, os []Offender) table {
	t := table{name: name, cols: []string{"identity", "requests", "requests (min)", "refusals", "refusals (min)",
		"challenges", "challenges (min)", "token passes", "token passes (min)", "solve rate", "first seen", "last seen", "actions"}, code: []string{"identity"}}
	for _, o := range os {
		refusals := u(o.Refusals)
		if o.RefusalsUnknown {
			refusals = "-"
		}
		t.rows = append(t.rows, []string{o.Identity, u(o.Requests), u(o.RequestsMin), refusals, u(o.RefusalsMin),
			u(o.Challenges), u(o.ChallengesMin), u(o.TokenPasses), u(o.TokenPassesMin), rateRange(o.SolveRateMin, o.SolveRateMax),
			stamp(o.FirstSeen), stamp(o.LastSeen), strings.Join(o.Actions, " ")})
	}
	return t
}

func neverSolvedTable(name string, os []Offender) table {
	t := table{name: name, cols: []string{"identity", "challenges", "challenges (min)", "token passes (max)", "first seen", "last seen", "actions"}, code: []string{"identity"}}
	for _, o := range os {
		t.rows = append(t.rows, []string{o.Identity, u(o.Challenges), u(o.ChallengesMin), u(o.TokenPasses), stamp(o.FirstSeen), stamp(o.LastSeen), strings.Join(o.Actions, " ")})
	}
	return t
}

// rateRange is a solve rate's bounds: one rate when they agree, else
// "lo to hi %".
func rateRange(lo, hi *float64) string {
	if lo == nil || hi == nil || *lo == *hi {
		return rate(lo)
	}
	return strconv.FormatFloat(*lo*100, 'f', 1, 64) + " to " + rate(hi)
}

func pathTable(name string, ps []Path) table {
	t := table{name: name, cols: []string{"rule", "tier", "requests", "refused", "challenges", "token passes", "solve rate", "first seen", "last seen"}, code: []string{"rule"}}
	for _, p := range ps {
		t.rows = append(t.rows, []string{p.Rule, p.Tier, u(p.Requests), u(p.Refused), u(p.Challenges), u(p.TokenPasses), rate(p.SolveRate), stamp(p.FirstSeen), stamp(p.LastSeen)})
	}
	return t
}

// pointLen names the length of a trend's points, such as "5m0s".
func pointLen(ps []Point) string {
	if len(ps) == 0 {
		return "window"
	}
	return ps[0].End.Sub(ps[0].Start).String()
}
