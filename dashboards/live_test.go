package dashboards

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// collect is an aggregator.Sink keeping every output.
type collect struct {
	parts []string
	outs  []aggregator.Output
}

func (c *collect) Write(_ context.Context, partition string, o aggregator.Output) error {
	c.parts, c.outs = append(c.parts, partition), append(c.outs, o)
	return nil
}
func (c *collect) Flush(context.Context) error { return nil }

// decision is one JSON line of a decision at t0+at.
func decision(at time.Duration, ip, tier, rule, outcome string, storeUS int) string {
	return fmt.Sprintf(`{"v":1,"kind":"decision","time":%q,"node":"n1","client_ip":%q,"tier":%q,"rule":%q,"outcome":%q,"store_latency_us":%d}`,
		t0.Add(at).Format(time.RFC3339Nano), ip, tier, rule, outcome, storeUS)
}

// rollup runs lines through the aggregator with windows of size into
// sinks.
func rollup(t *testing.T, lines []string, size time.Duration, sinks ...aggregator.Sink) {
	t.Helper()
	_, err := aggregator.RunLines(context.Background(), strings.NewReader(strings.Join(lines, "\n")+"\n"),
		aggregator.Options{Window: size, TopK: 10}, sinks)
	if err != nil {
		t.Fatal(err)
	}
}

// sample is a known traffic: per second s in [0, 30): the scraper
// 10.0.0.9 gets 3 allowed then blocked and challenged, two users pass.
func sample() (lines []string, want map[string]uint64) {
	want = map[string]uint64{}
	add := func(at time.Duration, ip, tier, rule, outcome string) {
		lines = append(lines, decision(at, ip, tier, rule, outcome, 1500))
		want[outcome]++
	}
	for s := range 30 {
		at := time.Duration(s) * time.Second
		add(at, "10.0.0.9", "anonymous", "anonymous:/api/reports", []string{"allow", "challenge", "block"}[s%3])
		add(at+time.Millisecond, "10.0.0.9", "anonymous", "anonymous:/api/reports", "block")
		add(at+2*time.Millisecond, "192.0.2.1", "pro", "pro:global", "allow")
		if s%10 == 0 {
			add(at+3*time.Millisecond, "192.0.2.2", "pro", "", "allow_listed")
		}
	}
	return lines, want
}

func TestIndexTotalsAndSeries(t *testing.T) {
	lines, want := sample()
	var c collect
	rollup(t, lines, time.Second, &c)
	x := NewIndex(time.Second, time.Hour)
	for i, o := range c.outs {
		x.Write(context.Background(), c.parts[i], o)
	}
	// Delivered again after a crash: replaces, does not add.
	for i, o := range c.outs {
		x.Write(context.Background(), c.parts[i], o)
	}
	tot := x.Totals(t0, t0.Add(time.Minute))
	for o, n := range want {
		if tot.Outcomes[o] != n {
			t.Errorf("outcome %s: %d, want %d", o, tot.Outcomes[o], n)
		}
	}
	if tot.Windows != 30 || tot.Requests != uint64(len(lines)) {
		t.Errorf("windows %d requests %d, want 30 and %d", tot.Windows, tot.Requests, len(lines))
	}
	if len(tot.TopRefusals) == 0 || tot.TopRefusals[0].Client != "10.0.0.9" || tot.TopRefusals[0].Count != want["block"]+want["challenge"] {
		t.Errorf("top refusals %+v", tot.TopRefusals)
	}
	if len(tot.Rules) != 2 || tot.Rules[0].Rule != "anonymous:/api/reports" || tot.Rules[0].Total != 60 {
		t.Errorf("rules %+v", tot.Rules)
	}
	if tot.Latency.Count != uint64(len(lines)) || tot.Latency.P50 < 1.4 || tot.Latency.P50 > 1.6 {
		t.Errorf("latency %+v, want %d calls at 1.5 ms", tot.Latency, len(lines))
	}
	// A range: seconds 10 to 19.
	part := x.Totals(t0.Add(10*time.Second), t0.Add(20*time.Second))
	if part.Windows != 10 || part.Requests != 10*3+1 {
		t.Errorf("seconds 10-19: %d windows, %d requests", part.Windows, part.Requests)
	}

	// Downsampled to 7 points of 5 s: each bucket sums its windows and the
	// buckets sum to the totals.
	s := x.Series(t0, t0.Add(30*time.Second), 7)
	if s.StepMS != 5000 || len(s.Times) != 6 || s.Windows != 30 {
		t.Fatalf("step %d ms, %d buckets, %d windows", s.StepMS, len(s.Times), s.Windows)
	}
	var allow, block, chal, other uint64
	for i := range s.Times {
		allow, block, chal, other = allow+s.Total.Allow[i], block+s.Total.Block[i], chal+s.Total.Challenge[i], other+s.Total.Other[i]
	}
	if allow != want["allow"] || block != want["block"] || chal != want["challenge"] || other != want["allow_listed"] {
		t.Errorf("series sums allow %d block %d challenge %d other %d, want %v", allow, block, chal, other, want)
	}
	if len(s.Tiers) != 2 || s.Tiers[0].Tier != "anonymous" || len(s.Rules) != 2 {
		t.Errorf("tiers %d rules %d", len(s.Tiers), len(s.Rules))
	}
	if s.Rules[0].Block[0] != 1+5 { // seconds 0-4: the first request of second 2, the second of each
		t.Errorf("first bucket of the busiest rule: %d blocked, want 6", s.Rules[0].Block[0])
	}
}

