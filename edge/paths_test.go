package edge

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/internal/canonpath"
)

// TestDecidePaths: every spelling of a path counts against the rule of its
// canonical form, under each paths setting.
func TestDecidePaths(t *testing.T) {
	const reports, global = "anonymous:/api/reports", "anonymous:global"
	sensitive := func(c *config.Config) { c.Paths.Case = canonpath.Sensitive }
	rewrite := func(c *config.Config) { c.Paths.Ambiguous = "rewrite" }
	for _, c := range []struct {
		name, path string
		edit       func(*config.Config)
		rule       string // the deciding rule, when passed
		outcome    decisions.Outcome
		recorded   string // Decision.Path
	}{
		{"canonical", "/api/reports", nil, reports, decisions.Allow, "/api/reports"},
		{"upper case", "/API/Reports", nil, reports, decisions.Allow, "/API/Reports"},
		{"upper case, sensitive", "/API/Reports", sensitive, global, decisions.Allow, "/API/Reports"},
		{"encoded unreserved", "/api/%72eports", nil, reports, decisions.Allow, "/api/reports"},
		{"segment parameter", "/api;v=1/reports", nil, reports, decisions.Allow, "/api;v=1/reports"},
		{"dotless i", "/ap%C4%B1/reports", nil, reports, decisions.Allow, "/ap%C4%B1/reports"},
		{"dotless i, sensitive", "/ap%C4%B1/reports", sensitive, global, decisions.Allow, "/ap%C4%B1/reports"},
		{"repeated slash", "/api//reports", nil, "", decisions.Rejected, "/api//reports"},
		{"repeated slash, rewrite", "/api//reports", rewrite, reports, decisions.Allow, "/api/reports"},
		{"dot-dot, rewrite", `/api/x/..\reports`, rewrite, reports, decisions.Allow, "/api/reports"},
		{"encoded slash, rewrite", "/api%2Freports", rewrite, "", decisions.Rejected, "/api%2Freports"},
		{"empty", "", nil, "", decisions.Rejected, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLimiter(t, seedConfig(t, c.edit), Options{})
			var v Verdict
			l.Decide(context.Background(), t0, req("203.0.113.7:1", c.path), &v)
			if v.Outcome != c.outcome || v.Rule != c.rule || v.Path != c.recorded {
				t.Errorf("%q: %v %q %q; want %v %q %q", c.path, v.Outcome, v.Rule, v.Path, c.outcome, c.rule, c.recorded)
			}
		})
	}
}

// TestFailClosedPaths: every spelling of a fail_closed prefix fails closed,
// the prefix without its trailing slash included.
func TestFailClosedPaths(t *testing.T) {
	cfg := seedConfig(t, func(c *config.Config) { c.Paths.Ambiguous = "rewrite" })
	l := newLimiter(t, cfg, Options{Store: &failingStore{err: errors.New("down")}})
	for _, p := range []string{"/api/admin", "/api/admin/", "/API/Admin/users", "/api//admin/users", "/api/./admin/users",
		"/api/x/../admin/users", `/api\admin`, "/api;x/admin", "/api/admin;x", "/ap%C4%B1/admin", "/api/%61dmin", "/api/billing"} {
		var v Verdict
		l.Decide(context.Background(), t0, req("203.0.113.7:1", p), &v)
		if v.Outcome != decisions.FailClosed {
			t.Errorf("%q with the store down: %v, want fail_closed", p, v.Outcome)
		}
	}
	var v Verdict
	l.Decide(context.Background(), t0, req("203.0.113.7:1", "/api/administrator"), &v)
	if v.Outcome != decisions.FailOpen {
		t.Errorf("/api/administrator with the store down: %v, want fail_open", v.Outcome)
	}
}

