package assemble_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/edge/challenge"
	"github.com/ratewarden/ratewarden/edge/dynamostore"
	"github.com/ratewarden/ratewarden/edge/rls"
)

// rlsTiers are the seed's anonymous limits on /api/reports, with
// challenges: 5 allowed a minute, 5 more challenged, then blocked.
const rlsTiers = `
challenge: {enabled: true, factor: 2}
fail_closed: [/api/admin/]
tiers:
  anonymous:
    global: {limit: 60, window: 1m}
    paths:
      /api/reports: {limit: 5, window: 1m}
      /api/admin/: {limit: 5, window: 1m}
  pro:
    global: {limit: 1000, window: 1m}
`

// rlsServer is an assembled rate limit service on 127.0.0.1 and a client
// built from the official protos.
type rlsServer struct {
	svc       *assemble.RLS
	conn      *grpc.ClientConn
	client    rlsv3.RateLimitServiceClient
	decisions string // the JSON-lines decision file
	stop      func() // graceful shutdown, then Close
}

func startRLS(t *testing.T, yaml string) *rlsServer { return startRLSB(t, yaml) }

func startRLSB(t testing.TB, yaml string) *rlsServer {
	t.Helper()
	file := filepath.Join(t.TempDir(), "decisions.jsonl")
	cfg := loadConfig(t, "edge:\n  decisions_file: "+file+"\n"+yaml)
	cfg.Edge.Upstream = "http://127.0.0.1:1" // must not matter: rls forwards nothing
	s, err := assemble.NewRLS(context.Background(), cfg, assemble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, 5*time.Second, slogDiscard()) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	r := &rlsServer{svc: s, conn: conn, client: rlsv3.NewRateLimitServiceClient(conn), decisions: file}
	var stopped bool
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		conn.Close()
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	}
	t.Cleanup(r.stop)
	return r
}

// call asks about one request: the client ip on path, as Envoy's
// remote_address and request_headers(:path) actions describe it.
func (r *rlsServer) call(t *testing.T, ip, path string, extra ...string) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := r.client.ShouldRateLimit(context.Background(), request(ip, path, extra...))
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

func request(ip, path string, extra ...string) *rlsv3.RateLimitRequest {
	d := &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "remote_address", Value: ip}}}
	p := &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "path", Value: path}}}
	for i := 0; i+1 < len(extra); i += 2 {
		p.Entries = append(p.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: extra[i], Value: extra[i+1]})
	}
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{d, p}}
}

// header returns the value of the response header k, or "".
func header(resp *rlsv3.RateLimitResponse, k string) string {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == k {
			return h.GetValue()
		}
	}
	return ""
}

// summary is one response in a line: code, decision, remaining.
func summary(resp *rlsv3.RateLimitResponse) string {
	return fmt.Sprintf("%s/%s/%s", resp.GetOverallCode(), header(resp, "x-ratewarden-decision"), header(resp, "ratelimit-remaining"))
}

