package edge

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
)

func TestSetHeaders(t *testing.T) {
	v := Verdict{}
	v.Time = t0.Add(15 * time.Second)
	v.Policies[0] = Policy{Name: `anonymous:/api/"r"`, Limit: 5, Window: time.Minute, Remaining: 0, Reset: 45 * time.Second}
	v.Policies[1] = Policy{Name: "anonymous:global", Limit: 60, Window: time.Minute, Remaining: 50, Reset: 45 * time.Second}
	h := make(http.Header)
	SetHeaders(h, &v)
	want := map[string]string{
		"X-Ratelimit-Limit":     "5",
		"X-Ratelimit-Remaining": "0",
		"X-Ratelimit-Reset":     strconv.FormatInt(t0.Add(time.Minute).Unix(), 10),
		"Ratelimit-Policy":      `"anonymous:/api/\"r\"";q=5;w=60, "anonymous:global";q=60;w=60`,
		"Ratelimit":             `"anonymous:/api/\"r\"";r=0;t=45`,
	}
	for k, w := range want {
		if got := h.Get(k); got != w {
			t.Errorf("%s: got %q, want %q", k, got, w)
		}
	}
	empty := make(http.Header)
	SetHeaders(empty, &Verdict{})
	if len(empty) != 0 {
		t.Errorf("a verdict without policies set headers: %v", empty)
	}
}

func TestRefusalBodies(t *testing.T) {
	cases := []struct {
		outcome  decisions.Outcome
		status   int
		code     string
		location string
	}{
		{decisions.Block, 429, "rate_limit_exceeded", ""},
		{decisions.LocalLimit, 429, "rate_limit_exceeded", ""},
		{decisions.DenyListed, 403, "forbidden", ""},
		{decisions.FailClosed, 503, "service_unavailable", ""},
		{decisions.Challenge, 302, "", "/captcha?redirect=%2Fapi%2Freports%3Fq%3D1%26b%3D2"},
	}
	for _, c := range cases {
		t.Run(c.outcome.String(), func(t *testing.T) {
			v := Verdict{RetryAfter: 42 * time.Second, uri: "/api/reports?q=1&b=2"}
			v.Outcome = c.outcome
			resp, refused := Refusal(&v, "/captcha", "redirect")
			if !refused || resp.Status != c.status || resp.Location != c.location {
				t.Fatalf("got %v %d %q", refused, resp.Status, resp.Location)
			}
			if c.code == "" {
				return
			}
			var body struct {
				Error      string `json:"error"`
				Message    string `json:"message"`
				RetryAfter *int   `json:"retry_after"`
			}
			if err := json.Unmarshal(resp.Body, &body); err != nil {
				t.Fatalf("body %q: %v", resp.Body, err)
			}
			if body.Error != c.code || body.Message == "" {
				t.Errorf("body %+v", body)
			}
			if hasRetry := c.status != 403; hasRetry != (body.RetryAfter != nil) || (hasRetry && *body.RetryAfter != 42) {
				t.Errorf("retry_after %v", body.RetryAfter)
			}
		})
	}
	for _, o := range []decisions.Outcome{decisions.Allow, decisions.AllowListed, decisions.TokenPass, decisions.FailOpen, decisions.ShadowBlock} {
		v := Verdict{}
		v.Outcome = o
		if _, refused := Refusal(&v, "/captcha", "redirect"); refused {
			t.Errorf("%v refused", o)
		}
	}
	v := Verdict{uri: "/a"}
	v.Outcome = decisions.Challenge
	if resp, _ := Refusal(&v, "/captcha?lang=es", "r"); resp.Location != "/captcha?lang=es&r=%2Fa" {
		t.Errorf("location %q", resp.Location)
	}
}

func TestMiddleware(t *testing.T) {
	var reached atomic.Int64
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if r.Header.Get("X-Request-Id") == "" {
			t.Error("origin got no request id")
		}
		io.WriteString(w, "hello")
	})
	sink := &recordSink{}
	l := newLimiter(t, seedConfig(t, nil), Options{Sink: sink})
	srv := httptest.NewServer(l.Middleware(origin))
	defer srv.Close()
	client := srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	var statuses []int
	var last *http.Response
	for range 11 {
		resp, err := client.Get(srv.URL + "/api/export?id=7")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
		last = resp
		if resp.StatusCode == 200 && resp.Header.Get("X-RateLimit-Limit") != "3" {
			t.Errorf("allowed response limit header %q", resp.Header.Get("X-RateLimit-Limit"))
		}
		if resp.StatusCode == 302 && resp.Header.Get("Location") != "/captcha?redirect=%2Fapi%2Fexport%3Fid%3D7" {
			t.Errorf("location %q", resp.Header.Get("Location"))
		}
	}
	if got, want := jsonInts(statuses), "[200,200,200,302,302,302,429,429,429,429,429]"; got != want {
		t.Errorf("statuses %s, want %s", got, want)
	}
	if reached.Load() != 3 {
		t.Errorf("origin reached %d times, want 3", reached.Load())
	}
	if last.Header.Get("Retry-After") == "" || last.Header.Get("Content-Type") != "application/json" {
		t.Errorf("429 headers %v", last.Header)
	}
	ds := sink.waitFor(t, 11)
	if len(ds) != 11 {
		t.Errorf("%d decisions, want 11", len(ds))
	}
	for i, d := range ds {
		if d.Status != statuses[i] || d.ResponseError != "" {
			t.Errorf("decision %d: status %d %q, want %d", i+1, d.Status, d.ResponseError, statuses[i])
		}
	}
}

