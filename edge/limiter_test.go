package edge

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge/challenge"
	"github.com/ratewarden/ratewarden/edge/identity"
	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/lists"
	"github.com/ratewarden/ratewarden/edge/memstore"
)

// t0 is the start of a minute, so fixed windows of a minute start here.
var t0 = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

// recordSink keeps every decision.
type recordSink struct {
	mu    sync.Mutex
	ds    []decisions.Decision
	added chan struct{} // signalled after each Emit; made by waitFor
}

func (s *recordSink) Emit(d decisions.Decision) bool {
	s.mu.Lock()
	s.ds = append(s.ds, d)
	added := s.added
	s.mu.Unlock()
	if added != nil {
		select {
		case added <- struct{}{}:
		default:
		}
	}
	return true
}

// waitFor returns the decisions once there are n, failing the test if
// they take more than 10 s: a decision is emitted when its response
// ends, which may be after the client has its response.
func (s *recordSink) waitFor(t testing.TB, n int) []decisions.Decision {
	t.Helper()
	s.mu.Lock()
	if s.added == nil {
		s.added = make(chan struct{}, 1)
	}
	added := s.added
	s.mu.Unlock()
	timeout := time.After(10 * time.Second)
	for {
		s.mu.Lock()
		ds := append([]decisions.Decision(nil), s.ds...)
		s.mu.Unlock()
		if len(ds) >= n {
			return ds
		}
		select {
		case <-added:
		case <-timeout:
			t.Fatalf("%d decisions after 10s, want %d", len(ds), n)
		}
	}
}