// readDecisions flushes the service's decisions and reads them back.
func (r *rlsServer) readDecisions(t *testing.T) []decisions.Decision {
	t.Helper()
	if err := r.svc.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(r.decisions)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []decisions.Decision
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		d, _, err := decisions.ParseJSON(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

func outcomes(ds []decisions.Decision) string {
	var b []string
	for _, d := range ds {
		b = append(b, d.Outcome.String())
	}
	return strings.Join(b, " ")
}

// TestRLSSeedSequence holds the rate limit service to the seed's table on
// every store: a client's /api/reports calls are OK five times, OVER_LIMIT
// with a challenge five times, then OVER_LIMIT blocked; each descriptor's
// status states the rule in Envoy's terms, the headers say the decision,
// and every call is one decision event.
func TestRLSSeedSequence(t *testing.T) {
	f := func(t *testing.T, store string) {
		s := startRLS(t, store+rlsTiers)
		ip := fmt.Sprintf("192.0.2.%d", time.Now().UnixNano()%250+1)
		var got []string
		var last *rlsv3.RateLimitResponse
		for range 12 {
			last = s.call(t, ip, "/api/reports?page=2")
			got = append(got, summary(last))
		}
		want := "[OK/allow/4 OK/allow/3 OK/allow/2 OK/allow/1 OK/allow/0 " +
			"OVER_LIMIT/challenge/0 OVER_LIMIT/challenge/0 OVER_LIMIT/challenge/0 OVER_LIMIT/challenge/0 OVER_LIMIT/challenge/0 " +
			"OVER_LIMIT/block/0 OVER_LIMIT/block/0]"
		if fmt.Sprint(got) != want {
			t.Errorf("calls:\n%v\nwant\n%s", got, want)
		}
		if n := len(last.GetStatuses()); n != 2 {
			t.Fatalf("%d statuses for 2 descriptors", n)
		}
		st := last.GetStatuses()[1]
		lim := st.GetCurrentLimit()
		if st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || lim.GetRequestsPerUnit() != 5 || lim.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE ||
			lim.GetName() != "anonymous:/api/reports" || st.GetLimitRemaining() != 0 || st.GetDurationUntilReset().AsDuration() <= 0 || st.GetDurationUntilReset().AsDuration() > time.Minute {
			t.Errorf("status %v", st)
		}
		if ra := header(last, "retry-after"); ra == "" || ra == "0" {
			t.Errorf("block without retry-after: %v", last.GetResponseHeadersToAdd())
		}
		if h := header(last, "ratelimit-limit"); h != "5" {
			t.Errorf("ratelimit-limit %q", h)
		}
		ds := s.readDecisions(t)
		if len(ds) != 12 {
			t.Fatalf("%d decisions for 12 calls", len(ds))
		}
		d := ds[11]
		if d.Rule != "anonymous:/api/reports" || d.Path != "/api/reports" || d.ClientIP.String() != ip || d.Host != "edge" || d.Tier != "anonymous" {
			t.Errorf("decision %+v", d)
		}
	}
	t.Run("memory", func(t *testing.T) { f(t, "store: {type: memory}\n") })
	t.Run("redis", func(t *testing.T) {
		addr := awstest.Endpoint(t, awstest.RedisEnv)
		f(t, fmt.Sprintf("store:\n  type: redis\n  timeout: 5s\n  redis: {addrs: [%q], prefix: \"rls-%d:\"}\n", addr, time.Now().UnixNano()))
	})
	t.Run("dynamodb", func(t *testing.T) {
		ep := awstest.Endpoint(t, awstest.DynamoDBEnv)
		table := fmt.Sprintf("rls-counters-%d", time.Now().UnixNano())
		createCounterTable(t, ep, table)
		t.Setenv("AWS_REGION", "us-east-1")
		t.Setenv("AWS_ACCESS_KEY_ID", "test")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
		f(t, fmt.Sprintf("store:\n  type: dynamodb\n  timeout: 5s\n  dynamodb: {table: %s, endpoint: %q, read_after_condition_failure: true}\n", table, ep))
	})
}

// TestRLSChallengeAndLists: a challenged call carries the challenge page
// with the original URI as Location, for Envoy's local reply to redirect
// to; the deny list refuses and the allow list passes whatever the count.
func TestRLSChallengeAndLists(t *testing.T) {
	dir := t.TempDir()
	deny, allow := filepath.Join(dir, "deny"), filepath.Join(dir, "allow")
	os.WriteFile(deny, []byte("192.0.2.66\n"), 0o600)
	os.WriteFile(allow, []byte("192.0.2.77\n"), 0o600)
	s := startRLS(t, "lists: {deny_file: "+deny+", allow_file: "+allow+"}\n"+rlsTiers)
	for range 5 {
		s.call(t, "192.0.2.9", "/api/reports")
	}
	r := s.call(t, "192.0.2.9", "/api/reports?q=a b")
	if loc := header(r, "location"); loc != "/captcha?redirect=%2Fapi%2Freports%3Fq%3Da+b" || r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("challenge: %s location %q", summary(r), loc)
	}
	if md := r.GetDynamicMetadata().GetFields(); md["decision"].GetStringValue() != "challenge" || md["status"].GetNumberValue() != 302 {
		t.Errorf("challenge metadata %v", md)
	}
	if got := summary(s.call(t, "192.0.2.66", "/")); got != "OVER_LIMIT/deny_listed/" {
		t.Errorf("deny list: %s", got)
	}
	for range 20 {
		s.call(t, "192.0.2.77", "/api/reports")
	}
	if got := summary(s.call(t, "192.0.2.77", "/api/reports")); got != "OK/allow_listed/" {
		t.Errorf("allow list: %s", got)
	}
}

// TestRLSChallengeToken: a challenged client that presents a valid token
// (the challenge_token entry) passes as token_pass; a token for another
// client does not.
func TestRLSChallengeToken(t *testing.T) {
	const keys = "k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	t.Setenv("RATEWARDEN_CHALLENGE_KEYS", keys)
	s := startRLS(t, rlsTiers)
	ring, err := challenge.ParseKeys(keys)
	if err != nil {
		t.Fatal(err)
	}
	tok := ring.Issue(s.svc.Limiter.SubjectFor(netip.MustParseAddr("192.0.2.60"), ""), time.Now(), time.Hour)
	other := ring.Issue(s.svc.Limiter.SubjectFor(netip.MustParseAddr("192.0.2.61"), ""), time.Now(), time.Hour)
	for range 5 {
		s.call(t, "192.0.2.60", "/api/reports")
	}
	if got := summary(s.call(t, "192.0.2.60", "/api/reports", "challenge_token", other)); got != "OVER_LIMIT/challenge/0" {
		t.Errorf("another client's token: %s", got)
	}
	if got := summary(s.call(t, "192.0.2.60", "/api/reports", "challenge_token", tok)); got != "OK/token_pass/0" {
		t.Errorf("valid token: %s", got)
	}
}

// TestRLSHitsAndIdentity: hits_addend counts, a descriptor's own overrides
// the call's, huge values neither overflow nor wrap; the user and plan
// entries pick the tier and key the count.
func TestRLSHitsAndIdentity(t *testing.T) {
	s := startRLS(t, rlsTiers)
	req := request("192.0.2.10", "/api/reports")
	req.HitsAddend = 3
	r, err := s.client.ShouldRateLimit(context.Background(), req)
	if err != nil || summary(r) != "OK/allow/2" {
		t.Fatalf("hits_addend 3: %s %v", summary(r), err)
	}
	req.Descriptors[1].HitsAddend = wrapperspb.UInt64(2)
	if r, _ = s.client.ShouldRateLimit(context.Background(), req); summary(r) != "OK/allow/0" {
		t.Errorf("descriptor hits_addend 2 over 3: %s", summary(r))
	}
	huge := request("192.0.2.11", "/api/search")
	huge.HitsAddend = math.MaxUint32
	huge.Descriptors[0].HitsAddend = wrapperspb.UInt64(math.MaxUint64)
	for i := range 3 {
		r, err = s.client.ShouldRateLimit(context.Background(), huge)
		if err != nil || r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || header(r, "x-ratewarden-decision") != "block" {
			t.Fatalf("huge hits_addend, call %d: %s %v", i, summary(r), err)
		}
	}
	// The huge calls were not recorded past the block threshold: the
	// client's next window is not pushed away, and another client is
	// untouched.
	if got := summary(s.call(t, "192.0.2.12", "/api/search")); got != "OK/allow/59" {
		t.Errorf("another client after the flood: %s", got)
	}
	// A user on the pro plan: its own tier and count, whatever the address.
	r = s.call(t, "192.0.2.10", "/api/reports", "user", "alice", "plan", "pro")
	if summary(r) != "OK/allow/999" || r.GetStatuses()[0].GetCurrentLimit().GetName() != "pro:global" {
		t.Errorf("pro user: %s %v", summary(r), r.GetStatuses()[0])
	}
	ds := s.readDecisions(t)
	last := ds[len(ds)-1]
	if last.UserID != "alice" || last.Tier != "pro" || last.IdentitySource != decisions.SourceHeader {
		t.Errorf("pro decision %+v", last)
	}
}

// TestRLSShadowMode: with rls.shadow_mode every call is OK, the statuses
// still say which are over, and the decisions record shadow_block.
func TestRLSShadowMode(t *testing.T) {
	s := startRLS(t, "rls: {shadow_mode: true}\n"+rlsTiers)
	var got []string
	var last *rlsv3.RateLimitResponse
	for range 12 {
		last = s.call(t, "192.0.2.20", "/api/reports")
		got = append(got, summary(last))
	}
	if got[0] != "OK/allow/4" || got[5] != "OK/shadow_block/0" || got[11] != "OK/shadow_block/0" {
		t.Errorf("shadow mode: %v", got)
	}
	if last.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("shadow status %v, want OVER_LIMIT", last.GetStatuses()[0])
	}
	if o := outcomes(s.readDecisions(t)); o != "allow allow allow allow allow "+strings.TrimSpace(strings.Repeat("shadow_block ", 7)) {
		t.Errorf("outcomes %s", o)
	}
}