// TestEscapedDelimitersMatchRules: a path rule counts a request whatever
// the spelling of a sub-delimiter, ":" or "@" in its path: origins decode
// %3A to ":", so /v1/things%3AbatchGet must not escape the tighter rule on
// /v1/things:batchGet (before, it was counted by the global rule alone).
// A literal "*", which a prefix cannot hold raw (it would read as a glob),
// is written %2A and matches both spellings; a prefix may escape the
// others too. %3B is not the ";" of a segment parameter.
func TestEscapedDelimitersMatchRules(t *testing.T) {
	const yaml = `
tiers:
  anonymous:
    global: {limit: 100, window: 1m}
    paths:
      /v1/things:batchGet: {limit: 50, window: 1m}
      /api/x%2A: {limit: 50, window: 1m}
      /v1/a%3Ab/: {limit: 50, window: 1m}
      /v1/a:b/c: {limit: 50, window: 1m}
fail_closed: [/api/admin@x/]
`
	const batch, star, ab, abc, global = "anonymous:/v1/things:batchGet", "anonymous:/api/x%2A", "anonymous:/v1/a%3Ab/", "anonymous:/v1/a:b/c", "anonymous:global"
	l := newLimiter(t, stackConfig(t, yaml), Options{})
	down := newLimiter(t, stackConfig(t, yaml), Options{Store: &failingStore{err: errors.New("down")}})
	for _, c := range []struct {
		path, rule string
		failClosed bool // with the store down
	}{
		{"/v1/things:batchGet", batch, false},
		{"/v1/things%3AbatchGet", batch, false},
		{"/v1/things%3abatchGet/x", batch, false},
		{"/V1/THINGS%3ABATCHGET", batch, false},
		{"/v1/things%3BbatchGet", global, false},
		{"/api/x*", star, false},
		{"/api/x%2A/y", star, false},
		{"/api/x", global, false},
		{"/v1/a:b", ab, false},
		{"/v1/a%3Ab/d", ab, false},
		{"/v1/a%3Ab/c", abc, false},
		{"/api/admin%40x/users", global, true},
		{"/api/admin@x", global, true},
	} {
		if v := decide(l, context.Background(), t0, req("203.0.113.7:1", c.path)); v.Outcome != decisions.Allow || v.Rule != c.rule {
			t.Errorf("%q: %v by %q, want allow by %q", c.path, v.Outcome, v.Rule, c.rule)
		}
		if v := decide(down, context.Background(), t0, req("203.0.113.7:1", c.path)); (v.Outcome == decisions.FailClosed) != c.failClosed {
			t.Errorf("%q with the store down: %v; fail_closed wanted: %v", c.path, v.Outcome, c.failClosed)
		}
	}
}

func TestRefusalRejected(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
	}{{canonpath.ErrEncodedSlash, 400}, {nil, 400}, {canonpath.ErrTooLong, 414}} {
		v := Verdict{pathErr: c.err}
		v.Outcome, v.Reason = decisions.Rejected, "why"
		if resp, refused := Refusal(&v, "/captcha", "redirect"); !refused || resp.Status != c.status {
			t.Errorf("%v: refused %v, status %d; want %d", c.err, refused, resp.Status, c.status)
		}
	}
}

func TestRequestPath(t *testing.T) {
	for _, c := range []struct{ uri, want string }{
		{"/api/reports?x=1", "/api/reports"},
		{"/api//x/../reports", "/api//x/../reports"},
		{`/api\reports?a=/b`, `/api\reports`},
		{"/api/%2e/reports", "/api/%2e/reports"},
		{"/api%2Freports", "/api%2Freports"},
		{"/caf%c3%a9", "/caf%c3%a9"},
		{"/caf%C3%A9", "/caf%C3%A9"},
		{"http://h.example/api/./x?y", "/api/./x"},
		{"https://h.example", ""},
		{"*", "*"},
	} {
		r := httptest.NewRequest("GET", c.uri, nil)
		if got := requestPath(r.URL); got != c.want {
			t.Errorf("requestPath(%q) = %q, want %q", c.uri, got, c.want)
		}
	}
	// A handler in front that strips a prefix strips it from what the
	// limiter matches too.
	var got string
	h := http.StripPrefix("/v1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = requestPath(r.URL) }))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/api/%2e/reports", nil))
	if got != "/api/%2e/reports" {
		t.Errorf("behind StripPrefix: %q", got)
	}
}

func TestAppendForwarded(t *testing.T) {
	for _, c := range []struct{ addr, host, proto, want string }{
		{"203.0.113.7", "api.example.com", "https", `for=203.0.113.7;host="api.example.com";proto=https`},
		{"2001:db8::1", "api.example.com:8443", "http", `for="[2001:db8::1]";host="api.example.com:8443";proto=http`},
		{"203.0.113.7", `a"b\c`, "http", `for=203.0.113.7;host="a\"b\\c";proto=http`},
		{"203.0.113.7", "", "http", `for=203.0.113.7;proto=http`},
	} {
		if got := string(AppendForwarded(nil, netip.MustParseAddr(c.addr), c.host, c.proto)); got != c.want {
			t.Errorf("AppendForwarded(%s, %q) = %s, want %s", c.addr, c.host, got, c.want)
		}
	}
}

// BenchmarkDecidePaths measures a decision on paths of each form: what
// canonicalising and case-insensitive matching add to BenchmarkDecide's
// hot key, and what a path that must be rewritten or refused costs.
func BenchmarkDecidePaths(b *testing.B) {
	for _, bc := range []struct{ name, path string }{
		{"canonical", "/api/search"},
		{"upper_case", "/API/Search"},
		{"encoded", "/api/%73earch"},
		{"ambiguous_rewrite", "/api//x/../search"},
		{"rejected", "/api%2Fsearch"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l := newLimiter(b, seedConfig(b, func(c *config.Config) { c.Paths.Ambiguous = "rewrite" }), Options{})
			r := req("203.0.113.7:4711", bc.path)
			var v Verdict
			b.ReportAllocs()
			now := t0
			for b.Loop() {
				now = now.Add(time.Microsecond)
				l.Decide(context.Background(), now, r, &v)
			}
		})
	}
}

