package tests

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/internal/canonpath"
)

// received is one request the recording origin got.
type received struct {
	target string // the request target as it came on the wire
	host   string
	header http.Header
}

// recordingOrigin is an origin that answers 200 and keeps what it got.
type recordingOrigin struct {
	*httptest.Server
	mu  sync.Mutex
	got []received
}

func newRecordingOrigin(t *testing.T) *recordingOrigin {
	o := &recordingOrigin{}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.got = append(o.got, received{target: r.RequestURI, host: r.Host, header: r.Header.Clone()})
		o.mu.Unlock()
		io.WriteString(w, "origin")
	}))
	t.Cleanup(o.Close)
	return o
}

// take returns what the origin got since the last call.
func (o *recordingOrigin) take() []received {
	o.mu.Lock()
	defer o.mu.Unlock()
	got := o.got
	o.got = nil
	return got
}

// rawGet sends target and the header lines ("Name: value") exactly as
// given, from the loopback address local, and returns the status. It is
// how a client that does not clean its paths talks, which net/http's
// client would not let a test be.
func rawGet(t *testing.T, base, local, target string, lines ...string) int {
	t.Helper()
	host := strings.TrimPrefix(base, "http://")
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	var b strings.Builder
	b.WriteString("GET " + target + " HTTP/1.1\r\n")
	hasHost := false
	for _, l := range lines {
		hasHost = hasHost || strings.HasPrefix(strings.ToLower(l), "host:")
		b.WriteString(l + "\r\n")
	}
	if !hasHost {
		b.WriteString("Host: " + host + "\r\n")
	}
	b.WriteString("Connection: close\r\n\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %q: %v", target, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// seedWith writes examples/seed.yaml, trusting the test process on
// 127.0.0.1 to forward for its clients, with replace applied (old, new
// pairs) and extra appended, and returns its path.
func seedWith(t *testing.T, extra string, replace ...string) string {
	t.Helper()
	return seedTrusting(t, "[127.0.0.1]", "\n"+extra, replace...)
}

// pathVariants are spellings of /api/reports: the ones issue 13 measured
// passing six times on its 5-per-minute rule, and the classes they stand
// for. forwarded is the path the origin must get; ambiguous says that the
// default configuration (paths.ambiguous: reject) answers 400.
var pathVariants = []struct {
	name, target, forwarded string
	ambiguous               bool
}{
	{"upper-case segment", "/API/reports", "/API/reports", false},
	{"upper-case letter", "/api/Reports", "/api/Reports", false},
	{"repeated slash", "/api//reports", "/api/reports", true},
	{"leading repeated slash", "//api/reports", "/api/reports", true},
	{"dot segment", "/api/./reports", "/api/reports", true},
	{"dot-dot segment", "/api/x/../reports", "/api/reports", true},
	{"encoded dot", "/api/%2e/reports", "/api/reports", true},
	{"backslash", `/api\reports`, "/api/reports", true},
	{"encoded unreserved", "/api/%72eports", "/api/reports", false},
	{"encoded first letter", "/%61pi/reports", "/api/reports", false},
	{"segment parameter", "/api/reports;jsessionid=1", "/api/reports;jsessionid=1", false},
	{"parameter mid-path", "/api;v=1/reports", "/api;v=1/reports", false},
	{"dotless i", "/ap%C4%B1/reports", "/ap%C4%B1/reports", false},
	{"kelvin sign", "/api/reports/%E2%84%AA", "/api/reports/%E2%84%AA", false},
	{"absolute form", "http://other.example/api/./reports", "/api/reports", true},
	{"absolute form canonical", "http://other.example/API/reports?x=1", "/API/reports?x=1", false},
}

// TestEdgePathVariants runs the binary in front of a recording origin and
// spells /api/reports (5 a minute for anonymous clients, challenged above)
// every way in pathVariants, six times each, one client per spelling:
// every spelling counts against the path rule, and the origin only ever
// gets canonical paths.
func TestEdgePathVariants(t *testing.T) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		for _, mode := range []struct{ name, extra string }{
			{"default reject", ""},
			{"rewrite", "paths:\n  ambiguous: rewrite\n"},
		} {
			t.Run(mode.name, func(t *testing.T) {
				origin := newRecordingOrigin(t)
				base, _ := startEdge(t, bin, nil, "--server", server, "--config", seedWith(t, mode.extra), "--upstream", origin.URL)
				for i, v := range pathVariants {
					client := fmt.Sprintf("X-Forwarded-For: 203.0.113.%d", 10+i)
					var statuses []int
					inOneMinute(t)
					for range 6 {
						statuses = append(statuses, rawGet(t, base, "127.0.0.1", v.target, client))
					}
					want, forwarded := "[200 200 200 200 200 302]", 5
					if v.ambiguous && mode.extra == "" {
						want, forwarded = "[400 400 400 400 400 400]", 0
					}
					if got := fmt.Sprint(statuses); got != want {
						t.Errorf("%s %q: statuses %s, want %s", v.name, v.target, got, want)
					}
					got := origin.take()
					if len(got) != forwarded {
						t.Errorf("%s %q: the origin got %d requests, want %d", v.name, v.target, len(got), forwarded)
					}
					for _, r := range got {
						if r.target != v.forwarded {
							t.Errorf("%s %q: the origin got %q, want %q", v.name, v.target, r.target, v.forwarded)
						}
						p, _, _ := strings.Cut(r.target, "?")
						if c, form, err := canonpath.Clean(p); form != canonpath.Canonical || err != nil {
							t.Errorf("%s %q: the origin got %q, not canonical (%q, %v)", v.name, v.target, r.target, c, err)
						}
					}
				}
			})
		}
	})
}

