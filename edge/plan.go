package edge

import (
	"net/http"
	"slices"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/internal/canonpath"
)

// RulePlan is one compiled rule as the Limiter counts it: what another
// implementation of the decision core (the viewer-request function of
// package edge/lambdaedge) needs to decide exactly as the Limiter does.
type RulePlan struct {
	ID        string        // "tier:/prefix" or "tier:global"
	Algorithm string        // such as fixed_window
	Limit     int64         // limit.Rule.Limit
	Window    time.Duration // limit.Rule.Window
	Capacity  int64         // a hit whose count is at most this is allowed
	Challenge bool          // over the capacity but within Ceiling: challenge
	Ceiling   int64         // above it, block
	Shadow    bool          //
	MaxCount  int64         // counting stops here (limit.Rule.MaxCount)
	// LocalLimit and LocalMaxCount are the fallback limit while the store
	// is unavailable.
	LocalLimit, LocalMaxCount int64
}

// PathPlan is a path rule of a tier: its prefix in the form
// canonpath.HasPrefix compares (canonpath.MatchForm).
type PathPlan struct {
	Prefix string
	Match  string
	Rule   RulePlan
}

// TierPlan is a compiled tier: its path rules longest prefix first.
type TierPlan struct {
	Name   string
	Global RulePlan
	Paths  []PathPlan
}

// Plan is the compiled form of a configuration's rules, tiers and
// fail-closed prefixes.
type Plan struct {
	Tiers      []TierPlan // sorted by name
	FailClosed []string   // in match form
	// ChallengePage is the prefix, in match form, of the requests for the
	// challenge page, which are never challenged; "" for none.
	ChallengePage string
}

// Compile compiles cfg's rules as New does and describes them.
func Compile(cfg *config.Config) (Plan, error) {
	tiers, err := compileTiers(cfg, cfg.Paths.Case)
	if err != nil {
		return Plan{}, err
	}
	var p Plan
	for _, t := range tiers {
		tp := TierPlan{Name: t.name, Global: t.global.plan()}
		for _, pr := range t.paths {
			tp.Paths = append(tp.Paths, PathPlan{Prefix: pr.prefix, Match: pr.match, Rule: pr.rule.plan()})
		}
		p.Tiers = append(p.Tiers, tp)
	}
	slices.SortFunc(p.Tiers, func(a, b TierPlan) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	for _, fc := range cfg.FailClosed {
		p.FailClosed = append(p.FailClosed, canonpath.MatchForm(fc, cfg.Paths.Case))
	}
	p.ChallengePage = challengePagePrefix(cfg.Challenge.PagePath(), cfg.Paths.Case)
	return p, nil
}

func (r *rule) plan() RulePlan {
	return RulePlan{ID: r.id, Algorithm: r.algorithm, Limit: r.limit.Limit, Window: r.limit.Window,
		Capacity: r.capacity, Challenge: r.challenge, Ceiling: r.ceiling, Shadow: r.shadow, MaxCount: r.limit.MaxCount,
		LocalLimit: r.local.Limit, LocalMaxCount: r.local.MaxCount}
}

// Forward returns r, which v passed, as the origin is to see it, exactly
// as the middleware forwards it: the path canonical, the headers of an
// untrusted peer that the edge did not believe removed, the resolved
// identity set. Other shapes of the edge (the viewer-request function of
// package edge/lambdaedge) are held to it.
func (l *Limiter) Forward(r *http.Request, v *Verdict) *http.Request { return l.forward(r, v) }
