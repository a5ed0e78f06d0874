package tests

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// waitStatus sends the request until it is answered with want, for at most
// a minute (the edge acts on a list write at its next refresh), and
// returns the last status.
func waitStatus(t *testing.T, client *http.Client, url string, want int, kv ...string) int {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		s := get(t, client, url, kv...).status
		if s == want || time.Now().After(deadline) {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestChallengeListEndToEnd writes the challenge list with `ratewarden
// lists` beside a running edge: the listed client is challenged on its
// next request whatever its count, passes with a token, and is allowed
// again once removed; each change is one feedback event in the decision
// log, which the aggregator's replay counts.
func TestChallengeListEndToEnd(t *testing.T) {
	bin := buildBinary(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "origin") }))
	defer origin.Close()
	dir := t.TempDir()
	list, logDir := filepath.Join(dir, "challenge.list"), filepath.Join(dir, "log")
	if err := os.WriteFile(list, []byte("# challenged clients\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath := seedTrusting(t, "[127.0.0.1]", "\nlists:\n  challenge_file: "+list+"\n  refresh: 1s\n")
	const secret = testVerifierSecret
	base, _ := startEdge(t, bin, challengeEnv, "--config", cfgPath, "--upstream", origin.URL, "--decisions-dir", logDir)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	const ip = "203.0.113.7"
	xff := []string{"X-Forwarded-For", ip}
	if s := get(t, client, base+"/api/search", xff...).status; s != 200 {
		t.Fatalf("before the list: %d, want 200", s)
	}

	run := func(args ...string) string {
		t.Helper()
		return runBinary(t, bin, nil, append([]string{"lists"}, append(args, "--config", cfgPath)...)...)
	}
	run("add", "--list", "challenge", ip, "--by", "alice", "--reason", "scraper", "--ttl", "1h")
	if s := waitStatus(t, client, base+"/api/search", 302, xff...); s != 302 {
		t.Fatalf("after lists add: %d, want 302", s)
	}
	res := get(t, client, base+"/api/search?q=1", xff...)
	if res.status != 302 || res.header.Get("Location") != "/captcha?redirect=%2Fapi%2Fsearch%3Fq%3D1" {
		t.Errorf("listed client: %d %q, want the challenge redirect", res.status, res.header.Get("Location"))
	}
	if s := get(t, client, base+"/api/search", "X-Forwarded-For", "203.0.113.8").status; s != 200 {
		t.Errorf("another client: %d, want 200", s)
	}

	tok := issueToken(t, client, base, secret, ip)
	if s := get(t, client, base+"/api/search", "X-Forwarded-For", ip, "Cookie", tok.Cookie+"="+tok.Token).status; s != 200 {
		t.Errorf("listed client with a token: %d, want 200", s)
	}

	if out := run("show", "--json"); !strings.Contains(out, `"target": "203.0.113.7"`) || !strings.Contains(out, `"state": "active"`) {
		t.Errorf("lists show --json:\n%s", out)
	}
	// A bad line (a second target smuggled onto it) is refused with
	// file:line: the edge logs it and keeps the last good list, and the
	// writer will not rewrite the file.
	good, err := os.ReadFile(list)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(list, append(append([]byte(nil), good...), "198.51.100.7 203.0.113.8\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := fmt.Sprintf("%s:%d: ", list, strings.Count(string(good), "\n")+1)
	for deadline := time.Now().Add(time.Minute); !strings.Contains(edgeLogs[t.Name()](), bad) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if logs := edgeLogs[t.Name()](); !strings.Contains(logs, "keeping the last good list") || !strings.Contains(logs, bad) {
		t.Errorf("the edge did not report %s:\n%s", bad, logs)
	}
	if s := get(t, client, base+"/api/search", xff...).status; s != 302 {
		t.Errorf("after a bad list file: %d, want 302 from the last good list", s)
	}
	if code, out := runBinaryStatus(t, bin, nil, "lists", "remove", "--list", "challenge", ip, "--by", "bob", "--config", cfgPath); code == 0 || !strings.Contains(out, bad) {
		t.Errorf("lists remove on a bad file: exit %d, %s", code, out)
	}
	if err := os.WriteFile(list, good, 0o600); err != nil {
		t.Fatal(err)
	}
	run("remove", "--list", "challenge", ip, "--by", "bob", "--reason", "resolved")
	if s := waitStatus(t, client, base+"/api/search", 200, xff...); s != 200 {
		t.Fatalf("after lists remove: %d, want 200", s)
	}
	stops[t.Name()]()

	// One feedback event per change, in the log.
	var feedback []string
	var listed []string
	for _, line := range strings.Split(strings.TrimSpace(runBinary(t, bin, nil, "decisions", "cat", "--dir", logDir)), "\n") {
		d, _, err := decisions.ParseJSON([]byte(line))
		if err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		switch {
		case d.Kind == decisions.KindFeedback:
			feedback = append(feedback, fmt.Sprintf("%s %s %s by=%s reason=%s ttl≤1h=%v", d.List, d.Action, d.Target, d.Node, d.Reason, d.TTL > 0 && d.TTL <= time.Hour))
		case d.Reason == "challenge list" || d.Reason == "challenge list: valid challenge token":
			listed = append(listed, d.Outcome.String()+" "+d.Reason)
		}
	}
	want := "challenge add 203.0.113.7 by=alice reason=scraper ttl≤1h=true\nchallenge remove 203.0.113.7 by=bob reason=resolved ttl≤1h=false"
	if got := strings.Join(feedback, "\n"); got != want {
		t.Errorf("feedback events:\n%s\nwant\n%s", got, want)
	}
	if len(listed) < 3 || listed[0] != "challenge challenge list" || !slices.Contains(listed, "token_pass challenge list: valid challenge token") {
		t.Errorf("decisions about the listed client: %v", listed)
	}

	// The aggregator counts them.
	out := filepath.Join(dir, "replay")
	runBinary(t, bin, nil, "replay", "--decisions-dir", logDir, "--out", out, "--window", "1s", "--lateness", "100ms")
	counts := map[string]uint64{}
	for _, p := range readPartials(t, filepath.Join(out, "partials"), time.Second) {
		for k, n := range p.Counts.Feedback {
			counts[k] += n
		}
	}
	if fmt.Sprint(counts) != "map[challenge/add:1 challenge/remove:1]" {
		t.Errorf("aggregated feedback %v, want one add and one remove", counts)
	}
}

// TestListsCommandRefuses: what `ratewarden lists` refuses, it refuses
// with the allowed values named, and it never writes a second entry
// through a target, a reason or a name.
func TestListsCommandRefuses(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	list := filepath.Join(dir, "deny.list")
	if err := os.WriteFile(list, nil, 0o600); err != nil { // an empty list: lists refuses a missing file
		t.Fatal(err)
	}
	cfgPath := seedTrusting(t, "[]", "\nlists:\n  deny_file: "+list+"\n")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"add", "--list", "grey", "203.0.113.7"}, `--list "grey": want one of deny, allow, challenge`},
		{[]string{"add", "--list", "allow", "203.0.113.7"}, "--list allow: not configured (lists.allow_file); configured: deny"},
		{[]string{"add", "--list", "deny", "user:eve\n203.0.113.9"}, "user id with a control character"},
		{[]string{"add", "--list", "deny", "203.0.113.7", "--reason", "x\n203.0.113.9"}, "reason with a control character"},
		{[]string{"add", "--list", "deny", "203.0.113.7", "--by", "a\rb"}, "by with a control character"},
		{[]string{"add", "--list", "deny", "203.0.113.7/24"}, "host bits set; want 203.0.113.0/24"},
		{[]string{"add", "--list", "deny", "203.0.113.7", "--ttl", "-1h"}, "--ttl -1h0m0s: want a positive duration"},
		{[]string{"add", "--list", "deny", "203.0.113.7", "--by", ""}, "--by is empty"},
		{[]string{"remove", "--list", "deny", "203.0.113.7"}, "no such entry"},
		{[]string{"frob"}, "actions: show, add, remove, approve"},
	}
	for _, c := range cases {
		code, out := runBinaryStatus(t, bin, []string{"USER=tester"}, append(append([]string{"lists"}, c.args...), "--config", cfgPath)...)
		if code == 0 || !strings.Contains(out, c.want) {
			t.Errorf("lists %q: exit %d, %s; want a failure containing %q", c.args, code, out, c.want)
		}
	}
	// A user id with spaces and quotes is written quoted: one entry.
	runBinary(t, bin, []string{"USER=tester"}, "lists", "add", "--config", cfgPath, "--list", "deny", `user:eve "x" 203.0.113.9 # y`, "--reason", `r" by=mallory`)
	b, err := os.ReadFile(list)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], `"user:eve \"x\" 203.0.113.9 # y" added=`) || !strings.Contains(lines[0], `by=tester reason="r\" by=mallory"`) {
		t.Errorf("deny list file:\n%s", b)
	}
	out := runBinary(t, bin, nil, "lists", "show", "--config", cfgPath, "--json")
	if strings.Count(out, `"target"`) != 1 || !strings.Contains(out, `"by": "tester"`) {
		t.Errorf("lists show:\n%s", out)
	}
}

