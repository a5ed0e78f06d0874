package tests

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/edge"
	"github.com/ratewarden/ratewarden/edge/config"
	"github.com/ratewarden/ratewarden/edge/dynamostore"
	"github.com/ratewarden/ratewarden/edge/redisstore"
)

// The edge configuration of the outage tests: one anonymous tier limited to
// outageLimit hits a minute per address, a fail-closed prefix, and a store
// deadline, breaker and edge-node count that make the fallback visible.
const (
	outageLimit    = 10
	outageNodes    = 2
	outageLocal    = outageLimit / outageNodes // the fallback limit while the breaker is open
	outageFailures = 3
	outageCooldown = time.Second
	// outageTimeout is generous: a healthy dynalite on two shared cores
	// under the race detector sometimes takes 60 ms, and a healthy store
	// that misses the deadline would blur the counts.
	outageTimeout = 250 * time.Millisecond
	// outageLatencyBound is the longest a Decide may take while the store is
	// down: a correctness bound (the deadline holds), not a benchmark.
	outageLatencyBound = 10 * outageTimeout
)

// outageYAML is the configuration with the store deadline timeout.
func outageYAML(timeout time.Duration) string {
	return fmt.Sprintf(`
edge:
  node: outage-test
  admin_listen: ""
fail_closed: [/api/admin/]
store:
  timeout: %v
  edge_nodes: %d
  breaker: {failures: %d, cooldown: %v}
tiers:
  anonymous:
    global: {limit: %d, window: 1m, algorithm: fixed_window}
`, timeout, outageNodes, outageFailures, outageCooldown, outageLimit)
}

// outageT0 starts a minute, so that every phase but the last counts in
// one fixed window.
var outageT0 = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

// outageStore is one distributed counter store under test: its server
// process, the store the limiter counts in, and what phase 3 expects of it.
type outageStore struct {
	proc  *storeProcess
	store edge.Store
	// takes and errors are the store's own counters of Take calls and of
	// failed ones.
	takes, errors func() uint64
	// ready reports whether the restarted server serves requests, asked
	// through a client of its own, not the limiter's.
	ready func(ctx context.Context) error
	// keepsCounts says whether a restarted server still holds the counts
	// taken before the crash: dynalite with --path does, redis-server with
	// neither RDB nor AOF does not.
	keepsCounts bool
	// crashed runs after the crash, restarted after the restart, to check
	// what is particular to the store.
	crashed, restarted func(t *testing.T)
}

// restart starts the crashed server again and waits until it serves.
func (s *outageStore) restart(t *testing.T) {
	t.Helper()
	s.proc.start()
	waitFor(t, s.proc.name+" to serve after the restart", s.ready)
}

// TestOutageRedis crashes redis-server under the edge and starts it again.
func TestOutageRedis(t *testing.T) { runOutage(t, redisOutageStore(t)) }

// TestOutageDynamoDB crashes dynalite under the edge and starts it again on
// the same LevelDB directory.
func TestOutageDynamoDB(t *testing.T) { runOutage(t, dynamoOutageStore(t)) }

