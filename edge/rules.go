package edge

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/internal/canonpath"
)

// rule is one compiled limit.
type rule struct {
	id        string // "tier:/prefix" or "tier:global"; the counter key's rule part and the policy name
	algorithm string
	limit     limit.Rule
	capacity  int64 // limit.Capacity(): a hit whose count is at most this is allowed
	challenge bool  // over the limit but within factor × limit: challenge
	ceiling   int64 // factor × capacity: above it, block
	shadow    bool
	local     limit.Rule // the fallback limit while the store is unavailable
}

type pathRule struct {
	prefix string // as configured, canonical
	match  string // prefix as canonpath.HasPrefix compares it (canonpath.MatchForm)
	rule   *rule
}

// tier is a compiled tier: a global rule and path rules, longest prefix first.
type tier struct {
	name   string
	global *rule
	paths  []pathRule
}

// match returns the path rule for the canonical path, or nil; plain is
// canonpath.Plain(path).
func (t *tier) match(path string, plain bool, c canonpath.Case) *rule {
	if plain {
		for i := range t.paths {
			if canonpath.HasPlainPrefix(path, t.paths[i].match) {
				return t.paths[i].rule
			}
		}
		return nil
	}
	for i := range t.paths {
		if canonpath.HasPrefix(path, t.paths[i].match, c) {
			return t.paths[i].rule
		}
	}
	return nil
}

func compileTiers(cfg *config.Config, c canonpath.Case) (map[string]*tier, error) {
	out := make(map[string]*tier, len(cfg.Tiers))
	for name, ct := range cfg.ResolvedTiers() {
		t := &tier{name: name}
		g, err := compileRule(cfg, config.RuleID(name, config.GlobalRule), ct.Global)
		if err != nil {
			return nil, err
		}
		t.global = g
		for prefix, cr := range ct.Paths {
			r, err := compileRule(cfg, config.RuleID(name, prefix), cr)
			if err != nil {
				return nil, err
			}
			t.paths = append(t.paths, pathRule{prefix: prefix, match: canonpath.MatchForm(prefix, c), rule: r})
		}
		slices.SortFunc(t.paths, func(a, b pathRule) int {
			return cmp.Or(cmp.Compare(len(b.match), len(a.match)), strings.Compare(a.match, b.match))
		})
		for i := 1; i < len(t.paths); i++ {
			if t.paths[i].match == t.paths[i-1].match {
				return nil, fmt.Errorf("compile rules: tier %s: %s and %s are one prefix when matched", name, t.paths[i-1].prefix, t.paths[i].prefix)
			}
		}
		out[name] = t
	}
	if out[config.TierAnonymous] == nil {
		return nil, fmt.Errorf("compile rules: no %q tier", config.TierAnonymous)
	}
	return out, nil
}

func compileRule(cfg *config.Config, id string, cr *config.Rule) (*rule, error) {
	if cr == nil {
		return nil, fmt.Errorf("compile rules: %s: no rule", id)
	}
	alg, ok := limit.ParseAlgorithm(cr.Algorithm)
	if !ok {
		return nil, fmt.Errorf("compile rules: %s: unknown algorithm %q", id, cr.Algorithm)
	}
	lr := limit.Rule{Algorithm: alg, Limit: cr.Limit, Window: cr.Window, Burst: cr.Burst}
	r := &rule{id: id, algorithm: alg.String(), shadow: cr.Shadow}
	r.challenge = cfg.Challenge.Enabled && alg != limit.Concurrency
	if cr.Challenge != nil {
		r.challenge = *cr.Challenge && alg != limit.Concurrency
	}
	r.ceiling = lr.Capacity()
	if r.challenge {
		r.ceiling = int64(float64(lr.Capacity()) * cfg.Challenge.Factor)
	}
	// Counting stops a little above the block threshold: enough to tell a
	// block from a challenge. A flood is then not recorded at all: a token
	// bucket's refill is not pushed indefinitely into the future, a blocked
	// key costs a distributed store no writes (and can be answered from the
	// over-limit cache), and a sliding window's next window starts from the
	// block threshold rather than from the size of the flood.
	if alg != limit.Concurrency {
		lr.MaxCount = r.ceiling + 1
	}
	r.limit, r.capacity = lr, lr.Capacity()
	local := lr
	nodes := int64(max(cfg.Store.EdgeNodes, 1))
	local.Limit = max(lr.Limit/nodes, 1)
	if local.Burst > 0 {
		local.Burst = max(lr.Burst/nodes, 1)
	}
	if local.MaxCount > 0 {
		local.MaxCount = max(lr.MaxCount/nodes, 1)
	}
	r.local = local
	return r, nil
}
