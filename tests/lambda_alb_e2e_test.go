package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ratewarden/ratewarden/decisions"
)

// TestLambdaALBWithoutForwardedFor runs `ratewarden lambda` against a
// runtime API serving ALB events without X-Forwarded-For, as an ALB whose
// routing.http.xff_header_processing.mode is remove sends every request
// (the event has no other client address). Such a request is decided as
// the path's failure mode decides a request the store cannot count: under
// a fail_closed prefix it is refused with 503 (fail_closed, "no client
// address"), elsewhere it passes as fail_open with that reason; and the
// function logs, once, an error naming the missing header and the ALB
// setting. Before, every such request passed, fail_closed paths too, and
// nothing but the decisions' reason said why. An event with the header is
// counted by its last hop as before.
func TestLambdaALBWithoutForwardedFor(t *testing.T) {
	bin := buildBinary(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("origin")) }))
	defer origin.Close()
	cfgPath := filepath.Join(t.TempDir(), "ratewarden.yaml")
	yaml := "edge:\n  upstream: " + origin.URL + "\ntiers:\n  anonymous:\n    global: {limit: 2, window: 1m}\nfail_closed: [/api/admin/]\n"
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	f := startLambda(t, bin, "--config", cfgPath)
	alb := func(path, xff string) []byte {
		ev := events.ALBTargetGroupRequest{HTTPMethod: "GET", Path: path, Headers: map[string]string{"host": "app.example"}}
		if xff != "" {
			ev.Headers["x-forwarded-for"] = xff
		}
		ev.RequestContext.ELB.TargetGroupArn = "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/ratewarden/6d0ecf831eec9f09"
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	status := func(r lambdaResult) int {
		var resp events.ALBTargetGroupResponse
		if r.failed || json.Unmarshal(r.body, &resp) != nil {
			t.Fatalf("invocation failed: %s", r.body)
		}
		return resp.StatusCode
	}
	var got []int
	for _, ev := range [][]byte{alb("/", ""), alb("/", ""), alb("/", ""), alb("/api/admin/users", ""),
		alb("/", "198.51.100.7"), alb("/", "198.51.100.7"), alb("/", "198.51.100.7")} {
		got = append(got, status(f.invoke(t, ev)))
	}
	if want := []int{200, 200, 200, 503, 200, 200, 429}; !slices.Equal(got, want) {
		t.Errorf("statuses %v, want %v", got, want)
	}

	var outcomes []string
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, f.stdout)))
	for sc.Scan() {
		d, _, err := decisions.ParseJSON(sc.Bytes())
		if err != nil {
			t.Fatalf("%s: %v", sc.Bytes(), err)
		}
		outcomes = append(outcomes, d.Outcome.String()+" "+d.Reason)
	}
	if want := []string{"fail_open no client address", "fail_open no client address", "fail_open no client address",
		"fail_closed no client address"}; len(outcomes) != 7 || !slices.Equal(outcomes[:4], want) {
		t.Errorf("decisions %q, want 7, the first four %q", outcomes, want)
	}
	stderr := string(readFile(t, f.stderr))
	if n := strings.Count(stderr, "ALB event without X-Forwarded-For"); n != 1 || !strings.Contains(stderr, `"level":"ERROR"`) ||
		!strings.Contains(stderr, "routing.http.xff_header_processing.mode") {
		t.Errorf("stderr names the missing X-Forwarded-For %d times, want once, at ERROR, naming the ALB's setting:\n%s", n, stderr)
	}
}