// redisOutageStore starts a redis-server of the test's own, without
// persistence, and a store over it.
func redisOutageStore(t *testing.T) outageStore {
	bin := program(t, "redis-server", "tests/run (apt-get install redis-server)")
	proc := startProcess(t, "redis-server", func(port int) []string {
		return []string{bin, "--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no",
			"--daemonize", "no", "--loglevel", "warning"}
	})
	client := redis.NewClient(&redis.Options{Addr: proc.addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	// The caller's clock, so that the fixed instants of the test decide the
	// windows; keys outlive them by an hour, which changes no result.
	store, err := redisstore.New(redisstore.Options{Client: client, Clock: redisstore.CallerTime, ClockSkew: redisstore.MaxClockSkew})
	if err != nil {
		t.Fatal(err)
	}
	var reloads uint64
	return outageStore{
		proc:   proc,
		store:  store,
		takes:  func() uint64 { return store.Stats().Takes },
		errors: func() uint64 { return store.Stats().Errors },
		ready: func(ctx context.Context) error {
			c := redis.NewClient(&redis.Options{Addr: proc.addr, ContextTimeoutEnabled: true, MaxRetries: -1})
			defer c.Close()
			return c.Ping(ctx).Err()
		},
		keepsCounts: false,
		crashed:     func(*testing.T) { reloads = store.Stats().Reloads },
		restarted: func(t *testing.T) {
			// The restarted server has no scripts: the first call after it
			// answered NOSCRIPT once and the store sent the script again.
			if n := store.Stats().Reloads - reloads; n != 1 {
				t.Errorf("script reloads after the restart: %d, want 1", n)
			}
		},
	}
}

// dynamoOutageStore starts a dynalite of the test's own on a LevelDB
// directory, creates the counter table and returns a store over it.
func dynamoOutageStore(t *testing.T) outageStore {
	node := program(t, "node", "Node.js 20; tests/run requires it")
	cli := file(t, "node_modules/dynalite/cli.js", "tests/run (npm ci --prefix tests)")
	dir := t.TempDir()
	proc := startProcess(t, "dynalite", func(port int) []string {
		return []string{node, cli, "--host", "127.0.0.1", "--port", fmt.Sprint(port), "--path", dir, "--createTableMs", "20"}
	})
	newClient := func() *dynamodb.Client {
		return dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) {
			o.BaseEndpoint = aws.String("http://" + proc.addr)
			// Loopback, never through a proxy of the environment.
			o.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) { tr.Proxy = nil })
		})
	}
	const table = "outage-counters"
	admin := newClient()
	awstest.CreateTable(t, admin, dynamostore.TableSpec(table))
	// dynalite ignores ReturnValuesOnConditionCheckFailure.
	store, err := dynamostore.New(dynamostore.Options{Client: newClient(), Table: table, ReadAfterConditionFailure: true})
	if err != nil {
		t.Fatal(err)
	}
	return outageStore{
		proc:   proc,
		store:  store,
		takes:  func() uint64 { return store.Stats().Takes },
		errors: func() uint64 { return store.Stats().Errors },
		ready: func(ctx context.Context) error {
			out, err := admin.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
			if err != nil {
				return err
			}
			if s := out.Table.TableStatus; s != ddbtypes.TableStatusActive {
				return fmt.Errorf("table %s is %s", table, s)
			}
			// A freshly started dynalite answers its first updates slowly;
			// warm it up, so that the limiter's probe does not meet its
			// deadline on a server that is merely cold.
			for range 20 {
				_, err := admin.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table),
					Key:                       map[string]ddbtypes.AttributeValue{dynamostore.KeyAttribute: &ddbtypes.AttributeValueMemberB{Value: []byte("warm-up")}},
					UpdateExpression:          aws.String("ADD c :one"),
					ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":one": &ddbtypes.AttributeValueMemberN{Value: "1"}}})
				if err != nil {
					return err
				}
			}
			return nil
		},
		keepsCounts: true,
		crashed:     func(*testing.T) {},
		restarted:   func(*testing.T) {},
	}
}

// outageLimiter returns a limiter of the outage configuration with a store
// deadline of outageTimeout, with yaml appended to it, over store.
func outageLimiter(t *testing.T, store edge.Store, yaml string) *edge.Limiter {
	t.Helper()
	return outageLimiterTimeout(t, store, outageTimeout, yaml)
}

