package lambda_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge"
	"github.com/ratewarden/ratewarden/edge/lambda"
)

// sink keeps every decision. Invoke returns after the response ended, so
// a request's decision is in by then.
type sink struct {
	mu sync.Mutex
	ds []decisions.Decision
}

func (s *sink) Emit(d decisions.Decision) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ds = append(s.ds, d)
	return true
}

// statuses returns the decisions' statuses, with their response errors
// after a colon.
func (s *sink) statuses() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.ds))
	for i, d := range s.ds {
		out[i] = fmt.Sprint(d.Status)
		if d.ResponseError != "" {
			out[i] += ":" + d.ResponseError
		}
	}
	return out
}

func newHandler(t *testing.T) *lambda.Handler { return newHandlerSink(t, nil) }

func newHandlerSink(t *testing.T, s edge.Sink) *lambda.Handler {
	return newHandlerOpts(t, s, lambda.Options{})
}

// newHandlerOpts is the seed's limiter, its decisions told to s, in front
// of an application that echoes the request, served with o.
func newHandlerOpts(t *testing.T, s edge.Sink, o lambda.Options) *lambda.Handler {
	t.Helper()
	cfg, err := config.Load("../../examples/seed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lim, err := edge.New(cfg, edge.Options{Env: func(string) string { return "" }, Sink: s})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close(context.Background()) })
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Set-Cookie", "s=1")
		// The adapter's writer cannot flush: that is no failure.
		http.NewResponseController(w).Flush()
		fmt.Fprintf(w, "%s %s?%s body=%s", r.Method, r.URL.Path, r.URL.RawQuery, b)
	})
	return lambda.New(lim.Handler(app, ""), o)
}