// TestListsNAT64Spellings runs `ratewarden lists` beside a running edge
// whose identity.nat64_prefixes names the site's translator, on a deny
// entry written by hand in that prefix, in capitals, as an origin's log
// shows the client: `lists show` says the edge reads it as the IPv4
// client, `lists remove` of that IPv4 client removes it and says which
// spelling it removed, and the edge lets the client through; a second
// remove finds nothing and says so.
func TestListsNAT64Spellings(t *testing.T) {
	bin := buildBinary(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "origin") }))
	defer origin.Close()
	deny := filepath.Join(t.TempDir(), "deny.list")
	if err := os.WriteFile(deny, []byte("2001:DB8:64::CB00:7142 by=alice reason=\"scraper \u202e\"\n2001:db8:65::cb00:7142 by=alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath := seedTrusting(t, "[127.0.0.1]", "\nlists:\n  deny_file: "+deny+"\n  refresh: 1s\n",
		"\nidentity:\n", "\nidentity:\n  nat64_prefixes: [\"2001:db8:64::/96\"]\n")
	base, _ := startEdge(t, bin, challengeEnv, "--config", cfgPath, "--upstream", origin.URL)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	xff := []string{"X-Forwarded-For", "203.0.113.66"}
	if s := get(t, client, base+"/api/search", xff...).status; s != http.StatusForbidden {
		t.Fatalf("203.0.113.66 before lists remove: %d, want 403", s)
	}
	run := func(args ...string) (int, string) {
		return runBinaryStatus(t, bin, []string{"USER=bob"}, append([]string{"lists"}, append(args, "--config", cfgPath)...)...)
	}

	_, show := run("show", "--json")
	if !strings.Contains(show, `"target": "2001:db8:64::cb00:7142",
    "read_as": "203.0.113.66",`) || strings.Count(show, "read_as") != 1 || !strings.Contains(show, `"reason": "scraper \u202e"`) {
		t.Errorf("lists show --json:\n%s\nwant 2001:db8:64::cb00:7142 read as 203.0.113.66, and U+202E escaped", show)
	}
	_, show = run("show")
	if !strings.Contains(show, "READ AS") || !strings.Contains(show, "2001:db8:64::cb00:7142  203.0.113.66") {
		t.Errorf("lists show:\n%s\nwant 2001:db8:64::cb00:7142 read as 203.0.113.66", show)
	}

	code, out := run("remove", "--list", "deny", "203.0.113.66")
	if want := "deny: remove 2001:db8:64::cb00:7142: an edge with this configuration reads it as 203.0.113.66 (identity.nat64_prefixes)\n"; code != 0 || out != want {
		t.Errorf("lists remove 203.0.113.66: exit %d, %q; want exit 0, %q", code, out, want)
	}
	if s := waitStatus(t, client, base+"/api/search", http.StatusOK, xff...); s != http.StatusOK {
		t.Errorf("203.0.113.66 after lists remove: %d, want 200", s)
	}
	if s := get(t, client, base+"/api/search", "X-Forwarded-For", "2001:db8:65::cb00:7142").status; s != http.StatusForbidden {
		t.Errorf("2001:db8:65::cb00:7142, outside the prefix: %d, want 403", s)
	}
	if code, out := run("remove", "--list", "deny", "2001:db8:64::203.0.113.66"); code == 0 || !strings.Contains(out, "remove 2001:db8:64::cb00:7142 from deny: no such entry") {
		t.Errorf("a second lists remove: exit %d, %s; want no such entry", code, out)
	}
}

