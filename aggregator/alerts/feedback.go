package alerts

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/edge/lists"
)

// ListWriter writes feedback-list entries and reads them back, so that a
// policy never weakens an entry already there: the file and DynamoDB list
// stores implement it.
type ListWriter interface {
	Put(ctx context.Context, e lists.Entry) error
	Remove(ctx context.Context, list, target, by, reason string) error
	Entries(ctx context.Context, list string) ([]lists.Entry, error)
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
	// WhyStronger: an entry at least as strong already covers the target
	// (on the deny list, or on the same list for at least as long), and
	// a store's Put would replace it with this weaker one.
	WhyStronger = "stronger_entry"
	// WhyReadFailed: the lists could not be read to look for a stronger
	// entry, so nothing was written.
	WhyReadFailed = "read_failed"
)

// maxTargets bounds the identities one alert acts on (a credential
// stuffing alert names its top clients).
const maxTargets = topIdentities

// Policies turn firing alerts into list entries by the configured
// policies, within the guard rails: an allow-listed identity or a paying
// tier gets a pending entry a person approves, never an applied one; an
// allow-list action is always a proposal; an entry at least as strong as
// the policy's (a deny entry, or one on the same list lasting as long or
// longer, whoever wrote it) is never replaced; an IPv6 client is listed
// by the prefix the edge counts it under; at most MaxPerHour entries are
// written per hour of event time; in dry-run mode nothing is written and
// every action is still recorded.
//
// Policies write the lists only. They record no feedback event: the edge
// that reads the lists records each change it sees as exactly one feedback
// event in its decision stream (see package lists), and the Action records
// are the policies' audit trail. The zero value is not usable: use
// NewPolicies. It is not safe for concurrent use.
type Policies struct {
	cfg    config.Feedback
	dry    bool
	lists  ListWriter // nil: dry run only
	allow  AllowList  // nil: nobody is allow-listed
	paying func(tier string) bool
	v6bits int // the edge's identity.ipv6_prefix
}

