package accuracy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/syncstore"
)

// Base is the true instant a trace starts at: a UTC midnight, aligned to
// every window that divides 24 hours, so that true windows and the stores'
// windows start together on a node without skew.
var Base = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Backend is a client of the shared counter store: the edge's store
// interface, which the memory, DynamoDB and Redis stores implement.
type Backend interface {
	Take(ctx context.Context, key limit.Key, rule limit.Rule, now time.Time, n int64) (limit.Result, error)
}

// Mode is how an edge node reaches the shared store.
type Mode uint8

// The modes.
const (
	// Exact sends every request to the node's store client.
	Exact Mode = iota
	// Cache puts a syncstore.Store with MaxError 0 in front of the client:
	// only the over-limit cache, which must not change a decision.
	Cache
	// Batched puts a syncstore.Store with Setup.MaxError and the trace's
	// number of nodes in front of the client.
	Batched
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case Exact:
		return "exact"
	case Cache:
		return "cache"
	case Batched:
		return "batched"
	}
	return "unknown"
}

// DefaultMaxError is the batched mode's MaxError when Setup leaves it 0.
const DefaultMaxError = 0.01

// Setup is one replay of a trace.
type Setup struct {
	Store     string // the store's name, for the report
	Algorithm limit.Algorithm
	Mode      Mode
	// Skew spreads the nodes' clocks evenly over [−Skew, +Skew]: node i of
	// n passes its store true time + Skew × (2i/(n−1) − 1).
	Skew time.Duration
	// ServerClock makes the store count by one clock of its own, as Redis
	// does under store.redis.clock server (its scripts read TIME): every
	// call counts at true time + ServerSkew, whatever the now its node
	// passes, and the store's answers are on that clock. Time in a replay
	// is simulated, so the server's clock is too: the store, which must
	// count by the caller's clock, is passed the server's instant.
	ServerClock bool
	ServerSkew  time.Duration
	// MaxError is the batched mode's over-admission bound; 0 means
	// DefaultMaxError.
	MaxError float64
	// FlushEvery is how often, in simulated time, each syncstore node sends
	// its pending counts; 0 means syncstore.DefaultFlushInterval.
	FlushEvery time.Duration
	// Timeout bounds each call of a node's store; 0 means none (in-process
	// stores).
	Timeout time.Duration
	// Rule is the rule id of every key, so that replays sharing one store
	// count apart; "" means "accuracy".
	Rule string
	// Connect returns node's own client of the shared store, called once
	// per node. A returned value with a Close(context.Context) error method
	// is closed when the replay ends.
	Connect func(node int) (Backend, error)
}

// RuleFor returns the rule a replay enforces: limit per window, a token
// bucket of burst limit, and the record ceiling the edge sets when
// challenges are off (edge/rules.go: MaxCount = ceiling + 1, the ceiling
// being the capacity), which makes refusals cacheable.
func RuleFor(alg limit.Algorithm, lim int64, window time.Duration) limit.Rule {
	return limit.Rule{Algorithm: alg, Limit: lim, Window: window, Burst: lim, MaxCount: lim + 1}
}

// NodeSkew returns the clock skew of node i of n under Setup.Skew skew.
func NodeSkew(skew time.Duration, i, n int) time.Duration {
	if n < 2 {
		return 0
	}
	return time.Duration(float64(skew) * (2*float64(i)/float64(n-1) - 1))
}

// Result is what one replay measured.
type Result struct {
	Trace     string // the trace's name, for the report
	Store     string
	Algorithm limit.Algorithm
	Mode      Mode
	Skew      time.Duration
	Limit     int64
	MaxError  float64 // the batched mode's bound; 0 in the other modes
	Nodes     int

	Requests       int
	Allowed        int
	WronglyAllowed int // allowed by the store, refused by the oracle
	WronglyRefused int // refused by the store, allowed by the oracle
	// Writes counts the calls of the shared store that record hits (n ≠ 0),
	// from every node: one per request in exact mode, fewer behind a
	// syncstore.
	Writes          int64
	ScraperRequests int
	ScraperWrites   int64
	// MaxOverAligned is the most requests of one identity allowed within
	// one aligned window of true time, [k·W, (k+1)·W), beyond the limit.
	MaxOverAligned int64
	// MaxOverSliding is the same within any interval (t − W, t].
	MaxOverSliding int64
	// ByClass splits the requests and errors by the class of identity.
	ByClass [numClasses]ClassResult
	// Sync sums the nodes' syncstore counters; zero in exact mode.
	Sync syncstore.Stats
	// Decisions holds each request's decision, in trace order.
	Decisions []bool
	// Elapsed is the wall time the replay took.
	Elapsed time.Duration
}