func seedConfig(t testing.TB, edit func(*config.Config)) *config.Config {
	t.Helper()
	cfg, err := config.Load("../examples/seed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Identity.TrustedProxies = []string{"10.0.0.0/8"}
	if edit != nil {
		edit(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newLimiter(t testing.TB, cfg *config.Config, opts Options) *Limiter {
	t.Helper()
	if opts.Env == nil {
		opts.Env = func(string) string { return "" }
	}
	l, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l
}

func req(remote, path string, kv ...string) *Request {
	h := make(http.Header)
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return &Request{RemoteAddr: remote, Method: "GET", Host: "api.example.com", Path: path, URI: path, Header: h}
}

// outcomes decides r n times at t0+i*step and returns the outcomes.
func outcomes(l *Limiter, n int, step time.Duration, r *Request) []decisions.Outcome {
	out := make([]decisions.Outcome, n)
	for i := range n {
		var v Verdict
		l.Decide(context.Background(), t0.Add(time.Duration(i)*step), r, &v)
		out[i] = v.Outcome
	}
	return out
}

// decide is Decide returning the verdict.
func decide(l *Limiter, ctx context.Context, now time.Time, r *Request) Verdict {
	var v Verdict
	l.Decide(ctx, now, r, &v)
	return v
}

func repeat(o decisions.Outcome, n int) []decisions.Outcome {
	out := make([]decisions.Outcome, n)
	for i := range out {
		out[i] = o
	}
	return out
}

func concat(parts ...[]decisions.Outcome) []decisions.Outcome {
	var out []decisions.Outcome
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func equalOutcomes(t *testing.T, got, want []decisions.Outcome) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("outcomes\n got %v\nwant %v", got, want)
	}
}

func TestSeedTable(t *testing.T) {
	const (
		allow = decisions.Allow
		chall = decisions.Challenge
		block = decisions.Block
	)
	cases := []struct {
		name string
		r    *Request
		n    int
		want []decisions.Outcome
	}{
		{"anonymous /api/reports: 6th challenged, 11th blocked", req("203.0.113.7:4711", "/api/reports"), 12,
			concat(repeat(allow, 5), repeat(chall, 5), repeat(block, 2))},
		{"anonymous /api/export: 3", req("203.0.113.8:1", "/api/export/csv"), 7,
			concat(repeat(allow, 3), repeat(chall, 3), repeat(block, 1))},
		{"anonymous /api/search: 30", req("203.0.113.9:1", "/api/search?q=x"), 31,
			concat(repeat(allow, 30), repeat(chall, 1))},
		{"anonymous global: 60", req("203.0.113.10:1", "/products/1"), 61,
			concat(repeat(allow, 60), repeat(chall, 1))},
		{"authenticated user gets 30 on /api/reports", req("10.1.2.3:1", "/api/reports", "X-User-Id", "u_abc"), 31,
			concat(repeat(allow, 30), repeat(chall, 1))},
		{"authenticated global 300", req("10.1.2.3:1", "/home", "X-User-Id", "u_global"), 301,
			concat(repeat(allow, 300), repeat(chall, 1))},
		{"free plan 100/min", req("10.1.2.3:1", "/home", "X-User-Id", "u_free", "X-User-Plan", "free"), 101,
			concat(repeat(allow, 100), repeat(chall, 1))},
		{"pro plan keeps authenticated path rules", req("10.1.2.3:1", "/api/export", "X-User-Id", "u_pro", "X-User-Plan", "pro"), 21,
			concat(repeat(allow, 20), repeat(chall, 1))},
		{"unknown plan is authenticated", req("10.1.2.3:1", "/home", "X-User-Id", "u_x", "X-User-Plan", "platinum"), 301,
			concat(repeat(allow, 300), repeat(chall, 1))},
		{"spoofed X-User-Id from an untrusted peer is anonymous", req("198.51.100.1:1", "/api/reports", "X-User-Id", "u_abc"), 6,
			concat(repeat(allow, 5), repeat(chall, 1))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLimiter(t, seedConfig(t, nil), Options{})
			equalOutcomes(t, outcomes(l, c.n, 10*time.Millisecond, c.r), c.want)
		})
	}
}

func TestWindowResets(t *testing.T) {
	l := newLimiter(t, seedConfig(t, nil), Options{})
	r := req("203.0.113.7:1", "/api/export")
	equalOutcomes(t, outcomes(l, 4, time.Second, r), concat(repeat(decisions.Allow, 3), repeat(decisions.Challenge, 1)))
	var v Verdict
	l.Decide(context.Background(), t0.Add(time.Minute), r, &v)
	if v.Outcome != decisions.Allow || v.Count != 1 {
		t.Errorf("next minute: outcome %v count %d, want allow 1", v.Outcome, v.Count)
	}
}

func TestDecisionFields(t *testing.T) {
	sink := &recordSink{}
	l := newLimiter(t, seedConfig(t, func(c *config.Config) { c.Edge.Node = "edge-7" }), Options{Sink: sink})
	r := req("10.0.0.5:1", "/api/reports", "X-Forwarded-For", "203.0.113.99, 10.0.0.9", "X-User-Id", "u_1", "X-User-Plan", "pro")
	r.RequestID = "rid-1"
	r.Method = "POST"
	var v Verdict
	l.Decide(context.Background(), t0.Add(15*time.Second), r, &v)
	if len(sink.ds) != 1 {
		t.Fatalf("sink got %d decisions, want 1", len(sink.ds))
	}
	d := sink.ds[0]
	want := decisions.Decision{
		Time: t0.Add(15 * time.Second), RequestID: "rid-1", Node: "edge-7",
		UserID: "u_1", Plan: "pro", Tier: "pro", IdentitySource: decisions.SourceHeader,
		Method: "POST", Host: "api.example.com", Path: "/api/reports",
		Rule: "pro:/api/reports", Algorithm: "fixed_window", Limit: 30, Window: time.Minute,
		Count: 1, Remaining: 29, Reset: 45 * time.Second, Outcome: decisions.Allow, Reason: "within the limit",
	}
	want.ClientIP = d.ClientIP
	if d != want {
		t.Errorf("decision\n got %+v\nwant %+v", d, want)
	}
	if d.ClientIP.String() != "203.0.113.99" {
		t.Errorf("client ip %v, want 203.0.113.99", d.ClientIP)
	}
	if v.Decision != d {
		t.Error("verdict and emitted decision differ")
	}
	if v.Policies[0].Name != "pro:/api/reports" || v.Policies[1].Name != "pro:global" {
		t.Errorf("policies %+v", v.Policies)
	}
}

// failingStore fails every call, as an unreachable store does.
type failingStore struct {
	mu    sync.Mutex
	calls int
	err   error
}

func (f *failingStore) Take(ctx context.Context, _ limit.Key, _ limit.Rule, _ time.Time, _ int64) (limit.Result, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	if f.err != nil {
		return limit.Result{}, f.err
	}
	<-ctx.Done()
	return limit.Result{}, ctx.Err()
}

func TestStoreFailure(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		path   string
		want   decisions.Outcome
		reason string
	}{
		{"admin fails closed", errors.New("connection refused"), "/api/admin/x", decisions.FailClosed, "store error: path fails closed"},
		{"billing fails closed", errors.New("connection refused"), "/api/billing/invoices", decisions.FailClosed, "store error: path fails closed"},
		{"search fails open", errors.New("connection refused"), "/api/search", decisions.FailOpen, "store error: path fails open"},
		{"timeout fails open", nil, "/api/search", decisions.FailOpen, "store timeout: path fails open"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := seedConfig(t, func(c *config.Config) { c.Store.Timeout = time.Millisecond })
			l := newLimiter(t, cfg, Options{Store: &failingStore{err: c.err}})
			var v Verdict
			l.Decide(context.Background(), t0, req("203.0.113.7:1", c.path), &v)
			if v.Outcome != c.want || v.Reason != c.reason {
				t.Errorf("got %v %q, want %v %q", v.Outcome, v.Reason, c.want, c.reason)
			}
			resp, refused := Refusal(&v, "/captcha", "redirect")
			if wantRefused := c.want == decisions.FailClosed; refused != wantRefused || (refused && resp.Status != http.StatusServiceUnavailable) {
				t.Errorf("refusal %v status %d", refused, resp.Status)
			}
		})
	}
}

