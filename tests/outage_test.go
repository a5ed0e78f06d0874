package tests

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
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

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/edge"
	"github.com/ratewarden/ratewarden/edge/dynamostore"
	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/redisstore"
	"github.com/ratewarden/ratewarden/edge/syncstore"
)

// The edge configuration of the outage tests: one anonymous tier limited to
// outageLimit hits a minute per address, a fail-closed prefix, and a store
// deadline, breaker and edge-node count that make the fallback visible.
// The store is the stack `ratewarden edge` runs, built by assemble.Store:
// the distributed store behind the over-limit cache.
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
)

// outageYAML is the configuration with the store deadline timeout over
// the store whose keys under store: are storeYAML, indented by four.
func outageYAML(timeout time.Duration, storeYAML string) string {
	return fmt.Sprintf(`
edge:
  node: outage-test
  admin_listen: ""
fail_closed: [/api/admin/, /api/billing/]
store:
  timeout: %v
  edge_nodes: %d
  breaker: {failures: %d, cooldown: %v}
%s
tiers:
  anonymous:
    global: {limit: %d, window: 1m, algorithm: fixed_window}
`, timeout, outageNodes, outageFailures, outageCooldown, storeYAML, outageLimit)
}

// outageT0 starts a minute, so that every phase but the last counts in
// one fixed window. It is ahead of the wall clock, which the store stack's
// background flusher sweeps expired keys by: at an instant behind it, the
// flusher would forget the over-limit cache's keys while the test still
// counts in their window. So each test that uses it sets it when it
// starts (startOutageClock), not once for the package: the tests before
// it can take longer than the two minutes it is ahead by.
var outageT0 time.Time

// startOutageClock sets outageT0 two minutes ahead of the wall clock, at
// the start of a minute. The outage tests do not run in parallel.
func startOutageClock() {
	outageT0 = time.Now().UTC().Truncate(time.Minute).Add(2 * time.Minute)
}

// outageStore is one distributed counter store under test: its server
// process, the configuration that points the edge at it, and what phase 3
// expects of it.
type outageStore struct {
	proc *storeProcess
	// yaml holds the keys under store: that name the store, indented by
	// two; env is what the assembly reads from the environment.
	yaml string
	env  map[string]string
	// ready reports whether the restarted server serves requests, asked
	// through a client of its own, not the limiter's.
	ready func(ctx context.Context) error
	// keepsCounts says whether a restarted server still holds the counts
	// taken before the crash: dynalite with --path does, redis-server with
	// neither RDB nor AOF does not.
	keepsCounts bool
	// restarted runs after the restart phase, to check what is particular
	// to the store.
	restarted func(t *testing.T)
	// log receives what the assembly logs, go-redis's lines included.
	log *bytes.Buffer
}

// restart starts the crashed server again and waits until it serves.
func (s *outageStore) restart(t *testing.T) {
	t.Helper()
	s.proc.start()
	waitFor(t, s.proc.name+" to serve after the restart", s.ready)
}

// TestOutageRedis crashes redis-server under the edge and starts it again.
func TestOutageRedis(t *testing.T) {
	s := redisOutageStore(t)
	start := time.Now()
	runOutage(t, s)
	// While the server was down go-redis logged a failed dial a request:
	// through the assembly's log, at most one record per DefaultLogEvery.
	most := 1 + int(time.Since(start)/redisstore.DefaultLogEvery)
	if n := strings.Count(s.log.String(), "component=go-redis"); n < 1 || n > most {
		t.Errorf("%d records of go-redis in the edge's log, want 1 to %d (one per %v):\n%s", n, most, redisstore.DefaultLogEvery, s.log)
	}
}

// TestOutageDynamoDB crashes dynalite under the edge and starts it again on
// the same LevelDB directory.
func TestOutageDynamoDB(t *testing.T) { runOutage(t, dynamoOutageStore(t)) }

// redisServer starts a redis-server of the test's own, without
// persistence, with args added.
func redisServer(t *testing.T, args ...string) *storeProcess {
	bin := program(t, "redis-server", "tests/run (apt-get install redis-server)")
	return startProcess(t, "redis-server", func(port int) []string {
		return append([]string{bin, "--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no",
			"--daemonize", "no", "--loglevel", "warning"}, args...)
	}, redisPing)
}