// TestIndexSeriesAnyRange: a range of centuries, or wider than a Duration
// holds, is cut into at most points buckets (one more for the first,
// aligned to the step) that hold every window, without a panic.
func TestIndexSeriesAnyRange(t *testing.T) {
	lines, want := sample()
	x := NewIndex(time.Second, time.Hour)
	rollup(t, lines, time.Second, x)
	for _, r := range []struct{ from, to time.Time }{
		{minTime, maxTime},
		{minTime, time.Date(2199, 12, 31, 0, 0, 0, 0, time.UTC)},
		{time.Time{}, t0.Add(time.Hour)},
		{time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64)},
		{time.Time{}, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		for _, points := range []int{1, 2, 3, 300, 2000} {
			s := x.Series(r.from, r.to, points)
			var total uint64
			for i := range s.Times {
				total += s.Total.Allow[i] + s.Total.Challenge[i] + s.Total.Block[i] + s.Total.Other[i]
			}
			if s.Windows != 30 || total != uint64(len(lines)) || len(s.Times) > points+1 || len(s.Times) == 0 || s.StepMS <= 0 {
				t.Errorf("%s to %s in %d points: %d windows, %d decisions, %d buckets of %d ms; want 30 windows, %d decisions (%v)",
					r.from.Format(time.RFC3339), r.to.Format(time.RFC3339), points, s.Windows, total, len(s.Times), s.StepMS, len(lines), want)
			}
		}
	}
}

// TestIndexCorrectionAndEviction: a correction of a window adds to it; the
// windows older than retain before the newest are dropped.
func TestIndexCorrectionAndEviction(t *testing.T) {
	var c collect
	rollup(t, []string{decision(0, "10.0.0.1", "a", "r", "allow", 10)}, time.Second, &c)
	rollup(t, []string{decision(5*time.Millisecond, "10.0.0.1", "a", "r", "block", 10)}, time.Second, &c)
	x := NewIndex(time.Second, 10*time.Second)
	x.Write(context.Background(), "log", c.outs[0])
	c.outs[1].Correction, c.outs[1].From, c.outs[1].To = true, 7, 7
	x.Write(context.Background(), "log", c.outs[1])
	if got := x.Totals(t0, t0.Add(time.Second)).Outcomes; got["allow"] != 1 || got["block"] != 1 {
		t.Errorf("after the correction: %v", got)
	}
	var later collect
	rollup(t, []string{decision(11*time.Second, "10.0.0.1", "a", "r", "allow", 10)}, time.Second, &later)
	x.Write(context.Background(), "log", later.outs[0])
	if oldest, _, _ := x.Bounds(); !oldest.Equal(t0.Add(11 * time.Second)) {
		t.Errorf("oldest window %v, want the first evicted", oldest)
	}
}

// TestIndexLoad: the index loads the stored partials, and an output the
// aggregator delivers again on restart does not count twice.
func TestIndexLoad(t *testing.T) {
	lines, want := sample()
	dir := &aggregator.PartialsDir{Dir: t.TempDir()}
	var c collect
	rollup(t, lines, 10*time.Second, dir, &c)
	x := NewIndex(10*time.Second, time.Hour)
	problems, err := x.Load(t.Context(), dir, t0.Add(-time.Hour), t0.Add(time.Hour))
	if err != nil || len(problems) > 0 {
		t.Fatal(err, problems)
	}
	x.Write(context.Background(), c.parts[0], c.outs[0])
	if got := x.Totals(t0, t0.Add(time.Hour)).Outcomes; got["block"] != want["block"] || got["allow"] != want["allow"] {
		t.Errorf("loaded %v, want %v", got, want)
	}
}