// TestEdgeHangupReloadsLists: SIGHUP has the edge re-read its lists at
// once (an entry written by hand applies well before lists.refresh, an
// hour here) and does not end it: SIGHUP's default action ended the edge
// at once, the decisions it held unwritten. The edge then stops cleanly
// with every request in its log.
func TestEdgeHangupReloadsLists(t *testing.T) {
	bin := buildBinary(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "origin") }))
	defer origin.Close()
	dir := t.TempDir()
	list, logDir := filepath.Join(dir, "deny.list"), filepath.Join(dir, "log")
	if err := os.WriteFile(list, []byte("# denied clients\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath := seedTrusting(t, "[127.0.0.1]", "\nlists:\n  deny_file: "+list+"\n  refresh: 1h\n")
	cmd := exec.Command(bin, "edge", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--config", cfgPath, "--upstream", origin.URL, "--decisions-dir", logDir)
	base, _ := startEdgeCommand(t, cmd)
	client := &http.Client{}
	const ip = "203.0.113.9"
	xff := []string{"X-Forwarded-For", ip}
	sent := 0
	status := func() int { sent++; return get(t, client, base+"/api/search", xff...).status }
	if s := status(); s != 200 {
		t.Fatalf("before the list: %d, want 200", s)
	}
	if err := os.WriteFile(list, []byte(ip+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s := 0
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if s = status(); s != 200 {
			break
		}
	}
	if s != 403 {
		t.Fatalf("after SIGHUP: %d, want 403 from the re-read deny list\n%s", s, edgeLogs[t.Name()]())
	}
	for range 3 {
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	if s := status(); s != 403 {
		t.Errorf("after three more SIGHUPs: %d, want 403 from a running edge", s)
	}
	stops[t.Name()]()
	var n, feedback int
	for _, line := range strings.Split(strings.TrimSpace(runBinary(t, bin, nil, "decisions", "cat", "--dir", logDir)), "\n") {
		d, _, err := decisions.ParseJSON([]byte(line))
		switch {
		case err != nil:
			t.Fatalf("%v: %s", err, line)
		case d.Kind == decisions.KindDecision:
			n++
		case d.Kind == decisions.KindFeedback && d.Target == ip:
			feedback++
		}
	}
	if n != sent || feedback != 1 {
		t.Errorf("%d decisions in the log, %d requests sent; %d feedback events for the entry, want 1", n, sent, feedback)
	}
	if logs := edgeLogs[t.Name()](); !strings.Contains(logs, "list reloaded") {
		t.Errorf("the edge did not log the reload:\n%s", logs)
	}
}
