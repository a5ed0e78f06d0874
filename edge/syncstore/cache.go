package syncstore

import (
	"math"

	"github.com/ratewarden/ratewarden/edge/limit"
)

// frozen is a key's state at the store while no hit can change it: hits
// stamped in [from, until) are answered by replaying the rule on state.
// until 0 means nothing is cached.
type frozen struct {
	state       limit.State
	from, until int64
}

// freeze returns what to cache after the store answered res to n hits at
// ns, and false when the answer does not show a frozen state. It derives the
// store's state from the answer: a window count is recorded exactly when
// the answer's Count is at most MaxCount.
func freeze(rule *limit.Rule, res limit.Result, ns, n int64) (frozen, bool) {
	if !cacheable(rule) || n <= 0 {
		return frozen{}, false
	}
	w := int64(rule.Window)
	recorded := res.Count
	if recorded > rule.MaxCount {
		recorded -= n
	}
	switch rule.Algorithm {
	case limit.FixedWindow:
		if recorded < rule.MaxCount {
			return frozen{}, false
		}
		idx := res.Expires/w - 1
		// The store counts a hit stamped in the window before the state's
		// in the state's window; earlier ones would start a new state.
		return frozen{state: limit.State{A: idx, B: recorded}, from: (idx - 1) * w, until: res.Expires}, true
	case limit.SlidingWindow:
		if recorded < rule.MaxCount || recorded > lo32 {
			return frozen{}, false
		}
		idx := res.Expires/w - 2
		// The previous window counted at most MaxCount, so its weighted
		// share loses at most ⌈MaxCount·d/w⌉ hits in d: at most one while
		// d ≤ w/MaxCount. The state is kept as a current count alone, which
		// reproduces the count at ns.
		until := min(ns+w/rule.MaxCount+1, (idx+1)*w)
		return frozen{state: limit.State{A: idx, B: recorded}, from: (idx - 1) * w, until: until}, true
	case limit.TokenBucket:
		// Expires is the theoretical arrival time after the hit. A hit is
		// recorded again once the bucket holds at most MaxCount-1 hits.
		t := interval(rule)
		tat := res.Expires
		if ceilDiv(tat-ns, t) < rule.MaxCount {
			return frozen{}, false
		}
		// (MaxCount-1)·t < tat-ns here, so the product does not overflow.
		return frozen{state: limit.State{A: tat}, from: math.MinInt64, until: tat - (rule.MaxCount-1)*t}, true
	}
	return frozen{}, false
}

// cached returns the store's answer to n hits at ns from the frozen state,
// and false when the entry cannot answer it; its shard's lock is held.
func (e *entry) cached(rule *limit.Rule, ns, n int64) (limit.Result, bool) {
	if e.f.until == 0 || ns < e.f.from || ns >= e.f.until || e.rule != *rule {
		return limit.Result{}, false
	}
	st := e.f.state
	res := rule.Take(&st, ns, n)
	if rule.Allowed(res) {
		// Not reached for a frozen state; let the store answer if it is.
		return limit.Result{}, false
	}
	return res, true
}