func outageLimiterTimeout(t *testing.T, store edge.Store, timeout time.Duration, yaml string) *edge.Limiter {
	t.Helper()
	cfg, err := config.Parse([]byte(outageYAML(timeout)+yaml), "outage.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	l, err := edge.New(cfg, edge.Options{Store: store, Env: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l
}

// runOutage drives one limiter over s through four phases, one request at
// a time at instants the test sets (the breaker reads its cooldown from the
// time passed to Decide, so no phase sleeps through it), and checks every
// outcome.
func runOutage(t *testing.T, s outageStore) {
	d := &outageDriver{t: t, l: outageLimiter(t, s.store, ""), s: &s, now: outageT0}

	const (
		allow      = decisions.Allow
		block      = decisions.Block
		failOpen   = decisions.FailOpen
		failClosed = decisions.FailClosed
		localLimit = decisions.LocalLimit
	)
	const products, admin = "/products/1", "/api/admin/users"

	// Phase 1: the store is up and counts every hit: the limit holds
	// exactly, a fail-closed path is counted like any other.
	d.begin("1 store up")
	d.expect(admin, allow)
	d.expect(products, repeat(allow, outageLimit-1)...)
	d.expect(products, block, block)
	d.end(map[decisions.Outcome]int{allow: outageLimit, block: 2}, 12, 0)
	d.breaker(0, 0)

	// Phase 2: the store crashes. The first calls fail: a fail-closed path
	// answers 503, the others pass. After outageFailures consecutive
	// failures the breaker opens and the local share of the limit applies
	// with no store call, whatever the store had counted; after the
	// cooldown one probe finds the store still down and opens it again.
	s.proc.crash()
	s.crashed(t)
	d.begin("2 store down")
	v := d.expect(admin, failClosed)
	if resp, refused := edge.Refusal(&v, "/captcha", "redirect"); !refused || resp.Status != http.StatusServiceUnavailable {
		t.Errorf("fail-closed path while the store is down: refused %v status %d, want 503", refused, resp.Status)
	}
	d.reasons(storeFailed("fails closed"))
	d.expect(products, failOpen, failOpen)
	d.reasons(storeFailed("fails open"), storeFailed("fails open"))
	d.breaker(1, 1)
	d.storeCalls(outageFailures, outageFailures)
	d.expect(products, repeat(failOpen, outageLocal)...)
	d.reasons(repeat("store unavailable: within the local limit", outageLocal)...)
	d.expect(products, localLimit)
	d.expect(admin, failClosed)
	d.reasons("store unavailable: over the local limit", "store unavailable (breaker open): path fails closed")
	d.storeCalls(outageFailures, outageFailures) // none while open
	d.now = d.now.Add(outageCooldown)
	d.expect(products, failOpen) // the probe fails: the store is still down
	d.reasons(storeFailed("fails open"))
	d.breaker(1, 2)
	d.storeCalls(outageFailures+1, outageFailures+1)
	d.expect(products, localLimit)
	d.end(map[decisions.Outcome]int{failClosed: 2, failOpen: 2 + outageLocal + 1, localLimit: 2}, outageFailures+1, outageFailures+1)
	d.checkLatency()

	// Phase 3: the store is started again on its port. The breaker stays
	// open until its cooldown has passed since the failed probe, then one
	// probe succeeds, closes it, and the store counts again. redis-server
	// lost its counts in the crash and admits the limit afresh; dynalite
	// kept them in LevelDB and goes on refusing the address it had refused.
	s.restart(t)
	d.begin("3 store back")
	d.expect(products, localLimit) // within the cooldown: still local
	d.storeCalls(0, 0)
	d.now = d.now.Add(outageCooldown)
	want := map[decisions.Outcome]int{localLimit: 1, block: 1} // and the admin request below
	if s.keepsCounts {
		d.expect(products, block) // the probe: the count of phase 1 holds
		d.breaker(0, 2)
		d.expect(products, repeat(block, outageLimit)...)
		want[block] += 1 + outageLimit
	} else {
		d.expect(products, allow) // the probe: a fresh count of 1
		d.breaker(0, 2)
		d.expect(products, repeat(allow, outageLimit-1)...)
		d.expect(products, block)
		want[allow] = outageLimit
		want[block]++
	}
	v = d.expect(admin, block) // counted again, no more 503
	if v.Count != outageLimit+2 {
		t.Errorf("count after the restart %d, want %d (the store's count, not the local one)", v.Count, outageLimit+2)
	}
	d.end(want, outageLimit+2, 0)
	d.checkLatency()
	s.restarted(t)

	// Phase 4: the next window. Both stores count it from zero, exactly.
	d.now = outageT0.Add(time.Minute)
	d.begin("4 next window")
	d.expect(products, repeat(allow, outageLimit)...)
	d.expect(admin, block)
	d.end(map[decisions.Outcome]int{allow: outageLimit, block: 1}, outageLimit+1, 0)
	d.breaker(0, 2)
}

// storeFailed is the reason of a decision whose store call failed: an error
// (connection refused) or the deadline, depending on where the client was
// when the deadline passed.
func storeFailed(mode string) string { return "store error or timeout: path " + mode }

// outageDriver decides one request at a time and checks each phase.
type outageDriver struct {
	t   *testing.T
	l   *edge.Limiter
	s   *outageStore
	now time.Time // advanced a millisecond per request

	phase   string
	got     map[decisions.Outcome]int
	reason  []string // reasons since the last call of reasons
	stats   edge.Stats
	takes   uint64
	errs    uint64
	slowest time.Duration
}

func (d *outageDriver) begin(phase string) {
	d.phase, d.got, d.reason, d.slowest = phase, make(map[decisions.Outcome]int), nil, 0
	d.stats, d.takes, d.errs = d.l.Stats(), d.s.takes(), d.s.errors()
}

// expect decides len(want) requests for path from one address and checks
// their outcomes; it returns the last verdict.
func (d *outageDriver) expect(path string, want ...decisions.Outcome) edge.Verdict {
	d.t.Helper()
	r := &edge.Request{RemoteAddr: "203.0.113.7:4711", Method: "GET", Host: "api.example.com", Path: path, URI: path, Header: http.Header{}}
	var v edge.Verdict
	got := make([]decisions.Outcome, len(want))
	for i := range want {
		d.now = d.now.Add(time.Millisecond)
		start := time.Now()
		d.l.Decide(context.Background(), d.now, r, &v)
		d.slowest = max(d.slowest, time.Since(start))
		got[i] = v.Outcome
		d.got[v.Outcome]++
		d.reason = append(d.reason, v.Reason)
	}
	if !slices.Equal(got, want) {
		d.t.Errorf("phase %s: %s\n got %v\nwant %v", d.phase, path, got, want)
	}
	return v
}

// reasons checks the reasons of the last len(want) decisions.
func (d *outageDriver) reasons(want ...string) {
	d.t.Helper()
	got := d.reason[max(len(d.reason)-len(want), 0):]
	for i := range want {
		w := want[i]
		if rest, ok := strings.CutPrefix(w, "store error or timeout: "); ok {
			if got[i] == "store error: "+rest || got[i] == "store timeout: "+rest {
				continue
			}
		} else if got[i] == w {
			continue
		}
		d.t.Errorf("phase %s: reasons\n got %q\nwant %q", d.phase, got, want)
		return
	}
}

// breaker checks the breaker's state and how often it has opened.
func (d *outageDriver) breaker(state int, opened uint64) {
	d.t.Helper()
	if s := d.l.Stats(); s.BreakerState != state || s.BreakerOpened != opened {
		d.t.Errorf("phase %s: breaker state %d opened %d times, want %d and %d", d.phase, s.BreakerState, s.BreakerOpened, state, opened)
	}
}

// storeCalls checks the Take calls the store received in this phase and
// the failed store calls the limiter counted.
func (d *outageDriver) storeCalls(takes, errs uint64) {
	d.t.Helper()
	gotTakes, gotErrs := d.s.takes()-d.takes, d.l.Stats().StoreErrors-d.stats.StoreErrors
	if gotTakes != takes || gotErrs != errs || d.s.errors()-d.errs != errs {
		d.t.Errorf("phase %s: store takes %d, limiter store errors %d, store errors %d; want %d, %d, %d",
			d.phase, gotTakes, gotErrs, d.s.errors()-d.errs, takes, errs, errs)
	}
}

// end checks the phase's outcomes, against the verdicts and against the
// limiter's counters, and its store calls, and logs them.
func (d *outageDriver) end(want map[decisions.Outcome]int, takes, errs uint64) {
	d.t.Helper()
	d.storeCalls(takes, errs)
	after := d.l.Stats()
	counted := make(map[decisions.Outcome]int)
	for o := decisions.Outcome(1); int(o) < decisions.NumOutcomes; o++ {
		if n := after.Outcomes[o.String()] - d.stats.Outcomes[o.String()]; n > 0 {
			counted[o] = int(n)
		}
	}
	d.t.Logf("phase %s: outcomes %s; store takes %d, store errors %d; breaker state %d, opened %d; slowest Decide %v",
		d.phase, formatOutcomes(d.got), d.s.takes()-d.takes, after.StoreErrors-d.stats.StoreErrors,
		after.BreakerState, after.BreakerOpened, d.slowest.Round(time.Microsecond))
	if formatOutcomes(d.got) != formatOutcomes(want) {
		d.t.Errorf("phase %s: outcomes %s, want %s", d.phase, formatOutcomes(d.got), formatOutcomes(want))
	}
	if formatOutcomes(counted) != formatOutcomes(d.got) {
		d.t.Errorf("phase %s: limiter counted outcomes %s, verdicts were %s", d.phase, formatOutcomes(counted), formatOutcomes(d.got))
	}
}

// checkLatency checks that no Decide of the phase waited much past the
// store deadline.
func (d *outageDriver) checkLatency() {
	d.t.Helper()
	if d.slowest > outageLatencyBound {
		d.t.Errorf("phase %s: slowest Decide took %v, want under %v (store timeout %v)", d.phase, d.slowest, outageLatencyBound, outageTimeout)
	}
}

func formatOutcomes(m map[decisions.Outcome]int) string {
	var b strings.Builder
	for o := decisions.Outcome(1); int(o) < decisions.NumOutcomes; o++ {
		if m[o] > 0 {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s=%d", o, m[o])
		}
	}
	return b.String()
}

func repeat[T any](x T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = x
	}
	return out
}

