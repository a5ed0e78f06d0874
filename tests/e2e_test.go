package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	binDir    string
)

// buildBinary builds cmd/ratewarden once per test binary; TestMain removes
// it.
func buildBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "ratewarden-e2e-"); buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "ratewarden")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/ratewarden").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// stops holds each test's edge stopper, for tests that stop it early;
// edgeLogs each test's edge log so far.
var (
	stops    = map[string]func(){}
	edgeLogs = map[string]func() string{}
)

var (
	listenRE = regexp.MustCompile(`msg="(?:edge|auth_request endpoint|rate limit service) listening" addr=(\S+)`)
	adminRE  = regexp.MustCompile(`msg="admin listening" addr=(\S+)`)
)

// startEdge runs `ratewarden edge args...` and returns its base URL and its
// admin URL; the process is stopped with SIGINT at cleanup and must exit
// cleanly.
func startEdge(t *testing.T, bin string, env []string, args ...string) (string, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"edge", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	return startEdgeCommand(t, cmd)
}

// startEdgeCommand starts cmd, an edge with an admin listener, as startEdge
// does.
func startEdgeCommand(t *testing.T, cmd *exec.Cmd) (string, string) {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr, admin := make(chan string, 1), make(chan string, 1)
	logs, logDone := scanLog(stderr, func(line string) {
		if m := listenRE.FindStringSubmatch(line); m != nil {
			addr <- m[1]
		}
		if m := adminRE.FindStringSubmatch(line); m != nil {
			admin <- m[1]
		}
	})
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cmd.Process.Signal(os.Interrupt)
			done := make(chan error, 1)
			// Wait closes the pipe: the log is read to its end first, or
			// its last lines may be lost.
			go func() { <-logDone; done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("edge exited with %v\n%s", err, logs())
				}
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				t.Errorf("edge did not stop on SIGINT\n%s", logs())
			}
		})
	}
	t.Cleanup(stop)
	stops[t.Name()] = stop
	edgeLogs[t.Name()] = logs
	var urls [2]string
	for i, ch := range []chan string{addr, admin} {
		select {
		case a := <-ch:
			urls[i] = "http://" + a
		case <-time.After(30 * time.Second):
			t.Fatalf("edge did not start\n%s", logs())
		}
	}
	return urls[0], urls[1]
}

// scanLog reads a process's stderr r to its end in the background,
// calling each with every line: it returns the lines read so far, and a
// channel closed at the end (before cmd.Wait, which closes the pipe, or
// the last lines may be lost).
func scanLog(r io.Reader, each func(line string)) (logs func() string, done <-chan struct{}) {
	var b strings.Builder
	var mu sync.Mutex
	end := make(chan struct{})
	go func() {
		defer close(end)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			mu.Lock()
			b.WriteString(sc.Text() + "\n")
			mu.Unlock()
			each(sc.Text())
		}
	}()
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return b.String()
	}, end
}

type result struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, client *http.Client, url string, kv ...string) result {
	t.Helper()
	r, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Set(kv[i], kv[i+1])
	}
	resp, err := client.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, string(b)}
}

