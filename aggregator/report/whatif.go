package report

import (
	"cmp"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// Outcome classes a what-if compares: a request was let through, refused,
// or sent to the challenge page.
const (
	ClassAllowed    = "allowed"
	ClassRefused    = "refused"
	ClassChallenged = "challenged"
)

// Class is o's class: challenged for a challenge, allowed for any outcome
// that passed the request (a token pass, a shadow block, a fail-open, an
// allow-listed request among them), refused for the rest.
func Class(o decisions.Outcome) string {
	switch {
	case o == decisions.Challenge:
		return ClassChallenged
	case o.Passed():
		return ClassAllowed
	}
	return ClassRefused
}

// WhatIf is what a candidate configuration would have decided about the
// logged requests of a range, against what was decided: its JSON form is
// the json format. Build it with a WhatIfTally.
type WhatIf struct {
	Title    string    `json:"title"`
	Source   string    `json:"source,omitempty"`
	Config   string    `json:"config"`
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	Identity string    `json:"identity"` // how identities were resolved for the candidate
	Notes    []string  `json:"notes"`

	Replayed uint64 `json:"requests_replayed"`
	Kept     uint64 `json:"requests_kept_as_logged"` // list outcomes, not replayed
	Skipped  uint64 `json:"events_skipped"`          // feedback and drop events
	// OutOfOrder counts requests the log held later than the replay's
	// reorder horizon: replayed when read, after requests decided later.
	OutOfOrder uint64 `json:"requests_out_of_order"`
	Changed    uint64 `json:"requests_changed"`

	Transitions []Transition     `json:"transitions"`
	Rules       []RuleChange     `json:"rules"`
	Identities  []IdentityChange `json:"identities"`
	// MoreIdentities counts the changed identities beyond those listed.
	MoreIdentities int       `json:"more_identities"`
	Problems       []Problem `json:"problems"`
}

// Transition counts the requests that went from one class to another.
type Transition struct {
	From       string `json:"from"`
	To         string `json:"to"`
	Requests   uint64 `json:"requests"`
	Identities int    `json:"identities"`
}

// RuleChange counts the requests of one transition by the rule that
// decided them in the log and the rule that decides them under the
// candidate.
type RuleChange struct {
	LoggedRule    string `json:"logged_rule"`
	CandidateRule string `json:"candidate_rule"`
	From          string `json:"from"`
	To            string `json:"to"`
	Requests      uint64 `json:"requests"`
	Identities    int    `json:"identities"`
}

// IdentityChange is one identity's requests of one transition.
type IdentityChange struct {
	Identity  string    `json:"identity"` // an address or user:<id>
	Tier      string    `json:"tier"`     // under the candidate
	From      string    `json:"from"`
	To        string    `json:"to"`
	Requests  uint64    `json:"requests"`
	FirstSeen time.Time `json:"first"`
	LastSeen  time.Time `json:"last"`
}

// WhatIfTally counts a replay's requests, one Add per replayed request, and
// makes the WhatIf. The zero value is ready to use; it is not safe for
// concurrent use.
type WhatIfTally struct {
	replayed, changed uint64
	trans             map[[2]string]*Transition
	transIDs          map[[3]string]bool
	rules             map[[4]string]*RuleChange
	ruleIDs           map[[5]string]bool
	ids               map[[3]string]*IdentityChange
}

// Add counts one replayed request of identity, decided logged before and
// candidate now.
func (t *WhatIfTally) Add(identity string, logged, candidate *decisions.Decision) {
	t.replayed++
	from, to := Class(logged.Outcome), Class(candidate.Outcome)
	if from == to {
		return
	}
	t.changed++
	if t.trans == nil {
		t.trans, t.transIDs = map[[2]string]*Transition{}, map[[3]string]bool{}
		t.rules, t.ruleIDs = map[[4]string]*RuleChange{}, map[[5]string]bool{}
		t.ids = map[[3]string]*IdentityChange{}
	}
	tk := [2]string{from, to}
	tr := t.trans[tk]
	if tr == nil {
		tr = &Transition{From: from, To: to}
		t.trans[tk] = tr
	}
	tr.Requests++
	if k := [3]string{from, to, identity}; !t.transIDs[k] {
		t.transIDs[k] = true
		tr.Identities++
	}
	lr, cr := cmp.Or(logged.Rule, NoRule), cmp.Or(candidate.Rule, NoRule)
	rk := [4]string{lr, cr, from, to}
	rc := t.rules[rk]
	if rc == nil {
		rc = &RuleChange{LoggedRule: lr, CandidateRule: cr, From: from, To: to}
		t.rules[rk] = rc
	}
	rc.Requests++
	if k := [5]string{lr, cr, from, to, identity}; !t.ruleIDs[k] {
		t.ruleIDs[k] = true
		rc.Identities++
	}
	ik := [3]string{identity, from, to}
	ic := t.ids[ik]
	if ic == nil {
		ic = &IdentityChange{Identity: identity, Tier: candidate.Tier, From: from, To: to, FirstSeen: candidate.Time}
		t.ids[ik] = ic
	}
	ic.Requests++
	if candidate.Time.Before(ic.FirstSeen) {
		ic.FirstSeen = candidate.Time
	}
	if candidate.Time.After(ic.LastSeen) {
		ic.LastSeen = candidate.Time
	}
}

// Fill sets w's counts and tables from the tally, listing top identities
// at most (every one when top is 0), most requests first.
func (t *WhatIfTally) Fill(w *WhatIf, top int) {
	w.Replayed, w.Changed = t.replayed, t.changed
	w.Transitions, w.Rules, w.Identities = []Transition{}, []RuleChange{}, []IdentityChange{}
	for _, tr := range t.trans {
		w.Transitions = append(w.Transitions, *tr)
	}
	slices.SortFunc(w.Transitions, func(a, b Transition) int {
		return cmp.Or(cmp.Compare(b.Requests, a.Requests), cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
	})
	for _, rc := range t.rules {
		w.Rules = append(w.Rules, *rc)
	}
	slices.SortFunc(w.Rules, func(a, b RuleChange) int {
		return cmp.Or(cmp.Compare(b.Requests, a.Requests), cmp.Compare(a.LoggedRule, b.LoggedRule),
			cmp.Compare(a.CandidateRule, b.CandidateRule), cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
	})
	for _, ic := range t.ids {
		w.Identities = append(w.Identities, *ic)
	}
	slices.SortFunc(w.Identities, func(a, b IdentityChange) int {
		return cmp.Or(cmp.Compare(b.Requests, a.Requests), cmp.Compare(a.Identity, b.Identity), cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
	})
	if top > 0 && len(w.Identities) > top {
		w.MoreIdentities = len(w.Identities) - top
		w.Identities = w.Identities[:top]
	}
}

// Render writes the what-if in format f.
func (w *WhatIf) Render(out io.Writer, f Format) error { return render(out, f, w, w.document()) }

func (w *WhatIf) document() *document {
	d := &document{title: w.Title}
	if w.Source != "" {
		d.meta = append(d.meta, [2]string{"Source", w.Source})
	}
	d.meta = append(d.meta,
		[2]string{"Candidate configuration", w.Config},
		[2]string{"Range", stamp(w.From) + " to " + stamp(w.To)},
	)
	for _, p := range w.Problems {
		d.warnings = append(d.warnings, "skipped: "+p.Source+": "+p.Error)
	}
	sum := table{name: "summary", cols: []string{"measure", "value"}, rows: [][]string{
		{"requests replayed", u(w.Replayed)},
		{"requests changed", u(w.Changed)},
		{"requests kept as logged (lists)", u(w.Kept)},
		{"events skipped (not requests)", u(w.Skipped)},
		{"requests replayed out of order (later than the horizon)", u(w.OutOfOrder)},
	}}
	d.sections = append(d.sections, section{title: "Summary", text: append([]string{w.Identity}, w.Notes...), tables: []table{sum}})
	tr := table{name: "transitions", cols: []string{"from", "to", "requests", "identities"}}
	for _, t := range w.Transitions {
		tr.rows = append(tr.rows, []string{t.From, t.To, u(t.Requests), strconv.Itoa(t.Identities)})
	}
	d.sections = append(d.sections, section{title: "Changes", tables: []table{tr}})
	rt := table{name: "rules", cols: []string{"logged rule", "candidate rule", "from", "to", "requests", "identities"}, code: []string{"logged rule", "candidate rule"}}
	for _, r := range w.Rules {
		rt.rows = append(rt.rows, []string{r.LoggedRule, r.CandidateRule, r.From, r.To, u(r.Requests), strconv.Itoa(r.Identities)})
	}
	d.sections = append(d.sections, section{title: "Changes by rule", tables: []table{rt}})
	it := table{name: "identities", cols: []string{"identity", "tier", "from", "to", "requests", "first", "last"}, code: []string{"identity"}}
	for _, i := range w.Identities {
		it.rows = append(it.rows, []string{i.Identity, i.Tier, i.From, i.To, u(i.Requests), stamp(i.FirstSeen), stamp(i.LastSeen)})
	}
	is := section{title: "Changes by identity", tables: []table{it}}
	if w.MoreIdentities > 0 {
		is.text = []string{strconv.Itoa(w.MoreIdentities) + " more identities changed; they are not listed."}
	}
	d.sections = append(d.sections, is)
	return d
}