// invoke sends ev as raw JSON through Invoke and returns status, headers
// and body, whatever the response type.
func invoke(t *testing.T, h *lambda.Handler, ev any) (int, map[string]string, string) {
	t.Helper()
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	out, err := h.Invoke(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	switch r := out.(type) {
	case events.APIGatewayProxyResponse:
		return r.StatusCode, r.Headers, r.Body
	case events.APIGatewayV2HTTPResponse:
		return r.StatusCode, r.Headers, r.Body
	case events.ALBTargetGroupResponse:
		return r.StatusCode, r.Headers, r.Body
	}
	t.Fatalf("unexpected response type %T", out)
	return 0, nil, ""
}

func TestEventShapes(t *testing.T) {
	rest := events.APIGatewayProxyRequest{HTTPMethod: "POST", Path: "/api/reports", Body: "e30=", IsBase64Encoded: true,
		QueryStringParameters: map[string]string{"a": "1"}, Headers: map[string]string{"Host": "api.example.com"}}
	rest.RequestContext.Identity.SourceIP = "203.0.113.1"
	v2 := events.APIGatewayV2HTTPRequest{Version: "2.0", RawPath: "/api/reports", RawQueryString: "a=1", Body: "{}"}
	v2.RequestContext.HTTP.Method = "POST"
	v2.RequestContext.HTTP.SourceIP = "203.0.113.2"
	alb := events.ALBTargetGroupRequest{HTTPMethod: "POST", Path: "/api/reports", Body: "{}",
		QueryStringParameters: map[string]string{"a": "1"},
		Headers:               map[string]string{"x-forwarded-for": "198.51.100.9, 203.0.113.3"}}
	alb.RequestContext.ELB.TargetGroupArn = "arn:aws:elasticloadbalancing:region:123456789012:targetgroup/tg/1"
	for _, c := range []struct {
		name string
		ev   any
	}{{"rest", rest}, {"http api", v2}, {"alb", alb}} {
		t.Run(c.name, func(t *testing.T) {
			decided := &sink{}
			h := newHandlerSink(t, decided)
			var statuses []int
			for i := range 11 {
				status, hdr, body := invoke(t, h, c.ev)
				statuses = append(statuses, status)
				if i == 0 {
					if body != "POST /api/reports?a=1 body={}" {
						t.Errorf("body %q", body)
					}
					if hdr["X-Ratelimit-Limit"] != "5" || hdr["X-Ratelimit-Remaining"] != "4" {
						t.Errorf("headers %v", hdr)
					}
				}
				if status == 302 && hdr["Location"] != "/captcha?redirect=%2Fapi%2Freports%3Fa%3D1" {
					t.Errorf("Location %q", hdr["Location"])
				}
			}
			if got := fmt.Sprint(statuses); got != "[200 200 200 200 200 302 302 302 302 302 429]" {
				t.Errorf("statuses %s", got)
			}
			// One decision per event, with the status it was answered.
			if got := strings.Join(decided.statuses(), " "); "["+got+"]" != fmt.Sprint(statuses) {
				t.Errorf("decided statuses %s, want %v", got, statuses)
			}
		})
	}
}

func TestALBClientIsLastHop(t *testing.T) {
	h := newHandler(t)
	// Two clients behind one spoofable first hop: counted apart by the
	// last hop, the address the ALB saw.
	for i, ip := range []string{"203.0.113.10", "203.0.113.11"} {
		alb := events.ALBTargetGroupRequest{HTTPMethod: "GET", Path: "/api/export",
			Headers: map[string]string{"x-forwarded-for": "1.1.1.1, " + ip}}
		alb.RequestContext.ELB.TargetGroupArn = "tg"
		for j := range 3 {
			if status, _, _ := invoke(t, h, alb); status != 200 {
				t.Errorf("client %d request %d: %d", i, j, status)
			}
		}
	}
}

func TestBadEvent(t *testing.T) {
	h := newHandler(t)
	if _, err := h.Invoke(context.Background(), json.RawMessage(`{"version":`)); err == nil {
		t.Error("truncated event: no error")
	}
	rest := events.APIGatewayProxyRequest{HTTPMethod: "GET", Path: "/", Body: "!!", IsBase64Encoded: true}
	raw, _ := json.Marshal(rest)
	if _, err := h.Invoke(context.Background(), raw); err == nil {
		t.Error("bad base64 body: no error")
	}
}

// flusher records what had been served when it was called.
type flusher struct {
	served *int
	seen   []int
	err    error
}

func (f *flusher) Flush(context.Context) error {
	f.seen = append(f.seen, *f.served)
	return f.err
}

// TestFlushEveryEvent: for every event shape, Flush runs after the handler
// served the event and before Invoke returns, once per event; its error is
// reported and the response returned all the same.
func TestFlushEveryEvent(t *testing.T) {
	rest := events.APIGatewayProxyRequest{HTTPMethod: "GET", Path: "/"}
	v2 := events.APIGatewayV2HTTPRequest{Version: "2.0", RawPath: "/"}
	v2.RequestContext.HTTP.Method = "GET"
	alb := events.ALBTargetGroupRequest{HTTPMethod: "GET", Path: "/"}
	alb.RequestContext.ELB.TargetGroupArn = "tg"
	for _, c := range []struct {
		name    string
		ev      any
		err     error
		reports int
	}{{"rest", rest, nil, 0}, {"http api", v2, nil, 0}, {"alb", alb, nil, 0}, {"failing flush", rest, errors.New("sink down"), 2}} {
		t.Run(c.name, func(t *testing.T) {
			served := 0
			f := &flusher{served: &served, err: c.err}
			var reported []error
			h := lambda.New(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ }),
				lambda.Options{Flush: f, OnError: func(err error) { reported = append(reported, err) }})
			for range 2 {
				if status, _, _ := invoke(t, h, c.ev); status != 200 {
					t.Errorf("status %d", status)
				}
			}
			if fmt.Sprint(f.seen) != "[1 2]" || len(reported) != c.reports {
				t.Errorf("flushes saw %v served (want [1 2]); reported %v", f.seen, reported)
			}
		})
	}
}