// ClassResult is a replay's decisions for the identities of one class.
type ClassResult struct {
	Requests       int
	OracleAllowed  int // allowed by the oracle
	Allowed        int // allowed by the store
	WronglyAllowed int
	WronglyRefused int
}

// WrongPct returns the share of the class's requests decided wrongly
// either way, in percent.
func (c *ClassResult) WrongPct() float64 {
	if c.Requests == 0 {
		return 0
	}
	return 100 * float64(c.WronglyAllowed+c.WronglyRefused) / float64(c.Requests)
}

// Pct returns n as a percentage of the requests.
func (r *Result) Pct(n int) float64 {
	if r.Requests == 0 {
		return 0
	}
	return 100 * float64(n) / float64(r.Requests)
}

// WritesPerRequest returns the shared store's writes per request.
func (r *Result) WritesPerRequest() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.Writes) / float64(r.Requests)
}

// ScraperWritesPerRequest returns the writes the scraper's key caused per
// scraper request.
func (r *Result) ScraperWritesPerRequest() float64 {
	if r.ScraperRequests == 0 {
		return 0
	}
	return float64(r.ScraperWrites) / float64(r.ScraperRequests)
}

// counting is one node's client of the shared store, counting the calls
// that record hits. Flush sends from several goroutines, hence atomics.
type counting struct {
	inner   Backend
	scraper string // the scraper's key User, "" for none
	writes  *atomic.Int64
	scraped *atomic.Int64
}

func (c *counting) Take(ctx context.Context, key limit.Key, rule limit.Rule, now time.Time, n int64) (limit.Result, error) {
	if n != 0 {
		c.writes.Add(1)
		if key.User == c.scraper {
			c.scraped.Add(1)
		}
	}
	return c.inner.Take(ctx, key, rule, now, n)
}

// serverClocked is a client of a store that counts by a clock of its own:
// it passes the store the server's instant, true time (*at) + skew, for
// whatever now it is given.
type serverClocked struct {
	inner Backend
	at    *time.Duration // the replay's true instant, set between calls
	skew  time.Duration
}

func (s serverClocked) Take(ctx context.Context, key limit.Key, rule limit.Rule, _ time.Time, n int64) (limit.Result, error) {
	return s.inner.Take(ctx, key, rule, Base.Add(*s.at+s.skew), n)
}

// node is one simulated edge node.
type node struct {
	store Backend
	sync  *syncstore.Store // nil in exact mode
	skew  time.Duration
}

type closer interface{ Close(context.Context) error }