// NewPolicies returns the policies of cfg writing to w (nil only in dry
// run) and consulting allow (nil: no allow list); paying says whether a
// tier is a paying one, and ipv6Prefix is the length of the prefix the
// edge counts an IPv6 client under (identity.ipv6_prefix; 0 takes 64).
func NewPolicies(cfg config.Feedback, w ListWriter, allow AllowList, paying func(string) bool, ipv6Prefix int) *Policies {
	dry := cfg.DryRun == nil || *cfg.DryRun || w == nil
	if ipv6Prefix <= 0 || ipv6Prefix > 128 {
		ipv6Prefix = 64
	}
	return &Policies{cfg: cfg, dry: dry, lists: w, allow: allow, paying: paying, v6bits: ipv6Prefix}
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

// heldBack returns the actions of acts that a later window takes again
// while their alert stays open: those the cap or the store kept from
// being written (cap_reached, read_failed, write_failed), not those a
// guard rail judged.
func heldBack(acts []Action) []Action {
	var out []Action
	for _, a := range acts {
		if a.Why == WhyCapReached || a.Why == WhyReadFailed || a.Why == WhyWriteFailed {
			out = append(out, a)
		}
	}
	return out
}

// Retry takes the deferred actions of a, an alert still firing, again at
// now (the end of a later window: the entry expires a TTL after it) and
// returns what it did; nothing, and nothing to record, while the hour's
// cap is still full.
func (p *Policies) Retry(ctx context.Context, a Alert, deferred []Action, now time.Time, applied *[]time.Time) []Action {
	cut := now.Add(-time.Hour)
	*applied = slices.DeleteFunc(*applied, func(t time.Time) bool { return !t.After(cut) })
	if len(*applied) >= p.cfg.MaxPerHour {
		return nil
	}
	a.Time = now
	var out []Action
	for _, d := range deferred {
		i := slices.IndexFunc(p.cfg.Policies, func(pol config.FeedbackPolicy) bool { return pol.Name == d.Policy })
		if i < 0 {
			continue // a policy no longer configured
		}
		out = append(out, p.act(ctx, a, p.cfg.Policies[i], d.Target, applied))
	}
	return out
}

// ListTarget is the target a policy lists for an identity of an alert: an
// IPv6 address, or a longer IPv6 prefix, becomes the prefix of ipv6Prefix
// bits it is counted under at the edge (2001:db8:1:2::/64), so that the
// client cannot step around its entry by moving within its prefix;
// anything else (a prefix as the aggregator's lists name it already) is
// kept as it is.
func ListTarget(id string, ipv6Prefix int) string {
	a, err := netip.ParseAddr(id)
	if err != nil {
		pf, perr := netip.ParsePrefix(id)
		if perr != nil || !pf.Addr().Is6() || pf.Addr().Is4In6() || pf.Bits() <= ipv6Prefix {
			return id
		}
		a = pf.Addr()
	}
	if !a.Is6() || a.Is4In6() || ipv6Prefix >= 128 {
		return id
	}
	pf, err := a.WithZone("").Prefix(ipv6Prefix)
	if err != nil {
		return id
	}
	return pf.String()
}

// act takes one policy's action on one identity.
func (p *Policies) act(ctx context.Context, a Alert, pol config.FeedbackPolicy, id string, applied *[]time.Time) Action {
	target := ListTarget(id, p.v6bits)
	act := Action{Kind: "action", Time: a.Time, Policy: pol.Name, Alert: a.Key, List: pol.Action, Target: target, TTL: pol.TTL.String()}
	pending := ""
	switch {
	case pol.Action == lists.Allow:
		pending = WhyNeedsApproval
	case p.allowListed(id) || p.allowListed(target):
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
	switch stronger, err := p.stronger(ctx, &e, a.Time); {
	case err != nil:
		act.Why = WhyReadFailed
		return act
	case stronger:
		act.Why = WhyStronger
		return act
	}
	if err := p.lists.Put(ctx, e); err != nil {
		act.Why = WhyWriteFailed
		return act
	}
	*applied = append(*applied, a.Time)
	act.Applied, act.Why = pending == "", pending
	return act
}

// outranks are the lists whose entries are at least as strong as an entry
// on a list: the list itself, and the deny list over the challenge list.
var outranks = map[string][]string{
	lists.Deny:      {lists.Deny},
	lists.Challenge: {lists.Deny, lists.Challenge},
	lists.Allow:     {lists.Allow},
}

// stronger reports whether an entry at now is at least as strong as e: it
// covers e's target on e's list or one that outranks it, and lasts at least
// as long (a pending e is outranked by any entry of its target, pending or
// not, so that a proposal is made once). A list the store does not keep
// has no entries.
func (p *Policies) stronger(ctx context.Context, e *lists.Entry, now time.Time) (bool, error) {
	for _, list := range outranks[e.List] {
		es, err := p.lists.Entries(ctx, list)
		if errors.Is(err, lists.ErrNoList) {
			continue
		}
		if err != nil {
			return false, err
		}
		for i := range es {
			o := &es[i]
			if !o.Removed.IsZero() || (!o.Expires.IsZero() && !now.Before(o.Expires)) || !covers(o.Target, e.Target) {
				continue
			}
			if e.Pending && list == e.List {
				return true, nil
			}
			if !o.Pending && (o.Expires.IsZero() || !o.Expires.Before(e.Expires)) {
				return true, nil
			}
		}
	}
	return false, nil
}

// covers reports whether an entry for target outer applies to every client
// target names: the same target, or a prefix holding target's address or
// prefix.
func covers(outer, target string) bool {
	if outer == target {
		return true
	}
	op, err := netip.ParsePrefix(outer)
	if err != nil {
		return false
	}
	if pf, err := netip.ParsePrefix(target); err == nil {
		return op.Bits() <= pf.Bits() && op.Contains(pf.Addr())
	}
	a, err := netip.ParseAddr(target)
	return err == nil && op.Contains(a)
}

// allowListed reports whether target (an address, a CIDR or user:<id>) is
// on the allow list: for a CIDR (an IPv6 client's prefix), whether any
// allow-listed address or prefix overlaps it, since an entry on the
// prefix would cover that address too, and the edge reads the deny list
// before the allow list.
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
		allowed, _ := l.Targets(l.Read())
		return slices.ContainsFunc(allowed, pf.Overlaps)
	}
	return false
}
