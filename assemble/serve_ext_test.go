package assemble_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/dashboards"
	"github.com/ratewarden/ratewarden/decisions/awstest"
)

const serveYAML = `
edge: {upstream: ORIGIN, listen: "127.0.0.1:0", admin_listen: ""}
decisions: {linger: 10ms}
serve: {window: 1s, lateness: 0s, dashboard: {listen: "127.0.0.1:0"}}
tiers:
  anonymous:
    global: {limit: 3, window: 1m}
`

// startServe runs Serve on cfg with o until ctx is done; it returns
// Serve's addresses once it is ready, and where its error will come.
func startServe(t *testing.T, ctx context.Context, cfg *config.Config, o assemble.ServeOptions) (assemble.ServeAddrs, <-chan error) {
	t.Helper()
	ready := make(chan assemble.ServeAddrs, 1)
	done := make(chan error, 1)
	o.Ready = func(a assemble.ServeAddrs) { ready <- a }
	go func() { done <- assemble.Serve(ctx, cfg, o) }()
	select {
	case a := <-ready:
		return a, done
	case err := <-done:
		t.Fatal(err)
		return assemble.ServeAddrs{}, nil
	}
}

// TestServeRunsAndStops: Serve answers through the edge and the dashboard,
// and when ctx is done it returns with every decision in the partials,
// the open window included: in serve.partials_dir, or in the DynamoDB
// table of --partials dynamodb:TABLE (assemble.Partials, on dynalite).
func TestServeRunsAndStops(t *testing.T) {
	t.Run("dir", func(t *testing.T) {
		dir := t.TempDir()
		testServeRunsAndStops(t, "", &aggregator.PartialsDir{Dir: filepath.Join(dir, "partials")})
	})
	t.Run("table", func(t *testing.T) {
		t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", awstest.Endpoint(t, awstest.DynamoDBEnv))
		t.Setenv("AWS_REGION", "us-east-1")
		t.Setenv("AWS_ACCESS_KEY_ID", "test")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
		spec := fmt.Sprint("dynamodb:serve-partials-", time.Now().UnixNano())
		store, err := assemble.Partials(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		pt := store.(*aggregator.PartialsTable)
		awstest.CreateTable(t, pt.API.(*dynamodb.Client), aggregator.PartialsTableSpec(pt.Table))
		testServeRunsAndStops(t, spec, store)
	})
}

func testServeRunsAndStops(t *testing.T, spec string, store assemble.PartialsStore) {
	dir := t.TempDir()
	cfg := loadConfig(t, serveYAML)
	cfg.Decisions.Dir, cfg.Serve.StateDir, cfg.Serve.PartialsDir = filepath.Join(dir, "log"), filepath.Join(dir, "state"), filepath.Join(dir, "partials")
	o := assemble.ServeOptions{}
	if spec != "" {
		o.Partials = store
	} else {
		cfg.Serve.PartialsDir = store.(*aggregator.PartialsDir).Dir
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, done := startServe(t, ctx, cfg, o)
	codes := map[int]int{}
	for range 5 {
		resp, err := http.Get("http://" + a.Edge + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	if codes[200] != 3 || codes[429] != 2 {
		t.Errorf("statuses %v, want 3×200 and 2×429", codes)
	}
	resp, err := http.Get("http://" + a.Dashboard + "/api/lists")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("dashboard: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ps, problems, err := store.Read(t.Context(), time.Second, time.Time{}, time.Now().Add(time.Hour))
	if err != nil || len(problems) > 0 {
		t.Fatal(err, problems)
	}
	var total uint64
	for _, p := range ps {
		total += p.Counts.Total()
	}
	if total != 5 {
		t.Errorf("the partials hold %d decisions, want 5", total)
	}
}

// TestServeWakesOnAppend: serve's aggregator reads the decision log
// through the edge's own Log, so an append wakes it at once. With the
// look at the files (LogPoll) and the idle tick (Tick) an hour apart, the
// aggregator has no way to find the edge's decisions but that wake: it
// finds all of them, and Serve, shutting down, waits for it to read the
// log to its end and emit the open window into the partials. A reader of
// the files alone would find none within the hour.
func TestServeWakesOnAppend(t *testing.T) {
	dir := t.TempDir()
	cfg := loadConfig(t, serveYAML)
	cfg.Decisions.Dir, cfg.Serve.StateDir, cfg.Serve.PartialsDir = filepath.Join(dir, "log"), filepath.Join(dir, "state"), filepath.Join(dir, "partials")
	cfg.Serve.Dashboard.Listen = ""
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, done := startServe(t, ctx, cfg, assemble.ServeOptions{LogPoll: time.Hour, Tick: time.Hour})
	const requests = 7
	for range requests {
		resp, err := http.Get("http://" + a.Edge + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ps, problems, err := (&aggregator.PartialsDir{Dir: cfg.Serve.PartialsDir}).Read(t.Context(), time.Second, time.Time{}, time.Now().Add(time.Hour))
	if err != nil || len(problems) > 0 {
		t.Fatal(err, problems)
	}
	var total uint64
	for _, p := range ps {
		total += p.Counts.Total()
	}
	if total != requests {
		t.Errorf("the partials hold %d decisions, want %d: the aggregator was not woken by the edge's appends", total, requests)
	}
}

// TestServeAggregatorFails: an aggregator that cannot start (its state
// file is not one) stops serve with its error, and the edge with it.
func TestServeAggregatorFails(t *testing.T) {
	dir := t.TempDir()
	cfg := loadConfig(t, serveYAML)
	cfg.Decisions.Dir, cfg.Serve.PartialsDir = filepath.Join(dir, "log"), filepath.Join(dir, "partials")
	cfg.Serve.StateDir = filepath.Join(dir, "state")
	os.MkdirAll(cfg.Serve.StateDir, 0o755)
	os.WriteFile(filepath.Join(cfg.Serve.StateDir, "log.state"), []byte("not a state"), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := assemble.Serve(ctx, cfg, assemble.ServeOptions{})
	if err == nil || !strings.Contains(err.Error(), "aggregator stopped") || ctx.Err() != nil {
		t.Errorf("Serve = %v, want the aggregator's error before the deadline", err)
	}
}

const serveAlertsYAML = `
edge: {upstream: ORIGIN, listen: "127.0.0.1:0", admin_listen: ""}
decisions: {linger: 10ms}
identity: {trusted_proxies: [127.0.0.1]}
challenge: {enabled: true, factor: 1}
lists: {challenge_file: LIST, refresh: 1s}
serve: {window: 1s, lateness: 0s, dashboard: {listen: "127.0.0.1:0"}}
tiers:
  anonymous:
    global: {limit: 3, window: 1m}
alerts: {}
feedback:
  dry_run: false
  policies:
    - {name: challenge-scrapers, alerts: [heavy_hitter], action: challenge, ttl: 30m}
`

// TestServeAlertsReachTheDashboard: with an alerts and a feedback section,
// Serve runs the detectors and the policy in process: 40 requests of one
// address in a second (over 5 × its limit of 3) raise a heavy_hitter
// alert, which the dashboard's /api/alerts shows with the policy's action;
// the policy's challenge entry shows in /api/lists; the edge challenges
// the address's next request by the list; the alerts' metrics are on the
// dashboard's /metrics; and Serve stops cleanly.
func TestServeAlertsReachTheDashboard(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "challenge.list")
	if err := os.WriteFile(list, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := loadConfig(t, strings.ReplaceAll(serveAlertsYAML, "LIST", list))
	cfg.Decisions.Dir, cfg.Serve.StateDir, cfg.Serve.PartialsDir = filepath.Join(dir, "log"), filepath.Join(dir, "state"), filepath.Join(dir, "partials")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, done := startServe(t, ctx, cfg, assemble.ServeOptions{Options: assemble.Options{Getenv: func(string) string { return "" }}})
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(url, xff string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	const scraper = "203.0.113.7"
	for range 40 {
		get("http://"+a.Edge+"/x", scraper)
	}
	// Until the alert, the entry and the list's challenge show, another
	// client's request each 100 ms moves event time on.
	var alertsAns struct {
		Records []struct {
			Alert  *alerts.Alert
			Action *alerts.Action
		}
	}
	var listsAns struct{ Entries []dashboards.ListEntry }
	var alerted, acted, listed bool
	status := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !(alerted && acted && listed && status == 302); time.Sleep(100 * time.Millisecond) {
		get("http://"+a.Edge+"/x", "198.51.100.1")
		_, b := get("http://"+a.Dashboard+"/api/alerts", "")
		if err := json.Unmarshal(b, &alertsAns); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		for _, r := range alertsAns.Records {
			if al := r.Alert; al != nil && al.Type == alerts.TypeHeavyHitter && al.State == alerts.Firing && slices.Equal(al.Identities, []string{scraper}) {
				alerted = true
			}
			if ac := r.Action; ac != nil && ac.Applied && ac.List == "challenge" && ac.Target == scraper && ac.Policy == "challenge-scrapers" {
				acted = true
			}
		}
		_, b = get("http://"+a.Dashboard+"/api/lists", "")
		if err := json.Unmarshal(b, &listsAns); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		for _, e := range listsAns.Entries {
			if e.List == "challenge" && e.Target == scraper && e.By == "policy:challenge-scrapers" && !e.Expires.IsZero() {
				listed = true
			}
		}
		if listed {
			status, _ = get("http://"+a.Edge+"/y", scraper)
		}
	}
	if !alerted || !acted || !listed || status != 302 {
		t.Fatalf("alert shown %v, action shown %v, entry shown %v, the scraper's status after %d; alerts %+v lists %+v",
			alerted, acted, listed, status, alertsAns, listsAns)
	}
	_, m := get("http://"+a.Dashboard+"/metrics", "")
	if !regexp.MustCompile(`(?m)^ratewarden_alerts_raised(_total)?(\{[^}]*\})? [1-9]`).Match(m) ||
		!regexp.MustCompile(`(?m)^ratewarden_alerts_actions_applied(_total)?(\{[^}]*\})? [1-9]`).Match(m) {
		t.Errorf("the dashboard's /metrics lacks the alerts raised and applied:\n%s", m)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestServeEMFMetrics: with an EMF sink, the EMF documents written show
// on the dashboard's /metrics (ratewarden_aggregator_emf_written), as
// they do on aggregate's, and the file holds at least as many.
func TestServeEMFMetrics(t *testing.T) {
	dir := t.TempDir()
	cfg := loadConfig(t, serveYAML)
	cfg.Decisions.Dir, cfg.Serve.StateDir, cfg.Serve.PartialsDir = filepath.Join(dir, "log"), filepath.Join(dir, "state"), filepath.Join(dir, "partials")
	emfFile := filepath.Join(dir, "emf.jsonl")
	ao := assemble.DefaultAggregatorOptions()
	ao.EMF = "file:" + emfFile
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, done := startServe(t, ctx, cfg, assemble.ServeOptions{Aggregator: &ao})
	get := func(url string) []byte {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return b
	}
	written := regexp.MustCompile(`(?m)^ratewarden_aggregator_emf_written(_total)?(\{[^}]*\})? ([0-9]+)`)
	var n int
	var m []byte
	// A request each 100 ms moves event time on, so windows close.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && n == 0; time.Sleep(100 * time.Millisecond) {
		get("http://" + a.Edge + "/x")
		m = get("http://" + a.Dashboard + "/metrics")
		if g := written.FindSubmatch(m); g != nil {
			n, _ = strconv.Atoi(string(g[3]))
		}
	}
	if n == 0 {
		t.Fatalf("the dashboard's /metrics shows no EMF document written:\n%s", m)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(emfFile)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(b), "\n"); lines < n {
		t.Errorf("/metrics counted %d EMF documents written, the file holds %d", n, lines)
	}
}

// actionsSeen is an AlertWatcher that passes on the actions applied.
type actionsSeen chan alerts.Action

func (actionsSeen) Alert(context.Context, alerts.Alert) error { return nil }
func (c actionsSeen) Action(_ context.Context, a alerts.Action) error {
	if a.Applied {
		select {
		case c <- a:
		default:
		}
	}
	return nil
}

// TestServeEdgeReadsPolicyListsAtOnce: serve's edge reads a list its
// feedback policy wrote as soon as the policy wrote it, not at its next
// lists.refresh (an hour here): once the policy has put the scraper on the
// challenge list, its next request is challenged by the list (302), not
// blocked by its limit (429, factor 1), and the change is a feedback event
// in the decision log.
func TestServeEdgeReadsPolicyListsAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, a, done, acted := servePolicy(t, ctx, strings.NewReplacer("refresh: 1s", "refresh: 1h"))
	const scraper = "203.0.113.7"
	get := func() int { return statusVia(t, a.Edge, scraper) }
	for range 40 {
		get()
	}
	if act := appliedAction(t, acted, done); act.List != "challenge" || act.Target != scraper {
		t.Fatalf("action %+v", act)
	}
	if s := get(); s != http.StatusFound {
		t.Errorf("the scraper's request after the policy listed it: %d, want 302 from the challenge list", s)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ps, _, err := (&aggregator.PartialsDir{Dir: cfg.Serve.PartialsDir}).Read(t.Context(), time.Second, time.Time{}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var adds uint64
	for _, p := range ps {
		adds += p.Counts.Feedback["challenge/add"]
	}
	if adds != 1 {
		t.Errorf("%d challenge/add feedback events aggregated, want 1", adds)
	}
}

// TestServeListsRotatingIPv6Prefix: a scraper that takes a new address of
// its /64 for each of its 400 requests, after 100 IPv4 clients of 3
// requests each filled the top-K lists (serve.top_k 100), is one client to
// the aggregator as it is to the edge (identity.ipv6_prefix, 64): its
// heavy_hitter alert fires, the policy puts 2001:db8:1:2::/64 on the
// challenge list, and the edge challenges an address of that /64 it never
// saw (302 by the list, where its shared counter alone refuses it with
// 429), and not an address of the next /64. Before, each address was a
// client of one request that never entered the full lists: no alert, no
// entry.
func TestServeListsRotatingIPv6Prefix(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, a, done, acted := servePolicy(t, ctx, strings.NewReplacer("window: 1s", "window: 10s", "limit: 3,", "limit: 30,"))
	get := func(client string) int { return statusVia(t, a.Edge, client) }
	for i := range 300 {
		get(fmt.Sprintf("198.51.100.%d", i%100))
	}
	refused := 0
	for i := range 400 {
		if get(fmt.Sprintf("2001:db8:1:2:%x:%x::1", i>>4, i)) == http.StatusTooManyRequests {
			refused++
		}
	}
	if refused < 300 {
		t.Fatalf("the edge refused %d of the /64's 400 requests: want all but its limit of 30", refused)
	}
	if act := appliedAction(t, acted, done); act.List != "challenge" || act.Target != "2001:db8:1:2::/64" {
		t.Fatalf("action %+v, want the /64 on the challenge list", act)
	}
	if s := get("2001:db8:1:2:ffff:ffff:ffff:fffe"); s != http.StatusFound {
		t.Errorf("a new address of the listed /64: %d, want 302 from the challenge list", s)
	}
	if s := get("2001:db8:1:3::1"); s != http.StatusOK {
		t.Errorf("an address of the next /64: %d, want 200", s)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// servePolicy starts Serve, without its dashboard, on serveAlertsYAML
// edited by edit, its policy writing to an empty challenge list file in a
// new directory that holds the log, state and partials too; it returns
// the configuration, Serve's addresses and end, and the actions applied.
func servePolicy(t *testing.T, ctx context.Context, edit *strings.Replacer) (*config.Config, assemble.ServeAddrs, <-chan error, actionsSeen) {
	t.Helper()
	dir := t.TempDir()
	list := filepath.Join(dir, "challenge.list")
	if err := os.WriteFile(list, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := loadConfig(t, edit.Replace(strings.ReplaceAll(serveAlertsYAML, "LIST", list)))
	cfg.Decisions.Dir, cfg.Serve.StateDir, cfg.Serve.PartialsDir = filepath.Join(dir, "log"), filepath.Join(dir, "state"), filepath.Join(dir, "partials")
	cfg.Serve.Dashboard.Listen = ""
	acted := make(actionsSeen, 1)
	a, done := startServe(t, ctx, cfg, assemble.ServeOptions{Alerts: acted, Options: assemble.Options{Getenv: func(string) string { return "" }}})
	return cfg, a, done, acted
}

// appliedAction returns the first action the policy applied. The window
// closes on the aggregator's idle tick; a minute only guards against a
// hang.
func appliedAction(t *testing.T, acted actionsSeen, done <-chan error) alerts.Action {
	t.Helper()
	select {
	case act := <-acted:
		return act
	case err := <-done:
		t.Fatalf("serve stopped: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("no action applied in a minute")
	}
	return alerts.Action{}
}

// statusVia returns the status of a request to the edge at addr for
// client, as a trusted proxy forwards it (X-Forwarded-For).
func statusVia(t *testing.T, addr, client string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/x", nil)
	req.Header.Set("X-Forwarded-For", client)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServeFailedStartLeavesNothing: a serve that cannot start (its edge's
// or its admin's port taken) leaves none of the directories and files it
// made for the decision log, the state, the partials, the alerts and the
// EMF documents, the missing parents of a nested path included, and
// removes nothing that was there before it.
func TestServeFailedStartLeavesNothing(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	f := func(t *testing.T, edit func(*config.Config)) {
		dir := t.TempDir()
		kept := filepath.Join(dir, "kept")
		os.MkdirAll(kept, 0o755)
		os.WriteFile(filepath.Join(kept, "old"), []byte("mine"), 0o644)
		cfg := loadConfig(t, serveYAML+"alerts: {}\n")
		cfg.Decisions.Dir = filepath.Join(dir, "new", "nested", "log")
		cfg.Serve.StateDir = filepath.Join(dir, "state")
		cfg.Serve.PartialsDir = filepath.Join(kept, "partials")
		cfg.Alerts.Sinks.File = filepath.Join(dir, "alerts", "alerts.jsonl")
		edit(cfg)
		ao := assemble.DefaultAggregatorOptions()
		ao.EMF = "file:" + filepath.Join(dir, "emf", "out.jsonl")
		err := assemble.Serve(t.Context(), cfg, assemble.ServeOptions{Aggregator: &ao})
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("Serve = %v, want the port in use", err)
		}
		var left []string
		filepath.WalkDir(dir, func(path string, _ fs.DirEntry, _ error) error {
			rel, _ := filepath.Rel(dir, path)
			left = append(left, filepath.ToSlash(rel))
			return nil
		})
		if want := []string{".", "kept", "kept/old"}; !slices.Equal(left, want) {
			t.Errorf("after a failed start the directory holds %q, want %q", left, want)
		}
	}
	t.Run("edge listen", func(t *testing.T) {
		f(t, func(cfg *config.Config) { cfg.Edge.Listen = taken.Addr().String() })
	})
	t.Run("admin listen", func(t *testing.T) {
		f(t, func(cfg *config.Config) { cfg.Edge.AdminListen = taken.Addr().String() })
	})
}
