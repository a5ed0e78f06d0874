package tests

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/awstest"
)

// TestEdgeKinesis runs the AWS set-up and the edge against kinesalite and
// dynalite, found through the SDK's standard endpoint variables: `aws init`
// creates the stream and tables (twice: the second run finds them),
// `edge --kinesis-stream` ships every decision, and `decisions cat
// --kinesis-stream` reads each back once.
func TestEdgeKinesis(t *testing.T) {
	bin := buildBinary(t)
	env := standInEnv(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	stream := "e2e-decisions-" + suffix
	run := func(args ...string) string { t.Helper(); return runBinary(t, bin, env, args...) }
	initArgs := []string{"aws", "init", "--stream", stream, "--shards", "2", "--counters-table", "e2e-counters-" + suffix,
		"--lists-table", "e2e-lists-" + suffix, "--leases-table", "e2e-leases-" + suffix, "--state-table", "e2e-state-" + suffix,
		"--partials-table", "e2e-partials-" + suffix}
	first := run(initArgs...)
	for _, want := range []string{"stream " + stream + ": created with 2 shards", "table e2e-counters-" + suffix + ": created",
		"table e2e-lists-" + suffix + ": created", "table e2e-leases-" + suffix + ": created", "table e2e-state-" + suffix + ": created",
		"table e2e-partials-" + suffix + ": created"} {
		if !strings.Contains(first, want) {
			t.Fatalf("aws init said:\n%s\nwant %q", first, want)
		}
	}
	if again := run(initArgs...); strings.Count(again, ": exists") != 6 {
		t.Fatalf("aws init a second time said:\n%s\nwant six resources that exist", again)
	}

	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer origin.Close()
	spill := filepath.Join(t.TempDir(), "spill")
	base, admin := startEdge(t, bin, env, "--config", seedTrusting(t, "[127.0.0.1]", ""),
		"--upstream", origin.URL, "--kinesis-stream", stream, "--kinesis-spill-dir", spill)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	const clients, each = 12, 10
	want := map[int]int{}
	for c := range clients {
		for range each {
			res := get(t, client, base+"/api/export", "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", c))
			want[res.status]++
		}
	}
	metrics := get(t, client, admin+"/metrics").body
	stops[t.Name()]()
	for _, name := range []string{"ratewarden_decisions_kinesis_spilled_total", "ratewarden_decisions_kinesis_backlog", "ratewarden_decisions_kinesis_dropped_total"} {
		if !regexp.MustCompile(`(?m)^` + name + `\{[^}]*\} 0$`).MatchString(metrics) {
			t.Errorf("/metrics: want %s at 0:\n%s", name, grepLines(metrics, "kinesis"))
		}
	}

	n, got, ids := decisionLines(t, run("decisions", "cat", "--kinesis-stream", stream))
	if n != clients*each {
		t.Fatalf("decisions cat --kinesis-stream: %d lines, want %d", n, clients*each)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(ids) != clients*each {
		t.Errorf("outcomes on the stream %v (%d distinct requests), statuses served %v", got, len(ids), want)
	}
}

// TestEdgeKinesisSpill starts the edge shipping to a stream that does not
// exist yet: its decisions go to the spill directory, and once `aws init`
// creates the stream they are drained to it, every one, while the edge
// keeps serving.
func TestEdgeKinesisSpill(t *testing.T) {
	bin := buildBinary(t)
	env := standInEnv(t)
	stream := fmt.Sprintf("e2e-spill-%d", time.Now().UnixNano())
	run := func(args ...string) string { t.Helper(); return runBinary(t, bin, env, args...) }
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer origin.Close()
	cfg := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(cfg, []byte("decisions:\n  kinesis: {stream: "+stream+", retry: 200ms}\ntiers:\n  anonymous:\n    global: {limit: 1000, window: 1m}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base, admin := startEdge(t, bin, env, "--config", cfg, "--upstream", origin.URL,
		"--kinesis-spill-dir", filepath.Join(t.TempDir(), "spill"))
	client := &http.Client{}
	metric := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + `\{[^}]*\} (\d+)$`).FindStringSubmatch(get(t, client, admin+"/metrics").body)
		if m == nil {
			return ""
		}
		return m[1]
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i := range 20 {
		get(t, client, base+"/", "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i))
	}
	t0 := time.Now()
	waitUntil("20 spilled decisions", func() bool { return metric("ratewarden_decisions_kinesis_spilled_total") == "20" })
	t.Logf("spilled after %v", time.Since(t0))
	run("aws", "init", "--stream", stream, "--counters-table", "", "--lists-table", "", "--leases-table", "", "--state-table", "", "--partials-table", "")
	waitUntil("the spill to drain", func() bool {
		return metric("ratewarden_decisions_kinesis_backlog") == "0" && metric("ratewarden_decisions_kinesis_drained_total") == "20"
	})
	t.Logf("drained after %v", time.Since(t0))
	for i := range 5 {
		get(t, client, base+"/", "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", 100+i))
	}
	stops[t.Name()]()
	t.Logf("stopped after %v", time.Since(t0))
	n, _, ids := decisionLines(t, run("decisions", "cat", "--kinesis-stream", stream))
	if n != 25 || len(ids) != 25 {
		t.Fatalf("%d decisions on the stream (%d distinct), want the 20 spilled and 5 sent directly", n, len(ids))
	}
}

// standInEnv is the environment that points the binary's AWS SDK at the
// stand-ins tests/run starts, with a region and test credentials.
func standInEnv(t *testing.T) []string {
	return []string{
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"AWS_ENDPOINT_URL_KINESIS=" + awstest.Endpoint(t, awstest.KinesisEnv),
		"AWS_ENDPOINT_URL_DYNAMODB=" + awstest.Endpoint(t, awstest.DynamoDBEnv),
	}
}

// runBinary runs the binary with args and env added to the test's
// environment, and returns its output; it fails the test if it fails.
func runBinary(t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(cmd.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ratewarden %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// decisionLines parses `decisions cat` output: how many decisions, how
// many of each HTTP status their outcomes answer (allow 200, challenge
// 302, block 429), and their request ids.
func decisionLines(t *testing.T, out string) (n int, statuses map[int]int, ids map[string]bool) {
	t.Helper()
	status := map[decisions.Outcome]int{decisions.Allow: 200, decisions.Challenge: 302, decisions.Block: 429}
	statuses, ids = map[int]int{}, map[string]bool{}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i, line := range lines {
		d, _, err := decisions.ParseJSON([]byte(line))
		if err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, line)
		}
		statuses[status[d.Outcome]]++
		ids[d.RequestID] = true
	}
	return len(lines), statuses, ids
}