func TestBreakerOpensAndLocalLimitApplies(t *testing.T) {
	store := &failingStore{err: errors.New("down")}
	cfg := seedConfig(t, func(c *config.Config) {
		c.Store.EdgeNodes = 2
		c.Store.Breaker.Failures = 3
		c.Store.Breaker.Cooldown = 5 * time.Second
	})
	l := newLimiter(t, cfg, Options{Store: store})
	r := req("203.0.113.7:1", "/products")
	// Three failures open the breaker; each failed call fails open.
	for i := range 3 {
		if v := decide(l, context.Background(), t0.Add(time.Duration(i)*time.Millisecond), r); v.Outcome != decisions.FailOpen {
			t.Fatalf("request %d: %v", i, v.Outcome)
		}
	}
	if s := l.Stats(); s.BreakerState != breakerOpen || s.StoreErrors != 3 {
		t.Fatalf("breaker state %d errors %d, want open and 3", s.BreakerState, s.StoreErrors)
	}
	calls := store.calls
	// While open: no store calls; the local limit is 60/2 = 30 per minute.
	got := outcomes(l, 31, time.Millisecond, r)
	equalOutcomes(t, got, concat(repeat(decisions.FailOpen, 30), repeat(decisions.LocalLimit, 1)))
	if store.calls != calls {
		t.Errorf("store called %d times while the breaker was open", store.calls-calls)
	}
	// Fail-closed paths still fail closed while open, without a store call.
	if v := decide(l, context.Background(), t0.Add(time.Second), req("203.0.113.7:1", "/api/admin/users")); v.Outcome != decisions.FailClosed {
		t.Errorf("admin while open: %v", v.Outcome)
	}
	// After the cooldown one probe goes to the store.
	decide(l, context.Background(), t0.Add(6*time.Second), r)
	if store.calls != calls+1 {
		t.Errorf("probe calls %d, want 1", store.calls-calls)
	}
}

func TestBreakerRecovers(t *testing.T) {
	b := newBreaker(2, time.Second)
	now := t0.UnixNano()
	allow := func(at int64) bool {
		ok, _ := b.allow(at)
		return ok
	}
	b.failure(now)
	if !allow(now) {
		t.Fatal("open after one failure")
	}
	b.failure(now)
	if allow(now + int64(500*time.Millisecond)) {
		t.Fatal("closed after two failures")
	}
	if ok, probe := b.allow(now + int64(time.Second)); !ok || !probe || allow(now+int64(time.Second)) {
		t.Fatal("want exactly one probe after the cooldown")
	}
	b.success()
	if ok, probe := b.allow(now + int64(time.Second)); !ok || probe {
		t.Fatalf("after a successful probe: allow %v, probe %v; want a closed breaker's call", ok, probe)
	}
	b.failure(now)
	if !allow(now) {
		t.Fatal("a success did not reset the failure streak")
	}
}