// TestRLSStoreDown: with the counter store unreachable, a fail_closed path
// answers OVER_LIMIT (or UNAVAILABLE with rls.fail_closed: error) and
// others pass as fail_open; once the breaker opens, the local share of the
// limit is enforced.
func TestRLSStoreDown(t *testing.T) {
	dead := deadAddr(t)
	store := fmt.Sprintf("store:\n  type: redis\n  timeout: 200ms\n  breaker: {failures: 3, cooldown: 1m}\n  redis: {addrs: [%q]}\n", dead)
	t.Run("over_limit", func(t *testing.T) {
		s := startRLS(t, store+rlsTiers)
		r := s.call(t, "192.0.2.30", "/api/admin/users")
		if summary(r) != "OVER_LIMIT/fail_closed/" || header(r, "retry-after") != "60" {
			t.Errorf("fail closed: %s %v", summary(r), r.GetResponseHeadersToAdd())
		}
		var got []string
		for range 8 {
			got = append(got, summary(s.call(t, "192.0.2.30", "/api/reports")))
		}
		// Two more failures open the breaker (three in all); then the local
		// limit (5 on one node) counts from zero.
		want := "[OK/fail_open/ OK/fail_open/ OK/fail_open/4 OK/fail_open/3 OK/fail_open/2 OK/fail_open/1 OK/fail_open/0 OVER_LIMIT/local_limit/0]"
		if fmt.Sprint(got) != want {
			t.Errorf("store down:\n%v\nwant\n%s", got, want)
		}
	})
	t.Run("error", func(t *testing.T) {
		s := startRLS(t, store+"rls: {fail_closed: error}\n"+rlsTiers)
		_, err := s.client.ShouldRateLimit(context.Background(), request("192.0.2.31", "/api/admin/x"))
		if status.Code(err) != codes.Unavailable {
			t.Errorf("fail closed as error: %v, want UNAVAILABLE", err)
		}
		if o := outcomes(s.readDecisions(t)); o != "fail_closed" {
			t.Errorf("outcomes %q", o)
		}
	})
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// TestRLSHostileCalls: what a broken or hostile caller sends is refused
// with INVALID_ARGUMENT (and recorded as rejected), or by gRPC itself, and
// the service answers the next call as before.
func TestRLSHostileCalls(t *testing.T) {
	s := startRLS(t, "rls: {domains: [edge], max_descriptors: 8, max_entries: 4}\n"+rlsTiers)
	many := func(n, entries int) *rlsv3.RateLimitRequest {
		req := &rlsv3.RateLimitRequest{Domain: "edge"}
		for range n {
			d := &rlcommon.RateLimitDescriptor{}
			for range entries {
				d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: "remote_address", Value: "192.0.2.40"})
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		return req
	}
	emptyDomain := request("192.0.2.40", "/")
	emptyDomain.Domain = ""
	otherDomain := request("192.0.2.40", "/")
	otherDomain.Domain = "other"
	longDomain := request("192.0.2.40", "/")
	longDomain.Domain = strings.Repeat("edge", 100)
	cases := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		code codes.Code
	}{
		{"empty domain", emptyDomain, codes.InvalidArgument},
		{"other domain", otherDomain, codes.InvalidArgument},
		{"long domain", longDomain, codes.InvalidArgument},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "edge"}, codes.InvalidArgument},
		{"empty descriptor", many(1, 0), codes.InvalidArgument},
		{"too many descriptors", many(9, 1), codes.InvalidArgument},
		{"too many entries", many(1, 5), codes.InvalidArgument},
		{"huge descriptor list", many(40000, 1), codes.ResourceExhausted},
	}
	for _, c := range cases {
		_, err := s.client.ShouldRateLimit(context.Background(), c.req)
		if status.Code(err) != c.code {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}
	// An overlong path and an address that is no address.
	if got := summary(s.call(t, "192.0.2.41", "/"+strings.Repeat("a", 9000))); got != "OVER_LIMIT/rejected/" {
		t.Errorf("overlong path: %s", got)
	}
	if got := summary(s.call(t, "not-an-address", "/")); got != "OK/fail_open/" {
		t.Errorf("no client address: %s", got)
	}
	// On a fail_closed path it gets the path's failure mode, as a call the
	// store cannot count, without retry-after: retrying cannot help.
	if resp := s.call(t, "not-an-address", "/api/admin/x"); summary(resp) != "OVER_LIMIT/fail_closed/" || header(resp, "retry-after") != "" {
		t.Errorf("no client address on a fail_closed path: %s, retry-after %q", summary(resp), header(resp, "retry-after"))
	}
	// A long method and user: the method is cut, the user not believed.
	if got := summary(s.call(t, "192.0.2.44", "/", "method", strings.Repeat("M", 5000), "user", strings.Repeat("u", 5000))); got != "OK/allow/59" {
		t.Errorf("long method and user: %s", got)
	}
	// Invalid UTF-8 in a string field: proto3 refuses it, gRPC answers
	// INTERNAL, nothing reaches the limiter.
	raw := protowire.AppendTag(nil, 1, protowire.BytesType)
	raw = protowire.AppendBytes(raw, []byte("edge\xff\xfe"))
	in, out := rawMessage(raw), rawMessage(nil)
	err := s.conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
		&in, &out, grpc.ForceCodecV2(rawCodec{}))
	if status.Code(err) != codes.Internal {
		t.Errorf("invalid UTF-8: %v, want INTERNAL", err)
	}
	// A deadline that has passed: the client gives up, the server is fine.
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, err := s.client.ShouldRateLimit(ctx, request("192.0.2.42", "/")); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("deadline: %v", err)
	}
	if got := summary(s.call(t, "192.0.2.43", "/api/reports")); got != "OK/allow/4" {
		t.Errorf("after the hostile calls: %s", got)
	}
	ds := s.readDecisions(t)
	rejected := 0
	for _, d := range ds {
		if d.Outcome == decisions.Rejected {
			rejected++
		}
	}
	if rejected != 8 { // seven invalid calls and the overlong path
		t.Errorf("%d rejected decisions, want 8: %s", rejected, outcomes(ds))
	}
	for _, d := range ds {
		if len(d.Host) > 256 || len(d.Method) > 32 || len(d.Path) > 256 || len(d.UserID) > 256 {
			t.Errorf("an unbounded field recorded: host %d, method %d, path %d, user %d bytes", len(d.Host), len(d.Method), len(d.Path), len(d.UserID))
		}
	}
	if st := s.svc.Service.Stats(); st.Invalid != 7 {
		t.Errorf("stats %+v", st)
	}
}