// TestForward checks the request next gets behind Middleware, per forward
// setting: what an untrusted peer claims is gone, what the edge resolved
// is set.
func TestForward(t *testing.T) {
	claims := []string{"X-User-Id", "admin", "X-User-Plan", "enterprise", "X-Real-Ip", "198.51.100.9",
		"Cloudfront-Viewer-Address", "198.51.100.9:1", "X-Forwarded-For", "198.51.100.9", "X-Tier", "enterprise"}
	for _, c := range []struct {
		name   string
		edit   func(*config.Config)
		remote string
		kv     []string
		want   map[string]string // "" for absent
		client string            // the address handed to the reverse proxy
		target string            // requested
		path   string            // as next sees it, escaped
	}{
		{"untrusted, defaults", nil, "203.0.113.7:1", claims,
			map[string]string{"X-User-Id": "", "X-User-Plan": "", "X-Real-Ip": "", "Cloudfront-Viewer-Address": "", "X-Forwarded-For": "", "X-Tier": "enterprise"},
			"203.0.113.7", "/api/search", "/api/search"},
		{"untrusted, strip_headers []", func(c *config.Config) { c.Forward.StripHeaders = []string{} }, "203.0.113.7:1", claims,
			map[string]string{"X-User-Id": "", "X-Real-Ip": "198.51.100.9"}, "203.0.113.7", "/api/search", "/api/search"},
		{"untrusted, tier header", func(c *config.Config) { c.Forward.TierHeader = "X-Tier" }, "203.0.113.7:1", claims,
			map[string]string{"X-Tier": "anonymous"}, "203.0.113.7", "/api/search", "/api/search"},
		{"trusted", nil, "10.0.0.1:1", []string{"X-Forwarded-For", "198.51.100.7", "X-User-Id", "u_1", "X-Real-Ip", "198.51.100.7"},
			map[string]string{"X-User-Id": "u_1", "X-User-Plan": "", "X-Real-Ip": "198.51.100.7"}, "198.51.100.7", "/api/search", "/api/search"},
		{"trusted, a user header not believed", nil, "10.0.0.1:1", []string{"X-User-Id", "admin", "X-User-Id", "u_1"},
			map[string]string{"X-User-Id": ""}, "10.0.0.1", "/api/search", "/api/search"},
		{"trusted, a user header not believed, user false", func(c *config.Config) { f := false; c.Forward.User = &f }, "10.0.0.1:1",
			[]string{"X-User-Id", "admin", "X-User-Id", "u_1"}, map[string]string{"X-User-Id": "admin, u_1"}, "10.0.0.1", "/api/search", "/api/search"},
		{"untrusted, user false", func(c *config.Config) { f := false; c.Forward.User = &f }, "203.0.113.7:1", claims,
			map[string]string{"X-User-Id": "", "X-User-Plan": ""}, "203.0.113.7", "/api/search", "/api/search"},
		{"encoded path forwarded canonical", nil, "203.0.113.7:1", nil, nil, "203.0.113.7", "/api/%73earch", "/api/search"},
		// An origin that reads headers as CGI variables reads X-User-Id as
		// the configured X_User_Id.
		{"untrusted, a user header named with _", func(c *config.Config) { c.Identity.UserHeader = "X_User_Id" }, "203.0.113.7:1", claims,
			map[string]string{"X-User-Id": "", "X_user_id": ""}, "203.0.113.7", "/api/search", "/api/search"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLimiter(t, seedConfig(t, c.edit), Options{})
			var got *http.Request
			h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r }))
			r := httptest.NewRequest("GET", c.target, nil)
			r.RemoteAddr = c.remote
			for i := 0; i+1 < len(c.kv); i += 2 {
				r.Header.Add(c.kv[i], c.kv[i+1])
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			if got == nil {
				t.Fatal("next was not called")
			}
			for k, want := range c.want {
				if v := strings.Join(got.Header[k], ", "); v != want {
					t.Errorf("%s: %q, want %q", k, v, want)
				}
			}
			var a netip.Addr
			if x, ok := got.Context().Value(exchangeKey{}).(*exchange); ok {
				a = x.v.ClientIP
			}
			if a.String() != c.client {
				t.Errorf("client address for the proxy %v, want %s", a, c.client)
			}
			if p := got.URL.EscapedPath(); p != c.path {
				t.Errorf("path %q, want %q", p, c.path)
			}
		})
	}
}