func testKeys(t testing.TB) *challenge.Keyring {
	t.Helper()
	k, err := challenge.ParseKeys("k1:" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestChallengeTokens(t *testing.T) {
	keys := testKeys(t)
	other, err := challenge.ParseKeys("k1:" + base64.StdEncoding.EncodeToString([]byte("ffffffffffffffffffffffffffffffff")))
	if err != nil {
		t.Fatal(err)
	}
	ip := "203.0.113.7"
	valid := keys.Issue("ip:"+ip, t0, 30*time.Minute)
	forged := other.Issue("ip:"+ip, t0, 30*time.Minute)
	expired := keys.Issue("ip:"+ip, t0.Add(-time.Hour), 30*time.Minute)
	otherIdentity := keys.Issue("ip:203.0.113.8", t0, 30*time.Minute)
	tampered := valid[:len(valid)-2] + "AA"
	cases := []struct {
		name  string
		kv    []string
		want6 decisions.Outcome // the 6th /api/reports request
	}{
		{"valid cookie passes", []string{"Cookie", "a=b; rw_challenge=" + valid}, decisions.TokenPass},
		{"valid header passes", []string{"X-Ratewarden-Token", valid}, decisions.TokenPass},
		{"forged", []string{"X-Ratewarden-Token", forged}, decisions.Challenge},
		{"tampered", []string{"X-Ratewarden-Token", tampered}, decisions.Challenge},
		{"expired", []string{"X-Ratewarden-Token", expired}, decisions.Challenge},
		{"other identity", []string{"X-Ratewarden-Token", otherIdentity}, decisions.Challenge},
		{"garbage", []string{"X-Ratewarden-Token", "v1..x.\x00"}, decisions.Challenge},
		{"none", nil, decisions.Challenge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLimiter(t, seedConfig(t, nil), Options{Keys: keys})
			r := req(ip+":1", "/api/reports", c.kv...)
			got := outcomes(l, 11, time.Millisecond, r)
			want := concat(repeat(decisions.Allow, 5), repeat(c.want6, 5), repeat(decisions.Block, 1))
			equalOutcomes(t, got, want)
		})
	}
}

func TestLists(t *testing.T) {
	parse := func(s string) *lists.List {
		l, err := lists.Parse(strings.NewReader(s), "test")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	allow := staticList{parse("192.0.2.0/24\nuser:partner\n")}
	deny := staticList{parse("198.51.100.66\n")}
	l := newLimiter(t, seedConfig(t, nil), Options{Allow: allow, Deny: deny})
	equalOutcomes(t, outcomes(l, 20, time.Millisecond, req("192.0.2.10:1", "/api/export")), repeat(decisions.AllowListed, 20))
	equalOutcomes(t, outcomes(l, 2, time.Millisecond, req("198.51.100.66:1", "/")), repeat(decisions.DenyListed, 2))
	equalOutcomes(t, outcomes(l, 40, time.Millisecond, req("10.0.0.1:1", "/api/export", "X-User-Id", "partner")), repeat(decisions.AllowListed, 40))
	var v Verdict
	l.Decide(context.Background(), t0, req("198.51.100.66:1", "/"), &v)
	if resp, _ := Refusal(&v, "/captcha", "redirect"); resp.Status != http.StatusForbidden {
		t.Errorf("deny list status %d", resp.Status)
	}
}

type staticList struct{ l *lists.List }

func (s staticList) List() *lists.List { return s.l }

func TestShadowRule(t *testing.T) {
	cfg := seedConfig(t, func(c *config.Config) { c.Tiers["anonymous"].Paths["/api/export"].Shadow = true })
	l := newLimiter(t, cfg, Options{})
	got := outcomes(l, 10, time.Millisecond, req("203.0.113.7:1", "/api/export"))
	equalOutcomes(t, got, concat(repeat(decisions.Allow, 3), repeat(decisions.ShadowBlock, 7)))
}

func TestAlgorithmsThroughTheLimiter(t *testing.T) {
	cases := []struct {
		name string
		rule config.Rule
		step time.Duration
		n    int
		want []decisions.Outcome
	}{
		{"sliding window", config.Rule{Limit: 4, Window: time.Minute, Algorithm: "sliding_window"}, time.Second, 6,
			concat(repeat(decisions.Allow, 4), repeat(decisions.Challenge, 2))},
		{"token bucket burst 2 at 60/min", config.Rule{Limit: 60, Window: time.Minute, Algorithm: "token_bucket", Burst: 2}, 0, 5,
			concat(repeat(decisions.Allow, 2), repeat(decisions.Challenge, 2), repeat(decisions.Block, 1))},
		{"token bucket refills", config.Rule{Limit: 60, Window: time.Minute, Algorithm: "token_bucket", Burst: 2}, time.Second, 10,
			repeat(decisions.Allow, 10)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rule := c.rule
			cfg := seedConfig(t, func(cf *config.Config) { cf.Tiers["anonymous"].Paths["/x"] = &rule })
			l := newLimiter(t, cfg, Options{})
			equalOutcomes(t, outcomes(l, c.n, c.step, req("203.0.113.7:1", "/x")), c.want)
		})
	}
}

func TestConcurrencyLimitReleases(t *testing.T) {
	cfg := seedConfig(t, func(c *config.Config) {
		c.Tiers["anonymous"].Paths["/slow"] = &config.Rule{Limit: 2, Algorithm: "concurrency"}
	})
	l := newLimiter(t, cfg, Options{})
	r := req("203.0.113.7:1", "/slow")
	var a Verdict
	l.Decide(context.Background(), t0, r, &a)
	var b Verdict
	l.Decide(context.Background(), t0, r, &b)
	var c Verdict
	l.Decide(context.Background(), t0, r, &c)
	if a.Outcome != decisions.Allow || b.Outcome != decisions.Allow || c.Outcome != decisions.Block {
		t.Fatalf("outcomes %v %v %v, want allow allow block", a.Outcome, b.Outcome, c.Outcome)
	}
	if !a.Holds() || c.Holds() {
		t.Fatalf("holds: a %v c %v", a.Holds(), c.Holds())
	}
	l.Release(context.Background(), t0, &a)
	if a.Holds() {
		t.Fatal("released verdict still holds")
	}
	if d := decide(l, context.Background(), t0, r); d.Outcome != decisions.Allow {
		t.Errorf("after release: %v", d.Outcome)
	}
	// Releasing twice returns nothing more.
	l.Release(context.Background(), t0, &a)
	if d := decide(l, context.Background(), t0, r); d.Outcome != decisions.Block {
		t.Errorf("double release freed a slot: %v", d.Outcome)
	}
}

// TestExactlyOneDecision checks that every request yields one decision,
// whatever its path through the limiter.
func TestExactlyOneDecision(t *testing.T) {
	sink := &recordSink{}
	l := newLimiter(t, seedConfig(t, nil), Options{Sink: sink, Keys: testKeys(t),
		Deny: staticList{mustList(t, "198.51.100.66\n")}})
	reqs := []*Request{
		req("203.0.113.7:1", "/api/reports"), req("198.51.100.66:1", "/"), req("garbage", "/"),
		req("10.0.0.1:1", "/", "X-Forwarded-For", "not-an-ip"), req("[2001:db8::1]:1", "/api/search"),
	}
	n := 0
	for i := range 20 {
		for _, r := range reqs {
			decide(l, context.Background(), t0.Add(time.Duration(i)*time.Millisecond), r)
			n++
		}
	}
	if len(sink.ds) != n {
		t.Fatalf("%d requests, %d decisions", n, len(sink.ds))
	}
	var total uint64
	for _, c := range l.Stats().Outcomes {
		total += c
	}
	if total != uint64(n) {
		t.Errorf("outcome counters sum to %d, want %d", total, n)
	}
}

func mustList(t testing.TB, s string) *lists.List {
	l, err := lists.Parse(strings.NewReader(s), "test")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// flakyStore is a remote store that counts in a memory store while up and
// fails at once while down, as a store that refuses connections does. It
// logs the addresses of the releases it took, in order.
type flakyStore struct {
	mem *memstore.Store

	mu       sync.Mutex
	down     bool
	upFor    int  // if positive, the calls that succeed before it goes down
	refuse   bool // releases fail even while up
	calls    int
	released []string
}

var errRefused = errors.New("connection refused")

func newFlakyStore(t *testing.T) *flakyStore {
	f := &flakyStore{mem: memstore.New(memstore.Options{})}
	t.Cleanup(func() { f.mem.Close(context.Background()) })
	return f
}

func (f *flakyStore) Take(ctx context.Context, key limit.Key, rule limit.Rule, now time.Time, n int64) (limit.Result, error) {
	f.mu.Lock()
	f.calls++
	fail := f.down || (n < 0 && f.refuse)
	if !fail && f.upFor > 0 {
		f.upFor--
		f.down = f.upFor == 0
	}
	if !fail && n < 0 {
		f.released = append(f.released, key.Addr.String())
	}
	f.mu.Unlock()
	if fail {
		return limit.Result{}, errRefused
	}
	return f.mem.Take(ctx, key, rule, now, n)
}

func (f *flakyStore) set(edit func(*flakyStore)) {
	f.mu.Lock()
	edit(f)
	f.mu.Unlock()
}

// log returns the store's calls and the releases it took.
func (f *flakyStore) log() (int, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, strings.Join(f.released, " ")
}

// releaseCounts are the limiter's counts of releases.
type releaseCounts struct{ pending, retried, lost uint64 }

func releaseStats(l *Limiter) releaseCounts {
	s := l.Stats()
	return releaseCounts{s.ReleasesPending, s.ReleasesRetried, s.ReleasesLost}
}

func checkReleases(t *testing.T, l *Limiter, when string, want releaseCounts) {
	t.Helper()
	if got := releaseStats(l); got != want {
		t.Errorf("%s: releases pending %d retried %d lost %d, want %d %d %d",
			when, got.pending, got.retried, got.lost, want.pending, want.retried, want.lost)
	}
}

// releaseFixture is a limiter over a flaky store with a concurrency rule
// of 2 on /slow, a breaker that opens after 3 failures for 5 s, and the
// instant of the scenario, advanced a millisecond a call.
type releaseFixture struct {
	t     *testing.T
	l     *Limiter
	store *flakyStore
	now   time.Time
}

const releaseCooldown = 5 * time.Second

func newReleaseFixture(t *testing.T, edit func(*Limiter)) *releaseFixture {
	cfg := seedConfig(t, func(c *config.Config) {
		c.Tiers["anonymous"].Paths["/slow"] = &config.Rule{Limit: 2, Algorithm: "concurrency"}
		c.Store.Breaker.Failures = 3
		c.Store.Breaker.Cooldown = releaseCooldown
	})
	store := newFlakyStore(t)
	l := newLimiter(t, cfg, Options{Store: store})
	if edit != nil {
		edit(l)
	}
	return &releaseFixture{t: t, l: l, store: store, now: t0}
}

func (f *releaseFixture) tick() time.Time {
	f.now = f.now.Add(time.Millisecond)
	return f.now
}

// acquire takes a slot of /slow for the client at ip, which must be
// allowed as the count-th in flight.
func (f *releaseFixture) acquire(ip string, count int64) *Verdict {
	f.t.Helper()
	v := decide(f.l, context.Background(), f.tick(), req(ip+":1", "/slow"))
	if v.Outcome != decisions.Allow || v.Count != count || !v.Holds() {
		f.t.Fatalf("acquire %s: %v (%s) count %d holds %v, want allow %d holding", ip, v.Outcome, v.Reason, v.Count, v.Holds(), count)
	}
	return &v
}

func (f *releaseFixture) release(v *Verdict) {
	f.l.Release(context.Background(), f.tick(), v)
	if v.Holds() {
		f.t.Fatal("released verdict still holds")
	}
}

// crash takes the store down and opens the breaker with failed decisions
// of another client on a path without a concurrency rule.
func (f *releaseFixture) crash() {
	f.t.Helper()
	f.store.set(func(s *flakyStore) { s.down = true })
	for range 3 {
		if v := decide(f.l, context.Background(), f.tick(), req("198.51.100.1:1", "/products")); v.Outcome != decisions.FailOpen {
			f.t.Fatalf("decision while the store is down: %v", v.Outcome)
		}
	}
	if st := f.l.Stats().BreakerState; st != breakerOpen {
		f.t.Fatalf("breaker state %d after 3 failures, want open", st)
	}
}

// recover brings the store back and, after the cooldown, decides one
// request of another client: the probe succeeds and the retries run.
func (f *releaseFixture) recover() {
	f.t.Helper()
	f.store.set(func(s *flakyStore) { s.down = false })
	f.now = f.now.Add(releaseCooldown)
	if v := decide(f.l, context.Background(), f.tick(), req("198.51.100.2:1", "/products")); v.Outcome != decisions.Allow {
		f.t.Fatalf("probe after the cooldown: %v (%s), want allow", v.Outcome, v.Reason)
	}
	synctest.Wait()
}

// expectSlow checks the outcomes and counts of requests to /slow for ip:
// what the store counts as in flight.
func (f *releaseFixture) expectSlow(ip string, want ...decisions.Outcome) {
	f.t.Helper()
	for i, w := range want {
		v := decide(f.l, context.Background(), f.tick(), req(ip+":1", "/slow"))
		if v.Outcome != w || (w == decisions.Allow && v.Count != int64(i+1)) {
			f.t.Errorf("/slow for %s #%d: %v (%s) count %d, want %v", ip, i+1, v.Outcome, v.Reason, v.Count, w)
		}
	}
}

// TestReleasesRetriedAfterOutage loses the store while a client holds both
// slots of a concurrency rule: one release fails, the other finds the
// breaker open; once the store is back, both reach it, and the client
// has both slots again.
func TestReleasesRetriedAfterOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newReleaseFixture(t, nil)
		const a = "203.0.113.7"
		v1, v2 := f.acquire(a, 1), f.acquire(a, 2)

		// The breaker is closed: the release is sent, fails and is kept.
		f.store.set(func(s *flakyStore) { s.down = true })
		calls, _ := f.store.log()
		f.release(v1)
		if got, _ := f.store.log(); got != calls+1 {
			t.Errorf("release with the breaker closed: %d store calls, want 1", got-calls)
		}
		checkReleases(t, f.l, "after a failed release", releaseCounts{pending: 1})
		if got := f.l.Stats().StoreErrors; got != 1 {
			t.Errorf("store errors %d, want 1", got)
		}

		// The breaker is open: the release waits for no store call, and,
		// although the cooldown has passed, leaves the probe to a decision.
		f.crash()
		f.now = f.now.Add(releaseCooldown)
		calls, _ = f.store.log()
		f.release(v2)
		if got, _ := f.store.log(); got != calls {
			t.Errorf("release with the breaker open: %d store calls, want none", got-calls)
		}
		if st := f.l.Stats().BreakerState; st != breakerOpen {
			t.Errorf("breaker state %d after a release, want open (the probe not taken)", st)
		}
		synctest.Wait()
		checkReleases(t, f.l, "while the store is down", releaseCounts{pending: 2})

		f.recover()
		checkReleases(t, f.l, "after the store is back", releaseCounts{retried: 2})
		if _, released := f.store.log(); released != a+" "+a {
			t.Errorf("store took releases %q, want two for %s", released, a)
		}
		f.expectSlow(a, decisions.Allow, decisions.Allow, decisions.Block)
	})
}