// redisOutageStore starts a redis-server of the test's own, without
// persistence, and configures the edge to count in it by the caller's
// clock, so that the fixed instants of the test decide the windows.
func redisOutageStore(t *testing.T) outageStore {
	proc := redisServer(t)
	return outageStore{
		proc:        proc,
		yaml:        fmt.Sprintf("  type: redis\n  redis: {addrs: [%q], clock: caller}\n", proc.addr),
		ready:       func(ctx context.Context) error { return pingRedis(ctx, proc.addr) },
		keepsCounts: false,
		restarted: func(t *testing.T) {
			// The restarted server has no scripts: the first call after it
			// answered NOSCRIPT once and the store sent the script itself.
			if n := redisCalls(t, proc.addr, "eval"); n != 1 {
				t.Errorf("EVAL calls after the restart: %d, want 1", n)
			}
		},
		log: &bytes.Buffer{},
	}
}

// redisCalls returns how often the server at addr ran command, from INFO
// commandstats.
func redisCalls(t *testing.T, addr, command string) int {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+command+":calls="); ok {
			var n int
			fmt.Sscan(strings.SplitN(rest, ",", 2)[0], &n)
			return n
		}
	}
	return 0
}

// dynamoOutageStore starts a dynalite of the test's own on a LevelDB
// directory, creates the counter table and configures the edge to count
// in it.
func dynamoOutageStore(t *testing.T) outageStore {
	node := program(t, "node", "Node.js 20; tests/run requires it")
	cli := file(t, "node_modules/dynalite/cli.js", "tests/run (npm ci --prefix tests)")
	dir := t.TempDir()
	proc := startProcess(t, "dynalite", func(port int) []string {
		return []string{node, cli, "--host", "127.0.0.1", "--port", fmt.Sprint(port), "--path", dir, "--createTableMs", "20"}
	}, nil)
	admin := dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String("http://" + proc.addr)
		// Loopback, never through a proxy of the environment.
		o.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) { tr.Proxy = nil })
	})
	const table = "outage-counters"
	awstest.CreateTable(t, admin, dynamostore.TableSpec(table))
	return outageStore{
		proc: proc,
		// dynalite ignores ReturnValuesOnConditionCheckFailure.
		yaml: fmt.Sprintf("  type: dynamodb\n  dynamodb: {table: %s, region: us-east-1, endpoint: %q, read_after_condition_failure: true}\n",
			table, "http://"+proc.addr),
		env: map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"},
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
		restarted:   func(*testing.T) {},
		log:         &bytes.Buffer{},
	}
}

// outageEdge is a limiter over the store stack the assembly builds, with
// an observer between them.
type outageEdge struct {
	*edge.Limiter
	stack *syncstore.Store
}

// storeCalls returns the stack's calls of the distributed store and the
// failed ones.
func (e *outageEdge) storeCalls() (calls, errs uint64) {
	st := e.stack.Stats()
	return st.StoreCalls, st.Errors
}

// outageLimiter returns a limiter of the outage configuration with a store
// deadline of outageTimeout, with yaml appended to it, over the store
// stack of s as assemble.Store builds it for `ratewarden edge`.
func outageLimiter(t *testing.T, s *outageStore, yaml string) *outageEdge {
	t.Helper()
	return outageLimiterTimeout(t, s, outageTimeout, yaml)
}

