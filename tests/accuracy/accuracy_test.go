package accuracy_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/tests/accuracy"
)

var (
	outFile = flag.String("accuracy.out", "", "write the accuracy table, in Markdown, to this file")
	full    = flag.Bool("accuracy.full", false, "replay the 1M-request trace on the memory store (the published figures) instead of the short one")
)

const ms = time.Millisecond

// The traces. Users' rates are relative to the rule, Limit per Window. The
// edge nodes are 4, so that batching with MaxError 0.01 has a per-node
// slack of ⌊⌊0.01·800⌋/4⌋ = 2 hits on the memory traces and 1 on the
// network one.
var (
	// fullTrace is the trace of the figures: 15 minutes of 40 steady
	// users, 20 bursty ones and the scraper at 800 req/s, 60× its limit;
	// 1.14 M requests.
	fullTrace = accuracy.TraceConfig{
		Name: "full", Seed: 1, Duration: 900 * time.Second, Nodes: 4, Assign: accuracy.RoundRobin,
		Limit: 800, Window: time.Minute,
		Steady: 40, SteadyLoad: [2]float64{0.2, 0.9},
		Bursty: 20, BurstSize: [2]float64{0.5, 1.5},
		ScraperRate: 800,
	}
	// shortTrace is fullTrace's mix over 5 minutes, fewer users and 90 s of
	// scraping: the default run, sized for the race detector.
	shortTrace = accuracy.TraceConfig{
		Name: "short", Seed: 2, Duration: 300 * time.Second, Nodes: 4, Assign: accuracy.RoundRobin,
		Limit: 800, Window: time.Minute,
		Steady: 12, SteadyLoad: [2]float64{0.2, 0.9},
		Bursty: 8, BurstSize: [2]float64{0.5, 1.5},
		ScraperRate: 800, ScraperFrom: 100 * time.Second, ScraperUntil: 190 * time.Second,
	}
	// netTrace is small enough for a network store (about 20 k requests,
	// some 20 s a replay on dynalite) and still spans three windows: 10 s
	// windows, so a lower limit, and random assignment of requests to
	// nodes.
	netTrace = accuracy.TraceConfig{
		Name: "net", Seed: 3, Duration: 30 * time.Second, Nodes: 4, Assign: accuracy.Random,
		Limit: 400, Window: 10 * time.Second,
		Steady: 8, SteadyLoad: [2]float64{0.2, 0.9},
		Bursty: 6, BurstSize: [2]float64{0.5, 1.5},
		ScraperRate: 800, ScraperFrom: 10 * time.Second, ScraperUntil: 25 * time.Second,
	}
	// netShortTrace is netTrace's mix over 20 s with fewer users and 2 s of
	// scraping, about 3 k requests: the default run, which a loaded
	// dynalite answers at 1 to 3 ms a call.
	netShortTrace = accuracy.TraceConfig{
		Name: "net-short", Seed: 4, Duration: 20 * time.Second, Nodes: 4, Assign: accuracy.Random,
		Limit: 400, Window: 10 * time.Second,
		Steady: 2, SteadyLoad: [2]float64{0.2, 0.9},
		Bursty: 1, BurstSize: [2]float64{0.5, 1.5},
		ScraperRate: 800, ScraperFrom: 10 * time.Second, ScraperUntil: 12 * time.Second,
	}
)

var (
	algorithms = []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket}
	modes      = []accuracy.Mode{accuracy.Exact, accuracy.Cache, accuracy.Batched}
	// skews are the spreads of the nodes' clocks: none, NTP on a bad day,
	// and a node whose clock is not disciplined.
	skews = []time.Duration{0, 50 * ms, 500 * ms}
)

// replays is what TestAccuracy measured, found by setup.
type replays struct {
	list []*accuracy.Result
	by   map[replayKey]*accuracy.Result
}

type replayKey struct {
	trace, store string
	alg          limit.Algorithm
	mode         accuracy.Mode
	skew         time.Duration
}

func (rs *replays) add(r *accuracy.Result) {
	rs.list = append(rs.list, r)
	rs.by[replayKey{r.Trace, r.Store, r.Algorithm, r.Mode, r.Skew}] = r
}

func (rs *replays) get(trace, store string, alg limit.Algorithm, mode accuracy.Mode, skew time.Duration) *accuracy.Result {
	return rs.by[replayKey{trace, store, alg, mode, skew}]
}

// generate returns the trace c describes and its oracle decisions.
func generate(t *testing.T, c accuracy.TraceConfig) (*accuracy.Trace, []bool) {
	t.Helper()
	tr, err := accuracy.Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	return tr, accuracy.Oracle(tr, c.Limit, c.Window)
}