// waitFor polls cond until it succeeds, for at most 30 seconds.
func waitFor(t *testing.T, what string, cond func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := cond(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOutageDeadlines holds the edge to two promises a store outage
// tests: a decision waits at most one store deadline, however many rules it
// counts under, and a client that hangs up says nothing about the store.
func TestOutageDeadlines(t *testing.T) {
	decide := func(l *edge.Limiter, ctx context.Context, now time.Time, path string) (edge.Verdict, time.Duration) {
		r := &edge.Request{RemoteAddr: "203.0.113.7:4711", Method: "GET", Host: "api.example.com", Path: path, URI: path, Header: http.Header{}}
		var v edge.Verdict
		start := time.Now()
		l.Decide(ctx, now, r, &v)
		return v, time.Since(start)
	}

	// A request matching a path rule and the global rule shares one
	// deadline between their store calls, and skips the second once the
	// first failed (go-redis retries its dial until the deadline, so a
	// crashed server costs the whole deadline, as a hung one does).
	t.Run("a request under two rules waits one store deadline", func(t *testing.T) {
		s := redisOutageStore(t)
		l := outageLimiter(t, s.store, "    paths:\n      /api/search: {limit: 30, window: 1m}\n")
		s.proc.crash()
		v, took := decide(l, context.Background(), outageT0, "/api/search")
		if bound := outageTimeout + outageTimeout/2; took > bound {
			t.Errorf("Decide took %v with the store down (%v, %s); want at most the deadline %v and a margin: %v",
				took, v.Outcome, v.Reason, outageTimeout, bound)
		}
	})

	// Middleware passes the request's context to Decide: a store call that
	// failed because the client hung up must not count against the
	// breaker, or clients that hang up would open it in front of a healthy
	// store, and every client would get the local limit and 503 on the
	// fail-closed paths.
	t.Run("cancelled clients leave the breaker of a healthy store closed", func(t *testing.T) {
		s := redisOutageStore(t)
		l := outageLimiter(t, s.store, "")
		gone, cancel := context.WithCancel(context.Background())
		cancel()
		for i := range outageFailures {
			decide(l, gone, outageT0.Add(time.Duration(i)*time.Millisecond), "/products/1")
		}
		v, _ := decide(l, context.Background(), outageT0.Add(time.Second/2), "/api/admin/users")
		if st := l.Stats(); v.Outcome != decisions.Allow || st.BreakerState != 0 {
			t.Errorf("healthy store after %d cancelled requests: %v (%s), breaker state %d; want allow, closed",
				outageFailures, v.Outcome, v.Reason, st.BreakerState)
		}
	})
}

// TestOutageUnderLoad crashes each store while clients hammer the edge
// concurrently, at the wall clock (so the breaker's cooldown is a real
// second), and checks the bounds that hold whatever the interleaving: no
// address is admitted past the limit by the store nor past the local limit
// while the breaker is open, the store is hardly called while it is down,
// no Decide waits much past the deadline, and counting resumes after the
// restart.
func TestOutageUnderLoad(t *testing.T) {
	stores := []struct {
		name string
		new  func(*testing.T) outageStore
	}{
		{"redis", redisOutageStore},
		{"dynamodb", dynamoOutageStore},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) { runOutageUnderLoad(t, st.new(t)) })
	}
}

