package tests

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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
	env := []string{
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"AWS_ENDPOINT_URL_KINESIS=" + awstest.Endpoint(t, awstest.KinesisEnv),
		"AWS_ENDPOINT_URL_DYNAMODB=" + awstest.Endpoint(t, awstest.DynamoDBEnv),
	}
	suffix := fmt.Sprint(time.Now().UnixNano())
	stream := "e2e-decisions-" + suffix
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(cmd.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ratewarden %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	initArgs := []string{"aws", "init", "--stream", stream, "--shards", "2", "--counters-table", "e2e-counters-" + suffix,
		"--lists-table", "e2e-lists-" + suffix, "--leases-table", "e2e-leases-" + suffix}
	first := run(initArgs...)
	for _, want := range []string{"stream " + stream + ": created with 2 shards", "table e2e-counters-" + suffix + ": created",
		"table e2e-lists-" + suffix + ": created", "table e2e-leases-" + suffix + ": created"} {
		if !strings.Contains(first, want) {
			t.Fatalf("aws init said:\n%s\nwant %q", first, want)
		}
	}
	if again := run(initArgs...); strings.Count(again, ": exists") != 4 {
		t.Fatalf("aws init a second time said:\n%s\nwant four resources that exist", again)
	}

	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer origin.Close()
	spill := filepath.Join(t.TempDir(), "spill")
	base, admin := startEdge(t, bin, env, "--config", "../examples/seed.yaml",
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

	lines := strings.Split(strings.TrimSpace(run("decisions", "cat", "--kinesis-stream", stream)), "\n")
	if len(lines) != clients*each {
		t.Fatalf("decisions cat --kinesis-stream: %d lines, want %d", len(lines), clients*each)
	}
	got := map[int]int{}
	ids := map[string]bool{}
	status := map[decisions.Outcome]int{decisions.Allow: 200, decisions.Challenge: 302, decisions.Block: 429}
	for i, line := range lines {
		d, _, err := decisions.ParseJSON([]byte(line))
		if err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, line)
		}
		got[status[d.Outcome]]++
		ids[d.RequestID] = true
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(ids) != clients*each {
		t.Errorf("outcomes on the stream %v (%d distinct requests), statuses served %v", got, len(ids), want)
	}
}