func newLive(t *testing.T, o LiveOptions) (*httptest.Server, *Index) {
	t.Helper()
	lines, _ := sample()
	x := NewIndex(time.Second, time.Hour)
	rollup(t, lines, time.Second, x)
	o.Index = x
	o.Now = func() time.Time { return t0.Add(time.Minute) }
	s := httptest.NewServer(Live(o))
	t.Cleanup(s.Close)
	return s, x
}

func do(t *testing.T, method, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp, b.String()
}

// TestLiveToken: with a token, the API needs it (a wrong one, a prefix, a
// longer one, another scheme and none are refused) while the page's
// assets, which hold no data, do not.
func TestLiveToken(t *testing.T) {
	s, _ := newLive(t, LiveOptions{Token: "s3cret-token", Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})})
	for _, path := range []string{"/api/summary", "/api/series", "/api/alerts", "/api/lists", "/metrics"} {
		for _, c := range []struct {
			auth string
			code int
		}{
			{"", 401}, {"Bearer wrong", 401}, {"Bearer s3cret", 401}, {"Bearer s3cret-token2", 401},
			{"Basic s3cret-token", 401}, {"bearer s3cret-token", 401}, {"Bearer  s3cret-token", 401},
			{"Bearer s3cret-token", 200},
		} {
			resp, body := do(t, "GET", s.URL+path, "Authorization", c.auth)
			if resp.StatusCode != c.code {
				t.Errorf("%s with Authorization %q: %d, want %d: %s", path, c.auth, resp.StatusCode, c.code, body)
			}
		}
	}
	for _, path := range []string{"/", "/assets/app.js", "/assets/style.css"} {
		if resp, _ := do(t, "GET", s.URL+path); resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("%s: %d, CSP %q", path, resp.StatusCode, resp.Header.Get("Content-Security-Policy"))
		}
	}
	// With a token, any host name may be used (behind a proxy, say).
	if resp, _ := do(t, "GET", s.URL+"/api/lists", "Authorization", "Bearer s3cret-token", "Host", "dash.example.com"); resp.StatusCode != 200 {
		t.Errorf("host dash.example.com with the token: %d", resp.StatusCode)
	}
}

// TestLiveRebinding: without a token only loopback host names are
// answered, so a page on another site cannot read the API by pointing its
// own name at 127.0.0.1.
func TestLiveRebinding(t *testing.T) {
	s, _ := newLive(t, LiveOptions{})
	for host, code := range map[string]int{
		"attacker.example": 421, "attacker.example:80": 421, "127.0.0.1.nip.io": 421,
		"localhost": 200, "127.0.0.1:9092": 200, "[::1]:9092": 200, "LOCALHOST:1": 200,
	} {
		if resp, body := do(t, "GET", s.URL+"/api/summary", "Host", host); resp.StatusCode != code {
			t.Errorf("Host %q: %d, want %d: %s", host, resp.StatusCode, code, body)
		}
	}
}

