package tests

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ratewarden/ratewarden/decisions"
)

// runBinaryStatus runs the binary like runBinary but returns its exit code
// and output instead of failing the test when it fails.
func runBinaryStatus(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	return runBinaryStatusContext(t, context.Background(), bin, env, args...)
}

// runBinaryStatusContext is runBinaryStatus, the process killed when ctx
// is done (exit code -1).
func runBinaryStatusContext(t *testing.T, ctx context.Context, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(cmd.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	}
	t.Fatalf("ratewarden %v: %v\n%s", args, err, out)
	return 0, ""
}

// seedYAML is examples/seed.yaml, which trusts no proxy, with
// trusted_proxies set to proxies, such as "[127.0.0.1]" for tests whose
// clients are addresses the test process forwards for.
func seedYAML(t *testing.T, proxies string) string {
	t.Helper()
	seed, err := os.ReadFile("../examples/seed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^  trusted_proxies: .*$`)
	if !re.Match(seed) {
		t.Fatal("seed.yaml has no trusted_proxies line")
	}
	return re.ReplaceAllString(string(seed), "  trusted_proxies: "+proxies)
}

// seedTrusting writes seedYAML(proxies), with replace applied (old, new
// pairs) and more appended, to a file and returns its path.
func seedTrusting(t *testing.T, proxies, more string, replace ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(path, []byte(strings.NewReplacer(replace...).Replace(seedYAML(t, proxies))+more), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// withJWT adds HS256 bearer tokens, keyed by RW_TEST_JWT_KEY, to the
// configuration file at path.
func withJWT(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b = []byte(strings.Replace(string(b), "\nidentity:\n", "\nidentity:\n  jwt: {algorithm: HS256, key_env: RW_TEST_JWT_KEY}\n", 1))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestConfigCheckRefusesWhatEdgeRefuses: `config check` fails on what keeps
// `edge` from starting (a missing list file, an unset JWT key, a short
// verifier secret), naming each, exactly as `edge` does; and it warns of a
// trusted range that takes in every address, without failing.
func TestConfigCheckRefusesWhatEdgeRefuses(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	list := filepath.Join(dir, "allow.txt")
	cfg := seedTrusting(t, `["0.0.0.0/0"]`, `
lists:
  allow_file: `+list+`
`)
	withJWT(t, cfg)
	const keys = "RATEWARDEN_CHALLENGE_KEYS=k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	short := []string{keys, "RATEWARDEN_VERIFIER_SECRET=0123456789abcdef0123456789abcde", "RW_TEST_JWT_KEY="}
	code, out := runBinaryStatus(t, bin, short, "config", "check", cfg)
	for _, want := range []string{
		"lists.allow_file: load list: open " + list,
		"identity.jwt.key_env: the key in $RW_TEST_JWT_KEY is 0 bytes",
		"challenge.verifier_secret_env: RATEWARDEN_VERIFIER_SECRET: verifier secret of 31 bytes: want at least 32",
		`identity.trusted_proxies[0]: "0.0.0.0/0" trusts every address`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("config check does not say %q:\n%s", want, out)
		}
	}
	if code != 1 || strings.Contains(out, ": ok") {
		t.Errorf("config check: exit %d:\n%s", code, out)
	}
	// edge refuses to start, for the same reasons, in the same words.
	ecode, eout := runBinaryStatus(t, bin, short, "edge", "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "off")
	if ecode == 0 || !strings.Contains(eout, "verifier secret of 31 bytes") || !strings.Contains(eout, "load list: open "+list) {
		t.Errorf("edge: exit %d:\n%s", ecode, eout)
	}

	// With everything in place the check passes, still warning.
	os.WriteFile(list, []byte("198.51.100.0/24\n"), 0o600)
	good := []string{keys, "RATEWARDEN_VERIFIER_SECRET=0123456789abcdef0123456789abcdef", "RW_TEST_JWT_KEY=0123456789abcdef0123456789abcdef"}
	code, out = runBinaryStatus(t, bin, good, "config", "check", cfg)
	b, _ := os.ReadFile(cfg)
	line := 2 + strings.Count(string(b[:strings.Index(string(b), "\n  trusted_proxies: ")]), "\n")
	if code != 0 || !strings.Contains(out, cfg+": ok") || !strings.Contains(out, fmt.Sprintf("warning: %s:%d: identity.trusted_proxies[0]: \"0.0.0.0/0\" trusts every address", cfg, line)) {
		t.Errorf("config check with everything in place: exit %d:\n%s", code, out)
	}
}

// TestBuiltinConfigTrustsNoProxy: `ratewarden edge` without --config
// believes no forwarding or user header, from loopback either: a local
// process that names a user is an anonymous client, recorded as having
// tried.
func TestBuiltinConfigTrustsNoProxy(t *testing.T) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		dir := t.TempDir()
		file := filepath.Join(dir, "decisions.jsonl")
		base, _ := startEdge(t, bin, []string{"RATEWARDEN_CHALLENGE_KEYS=", "--server", server, "RATEWARDEN_VERIFIER_SECRET="}, "--decisions-file", file)
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		var statuses []int
		inOneMinute(t)
		for range 6 {
			statuses = append(statuses, get(t, client, base+"/api/reports", "X-User-Id", "admin", "X-User-Plan", "enterprise", "X-Forwarded-For", "198.51.100.1").status)
		}
		// The anonymous tier's 5 on /api/reports, not the authenticated 30.
		if got := fmt.Sprint(statuses); got != "[200 200 200 200 200 302]" {
			t.Errorf("statuses %s", got)
		}
		stops[t.Name()]()
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		for i, line := range lines {
			d, _, err := decisions.ParseJSON([]byte(line))
			if err != nil || d.UserID != "" || d.Tier != "anonymous" || !d.ClientIP.IsLoopback() || d.IdentitySource != decisions.SourceUntrustedHeader {
				t.Errorf("decision %d: %v %s", i, err, line)
			}
		}
		if len(lines) != 6 {
			t.Errorf("%d decisions", len(lines))
		}
	})
}

// TestTokenEndpointLimitedAndRecorded: thirty wrong verifier secrets from
// one address through the real binary: ten are answered 401, the rest 429,
// and every request, the right secret's too, is a decision of the rule
// token_endpoint that says what happened and does not hold the secret.
func TestTokenEndpointLimitedAndRecorded(t *testing.T) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		const secret = "0123456789abcdef0123456789abcdef-e2e"
		env := []string{"RATEWARDEN_CHALLENGE_KEYS=k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", "RATEWARDEN_VERIFIER_SECRET=" + secret}
		file := filepath.Join(t.TempDir(), "decisions.jsonl")
		base, _ := startEdge(t, bin, env, "--server", server, "--decisions-file", file)
		post := func(auth string) int {
			r, _ := http.NewRequest("POST", base+"/.ratewarden/token", strings.NewReader(`{"ip":"203.0.113.7"}`))
			r.Header.Set("Authorization", "Bearer "+auth)
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if s := post(secret); s != 200 {
			t.Fatalf("right secret: %d", s)
		}
		var got []int
		for i := range 30 {
			got = append(got, post(fmt.Sprintf("wrong-guess-%02d", i)))
		}
		got = append(got, post(secret))
		if want := "[" + strings.TrimSpace(strings.Repeat("401 ", 10)+strings.Repeat("429 ", 21)) + "]"; fmt.Sprint(got) != want {
			t.Errorf("statuses %v, want %s", got, want)
		}
		stops[t.Name()]()
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "wrong-guess") || strings.Contains(string(b), secret) {
			t.Errorf("the decisions hold a secret:\n%s", b)
		}
		reasons := map[string]int{}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		for _, line := range lines {
			d, _, err := decisions.ParseJSON([]byte(line))
			if err != nil || d.Rule != "token_endpoint" || d.Path != "/.ratewarden/token" || !d.ClientIP.IsLoopback() {
				t.Errorf("decision %v: %s", err, line)
			}
			reasons[d.Outcome.String()+" "+d.Reason]++
		}
		want := map[string]int{
			"allow token endpoint: token issued":                             1,
			"allow token endpoint: wrong verifier secret":                    10,
			"block token endpoint: over the limit of wrong verifier secrets": 21,
		}
		if fmt.Sprint(reasons) != fmt.Sprint(want) {
			t.Errorf("decisions %v, want %v", reasons, want)
		}
	})
}

