package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/aggregator/report"
	"github.com/ratewarden/ratewarden/decisions"
)

// The loop's settings: the aggregator's window and lateness, the rule's
// window to match, and the edge's list refresh.
const (
	loopWindow   = 10 * time.Second
	loopLateness = 500 * time.Millisecond
	loopRefresh  = time.Second
)

// loopConfig is the configuration both processes read: the edge's
// limits and challenge list, and the aggregator's alerts and policy. A
// challenge factor of 1 makes the limiter block, never challenge, over a
// limit: every 302 is the challenge list's.
const loopConfig = `
edge:
  upstream: http://127.0.0.1:9
identity:
  trusted_proxies: [127.0.0.1]
challenge:
  enabled: true
  factor: 1
store:
  type: memory
lists:
  challenge_file: LIST
  refresh: REFRESH
tiers:
  anonymous:
    global: {limit: 50, window: WINDOW, algorithm: fixed_window}
alerts:
  sinks: {file: ALERTS}
feedback:
  dry_run: false
  policies:
    - {name: challenge-scrapers, alerts: [heavy_hitter], action: challenge, ttl: 30m}
`

// loopRun is what one run of the loop saw.
type loopRun struct {
	dir, logDir, partials, alerts string
	first, challenged             time.Time // the scraper's first request, and its first challenged one
	challengedStatus              int
	location                      string
	normal                        int // the normal client's status once the scraper is challenged
	normalRefused                 int // the normal client's refused requests during the run
}