// TestReleaseRetriesKeepOrder has the store fail again in the middle of
// the retries: the releases after the failed one stay queued, in order,
// until the next successful store call.
func TestReleaseRetriesKeepOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newReleaseFixture(t, nil)
		clients := []string{"203.0.113.1", "203.0.113.2", "203.0.113.3"}
		var vs []*Verdict
		for _, c := range clients {
			vs = append(vs, f.acquire(c, 1))
		}
		f.crash()
		for _, v := range vs {
			f.release(v)
		}
		checkReleases(t, f.l, "while the store is down", releaseCounts{pending: 3})
		errs := f.l.Stats().StoreErrors

		// The probe and one retry succeed, then the store fails again.
		f.store.set(func(s *flakyStore) { s.upFor = 2 })
		f.recover()
		checkReleases(t, f.l, "after the retries failed", releaseCounts{pending: 2, retried: 1})
		if _, released := f.store.log(); released != clients[0] {
			t.Errorf("store took releases %q, want %q", released, clients[0])
		}
		if got := f.l.Stats().StoreErrors - errs; got != 1 {
			t.Errorf("store errors of the retries %d, want 1", got)
		}

		f.recover()
		checkReleases(t, f.l, "after the store is back", releaseCounts{retried: 3})
		if _, released := f.store.log(); released != strings.Join(clients, " ") {
			t.Errorf("store took releases %q, want %q", released, strings.Join(clients, " "))
		}
		for _, c := range clients {
			f.expectSlow(c, decisions.Allow, decisions.Allow, decisions.Block)
		}
	})
}

