package edge

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/syncstore"
)

// stackConfig parses yaml, fills in the defaults and validates it.
func stackConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), "stack.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// behindCache returns store behind the over-limit cache, as the edge
// command puts every distributed store.
func behindCache(t *testing.T, store syncstore.Backend) *syncstore.Store {
	t.Helper()
	s, err := syncstore.New(syncstore.Options{Store: store, FlushInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// TestBreakerBehindTheCache: a scraper over its limit is answered by the
// over-limit cache without a store call, and those answers say nothing of
// the store. With the store down and the scraper's requests between other
// clients', the breaker opens after its threshold of failures in a row,
// and a cached answer neither closes it nor takes its probe.
func TestBreakerBehindTheCache(t *testing.T) {
	cfg := stackConfig(t, `
store: {timeout: 50ms, edge_nodes: 2, breaker: {failures: 3, cooldown: 1s}}
tiers:
  anonymous:
    global: {limit: 100, window: 1m}
    paths:
      /api/export: {limit: 3, window: 1m}
`)
	flaky := newFlakyStore(t)
	l := newLimiter(t, cfg, Options{Store: behindCache(t, flaky)})
	now := t0
	decide := func(remote, path string) Verdict {
		now = now.Add(time.Millisecond)
		var v Verdict
		l.Decide(context.Background(), now, req(remote, path), &v)
		return v
	}
	const scraper = "203.0.113.66:1"
	for range 4 {
		decide(scraper, "/api/export")
	}
	calls, _ := flaky.log()
	if v := decide(scraper, "/api/export"); v.Outcome != decisions.Block {
		t.Fatalf("scraper over its limit: %v (%s), want block", v.Outcome, v.Reason)
	}
	if c, _ := flaky.log(); c != calls {
		t.Fatalf("the scraper's blocked hit called the store (%d calls): want the cache's answer", c-calls)
	}

	flaky.set(func(f *flakyStore) { f.down = true })
	calls, _ = flaky.log()
	for i := range 50 {
		// The cache answers the scraper until the breaker opens; then the
		// local limit does, as for every client.
		if v := decide(scraper, "/api/export"); i < cfg.Store.Breaker.Failures && v.Outcome != decisions.Block {
			t.Fatalf("round %d: scraper %v (%s), want block (cached)", i, v.Outcome, v.Reason)
		}
		v := decide(fmt.Sprintf("198.51.100.%d:1", i), "/products")
		want, reason := decisions.FailOpen, "store unavailable: within the local limit"
		if i < cfg.Store.Breaker.Failures {
			reason = "store error: path fails open"
		}
		if v.Outcome != want || v.Reason != reason {
			t.Fatalf("round %d: client %v (%s), want %v (%s)", i, v.Outcome, v.Reason, want, reason)
		}
	}
	if c, _ := flaky.log(); c-calls != cfg.Store.Breaker.Failures {
		t.Errorf("store calls while down: %d, want %d (the breaker's threshold)", c-calls, cfg.Store.Breaker.Failures)
	}
	if st := l.Stats(); st.BreakerState != breakerOpen || st.BreakerOpened != 1 {
		t.Fatalf("breaker state %d opened %d times, want open, once", st.BreakerState, st.BreakerOpened)
	}

	// After the cooldown the scraper comes first: the cache answers it, and
	// the breaker stays open; the next client's call is the probe.
	now = now.Add(cfg.Store.Breaker.Cooldown)
	if v := decide(scraper, "/api/export"); v.Outcome != decisions.Block {
		t.Fatalf("scraper after the cooldown: %v (%s), want block", v.Outcome, v.Reason)
	}
	if st := l.Stats(); st.BreakerState == breakerClosed {
		t.Fatalf("a cached answer closed the breaker while the store is down")
	}
	if v := decide("198.51.100.200:1", "/products"); v.Outcome != decisions.FailOpen || !strings.HasPrefix(v.Reason, "store error") {
		t.Errorf("probe: %v (%s), want fail_open after a store error", v.Outcome, v.Reason)
	}
	if st := l.Stats(); st.BreakerState != breakerOpen || st.BreakerOpened != 2 {
		t.Errorf("after the failed probe: breaker state %d opened %d times, want open, twice", st.BreakerState, st.BreakerOpened)
	}
}

// ruleDown is a store that fails the calls of one rule, as a store does
// that refuses some keys (a Redis ACL) or whose second call of a decision
// missed the deadline the first used up.
type ruleDown struct {
	*flakyStore
	rule string
}

func (s ruleDown) Take(ctx context.Context, key limit.Key, rule limit.Rule, now time.Time, n int64) (limit.Result, error) {
	if key.Rule == s.rule {
		return limit.Result{}, errRefused
	}
	return s.flakyStore.Take(ctx, key, rule, now, n)
}

// TestFailureOfOneRuleDecides: a request counted under a path rule and
// the global rule whose global call fails. On a fail-closed path it is
// refused with 503 however much room the path rule has left; elsewhere
// it passes, recorded as fail_open, not as the path rule's allow.
func TestFailureOfOneRuleDecides(t *testing.T) {
	cfg := stackConfig(t, `
fail_closed: [/api/billing/]
store: {timeout: 50ms, breaker: {failures: 100, cooldown: 1s}}
tiers:
  anonymous:
    global: {limit: 100, window: 1m}
    paths:
      /api/billing/: {limit: 3, window: 1m}
      /api/search: {limit: 3, window: 1m}
`)
	for _, c := range []struct {
		path string
		want decisions.Outcome
	}{
		{"/api/billing/invoices", decisions.FailClosed},
		{"/api/search", decisions.FailOpen},
	} {
		t.Run(c.path, func(t *testing.T) {
			store := ruleDown{newFlakyStore(t), "anonymous:global"}
			l := newLimiter(t, cfg, Options{Store: behindCache(t, store)})
			got := outcomes(l, 3, time.Millisecond, req("203.0.113.7:1", c.path))
			equalOutcomes(t, got, repeat(c.want, 3))
		})
	}
}