func outageLimiterTimeout(t *testing.T, s *outageStore, timeout time.Duration, yaml string) *outageEdge {
	t.Helper()
	cfg, err := config.Parse([]byte(outageYAML(timeout, s.yaml)+yaml), "outage.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string { return s.env[k] }
	for k, v := range s.env {
		// The AWS SDK reads its credentials from the environment.
		t.Setenv(k, v)
	}
	log := slog.New(slog.NewTextHandler(s.log, nil))
	store, closeStore, err := assemble.Store(context.Background(), cfg, log, getenv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeStore(context.Background()) })
	stack, ok := store.(*syncstore.Store)
	if !ok {
		t.Fatalf("assemble.Store built a %T, want the over-limit cache in front of the store", store)
	}
	l, err := edge.New(cfg, edge.Options{Store: observed{stack}, Env: getenv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return &outageEdge{l, stack}
}

// observed sits between the limiter and the assembled store stack and
// records each decision's store calls in the callLog its context carries,
// so that the tests hold the edge to what the design promises without
// timing it: every call has a deadline, the calls of one decision share
// one deadline, none follows a failed call, and a decision made while the
// breaker is open calls nothing.
type observed struct{ stack *syncstore.Store }

func (o observed) Take(ctx context.Context, key limit.Key, rule limit.Rule, now time.Time, n int64) (limit.Result, error) {
	res, err := o.stack.Take(ctx, key, rule, now, n)
	record(ctx, err)
	return res, err
}

func (o observed) TakeRemote(ctx context.Context, key limit.Key, rule limit.Rule, now time.Time, n int64) (limit.Result, bool, error) {
	res, remote, err := o.stack.TakeRemote(ctx, key, rule, now, n)
	record(ctx, err)
	return res, remote, err
}

type callLogKey struct{}

// callLog is one decision's store calls.
type callLog struct {
	mu    sync.Mutex
	calls []storeCall
}

type storeCall struct {
	deadline time.Time // zero: none
	failed   bool
}

func record(ctx context.Context, err error) {
	l, _ := ctx.Value(callLogKey{}).(*callLog)
	if l == nil {
		return
	}
	d, _ := ctx.Deadline()
	l.mu.Lock()
	l.calls = append(l.calls, storeCall{deadline: d, failed: err != nil})
	l.mu.Unlock()
}

// decideObserved decides r at now and checks the decision's store calls.
func decideObserved(l *outageEdge, ctx context.Context, now time.Time, r *edge.Request, v *edge.Verdict) error {
	log := &callLog{}
	l.Decide(context.WithValue(ctx, callLogKey{}, log), now, r, v)
	return log.check(v)
}

// check holds the calls of the decision v to the design: at most one
// store deadline, and no call once a call failed or while the breaker is
// open.
func (l *callLog) check(v *edge.Verdict) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if strings.HasPrefix(v.Reason, "store unavailable") && len(l.calls) > 0 {
		return fmt.Errorf("%d store calls with the breaker open (%s)", len(l.calls), v.Reason)
	}
	for i, c := range l.calls {
		switch {
		case c.deadline.IsZero():
			return fmt.Errorf("store call %d has no deadline", i+1)
		case c.deadline != l.calls[0].deadline:
			return fmt.Errorf("store call %d has a deadline of its own: %v, then %v", i+1, l.calls[0].deadline, c.deadline)
		case i > 0 && l.calls[i-1].failed:
			return fmt.Errorf("store call %d follows a failed one", i+1)
		}
	}
	return nil
}

// Addresses of the outage scenario: a scraper over its limit, which the
// over-limit cache answers, a client that meets the outage, and one counted
// before it.
const (
	scraper = "203.0.113.7:4711"
	client  = "198.51.100.1:4711"
	counted = "198.51.100.2:4711"
)

// runOutage drives one limiter over s through four phases, one request at
// a time at instants the test sets (the breaker reads its cooldown from the
// time passed to Decide, so no phase sleeps through it), and checks every
// outcome and every decision's store calls.
func runOutage(t *testing.T, s outageStore) {
	startOutageClock()
	d := &outageDriver{t: t, l: outageLimiter(t, &s, ""), now: outageT0}

	const (
		allow      = decisions.Allow
		block      = decisions.Block
		failOpen   = decisions.FailOpen
		failClosed = decisions.FailClosed
		localLimit = decisions.LocalLimit
	)
	const products, admin = "/products/1", "/api/admin/users"

	// Phase 1: the store is up and counts every hit: the limit holds
	// exactly, a fail-closed path is counted like any other. The scraper's
	// count reaches the record ceiling (limit + 1) on its first refusal,
	// and from then on the over-limit cache refuses it without a call.
	d.begin("1 store up")
	d.expect(scraper, admin, allow)
	d.expect(scraper, products, repeat(allow, outageLimit-1)...)
	d.expect(scraper, products, block, block)
	d.expect(counted, products, allow, allow, allow)
	d.end(map[decisions.Outcome]int{allow: outageLimit + 3, block: 2}, outageLimit+1+3, 0)
	d.breaker(0, 0)

	// Phase 2: the store crashes. The scraper's requests, answered by the
	// cache, come between the client's: they say nothing of the store. The
	// client's first calls fail: a fail-closed path answers 503, the others
	// pass. After outageFailures failures in a row the breaker opens and
	// the local share of the limit applies with no store call; after the
	// cooldown a cached answer does not take the probe, and the client's
	// probe finds the store still down and opens it again.
	s.proc.crash()
	d.begin("2 store down")
	d.expect(scraper, products, block)
	v := d.expect(client, admin, failClosed)
	if resp, refused := edge.Refusal(&v, "/captcha", "redirect"); !refused || resp.Status != http.StatusServiceUnavailable {
		t.Errorf("fail-closed path while the store is down: refused %v status %d, want 503", refused, resp.Status)
	}
	d.reasons(storeFailed("fails closed"))
	for range outageFailures - 1 {
		d.expect(scraper, products, block)
		d.expect(client, products, failOpen)
		d.reasons(storeFailed("fails open"))
	}
	d.breaker(1, 1)
	d.storeCalls(outageFailures, outageFailures)
	d.expect(client, products, repeat(failOpen, outageLocal)...)
	d.reasons(repeat("store unavailable: within the local limit", outageLocal)...)
	d.expect(client, products, localLimit)
	d.expect(client, admin, failClosed)
	d.reasons("store unavailable: over the local limit", "store unavailable (breaker open): path fails closed")
	d.storeCalls(outageFailures, outageFailures) // none while open
	d.now = d.now.Add(outageCooldown)
	d.expect(scraper, products, block) // answered by the cache: no probe
	d.breaker(1, 1)
	d.expect(client, products, failOpen) // the probe fails: the store is still down
	d.reasons(storeFailed("fails open"))
	d.breaker(1, 2)
	d.storeCalls(outageFailures+1, outageFailures+1)
	d.expect(client, products, localLimit)
	d.end(map[decisions.Outcome]int{block: outageFailures + 1, failClosed: 2, failOpen: outageFailures - 1 + outageLocal + 1, localLimit: 2},
		outageFailures+1, outageFailures+1)

	// Phase 3: the store is started again on its port. The breaker stays
	// open until its cooldown has passed since the failed probe, then one
	// probe succeeds, closes it, and the store counts again. redis-server
	// lost its counts in the crash and counts afresh; dynalite kept them in
	// LevelDB. The cache goes on refusing the scraper until the window ends,
	// with the count the store had before the crash.
	s.restart(t)
	d.begin("3 store back")
	d.expect(client, products, localLimit) // within the cooldown: still local
	d.storeCalls(0, 0)
	d.now = d.now.Add(outageCooldown)
	v = d.expect(counted, products, allow) // the probe
	d.breaker(0, 2)
	if want := map[bool]int64{true: 4, false: 1}[s.keepsCounts]; v.Count != want {
		t.Errorf("count after the restart %d, want %d (the store keeps counts: %v)", v.Count, want, s.keepsCounts)
	}
	d.expect(client, products, allow) // its failed calls recorded nothing
	v = d.expect(scraper, admin, block)
	if v.Count != outageLimit+2 {
		t.Errorf("the scraper's count after the restart %d, want %d (the cache's, not the local one)", v.Count, outageLimit+2)
	}
	d.end(map[decisions.Outcome]int{localLimit: 1, allow: 2, block: 1}, 2, 0)
	s.restarted(t)

	// Phase 4: the next window. Both stores count it from zero, exactly.
	d.now = outageT0.Add(time.Minute)
	d.begin("4 next window")
	d.expect(scraper, products, repeat(allow, outageLimit)...)
	d.expect(scraper, admin, block)
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
	l   *outageEdge
	now time.Time // advanced a millisecond per request

	phase   string
	got     map[decisions.Outcome]int
	reason  []string // reasons since the last call of reasons
	stats   edge.Stats
	calls   uint64
	errs    uint64
	slowest time.Duration
}

func (d *outageDriver) begin(phase string) {
	d.phase, d.got, d.reason, d.slowest = phase, make(map[decisions.Outcome]int), nil, 0
	d.stats = d.l.Stats()
	d.calls, d.errs = d.l.storeCalls()
}

// expect decides len(want) requests for path from remote and checks their
// outcomes and store calls; it returns the last verdict.
func (d *outageDriver) expect(remote, path string, want ...decisions.Outcome) edge.Verdict {
	d.t.Helper()
	r := &edge.Request{RemoteAddr: remote, Method: "GET", Host: "api.example.com", Path: path, URI: path, Header: http.Header{}}
	var v edge.Verdict
	got := make([]decisions.Outcome, len(want))
	for i := range want {
		d.now = d.now.Add(time.Millisecond)
		start := time.Now()
		if err := decideObserved(d.l, context.Background(), d.now, r, &v); err != nil {
			d.t.Errorf("phase %s: %s %s: %v", d.phase, remote, path, err)
		}
		d.slowest = max(d.slowest, time.Since(start))
		got[i] = v.Outcome
		d.got[v.Outcome]++
		d.reason = append(d.reason, v.Reason)
	}
	if !slices.Equal(got, want) {
		d.t.Errorf("phase %s: %s %s\n got %v\nwant %v", d.phase, remote, path, got, want)
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

// storeCalls checks the calls of the distributed store in this phase, as
// the stack counts them, and the failed ones, as the stack and the limiter
// count them.
func (d *outageDriver) storeCalls(calls, errs uint64) {
	d.t.Helper()
	c, e := d.l.storeCalls()
	gotCalls, gotErrs := c-d.calls, d.l.Stats().StoreErrors-d.stats.StoreErrors
	if gotCalls != calls || gotErrs != errs || e-d.errs != errs {
		d.t.Errorf("phase %s: store calls %d, limiter store errors %d, stack store errors %d; want %d, %d, %d",
			d.phase, gotCalls, gotErrs, e-d.errs, calls, errs, errs)
	}
}

// end checks the phase's outcomes, against the verdicts and against the
// limiter's counters, and its store calls, and logs them.
func (d *outageDriver) end(want map[decisions.Outcome]int, calls, errs uint64) {
	d.t.Helper()
	d.storeCalls(calls, errs)
	after := d.l.Stats()
	counted := make(map[decisions.Outcome]int)
	for o := decisions.Outcome(1); int(o) < decisions.NumOutcomes; o++ {
		if n := after.Outcomes[o.String()] - d.stats.Outcomes[o.String()]; n > 0 {
			counted[o] = int(n)
		}
	}
	c, _ := d.l.storeCalls()
	d.t.Logf("phase %s: outcomes %s; store calls %d, store errors %d; breaker state %d, opened %d; slowest Decide %v",
		d.phase, formatOutcomes(d.got), c-d.calls, after.StoreErrors-d.stats.StoreErrors,
		after.BreakerState, after.BreakerOpened, d.slowest.Round(time.Microsecond))
	if formatOutcomes(d.got) != formatOutcomes(want) {
		d.t.Errorf("phase %s: outcomes %s, want %s", d.phase, formatOutcomes(d.got), formatOutcomes(want))
	}
	if formatOutcomes(counted) != formatOutcomes(d.got) {
		d.t.Errorf("phase %s: limiter counted outcomes %s, verdicts were %s", d.phase, formatOutcomes(counted), formatOutcomes(d.got))
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
	startOutageClock()
	decide := func(l *outageEdge, ctx context.Context, now time.Time, path string) (edge.Verdict, error) {
		r := &edge.Request{RemoteAddr: client, Method: "GET", Host: "api.example.com", Path: path, URI: path, Header: http.Header{}}
		var v edge.Verdict
		err := decideObserved(l, ctx, now, r, &v)
		return v, err
	}

	// A request matching a path rule and the global rule shares one
	// deadline between their store calls, and skips the second once the
	// first failed (go-redis retries its dial until the deadline, so a
	// crashed server costs the whole deadline, as a hung one does).
	t.Run("a request under two rules waits one store deadline", func(t *testing.T) {
		s := redisOutageStore(t)
		l := outageLimiter(t, &s, "    paths:\n      /api/search: {limit: 30, window: 1m}\n")
		if v, err := decide(l, context.Background(), outageT0, "/api/search"); err != nil || v.Outcome != decisions.Allow {
			t.Fatalf("store up: %v (%s), calls: %v", v.Outcome, v.Reason, err)
		}
		s.proc.crash()
		calls, _ := l.storeCalls()
		v, err := decide(l, context.Background(), outageT0.Add(time.Millisecond), "/api/search")
		if err != nil {
			t.Error(err)
		}
		if c, _ := l.storeCalls(); v.Outcome != decisions.FailOpen || c-calls != 1 {
			t.Errorf("store down: %v (%s) after %d store calls, want fail_open after 1", v.Outcome, v.Reason, c-calls)
		}
	})

	// Middleware passes the request's context to Decide: a store call that
	// failed because the client hung up must not count against the
	// breaker, or clients that hang up would open it in front of a healthy
	// store, and every client would get the local limit and 503 on the
	// fail-closed paths.
	t.Run("cancelled clients leave the breaker of a healthy store closed", func(t *testing.T) {
		s := redisOutageStore(t)
		l := outageLimiter(t, &s, "")
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

// TestOutageOneRuleFails: the store refuses the keys of the global rule
// (a Redis ACL lets the edge's user touch only the path rules' keys) and
// counts those of the path rules. A request counted under both is refused
// with 503 on a fail-closed path however much room its path rule has
// left, and passes elsewhere, recorded as fail_open, not as the path
// rule's allow.
func TestOutageOneRuleFails(t *testing.T) {
	const paths = "    paths:\n      /api/billing/: {limit: 3, window: 1m}\n      /api/search: {limit: 3, window: 1m}\n"
	for _, c := range []struct {
		path, rule string
		want       decisions.Outcome
	}{
		{"/api/billing/invoices", "anonymous:/api/billing/", decisions.FailClosed},
		{"/api/search", "anonymous:/api/search", decisions.FailOpen},
	} {
		t.Run(c.path, func(t *testing.T) {
			proc := redisServer(t)
			admin := redis.NewClient(&redis.Options{Addr: proc.addr})
			defer admin.Close()
			pattern := fmt.Sprintf("~rw:{fw:%d:%s:*", len(c.rule), c.rule)
			if err := admin.Do(context.Background(), "ACL", "SETUSER", "edge", "on", ">secret", "resetkeys", pattern, "+@all").Err(); err != nil {
				t.Fatal(err)
			}
			s := outageStore{
				proc: proc,
				yaml: fmt.Sprintf("  type: redis\n  redis: {addrs: [%q], clock: caller, username: edge, password_env: EDGE_REDIS_PASSWORD}\n", proc.addr),
				env:  map[string]string{"EDGE_REDIS_PASSWORD": "secret"},
				log:  &bytes.Buffer{},
			}
			l := outageLimiter(t, &s, paths)
			now := outageT0
			for i := range 3 {
				now = now.Add(time.Millisecond)
				r := &edge.Request{RemoteAddr: client, Method: "GET", Host: "api.example.com", Path: c.path, URI: c.path, Header: http.Header{}}
				var v edge.Verdict
				if err := decideObserved(l, context.Background(), now, r, &v); err != nil {
					t.Error(err)
				}
				if v.Outcome != c.want || v.Rule != "anonymous:global" {
					t.Errorf("hit %d: %v (%s) by rule %s, want %v by the global rule, whose call failed", i+1, v.Outcome, v.Reason, v.Rule, c.want)
				}
			}
			if _, errs := l.storeCalls(); errs != 3 {
				t.Errorf("%d store errors, want 3: the global rule's calls", errs)
			}
		})
	}
}

// TestOutageUnderLoad crashes each store while clients hammer the edge
// concurrently, at the wall clock (so the breaker's cooldown is a real
// second), and checks the bounds that hold whatever the interleaving: no
// address is admitted past the limit by the store nor past the local limit
// while the breaker is open, the store is hardly called while it is down,
// no decision waits more than one store deadline nor calls the store while
// the breaker is open, and counting resumes after the restart. Each client
// has two addresses: one over its limit before the crash, which the
// over-limit cache answers between the other's requests, and one that
// meets the outage.
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

// loadTally is one worker's count of outcomes per address (0: the one
// over its limit, 1: the other) and phase.
type loadTally struct {
	outcomes    [2][loadPhases][decisions.NumOutcomes]int
	localPassed [2][loadPhases]int // fail_open within the local limit
	slowest     [loadPhases]time.Duration
	failed      error // the first decision whose store calls broke the design
}

func runOutageUnderLoad(t *testing.T, s outageStore) {
	startOutageClock()
	// Four clients on two shared cores under the race detector: a healthy
	// store answers within a few milliseconds but not always within 50, and
	// a timeout of a healthy store would count as a failure (and may have
	// recorded its hit), so the bounds below need a longer deadline.
	const (
		workers = 4
		timeout = 250 * time.Millisecond
	)
	l := outageLimiterTimeout(t, &s, timeout, "")
	start := time.Now()
	clock := func() time.Time { return outageT0.Add(time.Since(start)) }
	var phase atomic.Int32
	var crashed atomic.Bool
	stop := make(chan struct{})
	tallies := make([]loadTally, workers)
	var decided [workers]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tl := &tallies[w]
			addrs := [2]string{fmt.Sprintf("203.0.113.%d:4711", 10+w), fmt.Sprintf("198.51.100.%d:4711", 10+w)}
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
				// The second address starts once the store is dead, so
				// that none of its hits was recorded before the restart.
				a := 0
				if crashed.Load() {
					a = i % 2
				}
				r := &edge.Request{RemoteAddr: addrs[a], Method: "GET", Host: "api.example.com", Path: path, URI: path, Header: http.Header{}}
				t0 := time.Now()
				if err := decideObserved(l, context.Background(), clock(), r, &v); err != nil && tl.failed == nil {
					tl.failed = fmt.Errorf("phase %s, %s %s: %v (%s): %w", loadPhaseNames[p], addrs[a], path, v.Outcome, v.Reason, err)
				}
				tl.slowest[p] = max(tl.slowest[p], time.Since(t0))
				tl.outcomes[a][p][v.Outcome]++
				if v.Outcome == decisions.FailOpen && v.Reason == "store unavailable: within the local limit" {
					tl.localPassed[a][p]++
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
	crashed.Store(true)
	callsAtCrash, _ := l.storeCalls()
	poll("the breaker to open", func(st edge.Stats) bool { return st.BreakerOpened >= 1 })
	// Stay down until a probe after the cooldown has failed.
	poll("a failed probe", func(st edge.Stats) bool { return st.BreakerOpened >= 2 })
	callsNow, _ := l.storeCalls()
	downTakes, downOpened := callsNow-callsAtCrash, l.Stats().BreakerOpened
	phase.Store(loadRecovering)
	s.restart(t)
	poll("the breaker to close", func(st edge.Stats) bool { return st.BreakerState == 0 })
	phase.Store(loadBack)
	// Half of the requests are the second address's.
	each("load on the recovered store", 2*(outageLimit+5))
	close(stop)
	wg.Wait()
	if el := time.Since(start); el > 50*time.Second {
		t.Fatalf("the test took %v: the minute window of the bounds below may have rolled over", el)
	}

	// total sums the workers' tallies over both addresses.
	var total struct {
		outcomes [loadPhases][decisions.NumOutcomes]int
		slowest  [loadPhases]time.Duration
	}
	for w := range tallies {
		tl := &tallies[w]
		if tl.failed != nil {
			t.Errorf("worker %d: %v", w, tl.failed)
		}
		for p := range loadPhases {
			for a := range 2 {
				for o := range decisions.NumOutcomes {
					total.outcomes[p][o] += tl.outcomes[a][p][o]
				}
			}
			total.slowest[p] = max(total.slowest[p], tl.slowest[p])
		}
		// The first address is over its limits by the end of the first
		// phase, the second meets the outage with no count; both send
		// requests in every later phase, so the bounds are reached exactly.
		if got := tl.outcomes[0][loadUp][decisions.Allow]; got != outageLimit {
			t.Errorf("worker %d: %d allowed while the store was up, want %d", w, got, outageLimit)
		}
		for a := range 2 {
			if got := tl.localPassed[a][loadDown] + tl.localPassed[a][loadRecovering]; got != outageLocal {
				t.Errorf("worker %d, address %d: %d passed within the local limit during the outage, want %d", w, a, got, outageLocal)
			}
		}
		// After the restart the cache refuses the first address until the
		// window ends, whether or not the store kept its count; the second
		// had nothing recorded.
		for a, want := range [2]int{0, outageLimit} {
			if got := tl.outcomes[a][loadRecovering][decisions.Allow] + tl.outcomes[a][loadBack][decisions.Allow]; got != want {
				t.Errorf("worker %d, address %d: %d allowed after the restart, want %d", w, a, got, want)
			}
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
	answered := 0
	for w := range tallies {
		answered += tallies[w].outcomes[1][loadDown][decisions.Allow] + tallies[w].outcomes[1][loadDown][decisions.Block]
	}
	if answered > 0 {
		t.Errorf("phase down: %d decisions of the second addresses answered by the store, want none: it was dead", answered)
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
	// cooldown, each of which opened the breaker again; the cache's answers
	// call nothing.
	if bound := uint64(outageFailures+workers-1) + downOpened - 1; downTakes > bound {
		t.Errorf("store called %d times while down, want at most %d (breaker opened %d times)", downTakes, bound, downOpened)
	}
}

// TestOutageReleasesSlots crashes dynalite while a client holds both slots
// of a concurrency rule, and the requests end while it is down. A release
// the store never got would count its slot as in flight until the lease of
// its holder passes, and dynalite keeps its counts
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
	l := outageLimiterTimeout(t, &s, timeout, "    paths:\n      /api/upload: {limit: 2, algorithm: concurrency}\n")
	const upload, products, rule = "/api/upload", "/products/1", "anonymous:/api/upload"
	now := outageT0
	decide := func(remote, path string) edge.Verdict {
		now = now.Add(time.Millisecond)
		r := &edge.Request{RemoteAddr: remote, Method: "GET", Host: "api.example.com", Path: path, URI: path, Header: http.Header{}}
		var v edge.Verdict
		if err := decideObserved(l, context.Background(), now, r, &v); err != nil {
			t.Errorf("%s %s: %v", remote, path, err)
		}
		return v
	}

	const uploader = "203.0.113.7:4711"

	// Both slots taken, as the store counts them.
	var held [2]edge.Verdict
	for i := range held {
		held[i] = decide(uploader, upload)
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
	// A release queued behind the open breaker waits for no store call.
	takes, _ := l.storeCalls()
	for i := range held {
		l.Release(context.Background(), now, &held[i])
	}
	if c, _ := l.storeCalls(); c-takes != 0 {
		t.Errorf("releases with the breaker open called the store %d times, want none", c-takes)
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

	// A minute later, well within the lease of the slots (whose holder
	// would take back slots never released once it had passed), the
	// client has nothing in flight: the store counts exactly the new
	// upload.
	now = now.Add(time.Minute)
	v := decide(uploader, upload)
	if v.Outcome != decisions.Allow || v.Rule != rule || v.Count != 1 {
		t.Errorf("upload a minute after the restart: %v (%s) rule %s, store count in flight %d; want allow by %s, count 1",
			v.Outcome, v.Reason, v.Rule, v.Count, rule)
	}
	l.Release(context.Background(), now, &v)
}

// TestOutageCrashedEdgeSlots: an edge crashes holding both slots of a
// concurrency rule in DynamoDB, so their releases never come. Another
// edge, with a store stack of its own, is refused while the crashed
// edge's lease (store.dynamodb.concurrency_lease) runs, and counts the
// slots free once it has passed.
func TestOutageCrashedEdgeSlots(t *testing.T) {
	s := dynamoOutageStore(t)
	waitFor(t, "dynalite to serve", s.ready)
	s.yaml = strings.Replace(s.yaml, "read_after_condition_failure: true}", "read_after_condition_failure: true, concurrency_lease: 5m}", 1)
	const paths = "    paths:\n      /api/upload: {limit: 2, algorithm: concurrency}\n"
	crashed, other := outageLimiter(t, &s, paths), outageLimiter(t, &s, paths)
	const upload, uploader = "/api/upload", "203.0.113.7:4711"
	decide := func(l *outageEdge, at time.Duration) edge.Verdict {
		r := &edge.Request{RemoteAddr: uploader, Method: "GET", Host: "api.example.com", Path: upload, URI: upload, Header: http.Header{}}
		var v edge.Verdict
		if err := decideObserved(l, context.Background(), outageT0.Add(at), r, &v); err != nil {
			t.Errorf("+%v: %v", at, err)
		}
		return v
	}
	for i := range 2 {
		if v := decide(crashed, time.Duration(i)*time.Millisecond); v.Outcome != decisions.Allow || !v.Holds() {
			t.Fatalf("upload %d: %v (%s), holds %v; want allow, holding a slot", i+1, v.Outcome, v.Reason, v.Holds())
		}
	}
	// The edge crashes: its verdicts are never released.
	for _, c := range []struct {
		at    time.Duration
		want  decisions.Outcome
		count int64
	}{
		{time.Second, decisions.Block, 3},
		{5 * time.Minute, decisions.Block, 3},
		{5*time.Minute + time.Second, decisions.Allow, 1},
	} {
		v := decide(other, c.at)
		if v.Outcome != c.want || v.Count != c.count {
			t.Errorf("upload on the other edge at +%v: %v (%s), count %d; want %v, count %d", c.at, v.Outcome, v.Reason, v.Count, c.want, c.count)
		}
		other.Release(context.Background(), outageT0.Add(c.at), &v)
	}
}