// TestEdgeFailClosedVariants runs the binary with its counter store down
// (Redis on a port nothing listens on): every spelling of a fail_closed
// path (/api/admin/, /api/billing/) is refused with 503, or 400 when
// ambiguous and paths.ambiguous is reject; none reaches the origin as
// fail_open.
func TestEdgeFailClosedVariants(t *testing.T) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		dead := freePort(t)
		variants := []struct {
			target    string
			ambiguous bool
		}{
			{"/api/admin/users", false},
			{"/API/admin/users", false},
			{"/api/Admin/users", false},
			{"/api//admin/users", true},
			{"/api/./admin/users", true},
			{"/api/x/../admin/users", true},
			{`/api\admin\users`, true},
			{"/api/admin", false},
			{"/api/admin/", false},
			{"/api/admin;x=1", false},
			{"/api;x=1/admin/users", false},
			{"/api/%61dmin/users", false},
			{"/ap%C4%B1/admin/users", false},
			{"/api/billing", false},
			{"http://other.example/api/admin", false},
		}
		for _, mode := range []struct{ name, extra string }{
			{"default reject", ""},
			{"rewrite", "paths:\n  ambiguous: rewrite\n"},
		} {
			t.Run(mode.name, func(t *testing.T) {
				origin := newRecordingOrigin(t)
				store := fmt.Sprintf("store:\n  type: redis\n  timeout: 50ms\n  redis:\n    addrs: [127.0.0.1:%d]\n", dead)
				cfg := seedWith(t, mode.extra, "store:\n  type: memory\n", store)
				base, _ := startEdge(t, bin, nil, "--server", server, "--config", cfg, "--upstream", origin.URL)
				for i, v := range variants {
					want := 503
					if v.ambiguous && mode.extra == "" {
						want = 400
					}
					if got := rawGet(t, base, "127.0.0.1", v.target, fmt.Sprintf("X-Forwarded-For: 203.0.113.%d", 10+i)); got != want {
						t.Errorf("%q with the store down: %d, want %d", v.target, got, want)
					}
				}
				for _, r := range origin.take() {
					t.Errorf("the origin got %q with the store down", r.target)
				}
				// The store is down, not the edge: other paths fail open.
				if got := rawGet(t, base, "127.0.0.1", "/api/search", "X-Forwarded-For: 203.0.113.99"); got != 200 {
					t.Errorf("/api/search with the store down: %d, want 200", got)
				}
			})
		}
	})
}