// Phases of the load test, as the workers see them when a Decide starts.
const (
	loadUp         = iota // the store is up
	loadDown              // crashed
	loadRecovering        // restarted, the breaker not closed yet
	loadBack              // the breaker closed again
	loadPhases
)

var loadPhaseNames = [loadPhases]string{"up", "down", "recovering", "back"}

// loadTally is one worker's count of outcomes per phase.
type loadTally struct {
	outcomes    [loadPhases][decisions.NumOutcomes]int
	localPassed [loadPhases]int // fail_open within the local limit
	slowest     [loadPhases]time.Duration
}

func runOutageUnderLoad(t *testing.T, s outageStore) {
	// Four clients on two shared cores under the race detector: a healthy
	// store answers within a few milliseconds but not always within 50, and
	// a timeout of a healthy store would count as a failure (and may have
	// recorded its hit), so the bounds below need a longer deadline.
	const (
		workers      = 4
		timeout      = 250 * time.Millisecond
		latencyBound = 10 * timeout
	)
	l := outageLimiterTimeout(t, s.store, timeout, "")
	start := time.Now()
	clock := func() time.Time { return outageT0.Add(time.Since(start)) }
	var phase atomic.Int32
	stop := make(chan struct{})
	tallies := make([]loadTally, workers)
	var decided [workers]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tl := &tallies[w]
			addr := fmt.Sprintf("203.0.113.%d:4711", 10+w)
			paths := [...]string{"/products/1", "/products/2", "/products/3", "/api/admin/users"}
			var v edge.Verdict
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := phase.Load()
				path := paths[i%len(paths)]
				r := &edge.Request{RemoteAddr: addr, Method: "GET", Host: "api.example.com", Path: path, URI: path, Header: http.Header{}}
				t0 := time.Now()
				l.Decide(context.Background(), clock(), r, &v)
				tl.slowest[p] = max(tl.slowest[p], time.Since(t0))
				tl.outcomes[p][v.Outcome]++
				if v.Outcome == decisions.FailOpen && v.Reason == "store unavailable: within the local limit" {
					tl.localPassed[p]++
				}
				decided[w].Add(1)
				time.Sleep(time.Millisecond) // a client, not a spin loop on 2 cores
			}
		}()
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
			wg.Wait()
		}
	}()
	poll := func(what string, cond func(edge.Stats) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond(l.Stats()) {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: stats %+v", what, l.Stats())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// each waits until every worker has decided n more requests.
	each := func(what string, n int64) {
		t.Helper()
		var from [workers]int64
		for w := range from {
			from[w] = decided[w].Load()
		}
		deadline := time.Now().Add(20 * time.Second)
		for w := 0; w < workers; {
			if decided[w].Load() >= from[w]+n {
				w++
				continue
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: worker %d decided %d of %d", what, w, decided[w].Load()-from[w], n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	each("load on the healthy store", outageLimit+5)
	// The phase changes just before the kill: a Decide started before it
	// may fail (it was in flight), one started after it may still have been
	// answered by the store.
	phase.Store(loadDown)
	s.proc.crash()
	takesAtCrash := s.takes()
	poll("the breaker to open", func(st edge.Stats) bool { return st.BreakerOpened >= 1 })
	// Stay down until a probe after the cooldown has failed.
	poll("a failed probe", func(st edge.Stats) bool { return st.BreakerOpened >= 2 })
	downTakes, downOpened := s.takes()-takesAtCrash, l.Stats().BreakerOpened
	phase.Store(loadRecovering)
	s.restart(t)
	poll("the breaker to close", func(st edge.Stats) bool { return st.BreakerState == 0 })
	phase.Store(loadBack)
	each("load on the recovered store", outageLimit+5)
	close(stop)
	wg.Wait()
	if el := time.Since(start); el > 50*time.Second {
		t.Fatalf("the test took %v: the minute window of the bounds below may have rolled over", el)
	}

	var total loadTally
	for w := range tallies {
		tl := &tallies[w]
		for p := range loadPhases {
			for o := range decisions.NumOutcomes {
				total.outcomes[p][o] += tl.outcomes[p][o]
			}
			total.localPassed[p] += tl.localPassed[p]
			total.slowest[p] = max(total.slowest[p], tl.slowest[p])
		}
		// Every address is over its limits by the end of the first phase and
		// sends requests in every phase, so the bounds are reached exactly.
		if got := tl.outcomes[loadUp][decisions.Allow]; got != outageLimit {
			t.Errorf("worker %d: %d allowed while the store was up, want %d", w, got, outageLimit)
		}
		if got := tl.localPassed[loadDown] + tl.localPassed[loadRecovering]; got != outageLocal {
			t.Errorf("worker %d: %d passed within the local limit during the outage, want %d", w, got, outageLocal)
		}
		wantBack := outageLimit // a fresh count
		if s.keepsCounts {
			wantBack = 0 // the count of the first phase holds
		}
		if got := tl.outcomes[loadRecovering][decisions.Allow] + tl.outcomes[loadBack][decisions.Allow]; got != wantBack {
			t.Errorf("worker %d: %d allowed after the restart, want %d", w, got, wantBack)
		}
	}
	for p := range loadPhases {
		var b strings.Builder
		for o := decisions.Outcome(1); int(o) < decisions.NumOutcomes; o++ {
			if n := total.outcomes[p][o]; n > 0 {
				fmt.Fprintf(&b, " %s=%d", o, n)
			}
		}
		t.Logf("phase %s:%s; slowest Decide %v", loadPhaseNames[p], b.String(), total.slowest[p].Round(time.Microsecond))
	}
	t.Logf("while down: %d store calls, breaker opened %d times", downTakes, downOpened)

	// Outcomes each phase may have. The calls in flight when the store
	// crashed started in the first phase and failed.
	inFlight := total.outcomes[loadUp][decisions.FailOpen] + total.outcomes[loadUp][decisions.FailClosed]
	if inFlight > workers {
		t.Errorf("phase up: %d decisions failed open or closed, want at most one in flight per worker (%d)", inFlight, workers)
	}
	if answered := total.outcomes[loadDown][decisions.Allow] + total.outcomes[loadDown][decisions.Block]; answered > workers {
		t.Errorf("phase down: %d decisions answered by the store, want at most one in flight per worker (%d)", answered, workers)
	}
	allowed := [loadPhases][]decisions.Outcome{
		loadUp:         {decisions.Allow, decisions.Block, decisions.FailOpen, decisions.FailClosed},
		loadDown:       {decisions.Allow, decisions.Block, decisions.FailOpen, decisions.FailClosed, decisions.LocalLimit},
		loadRecovering: {decisions.FailOpen, decisions.FailClosed, decisions.LocalLimit, decisions.Allow, decisions.Block},
		loadBack:       {decisions.Allow, decisions.Block},
	}
	for p := range loadPhases {
		for o := decisions.Outcome(1); int(o) < decisions.NumOutcomes; o++ {
			if total.outcomes[p][o] > 0 && !slices.Contains(allowed[p], o) {
				t.Errorf("phase %s: %d decisions %s", loadPhaseNames[p], total.outcomes[p][o], o)
			}
		}
	}
	if total.outcomes[loadDown][decisions.LocalLimit] == 0 || total.outcomes[loadDown][decisions.FailClosed] == 0 {
		t.Errorf("phase down: no local_limit or no fail_closed decisions")
	}
	// The store is called by the failures that open the breaker (at most one
	// in flight per worker beyond the threshold) and by one probe per
	// cooldown, each of which opened the breaker again.
	if bound := uint64(outageFailures+workers-1) + downOpened - 1; downTakes > bound {
		t.Errorf("store called %d times while down, want at most %d (breaker opened %d times)", downTakes, bound, downOpened)
	}
	for _, p := range []int{loadDown, loadRecovering} {
		if total.slowest[p] > latencyBound {
			t.Errorf("phase %s: slowest Decide %v, want under %v (store timeout %v)", loadPhaseNames[p], total.slowest[p], latencyBound, timeout)
		}
	}
}

// TestOutageReleasesSlots crashes dynalite while a client holds both slots
// of a concurrency rule, and the requests end while it is down.
// Concurrency counts never expire, so a release the store never got would
// count its slot as in flight for good, and dynalite keeps its counts
// across the restart (--path): the edge must keep the releases and send
// them once the store answers again, without making the requests that end
// during the outage wait for it.
func TestOutageReleasesSlots(t *testing.T) {
	// A deadline that a healthy dynalite meets under the race detector on
	// two shared cores, as in TestOutageUnderLoad: a timeout of a call
	// that took a slot would fail the test for no fault of the edge.
	const timeout = 250 * time.Millisecond
	s := dynamoOutageStore(t)
	// A fresh dynalite answers its first updates slowly, as after a
	// restart: warm it up.
	waitFor(t, "dynalite to serve", s.ready)
	l := outageLimiterTimeout(t, s.store, timeout, "    paths:\n      /api/upload: {limit: 2, algorithm: concurrency}\n")
	const upload, products, rule = "/api/upload", "/products/1", "anonymous:/api/upload"
	now := outageT0
	decide := func(remote, path string) edge.Verdict {
		now = now.Add(time.Millisecond)
		r := &edge.Request{RemoteAddr: remote, Method: "GET", Host: "api.example.com", Path: path, URI: path, Header: http.Header{}}
		var v edge.Verdict
		l.Decide(context.Background(), now, r, &v)
		return v
	}
	const client = "203.0.113.7:4711"

	// Both slots taken, as the store counts them.
	var held [2]edge.Verdict
	for i := range held {
		held[i] = decide(client, upload)
		if v := &held[i]; v.Outcome != decisions.Allow || v.Rule != rule || v.Count != int64(i+1) || !v.Holds() {
			t.Fatalf("upload %d: %v (%s) rule %s count %d holds %v; want allow by %s, count %d, holding a slot",
				i+1, v.Outcome, v.Reason, v.Rule, v.Count, v.Holds(), rule, i+1)
		}
	}

	// The store crashes and the breaker opens; then both uploads end.
	s.proc.crash()
	for i := range outageFailures {
		if v := decide("198.51.100.1:4711", products); v.Outcome != decisions.FailOpen {
			t.Fatalf("decision %d with the store down: %v (%s), want fail_open", i+1, v.Outcome, v.Reason)
		}
	}
	if st := l.Stats(); st.BreakerState != 1 {
		t.Fatalf("breaker state %d after %d failures, want 1 (open)", st.BreakerState, outageFailures)
	}
	takes := s.takes()
	for i := range held {
		start := time.Now()
		l.Release(context.Background(), now, &held[i])
		// A correctness bound: a release queued behind the open breaker
		// waits for no store call, so it returns well within a deadline.
		if took := time.Since(start); took >= timeout {
			t.Errorf("release %d with the breaker open took %v, want under the store timeout %v", i+1, took, timeout)
		}
	}
	if n := s.takes() - takes; n != 0 {
		t.Errorf("releases with the breaker open called the store %d times, want none", n)
	}
	if st := l.Stats(); st.ReleasesPending != 2 || st.ReleasesRetried != 0 || st.ReleasesLost != 0 {
		t.Fatalf("releases pending %d retried %d lost %d with the store down, want 2 0 0",
			st.ReleasesPending, st.ReleasesRetried, st.ReleasesLost)
	}

	// The store is back: after the cooldown one decision on another path
	// closes the breaker and wakes the retries.
	s.restart(t)
	now = now.Add(outageCooldown)
	if v := decide("198.51.100.2:4711", products); v.Outcome != decisions.Allow {
		t.Fatalf("probe after the restart: %v (%s), want allow", v.Outcome, v.Reason)
	}
	deadline := time.Now().Add(20 * time.Second)
	errs := l.Stats().StoreErrors
	for st := l.Stats(); st.ReleasesPending != 0; st = l.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("releases still pending 20s after the restart: %+v", st)
		}
		if st.StoreErrors != errs {
			// A retry met a store still cold: the next successful call
			// wakes the retries again.
			errs = st.StoreErrors
			decide("198.51.100.2:4711", products)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := l.Stats(); st.ReleasesRetried != 2 || st.ReleasesLost != 0 {
		t.Errorf("releases retried %d lost %d, want 2 and 0", st.ReleasesRetried, st.ReleasesLost)
	}

	// An hour later the client has nothing in flight: the store counts
	// exactly the new upload.
	now = now.Add(time.Hour)
	v := decide(client, upload)
	if v.Outcome != decisions.Allow || v.Rule != rule || v.Count != 1 {
		t.Errorf("upload an hour after the restart: %v (%s) rule %s, store count in flight %d; want allow by %s, count 1",
			v.Outcome, v.Reason, v.Rule, v.Count, rule)
	}
	l.Release(context.Background(), now, &v)
}