// TestPendingReleasesBounded fills the queue: the release beyond it is
// dropped and counted, the others go through.
func TestPendingReleasesBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newReleaseFixture(t, func(l *Limiter) { l.releases.max = 2 })
		clients := []string{"203.0.113.1", "203.0.113.2", "203.0.113.3"}
		var vs []*Verdict
		for _, c := range clients {
			vs = append(vs, f.acquire(c, 1))
		}
		f.crash()
		for _, v := range vs {
			f.release(v)
		}
		checkReleases(t, f.l, "queue full", releaseCounts{pending: 2, lost: 1})
		f.recover()
		checkReleases(t, f.l, "after the store is back", releaseCounts{retried: 2, lost: 1})
		if _, released := f.store.log(); released != clients[0]+" "+clients[1] {
			t.Errorf("store took releases %q, want the first two", released)
		}
		// The lost release leaves its slot counted, as without the queue.
		f.acquire(clients[2], 2)
		f.expectSlow(clients[2], decisions.Block)
	})
}

// TestRefusedReleaseDropped has the store refuse one release on every
// retry: after maxReleaseAttempts it is dropped and counted lost.
func TestRefusedReleaseDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newReleaseFixture(t, nil)
		v := f.acquire("203.0.113.7", 1)
		f.store.set(func(s *flakyStore) { s.refuse = true })
		f.release(v)
		checkReleases(t, f.l, "after the release failed", releaseCounts{pending: 1})
		for i := range maxReleaseAttempts {
			// Each successful decision wakes one round of retries.
			decide(f.l, context.Background(), f.tick(), req("198.51.100.2:1", "/products"))
			synctest.Wait()
			want := releaseCounts{pending: 1}
			if i == maxReleaseAttempts-1 {
				want = releaseCounts{lost: 1}
			}
			checkReleases(t, f.l, fmt.Sprintf("after retry %d", i+1), want)
		}
		if got := f.l.Stats().StoreErrors; got != 1+maxReleaseAttempts {
			t.Errorf("store errors %d, want %d", got, 1+maxReleaseAttempts)
		}
	})
}