// TestEdgeHostilePaths keeps the tries of an attacker who wants a path the
// edge and the origin read differently, each with the edge's decision.
func TestEdgeHostilePaths(t *testing.T) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		origin := newRecordingOrigin(t)
		decisionsFile := filepath.Join(t.TempDir(), "decisions.jsonl")
		base, _ := startEdge(t, bin, nil, "--server", server, "--config", "../examples/seed.yaml", "--upstream", origin.URL, "--decisions-file", decisionsFile)
		// byServer: the server refuses the request before the edge sees it,
		// so it leaves no decision; every other refusal is a rejected
		// decision. The servers differ: net/http refuses a path with an
		// invalid escape itself, which fasthttp hands to the edge (whose
		// canonical paths refuse it, recorded); fasthttp refuses an
		// asterisk-form target itself, which net/http hands to the edge.
		// Either way the request is refused and never forwarded.
		const (
			netHTTP  = 1 << iota // refused by net/http's server
			fastHTTP             // refused by fasthttp's
			both     = netHTTP | fastHTTP
		)
		mode := netHTTP
		if server == "fasthttp" {
			mode = fastHTTP
		}
		cases := []struct {
			name, target string
			lines        []string
			want         int
			byServer     int
		}{
			{"encoded slash", "/api%2Freports", nil, 400, 0},
			{"encoded slash lower case", "/api%2freports", nil, 400, 0},
			{"encoded backslash", "/api%5Creports", nil, 400, 0},
			{"double-encoded dot", "/api/%252e/reports", nil, 400, 0},
			{"double-encoded slash", "/api%252Freports", nil, 400, 0},
			{"invalid escape", "/api/%zz/reports", nil, 400, netHTTP},
			{"truncated escape", "/api/reports%2", nil, 400, netHTTP},
			{"overlong dot-dot", "/api/x/%C0%AE%C0%AE/reports", nil, 400, 0},
			{"overlong slash", "/api%C0%AFreports", nil, 400, 0},
			{"encoded NUL", "/api/reports%00.json", nil, 400, 0},
			{"raw NUL", "/api/reports\x00", nil, 400, both},
			{"encoded newline", "/api/reports%0d%0a", nil, 400, 0},
			{"dot-dot parameter (Tomcat)", "/api/x/..;/reports", nil, 400, 0},
			{"empty segment parameter", "/;x/api/reports", nil, 400, 0},
			{"asterisk", "*", nil, 400, fastHTTP},
			{"two Host headers", "/api/reports", []string{"Host: a.example", "Host: b.example"}, 400, both},
			{"path over 8 KiB", "/api/" + strings.Repeat("a", 9000), nil, 414, 0},
			{"request line over 64 KiB", "/api/" + strings.Repeat("a", 70000), nil, 431, both},
			{"long canonical path", "/api/" + strings.Repeat("a", 8000), nil, 200, 0},
		}
		rejected := 0
		for _, c := range cases {
			if got := rawGet(t, base, "127.0.0.1", c.target, c.lines...); got != c.want {
				t.Errorf("%s: %d, want %d", c.name, got, c.want)
			}
			if c.byServer&mode == 0 && c.want != 200 {
				rejected++
			}
		}
		if got := origin.take(); len(got) != 1 {
			t.Errorf("the origin got %d requests, want 1 (the long canonical path)", len(got))
		}

		// The Host header plays no part in matching: a client that names
		// another host, in the header or in an absolute-form target, counts
		// against the same rules. The origin gets the target's authority, as
		// RFC 9112 section 3.2.2 says.
		var statuses []int
		for _, target := range []string{"/api/export", "/api/export", "http://admin.internal/api/export"} {
			statuses = append(statuses, rawGet(t, base, "127.0.0.1", target, "Host: other.example", "X-Forwarded-For: 203.0.113.50"))
		}
		statuses = append(statuses, rawGet(t, base, "127.0.0.1", "/api/export", "X-Forwarded-For: 203.0.113.50"))
		if got := fmt.Sprint(statuses); got != "[200 200 200 302]" {
			t.Errorf("/api/export under other hosts: %s, want [200 200 200 302]", got)
		}
		var hosts []string
		for _, r := range origin.take() {
			hosts = append(hosts, r.host)
		}
		if got := fmt.Sprint(hosts); got != "[other.example other.example admin.internal]" {
			t.Errorf("the origin got hosts %s", got)
		}

		// Stopped, the edge has flushed its decisions: one for each request it
		// saw, the long canonical path and the four above passed.
		stops[t.Name()]()
		outcomes := map[decisions.Outcome]int{}
		for _, d := range readDecisions(t, decisionsFile) {
			outcomes[d.Outcome]++
		}
		want := map[decisions.Outcome]int{decisions.Rejected: rejected, decisions.Allow: 4, decisions.Challenge: 1}
		if fmt.Sprint(outcomes) != fmt.Sprint(want) {
			t.Errorf("decisions %v, want %v", outcomes, want)
		}
	})
}

