package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
)

// TestOrigin: the sample origin answers the paths of the story, refuses
// a wrong password, and counts what reaches it per second.
func TestOrigin(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	o := NewOrigin(func() time.Time { return now })
	do := func(method, path, body string) int {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		if body != "" {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		w := httptest.NewRecorder()
		o.ServeHTTP(w, r)
		return w.Code
	}
	for _, c := range []struct {
		method, path, body string
		code               int
	}{
		{"GET", "/products/7", "", 200},
		{"GET", "/api/search?q=x", "", 200},
		{"GET", "/nowhere", "", 404},
		{"POST", "/api/login", "user=a&password=correct+horse", 200},
		{"POST", "/api/login", "user=a&password=hunter2", 401},
		{"POST", "/api/login", "", 401},
	} {
		if got := do(c.method, c.path, c.body); got != c.code {
			t.Errorf("%s %s %q: %d, want %d", c.method, c.path, c.body, got, c.code)
		}
	}
	now = now.Add(time.Second)
	do("GET", "/products/1", "")
	st := o.Stats()
	if st.Requests != 7 || st.Logins != 3 || st.FailedLogins != 2 || st.PeakPerSec != 6 {
		t.Errorf("stats %+v", st)
	}
}

// TestTrafficStory: on a story clock at speed 20, 27 s of the story (the
// scraper from 10 s, the stuffing from 25 s) take 1.35 s of the bubble's
// time (testing/synctest), against an edge stand-in served in process
// that blocks the scraper and lets the rest through: the scraper's first
// request is sent 10 s into the story (at the next tick), and the counts by actor say what
// each got; users are never refused.
func TestTrafficStory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := NewOrigin(time.Now)
		edge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Forwarded-For") == ScraperAddr {
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			origin.ServeHTTP(w, r)
		})
		tr := &Traffic{Target: "http://edge.test", InFlight: 64, Client: &http.Client{Transport: inProcess{edge}}}
		start := time.Now()
		tr.Run(context.Background(), 27*time.Second, NewStory(start, 20, 0, time.Now).Now)
		users, scraper, stuffing := tr.Stats(ActorUsers), tr.Stats(ActorScraper), tr.Stats(ActorStuffing)
		if users.OK.Load() == 0 || users.Blocked.Load()+users.Challenged.Load()+users.Other.Load() != 0 {
			t.Errorf("users: %s", users)
		}
		// The phases send at ticks of 10 ms, 200 ms of the story.
		if f := scraper.Firsts().Sent.Sub(start); f < 10*time.Second || f > 10200*time.Millisecond {
			t.Errorf("the scraper's first request %v into the story, want 10 s, or a tick after", f)
		}
		// How many of the scraper's the in-flight bound lets through
		// depends on how the requests are scheduled; that it was refused
		// every time does not.
		if scraper.Blocked.Load() == 0 || scraper.OK.Load() != 0 || scraper.Challenged.Load() != 0 {
			t.Errorf("scraper: %s", scraper)
		}
		if stuffing.Refused.Load() == 0 || stuffing.OK.Load() != 0 {
			t.Errorf("stuffing: %s", stuffing)
		}
	})
}

// TestTrafficShortStory: a story that ends before a phase would start
// (5 s, before the scraper's 10 s and the stuffing's 25 s) ends on time,
// and that phase sends nothing. Before, the phase waited for its start,
// which the story's clock, held at its end, never reached: `demo
// --duration 20s` never ended.
func TestTrafficShortStory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := NewOrigin(time.Now)
		tr := &Traffic{Target: "http://edge.test", InFlight: 64, Client: &http.Client{Transport: inProcess{origin}}}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			tr.Run(ctx, 5*time.Second, NewStory(time.Now(), 20, 0, time.Now).Now)
		}()
		select {
		case <-done:
		case <-time.After(time.Minute): // 5 s of the story take 250 ms
			t.Error("a 5 s story at speed 20 still runs a minute later")
			cancel()
			<-done
		}
		if tr.Stats(ActorUsers).Sent.Load() == 0 {
			t.Error("the users sent nothing")
		}
		for _, a := range []string{ActorScraper, ActorStuffing} {
			if st := tr.Stats(a); st.Sent.Load()+st.Skipped.Load() != 0 {
				t.Errorf("%s, which starts after the story's end: %s", a, st)
			}
		}
	})
}