// TestCloseFlushesReleases closes a limiter with releases pending: Close
// sends them to a store that is back (no decision woke the retries), and
// counts them lost if it is still down.
func TestCloseFlushesReleases(t *testing.T) {
	f := func(t *testing.T, back bool, want releaseCounts, wantErr bool) {
		synctest.Test(t, func(t *testing.T) {
			fx := newReleaseFixture(t, nil)
			v1, v2 := fx.acquire("203.0.113.7", 1), fx.acquire("203.0.113.7", 2)
			fx.crash()
			fx.release(v1)
			fx.release(v2)
			fx.store.set(func(s *flakyStore) { s.down = !back })
			synctest.Wait()
			checkReleases(t, fx.l, "before Close", releaseCounts{pending: 2})
			err := fx.l.Close(context.Background())
			if (err != nil) != wantErr {
				t.Errorf("Close: %v, want an error: %v", err, wantErr)
			}
			checkReleases(t, fx.l, "after Close", want)
			if _, released := fx.store.log(); back && released != "203.0.113.7 203.0.113.7" {
				t.Errorf("store took releases %q, want both", released)
			}
		})
	}
	t.Run("store back", func(t *testing.T) { f(t, true, releaseCounts{retried: 2}, false) })
	t.Run("store down", func(t *testing.T) { f(t, false, releaseCounts{lost: 2}, true) })
}

// TestMemoryStoreQueuesNoReleases checks that a limiter over the memory
// store starts no retry goroutine.
func TestMemoryStoreQueuesNoReleases(t *testing.T) {
	l := newLimiter(t, seedConfig(t, nil), Options{})
	if l.remote || l.releases.cancel != nil {
		t.Errorf("memory store: remote %v, retry goroutine started %v", l.remote, l.releases.cancel != nil)
	}
}

// TestChallengeList: a listed client is challenged on its first request,
// before any count; with a valid token it passes, counted and limited like
// anyone; an expired entry no longer applies; a token cannot be forged for
// a listed user by an anonymous client.
func TestChallengeList(t *testing.T) {
	keys := testKeys(t)
	list, err := lists.ParseAt(strings.NewReader("203.0.113.7 expires=2026-12-01T18:00:00Z\nuser:mallory\n"), "test", lists.Challenge, t0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := seedConfig(t, func(c *config.Config) { c.Challenge.Enabled = true })
	l := newLimiter(t, cfg, Options{Challenge: staticList{list}, Keys: keys})
	at := time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC)
	valid := keys.Issue(l.SubjectFor(netip.MustParseAddr("203.0.113.7"), ""), at, 30*time.Minute)

	check := func(name string, now time.Time, r *Request, want decisions.Outcome, reason string) {
		t.Helper()
		v := decide(l, context.Background(), now, r)
		if v.Outcome != want || v.Reason != reason {
			t.Errorf("%s: %v %q, want %v %q", name, v.Outcome, v.Reason, want, reason)
		}
		if want == decisions.Challenge {
			if resp, _ := Refusal(&v, "/captcha", "redirect"); resp.Status != http.StatusFound || resp.Location != "/captcha?redirect=%2Fapi%2Fsearch" {
				t.Errorf("%s: response %d %q, want the limiter's 302 to the challenge page", name, resp.Status, resp.Location)
			}
		}
	}
	check("listed address", at, req("203.0.113.7:1", "/api/search"), decisions.Challenge, ReasonChallengeListed)
	check("IPv4-mapped", at, req("[::ffff:203.0.113.7]:1", "/api/search"), decisions.Challenge, ReasonChallengeListed)
	check("with a token", at, req("203.0.113.7:1", "/api/search", "X-Ratewarden-Token", valid), decisions.TokenPass, ReasonChallengeListedPass)
	check("other client", at, req("203.0.113.8:1", "/api/search"), decisions.Allow, "within the limit")
	check("listed user", at, req("10.0.0.1:1", "/api/search", "X-User-Id", "mallory"), decisions.Challenge, ReasonChallengeListed)
	check("the address's token does not pass the user", at, req("10.0.0.1:1", "/api/search", "X-User-Id", "mallory", "X-Forwarded-For", "203.0.113.7", "X-Ratewarden-Token", valid), decisions.Challenge, ReasonChallengeListed)
	check("expired entry", at.Add(time.Hour), req("203.0.113.7:1", "/api/search"), decisions.Allow, "within the limit")
	// A token passes the list, not the limits: /api/export allows 3, then
	// challenges (the token passes those too) up to 2 × 3, then blocks.
	got := outcomes(l, 7, time.Millisecond, req("203.0.113.7:1", "/api/export", "X-Ratewarden-Token", keys.Issue(l.SubjectFor(netip.MustParseAddr("203.0.113.7"), ""), t0, time.Hour)))
	equalOutcomes(t, got, concat(repeat(decisions.TokenPass, 6), repeat(decisions.Block, 1)))
}