// TestRLSHealthReflectionMetrics: Envoy operators' gRPC health check says
// SERVING until shutdown begins, server reflection lists the services,
// and /metrics counts the calls.
func TestRLSHealthReflectionMetrics(t *testing.T) {
	s := startRLS(t, rlsTiers)
	s.call(t, "192.0.2.50", "/")
	hc := healthpb.NewHealthClient(s.conn)
	for _, svc := range []string{"", rls.ServiceName} {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", svc, r, err)
		}
	}
	stream, err := reflectionpb.NewServerReflectionClient(s.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sv := range resp.GetListServicesResponse().GetService() {
		names = append(names, sv.GetName())
	}
	stream.CloseSend()
	if l := strings.Join(names, " "); !strings.Contains(l, rls.ServiceName) || !strings.Contains(l, "grpc.health.v1.Health") {
		t.Errorf("reflection lists %v", names)
	}
	h, err := s.svc.AdminHandler()
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if !regexp.MustCompile(`(?m)^ratewarden_rls_calls_total(\{[^}]*\})? 1$`).Match(body) || !strings.Contains(string(body), `ratewarden_edge_decisions_total`) {
		t.Errorf("metrics lack the call count:\n%s", grepMetrics(string(body), "rls", "decisions"))
	}
	s.svc.Health.Shutdown()
	r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: rls.ServiceName})
	if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health once shutting down: %v %v", r, err)
	}
}

