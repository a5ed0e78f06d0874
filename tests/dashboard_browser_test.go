package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/dashboards"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
)

// browser starts Debian's chromium headless, on loopback only, and returns
// a chromedp context for it. Outside tests/run a missing chromium skips the
// test; under CI it fails.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := file(t, "/usr/bin/chromium", "tests/run")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 2000),
		// Nothing leaves the machine: no proxy, no component updates,
		// every host name but loopback unresolvable.
		chromedp.Flag("no-proxy-server", true),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1"),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-features", "MediaRouter,OptimizationHints,Translate"),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // chromium refuses to run its sandbox as root
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// Start the browser now, so a failure to start is reported as such.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// pageState is what the page reports of its last render (window.__rw).
type pageState struct {
	Renders      int     `json:"renders"`
	RenderMS     float64 `json:"renderMs"`
	PayloadBytes int     `json:"payloadBytes"`
	SeriesBytes  int     `json:"seriesBytes"`
	Points       int     `json:"points"`
	Error        string  `json:"error"`
}

// renderedPage is what the test reads back from the page.
type renderedPage struct {
	State     pageState
	Tiles     map[string]float64 // by tile id: total-requests, total-allow, ...
	Polylines []int              // the points of every chart line
	Charts    int
	Alerts    []string // the alert table's rows, as text
	Images    int      // <img> elements: none are expected
}

// openDashboard loads url in ctx, waits for a render with data and reads
// the page; the screenshot is written to tests/artifacts/name.png.
func openDashboard(t *testing.T, ctx context.Context, url, name string) renderedPage {
	t.Helper()
	var p renderedPage
	tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("load the dashboard: %v", err)
	}
	if _, err := chromedp.Run(tctx, chromedp.Poll[bool](`window.__rw && (window.__rw.renders > 0 || window.__rw.error !== "")`, chromedp.WithPollingTimeout(45*time.Second))); err != nil {
		t.Fatalf("wait for a render: %v", err)
	}
	eval := func(expr string, dst any) {
		t.Helper()
		raw, err := chromedp.Run(tctx, chromedp.Evaluate[json.RawMessage]("JSON.stringify("+expr+")"))
		if err == nil {
			var s string
			if err = json.Unmarshal(raw, &s); err == nil {
				err = json.Unmarshal([]byte(s), dst)
			}
		}
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
	}
	eval(`window.__rw`, &p.State)
	eval(`Object.fromEntries([...document.querySelectorAll('.tile')].map(e => [e.id, Number(e.dataset.value)]))`, &p.Tiles)
	eval(`[...document.querySelectorAll('.chart svg polyline')].map(l => l.points.numberOfItems)`, &p.Polylines)
	eval(`document.querySelectorAll('.chart svg').length`, &p.Charts)
	eval(`[...document.querySelectorAll('#alerts tbody tr')].map(r => r.textContent)`, &p.Alerts)
	eval(`document.querySelectorAll('img').length`, &p.Images)
	shot, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if p.State.Error != "" {
		t.Fatalf("the page failed: %s", p.State.Error)
	}
	dir, err := filepath.Abs("artifacts")
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name+".png")
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", out, len(shot))
	return p
}

var dashboardRE = regexp.MustCompile(`msg="dashboard listening" addr=(\S+)`)

// startServe runs `ratewarden serve` in dir with args, as startEdge runs
// the edge (stopped with SIGINT at cleanup, and it must exit cleanly), and
// returns the edge's and the dashboard's base URLs and a stop that
// returns the process's log.
func startServe(t *testing.T, bin, dir string, args ...string) (edgeURL, dashURL string, stop func() string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--dashboard-listen", "127.0.0.1:0"}, args...)...)
	cmd.Dir = dir
	edgeURL, _ = startEdgeCommand(t, cmd)
	logs := edgeLogs[t.Name()]
	waitFor(t, "the dashboard to listen", func(context.Context) error {
		if m := dashboardRE.FindStringSubmatch(logs()); m != nil {
			dashURL = "http://" + m[1]
			return nil
		}
		return fmt.Errorf("no dashboard yet")
	})
	return edgeURL, dashURL, func() string { stops[t.Name()](); return logs() }
}

// serveConfig is the seed configuration with one-second windows and a
// short linger, so that the test sees its decisions within seconds.
const serveConfig = `
challenge: {enabled: true, factor: 2}
decisions: {linger: 20ms}
serve: {window: 1s, lateness: 0s}
tiers:
  anonymous:
    global: {limit: 60, window: 1m}
    paths:
      /api/reports: {limit: 5, window: 1m}
  authenticated:
    global: {limit: 300, window: 1m}
`

