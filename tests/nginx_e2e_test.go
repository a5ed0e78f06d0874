package tests

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// nginxBinary returns Debian's nginx: on PATH, or where Debian installs it
// (/usr/sbin is not on every user's PATH).
func nginxBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	return file(t, "/usr/sbin/nginx", "tests/run")
}

// startNginx runs nginx in the foreground with its own prefix in a
// temporary directory, serving the server block conf (an http-context
// snippet), and returns once it answers on port. It is stopped at cleanup.
func startNginx(t *testing.T, conf string, port int) {
	t.Helper()
	bin := nginxBinary(t)
	prefix := t.TempDir()
	main := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    include %[1]s/ratewarden.conf;
}
`, prefix)
	for name, body := range map[string]string{"nginx.conf": main, "ratewarden.conf": conf} {
		if err := os.WriteFile(filepath.Join(prefix, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-p", prefix, "-c", filepath.Join(prefix, "nginx.conf"), "-e", filepath.Join(prefix, "error.log"))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	errlog := func() string {
		b, _ := os.ReadFile(filepath.Join(prefix, "error.log"))
		return out.String() + string(b)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			t.Fatalf("nginx exited: %v\n%s", waitErr, errlog())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx does not answer on %d\n%s", port, errlog())
		}
	}
}

// clientFrom is an HTTP client whose connections come from the loopback
// address ip, and that does not follow redirects.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{
		Transport:     &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       10 * time.Second,
	}
}

// TestNginxAuthRequest puts `ratewarden authz` behind Debian's nginx,
// configured with examples/nginx/ratewarden.conf, in front of a Go origin:
// the seed's /api/reports table (200×5, 302×5 to the challenge page, then
// 429 with Retry-After) reaches the client through nginx, the deny list
// answers 403, a client's own X-Real-IP, X-Forwarded-For and X-User-Id are
// not believed (through nginx, which overwrites or clears them, nor sent
// straight to the endpoint from an untrusted address), and every call is
// a decision event.
func TestNginxAuthRequest(t *testing.T) {
	bin := buildBinary(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "origin "+r.URL.Path)
	}))
	defer origin.Close()

	dir := t.TempDir()
	deny := filepath.Join(dir, "deny.txt")
	if err := os.WriteFile(deny, []byte("127.0.0.3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	decisionsFile := filepath.Join(dir, "decisions.jsonl")
	cfg := seedTrusting(t, "[127.0.0.1]", "\nlists:\n  deny_file: "+deny+"\n")
	authz, _ := startEdgeCommand(t, authzCommand(bin, cfg, decisionsFile))

	example, err := os.ReadFile("../examples/nginx/ratewarden.conf")
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	conf := strings.NewReplacer(
		"server 127.0.0.1:8082;", "server "+strings.TrimPrefix(authz, "http://")+";",
		"server 127.0.0.1:3000;", "server "+strings.TrimPrefix(origin.URL, "http://")+";",
		"listen 127.0.0.1:8080;", fmt.Sprintf("listen 127.0.0.1:%d;", port),
	).Replace(string(example))
	if conf == string(example) {
		t.Fatal("the example's addresses were not found")
	}
	startNginx(t, conf, port)
	front := fmt.Sprintf("http://127.0.0.1:%d", port)

	type answer struct {
		status            int
		location, retry   string
		body, limitHeader string
	}
	do := func(c *http.Client, url string, kv ...string) answer {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		for i := 0; i+1 < len(kv); i += 2 {
			req.Header.Set(kv[i], kv[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header.Get("Location"), resp.Header.Get("Retry-After"), string(b), resp.Header.Get("X-Ratelimit-Limit")}
	}

	// The seed's table, from 127.0.0.2.
	client := clientFrom("127.0.0.2")
	var statuses []int
	var answers []answer
	for range 12 {
		a := do(client, front+"/api/reports?page=1")
		statuses = append(statuses, a.status)
		answers = append(answers, a)
	}
	if got := fmt.Sprint(statuses); got != "[200 200 200 200 200 302 302 302 302 302 429 429]" {
		t.Errorf("statuses through nginx %s", got)
	}
	if a := answers[0]; a.body != "origin /api/reports" || a.limitHeader != "5" {
		t.Errorf("passed request: %+v", a)
	}
	if a := answers[5]; a.location != "/captcha?redirect=%2Fapi%2Freports%3Fpage%3D1" {
		t.Errorf("challenge: %+v", a)
	}
	if a := answers[11]; a.retry == "" || a.retry == "0" || !strings.Contains(a.body, "rate_limit_exceeded") {
		t.Errorf("block: %+v", a)
	}

	// The deny list.
	if a := do(clientFrom("127.0.0.3"), front+"/"); a.status != http.StatusForbidden {
		t.Errorf("deny-listed client: %+v", a)
	}
	// A client claiming the deny-listed address, and a user, through
	// nginx: nginx overwrites X-Real-IP and clears the rest.
	if a := do(clientFrom("127.0.0.4"), front+"/", "X-Real-IP", "127.0.0.3", "X-Forwarded-For", "127.0.0.3", "X-User-Id", "admin"); a.status != 200 {
		t.Errorf("spoofing client through nginx: %+v", a)
	}
	// The same straight to the endpoint, from an untrusted address.
	req, _ := http.NewRequest("GET", authz+"/", nil)
	req.Header.Set("X-Real-IP", "127.0.0.3")
	req.Header.Set("X-Original-URI", "/api/export")
	resp, err := clientFrom("127.0.0.5").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("untrusted caller claiming a deny-listed address: %d", resp.StatusCode)
	}

	stops[t.Name()]()
	ds := readDecisionLines(t, decisionsFile)
	if len(ds) != 15 {
		t.Fatalf("%d decisions for 15 calls", len(ds))
	}
	byIP := map[string][]string{}
	for _, d := range ds {
		byIP[d.ClientIP.String()] = append(byIP[d.ClientIP.String()], d.Outcome.String()+":"+d.Path+":"+d.UserID)
	}
	want := map[string]string{
		"127.0.0.2": strings.TrimSpace(strings.Repeat("allow:/api/reports: ", 5) + strings.Repeat("challenge:/api/reports: ", 5) + strings.Repeat("block:/api/reports: ", 2)),
		"127.0.0.3": "deny_listed:/:",
		"127.0.0.4": "allow:/:",
		"127.0.0.5": "allow:/api/export:",
	}
	for ip, w := range want {
		if got := strings.Join(byIP[ip], " "); got != w {
			t.Errorf("decisions of %s: %s\nwant %s", ip, got, w)
		}
	}
	if d := ds[11]; d.Status != 429 || d.Method != "GET" {
		t.Errorf("block decision %+v", d)
	}
}

// authzCommand is `ratewarden authz` on loopback ports with the
// configuration at cfg, writing decisions to file.
func authzCommand(bin, cfg, file string) *exec.Cmd {
	cmd := exec.Command(bin, "authz", "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--decisions-file", file)
	cmd.Env = append(os.Environ(), "RATEWARDEN_CHALLENGE_KEYS=", "RATEWARDEN_VERIFIER_SECRET=")
	return cmd
}

// readDecisionLines reads a JSON-lines decision file.
func readDecisionLines(t *testing.T, path string) []decisions.Decision {
	t.Helper()
	f, err := os.Open(path)
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