func grepMetrics(s string, subs ...string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		for _, sub := range subs {
			if strings.Contains(l, sub) {
				b.WriteString(l + "\n")
				break
			}
		}
	}
	return b.String()
}

// rawMessage and rawCodec send bytes as they are, for input the official
// protos cannot marshal.
type rawMessage []byte

type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*rawMessage))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*rawMessage) = data.Materialize()
	return nil
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// createCounterTable creates a counter table on the DynamoDB stand-in.
func createCounterTable(t *testing.T, endpoint, table string) {
	dc := dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(endpoint) })
	awstest.CreateTable(t, dc, dynamostore.TableSpec(table))
}

// TestRLSGracefulShutdown: a call under way when shutdown begins is
// answered (here after the stalled store's deadline, failing open), and
// Serve returns once it has been.
func TestRLSGracefulShutdown(t *testing.T) {
	// A "Redis" that accepts connections and never answers.
	stalled, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := stalled.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	s := startRLS(t, fmt.Sprintf("store:\n  type: redis\n  timeout: 500ms\n  redis: {addrs: [%q]}\n", stalled.Addr().String())+rlsTiers)
	type result struct {
		resp *rlsv3.RateLimitResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		r, err := s.client.ShouldRateLimit(context.Background(), request("192.0.2.70", "/api/reports"))
		done <- result{r, err}
	}()
	c := <-accepted // the call is waiting on the store
	defer c.Close()
	stopped := make(chan struct{})
	go func() { s.stop(); close(stopped) }()
	r := <-done
	if r.err != nil || summary(r.resp) != "OK/fail_open/" {
		t.Errorf("call under way at shutdown: %s %v", summary(r.resp), r.err)
	}
	<-stopped
}