// TestIdentifyBelievesListableUsers: a caller's stated user (Envoy's
// descriptors through rls) is believed as the resolver believes headers
// and tokens (identity.Believes): an id the feedback lists could not hold
// as it is leaves the client counted by its address.
func TestIdentifyBelievesListableUsers(t *testing.T) {
	l := newLimiter(t, seedConfig(t, nil), Options{})
	ip := netip.MustParseAddr("192.0.2.1")
	for _, c := range []struct {
		user, plan string
		believed   bool
	}{
		{"alice", "pro", true},
		{"a b", "", true},
		{"José", "", true},
		{"", "pro", false},
		{"\u00a0alice", "", false},
		{"alice ", "", false},
		{"alice\x1b[2J", "", false},
		{"alice\u0085", "", false},
		{"alice\xff", "", false},
		{strings.Repeat("u", identity.MaxUserLen+1), "", false},
		{"alice", strings.Repeat("p", identity.MaxUserLen+1), false},
	} {
		id := l.Identify(ip, c.user, c.plan)
		if got := id.User != ""; got != c.believed || (got && (id.User != c.user || id.Plan != c.plan)) {
			t.Errorf("Identify(%q, %q) = user %q plan %q source %s; believed %v, want %v", c.user, c.plan, id.User, id.Plan, id.Source, got, c.believed)
		}
		if !c.believed && (id.Source != decisions.SourceForwarded || id.Addr != ip) {
			t.Errorf("Identify(%q, %q): source %s, address %v; want counted by %v", c.user, c.plan, id.Source, id.Addr, ip)
		}
	}
}

// TestChallengePageIsNeverChallenged: a client over a limit, or on the
// challenge list, is not redirected when it asks for the challenge page
// itself or a path below it (its assets): it would be sent there again,
// for ever, and never reach the CAPTCHA. It is still counted, and blocked
// over the ceiling. A page given as a URL is known by its path, unless it
// is the root of its host.
func TestChallengePageIsNeverChallenged(t *testing.T) {
	list, err := lists.ParseAt(strings.NewReader("203.0.113.7\n"), "test", lists.Challenge, t0)
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		path   string
		want   decisions.Outcome
		reason string
	}
	run := func(t *testing.T, page string, steps []step) {
		t.Helper()
		cfg := seedConfig(t, func(c *config.Config) { c.Challenge.Page = page })
		l := newLimiter(t, cfg, Options{Challenge: staticList{list}, Keys: testKeys(t)})
		now := t0
		// The anonymous global rule allows 60 a minute and challenges up
		// to 120.
		for range 60 {
			if v := decide(l, context.Background(), now, req("198.51.100.9:1", "/api/items")); v.Outcome != decisions.Allow {
				t.Fatalf("within the limit: %v", v.Outcome)
			}
			now = now.Add(time.Millisecond)
		}
		for _, s := range steps {
			remote := "198.51.100.9:1"
			if strings.HasPrefix(s.path, "listed ") {
				remote, s.path = "203.0.113.7:1", strings.TrimPrefix(s.path, "listed ")
			}
			v := decide(l, context.Background(), now, req(remote, s.path))
			now = now.Add(time.Millisecond)
			if v.Outcome != s.want || v.Reason != s.reason {
				t.Errorf("page %s, %s %s: %v %q, want %v %q", page, remote, s.path, v.Outcome, v.Reason, s.want, s.reason)
			}
		}
	}
	over, page := "over the limit", ReasonChallengePage
	t.Run("path", func(t *testing.T) {
		run(t, "/captcha", []step{
			{"/api/items", decisions.Challenge, over},
			{"/captcha", decisions.Allow, page},
			{"/captcha/app.js", decisions.Allow, page},
			{"/CAPTCHA", decisions.Allow, page}, // paths.case: insensitive
			{"/Captcha/", decisions.Allow, page},
			{"/captchas", decisions.Challenge, over},
			{"/api/captcha", decisions.Challenge, over},
			{"listed /api/items", decisions.Challenge, ReasonChallengeListed},
			{"listed /captcha", decisions.Allow, "within the limit"},
		})
	})
	t.Run("path with a query", func(t *testing.T) {
		run(t, "/verify?site=1", []step{{"/verify", decisions.Allow, page}, {"/api/items", decisions.Challenge, over}})
	})
	t.Run("URL on the edge's host", func(t *testing.T) {
		run(t, "https://api.example.com/verify/", []step{{"/verify", decisions.Allow, page}, {"/verify/x", decisions.Allow, page}, {"/api/items", decisions.Challenge, over}})
	})
	t.Run("URL at the root of another host", func(t *testing.T) {
		run(t, "https://captcha.example.com/", []step{{"/", decisions.Challenge, over}, {"/api/items", decisions.Challenge, over}})
	})
	t.Run("blocked over the ceiling", func(t *testing.T) {
		var steps []step
		for range 59 {
			steps = append(steps, step{"/captcha", decisions.Allow, page})
		}
		steps = append(steps, step{"/captcha", decisions.Allow, page}, step{"/captcha", decisions.Block, "over the challenge ceiling"})
		run(t, "/captcha", steps)
	})
}