// TestEdgeStartsPastStraySegment: a stray file named like a segment in the
// decision log directory neither reads as lost events nor keeps the edge
// from starting: the edge moves it to quarantine/ and says so.
func TestEdgeStartsPastStraySegment(t *testing.T) {
	bin := buildBinary(t)
	dir := filepath.Join(t.TempDir(), "log")
	base, _ := startEdge(t, bin, nil, "--decisions-dir", dir)
	for range 20 {
		get(t, http.DefaultClient, base+"/")
	}
	stops[t.Name()]()
	stray := filepath.Join(dir, "00000000000000099999.seg")
	if err := os.WriteFile(stray, []byte("notes, not a segment\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runBinary(t, bin, nil, "decisions", "stats", "--dir", dir)
	if !regexp.MustCompile(`(?m)^events\s+20$`).MatchString(out) || !regexp.MustCompile(`(?m)^events lost to corruption\s+0$`).MatchString(out) {
		t.Errorf("decisions stats with a stray file:\n%s", out)
	}

	cmd := exec.Command(bin, "edge", "--decisions-dir", dir, "--listen", "127.0.0.1:0", "--admin-listen", "off")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var logs strings.Builder
	timeout := time.After(30 * time.Second)
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				break wait
			}
			logs.WriteString(l + "\n")
			if strings.Contains(l, "edge listening") {
				cmd.Process.Signal(os.Interrupt)
			}
		case <-timeout:
			cmd.Process.Kill()
			break wait
		}
	}
	err = cmd.Wait()
	moved := filepath.Join(dir, "quarantine", "00000000000000099999.seg")
	if err != nil || !strings.Contains(logs.String(), "edge listening") || !strings.Contains(logs.String(), "moved to "+moved) {
		t.Errorf("edge with a stray file: %v\n%s", err, logs.String())
	}
	if _, err := os.Stat(moved); err != nil {
		t.Errorf("quarantined file: %v", err)
	}
}