// TestServeDashboardInBrowser runs `ratewarden serve` (edge, decision log,
// aggregator and dashboard in one process), sends known traffic through
// the edge, and opens the dashboard in headless Chromium: the page shows
// the totals of the decision log and of the aggregator's partials, and
// draws its charts with data. After SIGINT every decision is in the
// partials (the aggregator flushed its open windows).
func TestServeDashboardInBrowser(t *testing.T) {
	bin := buildBinary(t)
	ctx := browser(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rw.yaml"), []byte(serveConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	edgeURL, dashURL, stop := startServe(t, bin, dir, "--config", "rw.yaml", "--upstream", "builtin", "--emf", "file:emf.jsonl")

	statuses := map[int]int{}
	for i := range 32 {
		path := "/api/search"
		if i < 12 {
			path = "/api/reports"
		}
		resp, err := noRedirect.Get(edgeURL + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses[resp.StatusCode]++
	}
	if statuses[200] != 25 || statuses[302] != 5 || statuses[429] != 2 {
		t.Fatalf("statuses %v, want 25×200, 5×302, 2×429", statuses)
	}
	// The aggregator is live: the dashboard's API has every decision once
	// their windows close.
	waitFor(t, "the dashboard to count 32 decisions", func(ctx context.Context) error {
		var s struct{ Requests uint64 }
		if err := getJSON(ctx, dashURL+"/api/summary", &s); err != nil {
			return err
		}
		if s.Requests != 32 {
			return fmt.Errorf("%d requests", s.Requests)
		}
		return nil
	})
	page := openDashboard(t, ctx, dashURL+"/", "serve-dashboard")

	// What the aggregator wrote, and what the log holds.
	var fromPartials [decisions.NumOutcomes]uint64
	for _, p := range readPartials(t, filepath.Join(dir, "ratewarden-partials"), time.Second) {
		for o, n := range p.Counts.ByOutcome() {
			fromPartials[o] += n
		}
	}
	fromLog := logOutcomes(t, filepath.Join(dir, "decision-log"))
	for _, o := range []decisions.Outcome{decisions.Allow, decisions.Challenge, decisions.Block} {
		shown := page.Tiles["total-"+o.String()]
		if shown != float64(fromPartials[o]) || shown != float64(fromLog[o]) {
			t.Errorf("%s: the page shows %v, the partials hold %d, the log %d", o, shown, fromPartials[o], fromLog[o])
		}
	}
	if page.Tiles["total-requests"] != 32 || page.Tiles["total-allow"] != 25 {
		t.Errorf("tiles %v", page.Tiles)
	}
	// Charts: all tiers, the tier, its two rules, latency and drops.
	if page.Charts < 5 || len(page.Polylines) < 4*4 {
		t.Errorf("%d charts, %d lines", page.Charts, len(page.Polylines))
	}
	for i, n := range page.Polylines {
		if n == 0 {
			t.Errorf("line %d has no points", i)
		}
	}

	// Decisions in a window still open when serve stops: the shutdown
	// writes them to the log and the aggregator emits their window.
	for range 8 {
		resp, err := noRedirect.Get(edgeURL + "/api/search")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	logs := stop()
	var total uint64
	for _, p := range readPartials(t, filepath.Join(dir, "ratewarden-partials"), time.Second) {
		total += p.Counts.Total()
	}
	fromLog = logOutcomes(t, filepath.Join(dir, "decision-log"))
	if total != 40 || fromLog[decisions.Allow] != 33 {
		t.Errorf("after SIGINT the partials hold %d decisions, the log %d allowed; want 40 and 33:\n%s", total, fromLog[decisions.Allow], logs)
	}
	// The EMF documents count the same: the service-wide Requests of
	// every window add up to the decisions.
	raw, err := os.ReadFile(filepath.Join(dir, "emf.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var emfRequests float64
	for line := range strings.Lines(string(raw)) {
		var doc struct {
			AWS struct {
				CloudWatchMetrics []struct{ Dimensions [][]string }
			} `json:"_aws"`
			Requests float64
		}
		if err := json.Unmarshal([]byte(line), &doc); err != nil {
			t.Fatalf("EMF line %q: %v", line, err)
		}
		if m := doc.AWS.CloudWatchMetrics; len(m) == 1 && (len(m[0].Dimensions) == 0 || len(m[0].Dimensions) == 1 && len(m[0].Dimensions[0]) == 0) {
			emfRequests += doc.Requests
		}
	}
	if emfRequests != 40 {
		t.Errorf("the EMF documents count %v requests, the page and the partials 40", emfRequests)
	}
	if !strings.Contains(logs, `msg="aggregator stopped" events=40`) {
		t.Errorf("the aggregator did not report all 40 events at shutdown:\n%s", logs)
	}
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// logOutcomes counts the decisions of the log in dir by outcome.
func logOutcomes(t *testing.T, dir string) [decisions.NumOutcomes]uint64 {
	t.Helper()
	rd, err := decisionlog.Open(dir, decisionlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var out [decisions.NumOutcomes]uint64
	for {
		d, _, err := rd.Next(context.Background(), false)
		if decisionlog.IsEnd(err) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if d.Kind == decisions.KindDecision {
			out[d.Outcome]++
		}
	}
}

// dayIndex fills an index with a day of one-second windows: every second
// 3 tiers × 4 rules of traffic, a scraper refused at the top of each
// minute. It returns the number of decisions by outcome.
func dayIndex(t testing.TB, start time.Time) (*dashboards.Index, map[string]uint64) {
	x := dashboards.NewIndex(time.Second, 24*time.Hour)
	want := map[string]uint64{}
	tiers := []string{"anonymous", "free", "pro"}
	rules := []string{"/api/reports", "/api/search", "/api/export", "global"}
	scraper := netip.MustParseAddr("203.0.113.7")
	for s := range 86400 {
		ws := start.Add(time.Duration(s) * time.Second)
		p := aggregator.NewPartial(ws, time.Second, 10)
		for i := range 12 {
			d := decisions.Decision{Kind: decisions.KindDecision, Time: ws.Add(time.Duration(i) * time.Millisecond), Node: "n1",
				ClientIP: netip.AddrFrom4([4]byte{10, 0, byte(s % 200), byte(i)}), Tier: tiers[i%3], Rule: tiers[i%3] + ":" + rules[i%4],
				Outcome: decisions.Allow, StoreLatency: time.Duration(500+s%1000) * time.Microsecond}
			if s%60 == 0 && i%4 == 0 {
				d.ClientIP, d.Outcome = scraper, decisions.Block
			} else if s%60 == 1 && i%4 == 0 {
				d.ClientIP, d.Outcome = scraper, decisions.Challenge
			}
			p.Update(&d)
			want[d.Outcome.String()]++
		}
		if err := x.Write(context.Background(), "log", aggregator.Output{Partial: p, From: uint64(s * 12), To: uint64(s*12 + 11)}); err != nil {
			t.Fatal(err)
		}
	}
	return x, want
}

// TestDashboardDayOfSeconds opens the dashboard on a day of one-second
// windows (86 400): the server downsamples to the chart's width, so the
// page stays responsive; it reports the payload and the render time the
// browser measured (BENCHMARKS.md). An alert whose summary holds markup is
// shown as text, and a bidirectional control in it (U+202E) as a space.
func TestDashboardDayOfSeconds(t *testing.T) {
	ctx := browser(t)
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	x, want := dayIndex(t, start)
	alertsFile := filepath.Join(t.TempDir(), "alerts.jsonl")
	os.WriteFile(alertsFile, []byte(`{"kind":"alert","time":"2026-03-01T12:00:10Z","type":"heavy_hitter","severity":"warning","state":"firing","key":"k","summary":"<img src=x onerror=\"window.__pwned=1\">203.0.113.7 user:\u202enimda\u2028forged line","window_start":"2026-03-01T12:00:00Z","window_end":"2026-03-01T12:00:10Z","evidence":{"observed":1,"baseline":0}}`+"\n"), 0o644)
	srv := httptest.NewServer(dashboards.Live(dashboards.LiveOptions{Index: x, AlertsFile: alertsFile,
		Now: func() time.Time { return start.Add(24 * time.Hour) }}))
	t.Cleanup(srv.Close)

	// A long poll interval: one render is measured.
	page := openDashboard(t, ctx, srv.URL+"/?poll=600000", "dashboard-day-of-seconds")
	var total uint64
	for o, n := range want {
		total += n
		if page.Tiles["total-"+o] != float64(n) {
			t.Errorf("%s: the page shows %v, want %d", o, page.Tiles["total-"+o], n)
		}
	}
	if page.Tiles["total-requests"] != float64(total) {
		t.Errorf("requests: the page shows %v, want %d", page.Tiles["total-requests"], total)
	}
	// 1 + 3 tiers + 12 rules charts of 4 lines, latency (2) and drops (1).
	if page.Charts != 1+3+12+2 || len(page.Polylines) != 16*4+2+1 {
		t.Errorf("%d charts, %d lines", page.Charts, len(page.Polylines))
	}
	for i, n := range page.Polylines {
		if n < 60 || n > 600 {
			t.Errorf("line %d: %d points, want the chart's width (60 to 600), not a point per window", i, n)
		}
	}
	if len(page.Alerts) != 1 || !strings.Contains(page.Alerts[0], `<img src=x onerror="window.__pwned=1">203.0.113.7`) || page.Images != 0 {
		t.Errorf("alert rows %q, %d images: the summary must show as text", page.Alerts, page.Images)
	}
	if len(page.Alerts) == 1 && (!strings.Contains(page.Alerts[0], "user: nimda forged line") || strings.ContainsAny(page.Alerts[0], "\u202e\u2028")) {
		t.Errorf("alert row %q: U+202E and U+2028 must show as spaces", page.Alerts[0])
	}
	if pwned, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__pwned === 1`)); pwned {
		t.Error("markup in an alert ran")
	}
	t.Logf("a day of 1 s windows (86400): series payload %d bytes, all four API answers %d bytes, %d points drawn, render %.1f ms",
		page.State.SeriesBytes, page.State.PayloadBytes, page.State.Points, page.State.RenderMS)
}

// BenchmarkDashboardDaySeries measures the server side of the day-long
// chart: summing a day of one-second windows and downsampling it to 600
// buckets.
func BenchmarkDashboardDaySeries(b *testing.B) {
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	x, _ := dayIndex(b, start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s := x.Series(start, start.Add(24*time.Hour), 600)
		t := x.Totals(start, start.Add(24*time.Hour))
		if s.Windows != 86400 || t.Windows != 86400 {
			b.Fatal(s.Windows, t.Windows)
		}
	}
	// What the index of a day holds, live on the heap.
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB-index")
	runtime.KeepAlive(x)
}

// TestDashboardTokenInBrowser: with a token, the page asks for it, shows
// nothing before, and the data once it is given.
func TestDashboardTokenInBrowser(t *testing.T) {
	ctx := browser(t)
	start := time.Now().UTC().Truncate(time.Second).Add(-time.Minute)
	x := dashboards.NewIndex(time.Second, time.Hour)
	p := aggregator.NewPartial(start, time.Second, 10)
	for i := range 7 {
		d := decisions.Decision{Kind: decisions.KindDecision, Time: start, ClientIP: netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}),
			Tier: "anonymous", Rule: "anonymous:global", Outcome: decisions.Allow}
		p.Update(&d)
	}
	x.Write(context.Background(), "log", aggregator.Output{Partial: p, To: 6})
	srv := httptest.NewServer(dashboards.Live(dashboards.LiveOptions{Index: x, Token: "correct-token"}))
	t.Cleanup(srv.Close)

	tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(tctx, chromedp.Poll[bool](`!document.getElementById('login').hidden`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("the page did not ask for the token: %v", err)
	}
	tiles, _ := chromedp.Run(tctx, chromedp.Evaluate[int](`document.querySelectorAll('.tile').length`))
	if tiles != 0 {
		t.Errorf("%d tiles shown before the token", tiles)
	}
	for _, tok := range []string{"wrong", "correct-token"} {
		js := `document.getElementById('token').value = ` + strconv.Quote(tok) + `; document.getElementById('login').requestSubmit(); true`
		if _, err := chromedp.Run(tctx, chromedp.Evaluate[bool](js)); err != nil {
			t.Fatal(err)
		}
		if tok == "wrong" {
			if _, err := chromedp.Run(tctx, chromedp.Poll[bool](`!document.getElementById('login').hidden`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
				t.Fatalf("a wrong token was not asked again: %v", err)
			}
		}
	}
	got, err := chromedp.Run(tctx, chromedp.Poll[float64](`window.__rw.renders > 0 && Number(document.getElementById('total-requests').dataset.value)`, chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil || got != 7 {
		t.Errorf("after the token: requests %v, %v; want 7", got, err)
	}
}