// Replay feeds tr through its nodes under s, one request at a time in true
// time order, and compares each decision with oracle (from Oracle, for the
// same trace and limit). Decisions are made in trace order, so a replay
// measures the error of the algorithms, the caching and the batching, not
// of races between nodes; it is deterministic for a deterministic store.
func Replay(ctx context.Context, tr *Trace, oracle []bool, s Setup) (res *Result, err error) {
	if len(oracle) != len(tr.Requests) {
		return nil, fmt.Errorf("replay: %d oracle decisions for %d requests", len(oracle), len(tr.Requests))
	}
	if s.Connect == nil {
		return nil, errors.New("replay: Setup.Connect: nil: want a function that connects a node to the store")
	}
	if s.MaxError == 0 {
		s.MaxError = DefaultMaxError
	}
	if s.FlushEvery == 0 {
		s.FlushEvery = syncstore.DefaultFlushInterval
	}
	if s.Rule == "" {
		s.Rule = "accuracy"
	}
	cfg := &tr.Config
	rule := RuleFor(s.Algorithm, cfg.Limit, cfg.Window)
	res = &Result{
		Trace: cfg.Name, Store: s.Store, Algorithm: s.Algorithm, Mode: s.Mode, Skew: s.Skew,
		Limit: cfg.Limit, Nodes: cfg.Nodes, Requests: len(tr.Requests),
		Decisions: make([]bool, len(tr.Requests)),
	}
	if s.Mode == Batched {
		res.MaxError = s.MaxError
	}

	keys := make([]limit.Key, len(tr.Classes))
	scraper := ""
	for id, cl := range tr.Classes {
		keys[id] = limit.Key{Rule: s.Rule, User: "id" + strconv.Itoa(id)}
		if cl == Scraper {
			scraper = keys[id].User
		}
	}

	var writes, scraped atomic.Int64
	var trueNow time.Duration // of the request or flush under way
	nodes := make([]node, cfg.Nodes)
	var closers []closer
	defer func() {
		for _, c := range closers {
			if cerr := c.Close(context.WithoutCancel(ctx)); cerr != nil && err == nil {
				err = fmt.Errorf("replay: close: %w", cerr)
			}
		}
	}()
	for i := range nodes {
		client, err := s.Connect(i)
		if err != nil {
			return nil, fmt.Errorf("replay: connect node %d: %w", i, err)
		}
		if c, ok := client.(closer); ok {
			closers = append(closers, c)
		}
		n := &nodes[i]
		n.skew = NodeSkew(s.Skew, i, cfg.Nodes)
		n.store = &counting{inner: client, scraper: scraper, writes: &writes, scraped: &scraped}
		if s.ServerClock {
			n.store = serverClocked{inner: n.store, at: &trueNow, skew: s.ServerSkew}
		}
		if s.Mode == Exact {
			continue
		}
		opts := syncstore.Options{Store: n.store, FlushInterval: -1}
		if s.Mode == Batched {
			opts.MaxError, opts.Nodes = s.MaxError, cfg.Nodes
		}
		n.sync, err = syncstore.New(opts)
		if err != nil {
			return nil, fmt.Errorf("replay: node %d: %w", i, err)
		}
		// Closed before the clients it sends to.
		closers = append([]closer{n.sync}, closers...)
		n.store = n.sync
	}

	// flush makes every syncstore node send its pending counts at true
	// instant at, as its flusher would.
	flush := func(at time.Duration) error {
		trueNow = at
		for i := range nodes {
			if n := &nodes[i]; n.sync != nil {
				if err := n.sync.Flush(ctx, Base.Add(at+n.skew)); err != nil {
					return fmt.Errorf("replay: flush node %d at %v: %w", i, at, err)
				}
			}
		}
		return nil
	}

	admitted := make([]slidingLog, len(tr.Classes))
	type aligned struct{ win, count int64 }
	windows := make([]aligned, len(tr.Classes))
	w := cfg.Window
	nextFlush := s.FlushEvery
	start := time.Now()
	for i, r := range tr.Requests {
		for nextFlush <= r.At {
			if err := flush(nextFlush); err != nil {
				return nil, err
			}
			nextFlush += s.FlushEvery
		}
		n := &nodes[r.Node]
		trueNow = r.At
		callCtx, cancel := ctx, context.CancelFunc(nil)
		if s.Timeout > 0 {
			callCtx, cancel = context.WithTimeout(ctx, s.Timeout)
		}
		got, err := n.store.Take(callCtx, keys[r.ID], rule, Base.Add(r.At+n.skew), 1)
		if cancel != nil {
			cancel()
		}
		if err != nil {
			return nil, fmt.Errorf("replay: request %d (identity %d, node %d, at %v): %w", i, r.ID, r.Node, r.At, err)
		}
		allowed := rule.Allowed(got)
		res.Decisions[i] = allowed
		cl := &res.ByClass[tr.Classes[r.ID]]
		cl.Requests++
		if oracle[i] {
			cl.OracleAllowed++
		}
		switch {
		case allowed && !oracle[i]:
			cl.WronglyAllowed++
		case !allowed && oracle[i]:
			cl.WronglyRefused++
		}
		if !allowed {
			continue
		}
		cl.Allowed++
		a := &windows[r.ID]
		if win := int64(r.At / w); win != a.win {
			a.win, a.count = win, 0
		}
		a.count++
		res.MaxOverAligned = max(res.MaxOverAligned, a.count-cfg.Limit)
		l := &admitted[r.ID]
		l.push(r.At)
		res.MaxOverSliding = max(res.MaxOverSliding, l.count(r.At, w)-cfg.Limit)
	}
	if err := flush(cfg.Duration); err != nil {
		return nil, err
	}
	res.Elapsed = time.Since(start)
	for i := range res.ByClass {
		c := &res.ByClass[i]
		res.Allowed += c.Allowed
		res.WronglyAllowed += c.WronglyAllowed
		res.WronglyRefused += c.WronglyRefused
	}
	res.ScraperRequests = res.ByClass[Scraper].Requests
	res.Writes, res.ScraperWrites = writes.Load(), scraped.Load()
	for i := range nodes {
		if n := &nodes[i]; n.sync != nil {
			res.Sync = addStats(res.Sync, n.sync.Stats())
		}
	}
	return res, nil
}

func addStats(a, b syncstore.Stats) syncstore.Stats {
	a.StoreCalls += b.StoreCalls
	a.CacheHits += b.CacheHits
	a.LocalAdmits += b.LocalAdmits
	a.Flushes += b.Flushes
	a.FlushedHits += b.FlushedHits
	a.Errors += b.Errors
	a.Dropped += b.Dropped
	a.Untracked += b.Untracked
	a.Keys += b.Keys
	a.Evictions += b.Evictions
	return a
}