// TestEdgeEndToEnd runs `ratewarden edge --config examples/seed.yaml` in
// front of an origin and checks the seed's table through real HTTP.
func TestEdgeEndToEnd(t *testing.T) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		var reached atomic.Int64
		origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reached.Add(1)
			w.Header().Set("X-Origin", "yes")
			fmt.Fprintf(w, "origin %s", r.URL.Path)
		}))
		defer origin.Close()
		dir := t.TempDir()
		decisionsFile := filepath.Join(dir, "decisions.jsonl")
		base, admin := startEdge(t, bin, []string{"RATEWARDEN_CHALLENGE_KEYS=", "--server", server, "RATEWARDEN_VERIFIER_SECRET="},
			"--config", seedTrusting(t, "[127.0.0.1]", ""), "--upstream", origin.URL, "--decisions-file", decisionsFile, "--node", "e2e-1")
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

		// Anonymous /api/reports: 5 allowed, 5 challenged, then blocked.
		var statuses []int
		var last result
		for i := range 11 {
			res := get(t, client, base+"/api/reports?page=2")
			statuses = append(statuses, res.status)
			last = res
			switch {
			case i < 5:
				if res.body != "origin /api/reports" || res.header.Get("X-Origin") != "yes" {
					t.Errorf("request %d: body %q", i+1, res.body)
				}
				if got := res.header.Get("X-RateLimit-Remaining"); got != fmt.Sprint(4-i) {
					t.Errorf("request %d: X-RateLimit-Remaining %q, want %d", i+1, got, 4-i)
				}
			case i < 10:
				if loc := res.header.Get("Location"); loc != "/captcha?redirect=%2Fapi%2Freports%3Fpage%3D2" {
					t.Errorf("request %d: Location %q", i+1, loc)
				}
			}
		}
		if got := fmt.Sprint(statuses); got != "[200 200 200 200 200 302 302 302 302 302 429]" {
			t.Errorf("statuses %s", got)
		}
		var body struct {
			Error      string `json:"error"`
			Message    string `json:"message"`
			RetryAfter int    `json:"retry_after"`
		}
		if err := json.Unmarshal([]byte(last.body), &body); err != nil || body.Error != "rate_limit_exceeded" || body.RetryAfter < 1 || body.RetryAfter > 60 {
			t.Errorf("429 body %q (%v)", last.body, err)
		}
		for _, h := range []string{"Retry-After", "X-RateLimit-Limit", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit"} {
			if last.header.Get(h) == "" {
				t.Errorf("429 lacks %s", h)
			}
		}
		if got := last.header.Get("RateLimit-Policy"); got != `"anonymous:/api/reports";q=5;w=60` {
			t.Errorf("RateLimit-Policy %q", got)
		}
		if reached.Load() != 5 {
			t.Errorf("origin reached %d times, want 5", reached.Load())
		}

		// The configuration trusts loopback's 127.0.0.1 as the auth layer in
		// front: a user it names gets the authenticated limits (30 on
		// /api/reports).
		var userStatuses []int
		for range 31 {
			userStatuses = append(userStatuses, get(t, client, base+"/api/reports", "X-User-Id", "u_1").status)
		}
		if got := fmt.Sprint(userStatuses); got != "["+strings.Repeat("200 ", 30)+"302]" {
			t.Errorf("authenticated statuses %s", got)
		}
		// The same header from an untrusted peer (127.0.0.2) buys nothing: it
		// is an anonymous client with 5 on /api/reports.
		spoofer := &http.Client{
			CheckRedirect: client.CheckRedirect,
			Transport:     &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext},
		}
		var spoofStatuses []int
		inOneMinute(t)
		for range 6 {
			spoofStatuses = append(spoofStatuses, get(t, spoofer, base+"/api/reports", "X-User-Id", "u_spoof").status)
		}
		if got := fmt.Sprint(spoofStatuses); got != "[200 200 200 200 200 302]" {
			t.Errorf("spoofed user statuses %s", got)
		}

		// Fail-closed paths are ordinary paths while the store is healthy.
		if res := get(t, client, base+"/api/admin/users"); res.status != 200 {
			t.Errorf("/api/admin/users: %d", res.status)
		}

		// Metrics are served on the admin port.
		metrics := get(t, client, admin+"/metrics")
		for _, want := range []string{
			`ratewarden_edge_decisions_dropped_total\{[^}]*\} 0\n`,
			`ratewarden_edge_store_breaker_state\{[^}]*\} 0\n`,
			`ratewarden_edge_decisions_total\{[^}]*outcome="block"[^}]*\} 1\n`,
			`ratewarden_edge_decisions_total\{[^}]*outcome="challenge"[^}]*\} 7\n`,
			`ratewarden_edge_decisions_total\{[^}]*outcome="allow"[^}]*\} 41\n`,
		} {
			if !regexp.MustCompile(want).MatchString(metrics.body) {
				t.Errorf("/metrics does not match %s:\n%s", want, grepLines(metrics.body, "ratewarden_edge_decisions"))
			}
		}
		t.Run("decisions file", func(t *testing.T) {
			// The emitter flushes at least every 200 ms; poll for the lines.
			const total = 11 + 31 + 6 + 1
			var lines []string
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				b, _ := os.ReadFile(decisionsFile)
				lines = strings.Split(strings.TrimSpace(string(b)), "\n")
				if len(lines) >= total {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if len(lines) != total {
				t.Fatalf("%d decision lines, want %d", len(lines), total)
			}
			var counts [decisions.NumOutcomes]int
			for i, line := range lines {
				d, v, err := decisions.ParseJSON([]byte(line))
				if err != nil || v != decisions.Version {
					t.Fatalf("line %d: %v (v%d)", i+1, err, v)
				}
				if d.Node != "e2e-1" || d.RequestID == "" || !d.ClientIP.IsLoopback() {
					t.Errorf("line %d: %+v", i+1, d)
				}
				if d.UserID == "u_spoof" || (d.ClientIP.String() == "127.0.0.2" && d.IdentitySource != decisions.SourceUntrustedHeader) {
					t.Errorf("line %d: spoofed identity believed: %+v", i+1, d)
				}
				counts[d.Outcome]++
			}
			// 5+30+5+1 allowed, 5+1+1 challenged, 1 blocked.
			if counts[decisions.Allow] != 41 || counts[decisions.Challenge] != 7 || counts[decisions.Block] != 1 {
				t.Errorf("outcome counts allow %d challenge %d block %d", counts[decisions.Allow], counts[decisions.Challenge], counts[decisions.Block])
			}
		})
	})
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestEdgeChallengeFlowAndLists runs the edge with allow and deny lists and
// challenge keys: a challenged client gets a token from the token endpoint
// (as a CAPTCHA verifier would) and passes with it; listed clients bypass
// or are refused.
func TestEdgeChallengeFlowAndLists(t *testing.T) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "origin")
		}))
		defer origin.Close()
		dir := t.TempDir()
		allow, deny := filepath.Join(dir, "allow.txt"), filepath.Join(dir, "deny.txt")
		os.WriteFile(allow, []byte("# partners\n198.51.100.0/24\nuser:partner\n"), 0o600)
		os.WriteFile(deny, []byte("203.0.113.66\n"), 0o600)
		cfgPath := seedTrusting(t, "[127.0.0.1]", "\nlists:\n  allow_file: "+allow+"\n  deny_file: "+deny+"\n")
		const secret = testVerifierSecret
		base, _ := startEdge(t, bin, challengeEnv, "--server", server, "--config", cfgPath, "--upstream", origin.URL)
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

		// 203.0.113.7 (forwarded by the trusted loopback proxy) is challenged
		// on its 4th /api/export.
		var statuses []int
		for range 4 {
			statuses = append(statuses, get(t, client, base+"/api/export", "X-Forwarded-For", "203.0.113.7").status)
		}
		if fmt.Sprint(statuses) != "[200 200 200 302]" {
			t.Fatalf("statuses %v", statuses)
		}
		// The verifier asks for a token for that address.
		tok := issueToken(t, client, base, secret, "203.0.113.7")
		// With the cookie it passes the challenge zone (count 5 and 6 of a
		// limit of 3, factor 2) and is blocked above it; without, challenged.
		withCookie := func() int {
			return get(t, client, base+"/api/export", "X-Forwarded-For", "203.0.113.7", "Cookie", tok.Cookie+"="+tok.Token).status
		}
		if s := withCookie(); s != 200 {
			t.Errorf("with token: %d, want 200", s)
		}
		// The token is bound to 203.0.113.7: another client presenting it is
		// challenged like any other.
		for range 3 {
			get(t, client, base+"/api/export", "X-Forwarded-For", "203.0.113.8")
		}
		if s := get(t, client, base+"/api/export", "X-Forwarded-For", "203.0.113.8", "Cookie", tok.Cookie+"="+tok.Token).status; s != 302 {
			t.Errorf("another client with a stolen token: %d, want 302", s)
		}
		withCookie()
		if s := withCookie(); s != 429 {
			t.Errorf("with token above factor × limit: %d, want 429", s)
		}
		// A wrong verifier secret gets nothing.
		r, _ := http.NewRequest("POST", base+"/.ratewarden/token", strings.NewReader(`{"ip":"203.0.113.7"}`))
		r.Header.Set("Authorization", "Bearer wrong")
		if resp, err := client.Do(r); err != nil || resp.StatusCode != 401 {
			t.Errorf("wrong secret: %v %v", resp.StatusCode, err)
		}

		// Lists.
		for i := range 10 {
			if s := get(t, client, base+"/api/export", "X-Forwarded-For", "198.51.100.23").status; s != 200 {
				t.Fatalf("allow-listed request %d: %d", i+1, s)
			}
		}
		res := get(t, client, base+"/", "X-Forwarded-For", "203.0.113.66")
		if res.status != 403 || !strings.Contains(res.body, `"forbidden"`) {
			t.Errorf("deny-listed: %d %s", res.status, res.body)
		}
	})
}