// replayAll replays tr on one store for every algorithm, mode and skew.
func replayAll(t *testing.T, rs *replays, tr *accuracy.Trace, oracle []bool, store string, skews []time.Duration, timeout time.Duration, conn connector) {
	t.Helper()
	for _, alg := range algorithms {
		for _, mode := range modes {
			for _, skew := range skews {
				s := accuracy.Setup{
					Store: store, Algorithm: alg, Mode: mode, Skew: skew, Timeout: timeout,
					Rule:    fmt.Sprintf("%s/%s/%s/%d", tr.Config.Name, alg, mode, skew.Milliseconds()),
					Connect: conn(t),
				}
				r, err := accuracy.Replay(context.Background(), tr, oracle, s)
				if err != nil {
					t.Fatalf("%s: %v", s.Rule, err)
				}
				t.Logf("%s %s: %d requests in %v, %+v", store, s.Rule, r.Requests, r.Elapsed.Round(ms), r.Sync)
				rs.add(r)
			}
		}
	}
}

// TestAccuracy replays the traces on every store, algorithm, mode and
// skew, prints the table and checks what the stores promise.
func TestAccuracy(t *testing.T) {
	rs := &replays{by: map[replayKey]*accuracy.Result{}}
	// The network stores replay without skew by default, which is what
	// checkStoresAgree compares with the memory store; the figures add NTP's
	// skew.
	mainCfg, netCfg, netSkews := shortTrace, netShortTrace, []time.Duration{0}
	if *full {
		mainCfg, netCfg, netSkews = fullTrace, netTrace, []time.Duration{0, 50 * ms}
	}
	mainTr, mainOracle := generate(t, mainCfg)
	netTr, netOracle := generate(t, netCfg)

	t.Run("memory", func(t *testing.T) {
		replayAll(t, rs, mainTr, mainOracle, "memory", skews, 0, memory)
		replayAll(t, rs, netTr, netOracle, "memory", netSkews, 0, memory)
	})
	t.Run("dynamodb", func(t *testing.T) {
		replayAll(t, rs, netTr, netOracle, "dynamodb", netSkews, 10*time.Second, dynamo(t))
	})
	t.Run("redis", func(t *testing.T) {
		replayAll(t, rs, netTr, netOracle, "redis", netSkews, 10*time.Second, redisConn(t))
	})

	table := accuracy.AppendMarkdown(nil, rs.list)
	t.Logf("accuracy against the exact sliding log:\n%s", table)
	if *outFile != "" {
		if err := os.WriteFile(*outFile, table, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if t.Failed() {
		return
	}
	// The checks compare replays with one another; those whose replays did
	// not run (a store skipped, or -run chose a subtest) are skipped.
	checkSlidingWindow(t, rs, mainCfg.Name)
	checkBatchedBound(t, rs)
	checkCacheIdentical(t, rs)
	checkScraperWrites(t, rs, mainCfg)
	checkStoresAgree(t, rs)
}

// checkSlidingWindow holds the exact sliding window, on the memory store
// with synchronised clocks, to a stated distance from the oracle. Its
// error comes from bursty users (the counter assumes the previous window's
// hits were spread evenly) and from the scraper, which keeps its count at
// the record ceiling and is refused where the oracle lets it in as its own
// admissions age out. Users who stay below their limit must see no error:
// at most Cloudflare's published 0.003 %.
func checkSlidingWindow(t *testing.T, rs *replays, trace string) {
	r := rs.get(trace, "memory", limit.SlidingWindow, accuracy.Exact, 0)
	if r == nil {
		return
	}
	if got := r.Pct(r.WronglyAllowed); got >= 1 {
		t.Errorf("sliding window, exact, no skew: %.4f %% wrongly allowed, want < 1 %%", got)
	}
	if got := r.Pct(r.WronglyRefused); got >= 4 {
		t.Errorf("sliding window, exact, no skew: %.4f %% wrongly refused, want < 4 %%", got)
	}
	if got := r.ByClass[accuracy.Steady].WrongPct(); got > 0.003 {
		t.Errorf("sliding window, exact, no skew: %.4f %% of steady users' requests decided wrongly, want ≤ 0.003 %%", got)
	}
}

// checkBatchedBound holds batching to syncstore's bound: in any window the
// nodes admit at most L + Nodes·s ≤ L + MaxError·L. The bound is per store
// window; with skew a node opens and closes windows early or late, and the
// hits admitted across a true window boundary already exceed L without
// batching. So the over-admission batching adds is measured against cache
// mode on the same store, algorithm and skew (the same nodes without
// batching), in true aligned windows; without skew cache mode admits no
// more than L, and the bound is syncstore's own.
func checkBatchedBound(t *testing.T, rs *replays) {
	for _, r := range rs.list {
		if r.Mode != accuracy.Batched || r.Algorithm == limit.TokenBucket {
			continue
		}
		base := rs.get(r.Trace, r.Store, r.Algorithm, accuracy.Cache, r.Skew)
		if base == nil {
			continue
		}
		slack := int64(r.MaxError*float64(r.Limit)) / int64(r.Nodes) * int64(r.Nodes)
		if r.MaxOverAligned > base.MaxOverAligned+slack {
			t.Errorf("%s %s %s skew ±%v: batched admits up to %d over the limit in a window, cache mode %d: want at most %d more (Nodes·s)",
				r.Trace, r.Store, r.Algorithm, r.Skew, r.MaxOverAligned, base.MaxOverAligned, slack)
		}
		if r.Skew == 0 && r.MaxOverAligned > slack {
			t.Errorf("%s %s %s, no skew: batched admits up to %d over the limit in a window, want at most %d (Nodes·s)",
				r.Trace, r.Store, r.Algorithm, r.MaxOverAligned, slack)
		}
	}
}

// checkCacheIdentical requires the over-limit cache to change no decision
// for the fixed window and the token bucket, whose cached answers are the
// store's field for field. With skew a node behind can still hold a fixed
// window's frozen answer after a node ahead has opened the next window at
// the store, so the check is for synchronised clocks; the sliding window's
// cached count may exceed the store's by one, so it is not checked.
func checkCacheIdentical(t *testing.T, rs *replays) {
	for _, r := range rs.list {
		if r.Mode != accuracy.Cache || r.Skew != 0 || r.Algorithm == limit.SlidingWindow {
			continue
		}
		exact := rs.get(r.Trace, r.Store, r.Algorithm, accuracy.Exact, 0)
		if exact == nil {
			continue
		}
		if i, n := diff(exact.Decisions, r.Decisions); n > 0 {
			t.Errorf("%s %s %s: cache mode decides %d requests otherwise than exact mode, the first at %d", r.Trace, r.Store, r.Algorithm, n, i)
		}
	}
}

// checkScraperWrites bounds what the scraper costs the shared store behind
// the over-limit cache. A fixed window is frozen until it ends, so the
// scraper writes about Limit+1 plus one per node per window: ≤ 0.05 writes
// a request. A sliding window is frozen for Window/MaxCount at a time and a
// token bucket until one more hit could be recorded, again about
// Window/MaxCount, and each node refreshes its own cache: about
// Nodes·MaxCount writes per window, which at 60× the limit is above 0.05;
// they are held to 1.25 times that.
func checkScraperWrites(t *testing.T, rs *replays, c accuracy.TraceConfig) {
	perWindow := float64(c.ScraperRate) * c.Window.Seconds()
	for _, skew := range skews {
		for _, alg := range algorithms {
			r := rs.get(c.Name, "memory", alg, accuracy.Cache, skew)
			if r == nil {
				continue
			}
			bound := 0.05
			if alg != limit.FixedWindow {
				bound = 1.25 * float64(int64(c.Nodes)*(c.Limit+1)) / perWindow
			}
			if got := r.ScraperWritesPerRequest(); got > bound {
				t.Errorf("%s %s cache, skew ±%v: the scraper costs %.4f writes a request, want ≤ %.4f", c.Name, alg, skew, got, bound)
			}
		}
	}
}

// checkStoresAgree requires the network stores to decide every request of
// a replay without skew as the memory store does: they implement package
// limit's arithmetic and the replay is sequential, so any difference is a
// store's error. With skew they may differ by design: DynamoDB keeps a
// fixed window in an item per window, so a hit stamped in the window before
// the current one counts there, where the memory and Redis stores count it
// in the current window.
func checkStoresAgree(t *testing.T, rs *replays) {
	for _, r := range rs.list {
		if r.Store == "memory" || r.Skew != 0 {
			continue
		}
		mem := rs.get(r.Trace, "memory", r.Algorithm, r.Mode, r.Skew)
		if mem == nil {
			continue
		}
		if i, n := diff(mem.Decisions, r.Decisions); n > 0 {
			t.Errorf("%s %s %s skew ±%v: %d decisions differ from the memory store's, the first at %d", r.Store, r.Algorithm, r.Mode, r.Skew, n, i)
		}
		if r.Writes != mem.Writes {
			t.Errorf("%s %s %s skew ±%v: %d writes, the memory store %d", r.Store, r.Algorithm, r.Mode, r.Skew, r.Writes, mem.Writes)
		}
	}
}

// diff returns the index of the first difference between a and b and the
// number of differences.
func diff(a, b []bool) (first, n int) {
	first = -1
	for i := range a {
		if a[i] != b[i] {
			if n == 0 {
				first = i
			}
			n++
		}
	}
	return first, n
}