// TestLiveAPI: the answers carry the aggregator's counts, bad parameters
// get a 400 naming them, and the alerts and lists have empty states.
func TestLiveAPI(t *testing.T) {
	lines, want := sample()
	alertsFile := filepath.Join(t.TempDir(), "alerts.jsonl")
	os.WriteFile(alertsFile, []byte(`{"kind":"alert","time":"2026-03-01T12:00:10Z","type":"heavy_hitter","severity":"warning","state":"firing","key":"heavy_hitter/anonymous/ip:10.0.0.9","summary":"10.0.0.9 <script>alert(1)</script>","window_start":"2026-03-01T12:00:00Z","window_end":"2026-03-01T12:00:10Z","evidence":{"observed":40,"baseline":2}}
not json
{"kind":"action","time":"2026-03-01T12:00:10Z","policy":"scrapers","alert":"heavy_hitter/anonymous/ip:10.0.0.9","list":"challenge","target":"10.0.0.9","ttl":"1h","applied":true}
{"kind":"other"}
`), 0o644)
	s, _ := newLive(t, LiveOptions{AlertsFile: alertsFile, Run: func() (aggregator.RunStats, bool) {
		return aggregator.RunStats{Watermark: t0.Add(30 * time.Second), Rollup: aggregator.RollupStats{Events: 99}}, true
	}})
	resp, body := do(t, "GET", s.URL+"/api/summary")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var sum summaryAnswer
	if err := json.Unmarshal([]byte(body), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Requests != uint64(len(lines)) || sum.Outcomes["block"] != want["block"] || sum.Pipeline.LagSeconds != 30 || sum.Pipeline.Events != 99 {
		t.Errorf("summary: requests %d, outcomes %v, pipeline %+v", sum.Requests, sum.Outcomes, sum.Pipeline)
	}
	resp, body = do(t, "GET", s.URL+"/api/series?last=10s&points=5")
	var ser Series
	json.Unmarshal([]byte(body), &ser)
	if resp.StatusCode != 200 || ser.Windows != 10 || ser.StepMS != 2000 {
		t.Errorf("series last=10s: %d, %d windows, step %d ms", resp.StatusCode, ser.Windows, ser.StepMS)
	}
	for _, q := range []string{"points=0", "points=99999", "points=x", "last=-1h", "last=soon", "from=yesterday", "from=2026-03-01T12:00:10Z&to=2026-03-01T12:00:00Z",
		"from=-9223372036854775808", "from=0001-01-01T00:00:00Z", "to=9999-12-31T23:59:59Z", "from=-1&to=9223372036854775807"} {
		resp, body := do(t, "GET", s.URL+"/api/series?"+q)
		if resp.StatusCode != 400 || !strings.Contains(body, strings.Split(strings.Split(q, "=")[0], "&")[0]) && !strings.Contains(body, "before") && !strings.Contains(body, "1970 to 2200") {
			t.Errorf("%s: %d %q", q, resp.StatusCode, body)
		}
	}
	// A range wider than last may be (366 days) is refused, not cut into
	// buckets of centuries.
	for _, q := range []string{"from=0&to=7258118400000&points=1", "from=1970-01-01T00:00:00Z&to=2199-12-31T00:00:00Z&points=2",
		"from=0&to=31622400001", "to=2026-03-01T12:00:00Z&from=2025-02-28T11:59:59Z"} {
		for _, path := range []string{"/api/series", "/api/summary"} {
			resp, body := do(t, "GET", s.URL+path+"?"+q)
			if resp.StatusCode != 400 || !strings.Contains(body, "from ") || !strings.Contains(body, " to ") || !strings.Contains(body, "at most 366 days") {
				t.Errorf("%s?%s: %d %.200q, want 400 naming from, to and 366 days", path, q, resp.StatusCode, body)
			}
		}
	}
	if resp, body := do(t, "GET", s.URL+"/api/series?from=0&to=31622400000&points=1"); resp.StatusCode != 200 {
		t.Errorf("a range of 366 days: %d %q", resp.StatusCode, body)
	}
	resp, body = do(t, "GET", s.URL+"/api/alerts")
	var al alertsAnswer
	json.Unmarshal([]byte(body), &al)
	if !al.Configured || len(al.Records) != 2 || al.Skipped != 2 || al.Records[0].Alert == nil || al.Records[1].Action == nil || al.Records[1].Action.Target != "10.0.0.9" {
		t.Errorf("alerts: %s", body)
	}
	_, body = do(t, "GET", s.URL+"/api/lists")
	if body != `{"configured":false,"entries":[]}`+"\n" {
		t.Errorf("lists without a source: %s", body)
	}
	s2, _ := newLive(t, LiveOptions{AlertsFile: filepath.Join(t.TempDir(), "none.jsonl")})
	if _, body := do(t, "GET", s2.URL+"/api/alerts"); body != `{"configured":true,"records":[],"skipped":0,"truncated":false}`+"\n" {
		t.Errorf("alerts before the file exists: %s", body)
	}
}

// TestReadAlertsTail: only the end of a large file is read, from a whole
// line, and the latest records are kept.
func TestReadAlertsTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "alerts.jsonl")
	var b strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&b, `{"kind":"action","time":"2026-03-01T12:00:00Z","policy":"p%d","alert":"a","list":"deny","target":"10.0.0.1","applied":false,"why":"dry_run"}`+"\n", i)
	}
	os.WriteFile(path, []byte(b.String()), 0o644)
	recs, skipped, truncated, err := ReadAlerts(path, 20_000, 50)
	if err != nil || skipped != 0 || !truncated || len(recs) != 50 || recs[49].Action.Policy != "p999" {
		t.Errorf("%d records, skipped %d, truncated %v, err %v", len(recs), skipped, truncated, err)
	}
}

func TestCheckListen(t *testing.T) {
	for _, c := range []struct {
		addr          string
		token, remote bool
		ok            bool
	}{
		{"127.0.0.1:9092", false, false, true},
		{"[::1]:9092", false, false, true},
		{"localhost:9092", false, false, true},
		{":9092", false, false, false},
		{"0.0.0.0:9092", false, false, false},
		{"[::]:9092", false, false, false},
		{"192.0.2.10:9092", false, false, false},
		{"0.0.0.0:9092", true, false, true},
		{"0.0.0.0:9092", false, true, true},
		{"nonsense", true, true, false},
	} {
		err := CheckListen(c.addr, c.token, c.remote)
		if (err == nil) != c.ok {
			t.Errorf("CheckListen(%q, token %v, remote %v) = %v", c.addr, c.token, c.remote, err)
		}
	}
}