// TestJWTWithoutExpIsAnonymous: a JWT without exp, signed with the right
// key, does not authenticate through the real binary.
func TestJWTWithoutExpIsAnonymous(t *testing.T) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		const key = "0123456789abcdef0123456789abcdef-jwt"
		cfg := seedTrusting(t, "[]", "")
		withJWT(t, cfg)
		origin := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		defer origin.Close()
		file := filepath.Join(t.TempDir(), "decisions.jsonl")
		base, _ := startEdge(t, bin, []string{"RW_TEST_JWT_KEY=" + key, "--server", server, "RATEWARDEN_CHALLENGE_KEYS=", "RATEWARDEN_VERIFIER_SECRET="},
			"--config", cfg, "--upstream", origin.URL, "--decisions-file", file)
		sign := func(c jwt.MapClaims) string {
			s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(key))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		forever := sign(jwt.MapClaims{"sub": "alice", "plan": "pro"})
		hour := sign(jwt.MapClaims{"sub": "bob", "plan": "pro", "exp": time.Now().Add(time.Hour).Unix()})
		get(t, http.DefaultClient, base+"/", "Authorization", "Bearer "+forever)
		get(t, http.DefaultClient, base+"/", "Authorization", "Bearer "+hour)
		stops[t.Name()]()
		data, _ := os.ReadFile(file)
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			d, _, err := decisions.ParseJSON([]byte(line))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, d.IdentitySource+":"+d.UserID+":"+d.Tier)
		}
		if want := "[invalid_jwt::anonymous jwt:bob:pro]"; fmt.Sprint(got) != want {
			t.Errorf("identities %v, want %s", got, want)
		}
	})
}