// inProcess is an http.RoundTripper that answers with a handler, without
// a network: in a synctest bubble its requests take no time.
type inProcess struct{ h http.Handler }

func (p inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	p.h.ServeHTTP(w, r)
	if r.Body != nil {
		r.Body.Close()
	}
	return w.Result(), nil
}

// TestTrafficCountsListChallenges: a 302 counts as the challenge list's
// (ChallengedSinceMark) only without rate-limit headers, as the edge
// answers for a list, and only for a request sent at or after the mark: a
// 302 of the limits after a new minute began does not.
func TestTrafficCountsListChallenges(t *testing.T) {
	edge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/limit" {
			w.Header().Set("X-Ratelimit-Limit", "60")
		}
		w.WriteHeader(http.StatusFound)
	}))
	defer edge.Close()
	start := time.Unix(1_700_000_000, 0)
	now := start
	tr := &Traffic{Target: edge.URL, now: func() time.Time { return now },
		Client: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	tr.Mark(start.Add(10 * time.Second))
	st := tr.Stats(ActorScraper)
	f := func(sent time.Duration, path string, want uint64) {
		t.Helper()
		now = start.Add(sent)
		tr.send(context.Background(), st, request{method: "GET", path: path, addr: ScraperAddr})
		if got := st.ChallengedSinceMark.Load(); got != want {
			t.Errorf("after a 302 to %s sent at +%v: %d challenged since the mark, want %d", path, sent, got, want)
		}
	}
	f(5*time.Second, "/list", 0)
	f(10*time.Second, "/limit", 0)
	f(10*time.Second, "/list", 1)
	f(11*time.Second, "/limit", 1)
	if st.Challenged.Load() != 4 {
		t.Errorf("%d challenged, want 4", st.Challenged.Load())
	}
}

// TestLinesShowHostileText: an alert's summary, an action's target and a
// window's most refused client hold the client's choice (here a user id
// with a line break, a terminal's colour escape, a line separator and a
// bidirectional override): each line shows them as escapes, and stays one
// line, its text in its order.
func TestLinesShowHostileText(t *testing.T) {
	const id = "user:evil\n22:13:20  action challenge list + 192.0.2.1\x1b[31m\u2028\u202e"
	const shown = `user:evil\n22:13:20  action challenge list + 192.0.2.1\x1b[31m\u2028\u202e`
	ctx := context.Background()
	var out bytes.Buffer
	now := time.Unix(1_700_000_000, 0)
	l := &Loop{W: &out, Now: func() time.Time { return now }}
	l.Alert(ctx, alerts.Alert{Type: alerts.TypeHeavyHitter, State: alerts.Firing, Severity: "warning", Identities: []string{id}, Summary: id + " made 318 requests"})
	l.Action(ctx, alerts.Action{List: "challenge", Target: id, Policy: "p", TTL: "10m0s", Applied: true})
	user, _ := json.Marshal(strings.TrimPrefix(id, "user:"))
	line := `{"v":1,"kind":"decision","time":"2026-03-01T12:00:00.1Z","client_ip":"203.0.113.7","user_id":` + string(user) + `,"tier":"anonymous","rule":"anonymous:global","outcome":"block"}`
	w := &Windows{W: &out}
	if _, err := aggregator.RunLines(ctx, strings.NewReader(line), aggregator.Options{Window: time.Second}, []aggregator.Sink{w}); err != nil {
		t.Fatal(err)
	}
	want := "22:13:20  alert  firing warning heavy_hitter: " + shown + " made 318 requests\n" +
		"22:13:20  action challenge list + " + shown + " for 10m0s by policy p (applied)\n" +
		"12:00:00  decisions     1  allowed     0  challenged    0  blocked     1  other    0  most refused " + shown + " (1)\n"
	if out.String() != want {
		t.Errorf("lines\n%q\nwant\n%q", out.String(), want)
	}
}