// TestEdgeForwardedHeaders runs the binary with examples/seed.yaml in
// front of a recording origin and checks the headers the origin gets: what
// an untrusted peer claims about itself is removed, and so are the headers
// that some origins take the path from (X-Original-URL: before, they
// passed, and such an origin served a path the edge had not counted); the
// identity the edge resolved is what the origin sees.
func TestEdgeForwardedHeaders(t *testing.T) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		origin := newRecordingOrigin(t)
		base, _ := startEdge(t, bin, nil, "--server", server, "--config", seedWith(t, ""), "--upstream", origin.URL)
		host := strings.TrimPrefix(base, "http://")
		forwarded := func(client string) string { return "for=" + client + `;host="` + host + `";proto=http` }
		claims := []string{
			"X-User-Id: admin", "X-User-Plan: enterprise", "CloudFront-Viewer-Address: 198.51.100.9:443",
			"X-Forwarded-For: 198.51.100.9", "Forwarded: for=198.51.100.9", "X-Real-IP: 198.51.100.9",
			"True-Client-IP: 198.51.100.9", "X-Forwarded-Host: admin.internal", "X-Forwarded-Proto: https",
			// Origins that take the path from these (Symfony before 3.4.14,
			// Zend Framework) would serve a path the edge did not count.
			"X-Original-URL: /api/admin/users", "X-Rewrite-URL: /api/admin/users",
		}
		underscored := []string{
			"X_User_Id: admin", "X-User_Plan: enterprise", "x_forwarded_for: 198.51.100.9", "X_Real_IP: 198.51.100.9",
			"X_Forwarded_Host: admin.internal", "CloudFront_Viewer_Address: 198.51.100.9:443",
		}
		checkForwarded(t, base, origin, []forwardCase{
			{"untrusted peer", "127.0.0.2", claims, map[string]string{
				"X-User-Id": "", "X-User-Plan": "", "Cloudfront-Viewer-Address": "", "X-Real-Ip": "", "True-Client-Ip": "",
				"X-Original-Url": "", "X-Rewrite-Url": "", "X-Forwarded-For": "127.0.0.2", "Forwarded": forwarded("127.0.0.2"),
				"X-Forwarded-Host": host, "X-Forwarded-Proto": "http",
			}},
			{"trusted proxy", "127.0.0.1", []string{"X-Forwarded-For: 198.51.100.7", "X-User-Id: u_1", "X-User-Plan: pro", "X-Real-IP: 198.51.100.7", "X-Original-URL: /a"},
				map[string]string{
					"X-User-Id": "u_1", "X-User-Plan": "pro", "X-Real-Ip": "198.51.100.7", "X-Original-Url": "/a",
					"X-Forwarded-For": "198.51.100.7", "Forwarded": forwarded("198.51.100.7"),
				}},
			{"trusted proxy passing a client's user header on", "127.0.0.1", []string{"X-Forwarded-For: 198.51.100.8", "X-User-Id: admin", "X-User-Id: u_2"},
				map[string]string{"X-User-Id": "", "X-Forwarded-For": "198.51.100.8"}},
			{"trusted proxy forwarding IPv6", "127.0.0.1", []string{"X-Forwarded-For: 2001:db8::7"},
				map[string]string{"X-Forwarded-For": "2001:db8::7", "Forwarded": `for="[2001:db8::7]";host="` + host + `";proto=http`}},
			// An origin that reads headers as CGI variables (WSGI, Rack,
			// PHP) reads X_User_Id as X-User-Id: an underscore spelling of a
			// header the edge removes or sets must not pass either.
			{"untrusted peer, underscore spellings", "127.0.0.2", underscored, map[string]string{
				"X_user_id": "", "X-User_plan": "", "X_forwarded_for": "", "X_real_ip": "",
				"X_forwarded_host": "", "Cloudfront_viewer_address": "", "X-User-Id": "", "X-Forwarded-For": "127.0.0.2",
			}},
			{"trusted proxy passing a client's underscore spellings on", "127.0.0.1", append(underscored, "X-Forwarded-For: 198.51.100.7", "X-User-Id: u_1"),
				map[string]string{"X_user_id": "", "X-User_plan": "", "X_forwarded_for": "", "X_real_ip": "", "X-User-Id": "u_1", "X-Forwarded-For": "198.51.100.7"}},
			{"underscores elsewhere pass", "127.0.0.2", []string{"X_Trace_Id: t1", "X-User_Idx: 1"},
				map[string]string{"X_trace_id": "t1", "X-User_idx": "1"}},
		})
	})
}

