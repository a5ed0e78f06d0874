package config

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/ratewarden/ratewarden/internal/clientip"
)

// ResolvedTiers returns the tiers with extends applied, as the edge enforces
// them. A tier that extends another inherits the parent's global rule when
// it has none of its own, and every path rule of the parent whose prefix it
// does not set itself; its own rules replace the parent's. Inheritance is one
// level: a child inherits its parent's rules as written, never a
// grandparent's (Validate rejects a parent that itself extends).
//
// The result is a fresh copy, with no Extends set and no rule shared with c
// or between tiers, so the caller may keep or modify it. Call it after
// Defaults and Validate; on a configuration that failed Validate it does not
// panic, but a tier may lack a global rule. c.Tiers is left as written, so
// that error lines and the file stay in step.
func (c *Config) ResolvedTiers() map[string]*Tier {
	out := make(map[string]*Tier, len(c.Tiers))
	for name, t := range c.Tiers {
		if t == nil {
			continue
		}
		r := &Tier{Global: t.Global.clone(), Paths: make(map[string]*Rule, len(t.Paths))}
		if p := c.Tiers[t.Extends]; p != nil && t.Extends != name {
			if r.Global == nil {
				r.Global = p.Global.clone()
			}
			for prefix, rule := range p.Paths {
				if rule != nil {
					r.Paths[prefix] = rule.clone()
				}
			}
		}
		for prefix, rule := range t.Paths {
			if rule != nil {
				r.Paths[prefix] = rule.clone()
			}
		}
		out[name] = r
	}
	return out
}

func (r *Rule) clone() *Rule {
	if r == nil {
		return nil
	}
	c := *r
	if r.Challenge != nil {
		b := *r.Challenge
		c.Challenge = &b
	}
	return &c
}

// TierFor names the tier that limits a client. A client that is not
// authenticated uses "anonymous". An authenticated one uses the tier its
// plan names, if the configuration has such a tier other than "anonymous";
// otherwise "authenticated", if configured; otherwise "anonymous". It is
// safe for concurrent use as long as nothing modifies c.
func (c *Config) TierFor(authenticated bool, plan string) string {
	if !authenticated {
		return TierAnonymous
	}
	if _, ok := c.Tiers[plan]; ok && plan != TierAnonymous {
		return plan
	}
	if _, ok := c.Tiers[TierAuthenticated]; ok {
		return TierAuthenticated
	}
	return TierAnonymous
}

// TrustedPrefixes returns identity.trusted_proxies as prefixes, a single
// address as a prefix of its full length. Entries that Validate rejects are
// left out.
func (id *Identity) TrustedPrefixes() []netip.Prefix {
	ps := make([]netip.Prefix, 0, len(id.TrustedProxies))
	nat := id.NAT64()
	for _, s := range id.TrustedProxies {
		if p, ok := parseProxy(nat, s); ok {
			ps = append(ps, p)
		}
	}
	return ps
}

// NAT64 returns the NAT64 prefixes whose addresses carry IPv4 clients:
// the well-known one and identity.nat64_prefixes (white space around an
// entry trimmed, as identity.New trims it). Entries that Validate rejects
// are left out.
func (id *Identity) NAT64() clientip.NAT64 {
	ps := make([]netip.Prefix, 0, len(id.NAT64Prefixes))
	for _, s := range id.NAT64Prefixes {
		if p, err := clientip.ParseNAT64Prefix(strings.TrimSpace(s)); err == nil {
			ps = append(ps, p)
		}
	}
	return clientip.NewNAT64(ps)
}

// GlobalRule is the scope of a tier's global rule in its id (RuleID).
const GlobalRule = "global"

// RuleID is the id the edge names a rule by (decisions.Decision.Rule):
// "<tier>:global" for the tier's global rule (scope GlobalRule), or
// "<tier>:<path prefix>". Tier names hold no colon, so an id names its
// tier too.
func RuleID(tier, scope string) string { return tier + ":" + scope }

// RuleIDs returns the ids of the rules of the resolved tiers (RuleID),
// sorted.
func (c *Config) RuleIDs() []string {
	var ids []string
	for name, t := range c.ResolvedTiers() {
		if t.Global != nil {
			ids = append(ids, RuleID(name, GlobalRule))
		}
		for prefix := range t.Paths {
			ids = append(ids, RuleID(name, prefix))
		}
	}
	slices.Sort(ids)
	return ids
}
