package alerts

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge/lists"
)

// ListWriter writes feedback-list entries: the file and DynamoDB list
// stores implement it.
type ListWriter interface {
	Put(ctx context.Context, e lists.Entry) error
	Remove(ctx context.Context, list, target, by string) error
}

// EventWriter records a feedback event (a decisions.Decision of kind
// KindFeedback) where the decision log's readers find it.
type EventWriter interface {
	Feedback(ctx context.Context, d decisions.Decision) error
}

// AllowList is the current allow list (a *lists.Watcher): identities on it
// are never acted on without a person's approval.
type AllowList interface {
	List() *lists.List
}

// Why an action was not applied.
const (
	WhyDryRun        = "dry_run"
	WhyNeedsApproval = "needs_approval"
	WhyCapReached    = "cap_reached"
	WhyAllowListed   = "allow_listed"
	WhyPayingTier    = "paying_tier"
	WhyNoTarget      = "no_target"
	WhyWriteFailed   = "write_failed"
)

// FeedbackAction is the Action of a feedback event that proposes an entry
// a person must approve (Entry.Pending), beside "add" and "remove".
const FeedbackAction = "propose"

// maxTargets bounds the identities one alert acts on (a credential
// stuffing alert names its top clients).
const maxTargets = topIdentities

// Policies turn firing alerts into list entries by the configured
// policies, within the guard rails: an allow-listed identity or a paying
// tier gets a pending entry a person approves, never an applied one; an
// allow-list action is always a proposal; at most MaxPerHour entries are
// written per hour of event time; in dry-run mode nothing is written and
// every action is still recorded. The zero value is not usable: use
// NewPolicies. It is not safe for concurrent use.
type Policies struct {
	cfg    config.Feedback
	dry    bool
	lists  ListWriter  // nil: dry run only
	events EventWriter // nil: none
	allow  AllowList   // nil: nobody is allow-listed
	paying func(tier string) bool
}

// NewPolicies returns the policies of cfg writing to w (nil only in dry
// run), recording events to ev (nil: none) and consulting allow (nil: no
// allow list); paying says whether a tier is a paying one.
func NewPolicies(cfg config.Feedback, w ListWriter, ev EventWriter, allow AllowList, paying func(string) bool) *Policies {
	dry := cfg.DryRun == nil || *cfg.DryRun || w == nil
	return &Policies{cfg: cfg, dry: dry, lists: w, events: ev, allow: allow, paying: paying}
}

// DryRun reports whether the policies only record.
func (p *Policies) DryRun() bool { return p.dry }

// Act returns the actions the policies take on a, having taken them;
// applied keeps the times of the entries written in the last hour (the
// cap), and Act updates it. Only firing alerts are acted on; entries
// expire by their TTL, not when the alert resolves.
func (p *Policies) Act(ctx context.Context, a Alert, applied *[]time.Time) []Action {
	if a.State != Firing {
		return nil
	}
	var out []Action
	for _, pol := range p.cfg.Policies {
		if !slices.Contains(pol.Alerts, a.Type) || severityRank(a.Severity) < severityRank(pol.MinSeverity) {
			continue
		}
		targets := a.Identities
		if len(targets) > maxTargets {
			targets = targets[:maxTargets]
		}
		if len(targets) == 0 {
			out = append(out, Action{Kind: "action", Time: a.Time, Policy: pol.Name, Alert: a.Key, List: pol.Action,
				TTL: pol.TTL.String(), Why: WhyNoTarget})
			continue
		}
		for _, t := range targets {
			out = append(out, p.act(ctx, a, pol, t, applied))
		}
	}
	return out
}

// act takes one policy's action on one target.
func (p *Policies) act(ctx context.Context, a Alert, pol config.FeedbackPolicy, target string, applied *[]time.Time) Action {
	act := Action{Kind: "action", Time: a.Time, Policy: pol.Name, Alert: a.Key, List: pol.Action, Target: target, TTL: pol.TTL.String()}
	pending := ""
	switch {
	case pol.Action == lists.Allow:
		pending = WhyNeedsApproval
	case p.allowListed(target):
		pending = WhyAllowListed
	case a.Tier != "" && p.paying(a.Tier):
		pending = WhyPayingTier
	}
	// The cap counts the entries written in the hour before this alert.
	cut := a.Time.Add(-time.Hour)
	*applied = slices.DeleteFunc(*applied, func(t time.Time) bool { return !t.After(cut) })
	switch {
	case p.dry:
		act.Why = WhyDryRun
		return act
	case len(*applied) >= p.cfg.MaxPerHour:
		act.Why = WhyCapReached
		return act
	}
	e := lists.Entry{List: pol.Action, Target: target, Expires: a.Time.Add(pol.TTL),
		Reason: "alert " + a.Key, By: "policy:" + pol.Name, Added: a.Time, Pending: pending != ""}
	if err := p.lists.Put(ctx, e); err != nil {
		act.Why = WhyWriteFailed
		return act
	}
	*applied = append(*applied, a.Time)
	act.Applied, act.Why = pending == "", pending
	if p.events != nil {
		action := "add"
		if e.Pending {
			action = FeedbackAction
		}
		// A failed event leaves the entry written: the action record says
		// so, and the list is what the edge obeys.
		if err := p.events.Feedback(ctx, decisions.Decision{Kind: decisions.KindFeedback, Time: a.Time, Node: e.By,
			List: e.List, Action: action, Target: target, TTL: pol.TTL, Reason: e.Reason}); err != nil {
			act.Why = strings.TrimPrefix(act.Why+",event_failed", ",")
		}
	}
	return act
}

// allowListed reports whether target (an address, a CIDR or user:<id>) is
// on the allow list.
func (p *Policies) allowListed(target string) bool {
	if p.allow == nil {
		return false
	}
	l := p.allow.List()
	if user, ok := strings.CutPrefix(target, "user:"); ok {
		return l.Contains(netip.Addr{}, user)
	}
	if a, err := netip.ParseAddr(target); err == nil {
		return l.Contains(a, "")
	}
	if pf, err := netip.ParsePrefix(target); err == nil {
		return l.Contains(pf.Addr(), "")
	}
	return false
}