// TestEdgeForwardedDecision runs the binary with forward.tier_header and
// decision_header: the origin learns the tier and the outcome from the
// edge, never from the client.
func TestEdgeForwardedDecision(t *testing.T) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		origin := newRecordingOrigin(t)
		cfg := seedWith(t, "forward:\n  tier_header: X-Ratewarden-Tier\n  decision_header: X-Ratewarden-Decision\n")
		base, _ := startEdge(t, bin, nil, "--server", server, "--config", cfg, "--upstream", origin.URL)
		claims := []string{"X-Ratewarden-Tier: enterprise", "X-Ratewarden-Decision: allow_listed", "X_Ratewarden_Tier: enterprise", "X-Ratewarden_Decision: allow_listed"}
		checkForwarded(t, base, origin, []forwardCase{
			{"untrusted peer", "127.0.0.2", append(claims, "X-User-Id: admin", "X-User-Plan: enterprise"),
				map[string]string{"X-Ratewarden-Tier": "anonymous", "X-Ratewarden-Decision": "allow", "X-User-Id": "", "X_ratewarden_tier": "", "X-Ratewarden_decision": ""}},
			{"trusted proxy", "127.0.0.1", append(claims, "X-User-Id: u_1", "X-User-Plan: pro"),
				map[string]string{"X-Ratewarden-Tier": "pro", "X-Ratewarden-Decision": "allow", "X-User-Id": "u_1", "X_ratewarden_tier": "", "X-Ratewarden_decision": ""}},
			// A client's Connection header names fields of its own hop: the
			// headers the edge sets for the origin are not among them.
			{"untrusted peer naming the edge's headers hop-by-hop", "127.0.0.2",
				[]string{"Connection: X-Ratewarden-Tier, X-Ratewarden-Decision, X-Request-Id, X-Hop", "X-Request-Id: r-1", "X-Hop: h"},
				map[string]string{"X-Ratewarden-Tier": "anonymous", "X-Ratewarden-Decision": "allow", "X-Request-Id": "r-1", "X-Hop": ""}},
			{"trusted proxy naming the user header hop-by-hop", "127.0.0.1", []string{"Connection: X-User-Id, X-User-Plan", "X-User-Id: u_1", "X-User-Plan: pro"},
				map[string]string{"X-Ratewarden-Tier": "pro", "X-User-Id": "u_1", "X-User-Plan": "pro"}},
		})
	})
}

// readDecisions reads a JSON-lines decision file.
func readDecisions(t *testing.T, file string) []decisions.Decision {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var ds []decisions.Decision
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		d, _, err := decisions.ParseJSON([]byte(line))
		if err != nil {
			t.Fatalf("decision %d: %v", i+1, err)
		}
		ds = append(ds, d)
	}
	return ds
}

type forwardCase struct {
	name  string
	local string            // the loopback address the request comes from
	lines []string          // its header lines
	want  map[string]string // headers the origin gets; "" for absent
}

func checkForwarded(t *testing.T, base string, origin *recordingOrigin, cases []forwardCase) {
	t.Helper()
	for _, c := range cases {
		if got := rawGet(t, base, c.local, "/api/search", c.lines...); got != 200 {
			t.Fatalf("%s: %d", c.name, got)
		}
		got := origin.take()
		if len(got) != 1 {
			t.Fatalf("%s: the origin got %d requests", c.name, len(got))
		}
		for k, want := range c.want {
			if v := got[0].header[k]; strings.Join(v, ", ") != want {
				t.Errorf("%s: the origin got %s %q, want %q", c.name, k, v, want)
			}
		}
	}
}