// TestWindowsLine: a window's line has its counts and the client refused
// most.
func TestWindowsLine(t *testing.T) {
	lines := []string{}
	for i, oc := range []string{"allow", "challenge", "block", "block"} {
		lines = append(lines, `{"v":1,"kind":"decision","time":"2026-03-01T12:00:00.`+string(rune('1'+i))+`Z","client_ip":"203.0.113.7","tier":"anonymous","rule":"anonymous:global","outcome":"`+oc+`"}`)
	}
	var buf bytes.Buffer
	w := &Windows{W: &buf}
	if _, err := aggregator.RunLines(context.Background(), strings.NewReader(strings.Join(lines, "\n")), aggregator.Options{Window: time.Second}, []aggregator.Sink{w}); err != nil {
		t.Fatal(err)
	}
	want := "12:00:00  decisions     4  allowed     1  challenged    1  blocked     2  other    0  most refused 203.0.113.7 (3)\n"
	if buf.String() != want {
		t.Errorf("line\n%q\nwant\n%q", buf.String(), want)
	}
}

// TestLoopCheck: the demo's check names each step of the loop that is
// missing, and passes once the scraper was challenged before it was
// listed, blocked, alerted, listed by a policy and challenged since the
// traffic's mark.
func TestLoopCheck(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(1_700_000_000, 0)
	var marked time.Time
	l := &Loop{W: &out, Now: func() time.Time { return now }, Listed: func(at time.Time) { marked = at }}
	st := new(ActorStats)
	if err := Check(st, l.State()); err == nil || strings.Count(err.Error(), ";") != 4 {
		t.Fatalf("nothing shown: %v, want five steps missing", err)
	}
	first(&st.firstChallenged, now.Add(-time.Second))
	first(&st.firstBlocked, now)
	l.Alert(context.Background(), alerts.Alert{Type: alerts.TypeHeavyHitter, State: alerts.Firing, Identities: []string{"192.0.2.1", ScraperAddr}, Summary: "s"})
	l.Action(context.Background(), alerts.Action{List: "challenge", Target: "192.0.2.1", Policy: "p", Applied: true})
	if err := Check(st, l.State()); err == nil || !strings.Contains(err.Error(), "no policy put the scraper") || strings.Contains(err.Error(), "alert") {
		t.Fatalf("alerted, another address listed: %v", err)
	}
	l.Action(context.Background(), alerts.Action{List: "challenge", Target: ScraperAddr, Policy: "p", TTL: "10m0s", Applied: true})
	if !marked.Equal(now) || l.State().ListedBy != "policy:p" {
		t.Errorf("listed at %v by %q", marked, l.State().ListedBy)
	}
	if err := Check(st, l.State()); err == nil || !strings.Contains(err.Error(), "not challenged by the challenge list") {
		t.Fatalf("not yet challenged by the list: %v", err)
	}
	st.ChallengedSinceMark.Add(1)
	if err := Check(st, l.State()); err != nil {
		t.Fatal(err)
	}
	// A first challenge after the listing is the list's, not the limits'.
	late := new(ActorStats)
	first(&late.firstChallenged, now.Add(time.Second))
	first(&late.firstBlocked, now)
	late.ChallengedSinceMark.Add(1)
	if err := Check(late, l.State()); err == nil || !strings.Contains(err.Error(), "not challenged by its limits") {
		t.Errorf("challenged only after the listing: %v", err)
	}
	if !strings.Contains(out.String(), "action challenge list + 203.0.113.7 for 10m0s by policy p (applied)") {
		t.Errorf("lines:\n%s", out.String())
	}
}