// testVerifierSecret and challengeEnv give an edge challenge keys and the
// verifier secret its token endpoint wants (issueToken's secret).
const testVerifierSecret = "verifier-secret-of-at-least-32-bytes"

var challengeEnv = []string{
	"RATEWARDEN_CHALLENGE_KEYS=k2:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
	"RATEWARDEN_VERIFIER_SECRET=" + testVerifierSecret,
}

// token is what the token endpoint answers.
type challengeToken struct{ Token, Cookie string }

// issueToken asks the edge's token endpoint, as the CAPTCHA verifier does,
// for a challenge token for the client address ip.
func issueToken(t *testing.T, client *http.Client, base, secret, ip string) challengeToken {
	t.Helper()
	r, _ := http.NewRequest("POST", base+"/.ratewarden/token", strings.NewReader(`{"ip":"`+ip+`"}`))
	r.Header.Set("Authorization", "Bearer "+secret)
	resp, err := client.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	var tok challengeToken
	json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if resp.StatusCode != 200 || tok.Token == "" || tok.Cookie != "rw_challenge" {
		t.Fatalf("token endpoint: %d %+v", resp.StatusCode, tok)
	}
	return tok
}

// TestEdgeDecisionLog runs the edge with the segmented decision log, serves
// a known number of requests, stops it, and reads the log back with
// `ratewarden decisions cat`, `stats` and `export`: one JSON object per
// request, nothing lost on SIGTERM.
func TestEdgeDecisionLog(t *testing.T) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
		defer origin.Close()
		dir := filepath.Join(t.TempDir(), "log")
		base, _ := startEdge(t, bin, nil, "--server", server, "--config", seedTrusting(t, "[127.0.0.1]", ""), "--upstream", origin.URL, "--decisions-dir", dir)
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		const clients, each = 20, 25
		want := map[int]int{}
		for c := range clients {
			for range each {
				res := get(t, client, base+"/api/export", "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", c))
				want[res.status]++
			}
		}
		stops[t.Name()]()

		run := func(args ...string) string { t.Helper(); return runBinary(t, bin, nil, args...) }
		n, got, _ := decisionLines(t, run("decisions", "cat", "--dir", dir))
		if n != clients*each {
			t.Fatalf("decisions cat: %d lines, want %d", n, clients*each)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("outcomes in the log %v, statuses served %v", got, want)
		}
		if out := run("decisions", "stats", "--dir", dir); !regexp.MustCompile(`(?m)^events\s+500$`).MatchString(out) {
			t.Errorf("decisions stats:\n%s", out)
		}
		pq := filepath.Join(t.TempDir(), "d.parquet")
		if out := run("decisions", "export", "--dir", dir, "--out", pq); !strings.Contains(out, "500 events") {
			t.Errorf("decisions export: %s", out)
		}
		if fi, err := os.Stat(pq); err != nil || fi.Size() == 0 {
			t.Errorf("parquet file: %v", err)
		}
		table := run("decisions", "cat", "--dir", dir, "--format", "table", "--from", "495")
		if n := len(strings.Split(strings.TrimSpace(table), "\n")); n != 6 || !strings.HasPrefix(table, "OFFSET") {
			t.Errorf("table from offset 495: %d lines:\n%s", n, table)
		}
	})
}

// eachServer runs f as a subtest for each edge.server (net/http,
// fasthttp), which f passes to the binary (--server): what the edge does to
// requests holds for every server, and the same assertions check it.
func eachServer(t *testing.T, f func(t *testing.T, server string)) {
	t.Helper()
	for _, s := range config.EdgeServers {
		t.Run(s, func(t *testing.T) { f(t, s) })
	}
}