// runLoop runs the feedback loop through the binaries: `ratewarden edge`
// with an empty challenge list and the decision log, `ratewarden aggregate
// --alerts` following the log, a normal client at 4 requests a second and
// a scraper sending 800 requests in one second from one address (a
// trusted X-Forwarded-For), then polling every 50 ms until the edge
// challenges it. Both processes are stopped cleanly before it returns.
//
// scraper(i) is the address of the scraper's request i; its polling
// requests come from probe.
func runLoop(t *testing.T, bin string, scraper func(i int) string, probe string) loopRun {
	t.Helper()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "origin") }))
	defer origin.Close()
	dir := t.TempDir()
	r := loopRun{dir: dir, logDir: filepath.Join(dir, "log"), partials: filepath.Join(dir, "partials"), alerts: filepath.Join(dir, "alerts.jsonl")}
	list := filepath.Join(dir, "challenge.list")
	if err := os.WriteFile(list, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "ratewarden.yaml")
	yaml := strings.NewReplacer("LIST", list, "ALERTS", r.alerts, "REFRESH", loopRefresh.String(), "WINDOW", loopWindow.String()).Replace(loopConfig)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	base, _ := startEdge(t, bin, challengeEnv, "--config", cfgPath, "--upstream", origin.URL, "--decisions-dir", r.logDir)
	agg := startAggregate(t, bin, nil, "--decisions-dir", r.logDir, "--state-dir", filepath.Join(dir, "state"),
		"--partials", "dir:"+r.partials, "--alerts", cfgPath, "--window", loopWindow.String(), "--lateness", loopLateness.String())

	client := &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport:     &http.Transport{MaxIdleConnsPerHost: 16},
	}
	defer client.CloseIdleConnections()
	const normal = "198.51.100.1"

	// The normal client, 4 requests a second, until the scraper is
	// challenged.
	stop, normalDone := make(chan struct{}), make(chan struct{})
	var normalMu sync.Mutex
	go func() {
		defer close(normalDone)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			req, _ := http.NewRequest("GET", base+"/api/search", nil)
			req.Header.Set("X-Forwarded-For", normal)
			resp, err := client.Do(req)
			if err != nil {
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				normalMu.Lock()
				r.normalRefused++
				normalMu.Unlock()
			}
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-normalDone
	}()

	// The scraper: 800 requests paced over one second.
	r.first = time.Now()
	burst(client, 800, time.Second, func(i int) (string, string) { return base + "/api/search", scraper(i) })

	// Its next requests, until one is challenged: at most four windows.
	deadline := r.first.Add(4 * loopWindow)
	for {
		res := get(t, client, base+"/api/search?page=2", "X-Forwarded-For", probe)
		if res.status == 302 || time.Now().After(deadline) {
			r.challenged, r.challengedStatus, r.location = time.Now(), res.status, res.header.Get("Location")
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	<-normalDone
	r.normal = get(t, client, base+"/api/search", "X-Forwarded-For", normal).status

	// Stop the edge, let the aggregator read the log's tail (its idle
	// watermark closes the windows), and stop it: a clean shutdown emits
	// what is still open.
	stops[t.Name()]()
	time.Sleep(loopWindow/5 + loopLateness)
	agg.stop(t)
	return r
}

// TestAlertLoopIPv6Prefix runs the loop with a scraper that rotates over
// 20 addresses of one IPv6 /64 (the edge's identity.ipv6_prefix), 40
// requests each, none alone over the heavy-hitter threshold: the alert
// names the /64, the policy lists it, and an address of the /64 that never
// sent a request is challenged; the one feedback event names the prefix.
func TestAlertLoopIPv6Prefix(t *testing.T) {
	bin := buildBinary(t)
	r := runLoop(t, bin, func(i int) string { return fmt.Sprintf("2001:db8:1:2::a:%x", i%20) }, "2001:db8:1:2:ffff::1")
	if r.challengedStatus != 302 || r.normal != 200 {
		t.Fatalf("another address of the /64: %d, normal client %d; want 302 and 200\n%s", r.challengedStatus, r.normal, edgeLogs[t.Name()]())
	}
	b, err := os.ReadFile(r.alerts)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"identities":["2001:db8:1:2::/64"]`; strings.Count(string(b), want) != 1 || !strings.Contains(string(b), `"target":"2001:db8:1:2::/64"`) {
		t.Errorf("alerts and actions, want one heavy hitter and an action on the /64:\n%s", b)
	}
	var feedback []string
	for _, line := range strings.Split(strings.TrimSpace(runBinary(t, bin, nil, "decisions", "cat", "--dir", r.logDir)), "\n") {
		if d, _, err := decisions.ParseJSON([]byte(line)); err == nil && d.Kind == decisions.KindFeedback {
			feedback = append(feedback, d.List+" "+d.Action+" "+d.Target)
		}
	}
	if got := strings.Join(feedback, "\n"); got != "challenge add 2001:db8:1:2::/64" {
		t.Errorf("feedback events:\n%s", got)
	}
}

// burst sends n GET requests paced evenly over d by 16 senders, request
// i to the URL and from the X-Forwarded-For address of at(i), and returns
// when all are answered. Failed requests are not retried.
func burst(client *http.Client, n int, d time.Duration, at func(i int) (url, xff string)) {
	const senders = 16
	work := make(chan int)
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				url, xff := at(i)
				req, _ := http.NewRequest("GET", url, nil)
				req.Header.Set("X-Forwarded-For", xff)
				if resp, err := client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * d / time.Duration(n))))
		work <- i
	}
	close(work)
	wg.Wait()
}

// TestAlertLoopEndToEnd closes the loop through the binaries: a scraper
// at 800 requests a second from one address makes the aggregator raise a
// heavy_hitter alert; the challenge policy (not a dry run) writes the
// challenge list; the edge reads it at its next refresh and challenges the
// scraper's next request (302 to the challenge page) while a normal client
// still passes; the edge records the change as exactly one feedback event
// (challenge/add) in the decision log, which the aggregator's partials
// count; and `ratewarden report` on the partials shows the alert and the
// action. It logs the time from the scraper's first request to its first
// challenged one (BENCHMARKS.md, "Feedback lists"); nothing is asserted
// of it.
func TestAlertLoopEndToEnd(t *testing.T) {
	bin := buildBinary(t)
	r := runLoop(t, bin, func(int) string { return "203.0.113.7" }, "203.0.113.7")
	if r.challengedStatus != 302 || !strings.HasPrefix(r.location, "/captcha?redirect=") {
		t.Fatalf("the scraper's requests after the burst: last %d %q, want a 302 to the challenge page\n%s",
			r.challengedStatus, r.location, edgeLogs[t.Name()]())
	}
	if r.normal != 200 || r.normalRefused != 0 {
		t.Errorf("normal client: %d after, %d refused during; want 200 and none", r.normal, r.normalRefused)
	}

	// The alert and the action, in the alerts file.
	b, err := os.ReadFile(r.alerts)
	if err != nil {
		t.Fatal(err)
	}
	var hh []alerts.Alert
	var acts []alerts.Action
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var kind struct{ Kind string }
		if err := json.Unmarshal([]byte(line), &kind); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		switch kind.Kind {
		case "alert":
			var a alerts.Alert
			if err := json.Unmarshal([]byte(line), &a); err != nil {
				t.Fatal(err)
			}
			if a.Type == alerts.TypeHeavyHitter && a.State == alerts.Firing {
				hh = append(hh, a)
			}
		case "action":
			var a alerts.Action
			if err := json.Unmarshal([]byte(line), &a); err != nil {
				t.Fatal(err)
			}
			acts = append(acts, a)
		}
	}
	if len(hh) != 1 || len(hh[0].Identities) != 1 || hh[0].Identities[0] != "203.0.113.7" {
		t.Fatalf("heavy_hitter alerts %+v, want one for 203.0.113.7\n%s", hh, b)
	}
	// The figure: from the first request, and from the end of the window
	// that raised the alert (what the loop adds to the window's length).
	t.Logf("loop: scraper's first request to its first challenged request: %v; end of the alert's window to it: %v (window %v, lateness %v, refresh %v)",
		r.challenged.Sub(r.first).Round(time.Millisecond), r.challenged.Sub(hh[0].Time).Round(time.Millisecond), loopWindow, loopLateness, loopRefresh)
	if len(acts) != 1 || !acts[0].Applied || acts[0].List != "challenge" || acts[0].Target != "203.0.113.7" ||
		acts[0].Policy != "challenge-scrapers" || acts[0].Alert != hh[0].Key {
		t.Fatalf("actions %+v, want the policy's one applied challenge", acts)
	}

	// Exactly one feedback event, recorded by the edge, and the scraper's
	// challenged requests say why.
	var feedback []string
	listed := 0
	for _, line := range strings.Split(strings.TrimSpace(runBinary(t, bin, nil, "decisions", "cat", "--dir", r.logDir)), "\n") {
		d, _, err := decisions.ParseJSON([]byte(line))
		if err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		switch {
		case d.Kind == decisions.KindFeedback:
			feedback = append(feedback, fmt.Sprintf("%s %s %s by=%s ttl≤30m=%v", d.List, d.Action, d.Target, d.Node, d.TTL > 0 && d.TTL <= 30*time.Minute))
		case d.Outcome == decisions.Challenge:
			if d.ClientIP.String() != "203.0.113.7" || d.Reason != "challenge list" {
				t.Errorf("challenged %s: %q", d.ClientIP, d.Reason)
			}
			listed++
		}
	}
	if got, want := strings.Join(feedback, "\n"), "challenge add 203.0.113.7 by=policy:challenge-scrapers ttl≤30m=true"; got != want {
		t.Errorf("feedback events:\n%s\nwant\n%s", got, want)
	}
	if listed < 1 {
		t.Error("no challenged decision in the log")
	}

	// The aggregator's partials count it.
	counts := map[string]uint64{}
	var from, to time.Time
	for start, p := range readPartials(t, r.partials, loopWindow) {
		for k, n := range p.Counts.Feedback {
			counts[k] += n
		}
		if from.IsZero() || start.Before(from) {
			from = start
		}
		if end := start.Add(loopWindow); end.After(to) {
			to = end
		}
	}
	if fmt.Sprint(counts) != "map[challenge/add:1]" {
		t.Errorf("partials count feedback %v, want one challenge/add", counts)
	}

	// The report on the partials shows the alert and the action.
	out := runBinary(t, bin, nil, "report", "--partials", "dir:"+r.partials, "--alerts", r.alerts, "--window", loopWindow.String(),
		"--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339), "--format", "json")
	var rep report.Report
	// The document, then the summary line on standard error.
	if err := json.NewDecoder(strings.NewReader(out[strings.Index(out, "{"):])).Decode(&rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	var repAlert, repAction, repFeedback bool
	for _, a := range rep.Alerts {
		repAlert = repAlert || a.Key == hh[0].Key
	}
	for _, a := range rep.Actions {
		repAction = repAction || a.Target == "203.0.113.7" && a.Applied
	}
	for _, f := range rep.Feedback {
		repFeedback = repFeedback || f.List == "challenge" && f.Action == "add" && f.Events == 1
	}
	if !repAlert || !repAction || !repFeedback {
		t.Errorf("report: alert %v, action %v, feedback event %v\n%s", repAlert, repAction, repFeedback, out)
	}
}

// detectConfig is the configuration of TestStuffingAndFalsePositiveAlerts:
// rules of one second to match --window 1s, a login rule, and a paying
// tier whose users are told by a trusted proxy.
const detectConfig = `
edge:
  upstream: http://127.0.0.1:9
identity:
  trusted_proxies: [127.0.0.1]
  user_header: X-User-Id
  plan_header: X-User-Plan
store:
  type: memory
tiers:
  anonymous:
    global: {limit: 1000, window: 1s, algorithm: fixed_window}
    paths:
      /api/login: {limit: 5, window: 1s, algorithm: fixed_window}
  authenticated:
    global: {limit: 100, window: 1s, algorithm: fixed_window}
  pro:
    extends: authenticated
    paths:
      /api/export: {limit: 2, window: 1s, algorithm: fixed_window}
alerts:
  paying_tiers: [pro]
  sinks: {file: ALERTS}
`

// TestStuffingAndFalsePositiveAlerts runs the other two alerts of the
// issue's tests through the binaries: `ratewarden edge` and `ratewarden
// aggregate --alerts` over its log, with windows of one second. After a
// few windows of three clients logging in, 500 addresses each try
// /api/login once within a second (each under the limit): a
// credential_stuffing alert on the login rule, and no heavy hitter. A pro
// user refused on /api/export: a false_positive alert naming the user.
func TestStuffingAndFalsePositiveAlerts(t *testing.T) {
	bin := buildBinary(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "origin") }))
	defer origin.Close()
	dir := t.TempDir()
	logDir, alertsFile, cfgPath := filepath.Join(dir, "log"), filepath.Join(dir, "alerts.jsonl"), filepath.Join(dir, "ratewarden.yaml")
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(detectConfig, "ALERTS", alertsFile, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	base, _ := startEdge(t, bin, nil, "--config", cfgPath, "--upstream", origin.URL, "--decisions-dir", logDir)
	agg := startAggregate(t, bin, nil, "--decisions-dir", logDir, "--state-dir", filepath.Join(dir, "state"),
		"--alerts", cfgPath, "--window", "1s", "--lateness", "200ms")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer client.CloseIdleConnections()

	// The baseline: 8 windows of three clients, two tries each.
	burst(client, 48, 8*time.Second, func(i int) (string, string) {
		return base + "/api/login", fmt.Sprintf("192.0.2.%d", 1+i%3)
	})
	// The wave: 500 addresses, one try each.
	burst(client, 500, time.Second, func(i int) (string, string) {
		return base + "/api/login", fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)
	})
	// A pro user over the export rule's 2 a second.
	statuses := map[int]int{}
	for range 5 {
		statuses[get(t, client, base+"/api/export", "X-Forwarded-For", "198.51.100.70", "X-User-Id", "p-7", "X-User-Plan", "pro").status]++
	}
	if statuses[429] == 0 {
		t.Fatalf("the pro user was not refused: %v", statuses)
	}
	time.Sleep(1500 * time.Millisecond) // the windows close on the idle watermark
	stops[t.Name()]()
	agg.stop(t)

	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	firing := map[string]alerts.Alert{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var a alerts.Alert
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if a.Kind == "alert" && a.State == alerts.Firing {
			firing[a.Key] = a
		}
	}
	cs, ok := firing["credential_stuffing/anonymous/anonymous:/api/login"]
	if !ok || cs.Evidence.Counts["clients"] < 100 || len(cs.Identities) == 0 {
		t.Errorf("credential stuffing: %+v (found %v)\n%s", cs, ok, b)
	}
	fp, ok := firing["false_positive/pro/pro:/api/export"]
	if !ok || len(fp.Identities) == 0 || fp.Identities[0] != "user:p-7" {
		t.Errorf("false positive: %+v (found %v)\n%s", fp, ok, b)
	}
	for k, a := range firing {
		if a.Type == alerts.TypeHeavyHitter {
			t.Errorf("each client was under the limit, yet %s", k)
		}
	}
}