// FuzzAPIQuery: whatever the query, the summary and the series answer 200
// or 400, and a series never has more buckets than asked for (plus the one
// a range not aligned to the step adds).
func FuzzAPIQuery(f *testing.F) {
	for _, q := range []string{"", "last=1h", "points=7&from=2026-03-01T12:00:00Z&to=2026-03-01T12:00:30Z", "from=0&to=9223372036854775807",
		"last=8784h&points=2000", "from=1772366400000&to=1772366401000&points=1", "from=0&to=7258118400000&points=1",
		"from=1970-01-01T00:00:00Z&to=2199-12-31T00:00:00Z&points=2"} {
		f.Add(q)
	}
	lines, _ := sample()
	x := NewIndex(time.Second, time.Hour)
	var c collect
	_, err := aggregator.RunLines(context.Background(), strings.NewReader(strings.Join(lines, "\n")), aggregator.Options{Window: time.Second}, []aggregator.Sink{x, &c})
	if err != nil {
		f.Fatal(err)
	}
	h := Live(LiveOptions{Index: x, Now: func() time.Time { return t0 }})
	f.Fuzz(func(t *testing.T, q string) {
		for _, path := range []string{"/api/summary", "/api/series"} {
			req := httptest.NewRequest("GET", "http://127.0.0.1"+path, nil)
			req.URL.RawQuery = q
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != 200 && w.Code != 400 {
				t.Fatalf("%s?%s: %d %s", path, q, w.Code, w.Body)
			}
			if path == "/api/series" && w.Code == 200 {
				var s Series
				if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
					t.Fatal(err)
				}
				points := 300
				if p := req.URL.Query().Get("points"); p != "" {
					points, _ = strconv.Atoi(p)
				}
				if len(s.Times) > points+1 {
					t.Fatalf("%s?%s: %d buckets for %d points", path, q, len(s.Times), points)
				}
			}
		}
	})
}

// TestIndexCompacts: over many windows of new clients and rules, the
// tables of names stay bounded by what the windows kept use, and the
// windows kept still show their names.
func TestIndexCompacts(t *testing.T) {
	x := NewIndex(time.Second, 10*time.Second)
	for s := range 3000 {
		var lines []string
		for i := range 3 {
			ip := fmt.Sprintf("10.%d.%d.%d", s>>8&255, s&255, i)
			lines = append(lines, decision(time.Duration(s)*time.Second+time.Duration(i)*time.Millisecond, ip, "a", fmt.Sprintf("a:/r%d", s), "block", 10))
		}
		rollup(t, lines, time.Second, x)
	}
	x.mu.RLock()
	names, clients := len(x.names), len(x.cnames)
	x.mu.RUnlock()
	if names > 4*3+1024 || clients > 4*11*2*offendersKept+1024 {
		t.Errorf("%d series and %d clients held for 11 windows", names, clients)
	}
	tot := x.Totals(t0.Add(2999*time.Second), t0.Add(3000*time.Second))
	if len(tot.Rules) != 1 || tot.Rules[0].Rule != "a:/r2999" || len(tot.TopRefusals) != 3 || tot.TopRefusals[0].Client != "10.11.183.0" {
		t.Errorf("the last window after compaction: rules %+v, refusals %+v", tot.Rules, tot.TopRefusals)
	}
}

// TestLiveHostile: what an attacker might try against the dashboard: the
// embedded tree holds only the page's assets, other methods are refused,
// and an answer never echoes markup back as HTML.
func TestLiveHostile(t *testing.T) {
	s, _ := newLive(t, LiveOptions{})
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/assets/../live.go", 404},
		{"GET", "/assets/%2e%2e/live.go", 404},
		{"GET", "/assets/", 200},           // the page again
		{"GET", "/assets/index.html", 200}, // redirected to /assets/
		{"POST", "/api/summary", 405},
		{"DELETE", "/api/lists", 405},
		{"GET", "/api/nothing", 404},
		{"GET", "/index.html", 404},
	} {
		resp, body := do(t, c.method, s.URL+c.path)
		if resp.StatusCode != c.code {
			t.Errorf("%s %s: %d, want %d: %.200s", c.method, c.path, resp.StatusCode, c.code, body)
		}
	}
	resp, body := do(t, "GET", s.URL+"/api/series?from=%3Cscript%3Ealert(1)%3C/script%3E")
	if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("a bad parameter with markup: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}