func jsonInts(v []int) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestTokenEndpoint(t *testing.T) {
	keys := testKeys(t)
	cfg := seedConfig(t, nil)
	l := newLimiter(t, cfg, Options{Keys: keys})
	srv := httptest.NewServer(l.Handler(http.NotFoundHandler(), verifierSecret))
	defer srv.Close()
	post := func(auth, body string) (int, string) {
		r, _ := http.NewRequest("POST", srv.URL+cfg.Challenge.Endpoint, strings.NewReader(body))
		if auth != "" {
			r.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	cases := []struct {
		name, auth, body string
		status           int
	}{
		{"no secret", "", `{"ip":"203.0.113.7"}`, 401},
		{"wrong secret", "nope", `{"ip":"203.0.113.7"}`, 401},
		{"bad ip", verifierSecret, `{"ip":"300.1.1.1"}`, 400},
		{"both", verifierSecret, `{"ip":"203.0.113.7","user":"u"}`, 400},
		{"neither", verifierSecret, `{}`, 400},
		{"unknown field", verifierSecret, `{"ip":"203.0.113.7","admin":true}`, 400},
		{"ttl too long", verifierSecret, `{"ip":"203.0.113.7","ttl":"48h"}`, 400},
		{"ip", verifierSecret, `{"ip":"203.0.113.7"}`, 200},
		{"user", verifierSecret, `{"user":"u_1","ttl":"5m"}`, 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := post(c.auth, c.body)
			if status != c.status {
				t.Fatalf("status %d, want %d: %s", status, c.status, body)
			}
			if status != 200 {
				return
			}
			var tr tokenResponse
			if err := json.Unmarshal([]byte(body), &tr); err != nil {
				t.Fatal(err)
			}
			var in tokenRequest
			json.Unmarshal([]byte(c.body), &in)
			sub := "ip:" + in.IP
			if in.User != "" {
				sub = "user:" + in.User
			}
			if _, err := keys.Verify(tr.Token, sub, time.Now()); err != nil {
				t.Errorf("issued token does not verify for %s: %v", sub, err)
			}
			if tr.Cookie != cfg.Challenge.Cookie || tr.Header != cfg.Challenge.Header {
				t.Errorf("response %+v", tr)
			}
		})
	}
	// The token endpoint is not reachable without challenges configured.
	noChallenge := newLimiter(t, seedConfig(t, func(c *config.Config) { c.Challenge.Enabled = false }), Options{Keys: keys})
	rec := httptest.NewRecorder()
	noChallenge.Handler(http.NotFoundHandler(), verifierSecret).ServeHTTP(rec, httptest.NewRequest("POST", cfg.Challenge.Endpoint, strings.NewReader(`{"ip":"1.2.3.4"}`)))
	if rec.Code != 404 {
		t.Errorf("token endpoint without challenges: %d", rec.Code)
	}
}

func TestMiddlewareReleasesConcurrency(t *testing.T) {
	cfg := seedConfig(t, func(c *config.Config) {
		c.Tiers["anonymous"].Paths["/slow"] = &config.Rule{Limit: 1, Algorithm: "concurrency"}
	})
	l := newLimiter(t, cfg, Options{})
	inside := make(chan struct{})
	release := make(chan struct{})
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside <- struct{}{}
		<-release
	}))
	do := func() int {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/slow", nil)
		r.RemoteAddr = "203.0.113.7:1"
		h.ServeHTTP(rec, r)
		return rec.Code
	}
	done := make(chan int)
	go func() { done <- do() }()
	<-inside
	if code := do(); code != 429 {
		t.Errorf("second concurrent request: %d, want 429", code)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Errorf("first request: %d", code)
	}
	go func() { <-inside }()
	if code := do(); code != 200 {
		t.Errorf("after the first ended: %d, want 200", code)
	}
}