// TestALBWithoutForwardedFor: an ALB event without X-Forwarded-For (the
// load balancer's xff_header_processing.mode remove) has no client
// address: it passes uncounted as fail_open, but under a fail_closed
// prefix (the seed's /api/admin/) it is refused with 503 as fail_closed,
// the path's failure mode, without Retry-After; OnNoAddress is told once, naming the ALB's
// setting, and not for an event with the header or of API Gateway.
// Before, every such event passed, fail_closed paths too, and nothing
// told the operator.
func TestALBWithoutForwardedFor(t *testing.T) {
	decided := &sink{}
	var told []error
	h := newHandlerOpts(t, decided, lambda.Options{OnNoAddress: func(err error) { told = append(told, err) }})
	alb := func(path, xff string) events.ALBTargetGroupRequest {
		ev := events.ALBTargetGroupRequest{HTTPMethod: "GET", Path: path, Headers: map[string]string{}}
		if xff != "" {
			ev.Headers["x-forwarded-for"] = xff
		}
		ev.RequestContext.ELB.TargetGroupArn = "tg"
		return ev
	}
	rest := events.APIGatewayProxyRequest{HTTPMethod: "GET", Path: "/"}
	rest.RequestContext.Identity.SourceIP = "203.0.113.5"
	var statuses []int
	var headers map[string]string
	var body string
	for _, ev := range []any{rest, alb("/", "203.0.113.6"), alb("/", ""), alb("/", ""), alb("/api/admin/users", "")} {
		var status int
		status, headers, body = invoke(t, h, ev)
		statuses = append(statuses, status)
	}
	if got := fmt.Sprint(statuses); got != "[200 200 200 200 503]" {
		t.Errorf("statuses %s, want [200 200 200 200 503]", got)
	}
	// Retrying cannot give the request an address: the 503 says why and
	// has no Retry-After (before: "Retry-After: 1", "Try again in 1 seconds").
	if _, ok := headers["Retry-After"]; ok || !strings.Contains(body, `"error":"no_client_address"`) || strings.Contains(body, "retry_after") {
		t.Errorf("the 503's headers %v, body %s; want no Retry-After, error no_client_address", headers, body)
	}
	decided.mu.Lock()
	var outcomes []string
	for _, d := range decided.ds {
		outcomes = append(outcomes, d.Outcome.String()+" "+d.Reason)
	}
	decided.mu.Unlock()
	if want := []string{"fail_open no client address", "fail_open no client address", "fail_closed no client address"}; len(outcomes) != 5 ||
		fmt.Sprint(outcomes[2:]) != fmt.Sprint(want) {
		t.Errorf("decisions %q, want the last three %q", outcomes, want)
	}
	if len(told) != 1 || !errors.Is(told[0], lambda.ErrNoForwardedFor) || !strings.Contains(told[0].Error(), "routing.http.xff_header_processing.mode") {
		t.Errorf("OnNoAddress told %v, want ErrNoForwardedFor once", told)
	}
}

// TestALBQueryIsDecoded: an ALB passes the query parameters as the client
// encoded them (its documentation: "the load balancer does not decode
// them"), where API Gateway decodes them; the request the handler builds
// has the client's query, not one encoded twice. Before, ?q=a%20b%26c
// reached the origin as q=a%2520b%2526c, the literal "a%20b%26c".
func TestALBQueryIsDecoded(t *testing.T) {
	h := lambda.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%q %q %q", r.URL.Query()["q"], r.URL.Query()["a b"], r.URL.Query()["x"])
	}), lambda.Options{})
	ev := events.ALBTargetGroupRequest{HTTPMethod: "GET", Path: "/search", Headers: map[string]string{"x-forwarded-for": "203.0.113.9"},
		QueryStringParameters: map[string]string{"q": "a%20b%26c", "a%20b": "1+2", "x": "%zz"}}
	ev.RequestContext.ELB.TargetGroupArn = "tg"
	multi := ev
	multi.QueryStringParameters, multi.Headers = nil, nil
	multi.MultiValueHeaders = map[string][]string{"x-forwarded-for": {"203.0.113.9"}}
	multi.MultiValueQueryStringParameters = map[string][]string{"q": {"a%20b%26c"}, "a%20b": {"1+2"}, "x": {"%zz"}}
	for _, ev := range []events.ALBTargetGroupRequest{ev, multi} {
		// An escape that is not one is kept as sent.
		if _, _, body := invoke(t, h, ev); body != `["a b&c"] ["1 2"] ["%zz"]` {
			t.Errorf("the handler got the query %s, want [\"a b&c\"] [\"1 2\"] [\"%%zz\"]", body)
		}
	}
}
