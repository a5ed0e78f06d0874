package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/edge/challenge"
	"github.com/ratewarden/ratewarden/edge/dynamostore"
)

// buildSeedFunction runs `ratewarden lambda-edge build` on the seed's
// configuration and points the function at a fresh dynalite table.
func buildSeedFunction(t *testing.T) (fnDir string) {
	t.Helper()
	bin := buildBinary(t)
	out := t.TempDir()
	// The seed's configuration with a store deadline that a loaded test
	// machine meets: dynalite on a shared machine answers a cold client's
	// first call in tens of milliseconds, past the default 50ms, and a
	// call past the deadline fails open by design.
	seed, err := os.ReadFile("../examples/seed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(out, "seed.yaml")
	cfg := bytes.Replace(seed, []byte("store:\n  type: memory\n"), []byte("store:\n  type: memory\n  timeout: 5s\n"), 1)
	if bytes.Equal(cfg, seed) {
		t.Fatal("examples/seed.yaml has no store section to set the deadline in")
	}
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	msg := runBinary(t, bin, nil, "lambda-edge", "build", "--config", cfgPath, "--out", out)
	if !strings.Contains(msg, "function.zip") {
		t.Fatalf("lambda-edge build said %q", msg)
	}
	fnDir = filepath.Join(out, "function")
	endpoint := awstest.Endpoint(t, awstest.DynamoDBEnv)
	dc := dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) { o.BaseEndpoint = &endpoint })
	table := "lambdaedge-seed-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	awstest.CreateTable(t, dc, dynamostore.TableSpec(table))
	setTable(t, fnDir, table)
	return fnDir
}

// viewerRequest is a CloudFront viewer-request event as AWS documents it.
func viewerRequest(ip, method, uri, query string, headers map[string]string) json.RawMessage {
	hs := map[string][]map[string]string{"host": {{"key": "Host", "value": "d111111abcdef8.cloudfront.net"}},
		"user-agent": {{"key": "User-Agent", "value": "curl/8.5.0"}}}
	for k, v := range headers {
		hs[strings.ToLower(k)] = []map[string]string{{"key": k, "value": v}}
	}
	b, _ := json.Marshal(map[string]any{"Records": []any{map[string]any{"cf": map[string]any{
		"config": map[string]any{"distributionDomainName": "d111111abcdef8.cloudfront.net", "distributionId": "EDFDVBD6EXAMPLE",
			"eventType": "viewer-request", "requestId": "4TyzHTaYWb1GX1qTfsHhEqV6HUDd_BzoBZnwfnvQc_1oF26ClkoUSEQ=="},
		"request": map[string]any{"clientIp": ip, "headers": hs, "method": method, "querystring": query, "uri": uri},
	}}}})
	return b
}

// handlerInput is tests/lambdaedge.mjs's input for events a millisecond
// apart from now, counted in dynalite at endpoint.
func handlerInput(fnDir, endpoint string, now time.Time, evs []json.RawMessage) map[string]any {
	type c struct {
		Time  string          `json:"time"`
		Event json.RawMessage `json:"event"`
	}
	var cases []c
	for i, ev := range evs {
		cases = append(cases, c{Time: strconv.FormatInt(now.Add(time.Duration(i)*time.Millisecond).UnixNano(), 10), Event: ev})
	}
	return map[string]any{"functionDir": fnDir, "cases": cases,
		"dynamodb": map[string]any{"endpoint": endpoint, "region": "us-east-1", "maxAttempts": 1}}
}

type handlerResult struct {
	decision decisions.Decision
	result   cfRequest
	headers  map[string]string // lower-case name → first value
}

// runSeedEvents runs events through the built function's handler against
// endpoint, one case per event at now.
func runSeedEvents(t *testing.T, fnDir, endpoint string, now time.Time, evs ...json.RawMessage) []handlerResult {
	t.Helper()
	var out []handlerResult
	for _, line := range runNodeHandler(t, handlerInput(fnDir, endpoint, now, evs)) {
		var r struct {
			Decision string    `json:"decision"`
			Result   cfRequest `json:"result"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		d, _, err := decisions.ParseJSON([]byte(r.Decision))
		if err != nil {
			t.Fatalf("decision line %q: %v", r.Decision, err)
		}
		h := map[string]string{}
		for k, vs := range r.Result.Headers {
			h[k] = vs[0]["value"]
		}
		out = append(out, handlerResult{decision: d, result: r.Result, headers: h})
	}
	if len(out) != len(evs) {
		t.Fatalf("%d results for %d events", len(out), len(evs))
	}
	return out
}

// TestLambdaEdgeSeed runs the seed's configuration, built by the binary,
// on Node against dynalite: eleven requests of one client to
// /api/reports in a minute are 200 five times (forwarded), 302 to the
// CAPTCHA five times and 429 once, as in the seed; identity headers a
// viewer sends are not forwarded; with the store down a fail-closed path
// answers 503 and the others pass.
func TestLambdaEdgeSeed(t *testing.T) {
	fnDir := buildSeedFunction(t)
	endpoint := awstest.Endpoint(t, awstest.DynamoDBEnv)
	now := time.Now()
	var evs []json.RawMessage
	for range 11 {
		evs = append(evs, viewerRequest("203.0.113.7", "GET", "/api/reports", "month=3", map[string]string{"X-User-Id": "u_abc", "X-User-Plan": "enterprise"}))
	}
	res := runSeedEvents(t, fnDir, endpoint, now, evs...)
	var got []string
	for i, r := range res {
		status := r.result.Status
		if status == "" {
			status = "200"
			if r.result.URI != "/api/reports" || r.headers["x-user-id"] != "" || r.headers["x-user-plan"] != "" {
				t.Errorf("hit %d forwarded %s with x-user-id %q, x-user-plan %q; want /api/reports without them", i+1, r.result.URI, r.headers["x-user-id"], r.headers["x-user-plan"])
			}
		}
		got = append(got, status)
		if r.decision.Tier != "anonymous" || r.decision.IdentitySource != decisions.SourceUntrustedHeader || r.decision.Count != int64(i+1) {
			t.Errorf("hit %d: tier %s, source %s, count %d", i+1, r.decision.Tier, r.decision.IdentitySource, r.decision.Count)
		}
	}
	want := "[200 200 200 200 200 302 302 302 302 302 429]"
	if fmt.Sprint(got) != want {
		t.Fatalf("statuses %v, want %s", got, want)
	}
	if loc := res[5].headers["location"]; loc != "/captcha?redirect=%2Fapi%2Freports%3Fmonth%3D3" {
		t.Errorf("challenge location %q", loc)
	}
	last := res[10]
	if last.headers["retry-after"] == "" || last.headers["content-type"] != "application/json" || !strings.Contains(last.result.Body, `"error":"rate_limit_exceeded"`) {
		t.Errorf("429 headers %v body %q", last.headers, last.result.Body)
	}
	if last.headers["ratelimit-policy"] != `"anonymous:/api/reports";q=5;w=60` {
		t.Errorf("RateLimit-Policy %q", last.headers["ratelimit-policy"])
	}

	t.Run("store down", func(t *testing.T) {
		down := closedPort(t)
		res := runSeedEvents(t, fnDir, down, now,
			viewerRequest("203.0.113.8", "POST", "/api/billing/charge", "", nil),
			viewerRequest("203.0.113.8", "GET", "/api/search", "q=x", nil))
		if s := res[0].result.Status; s != "503" || res[0].decision.Outcome != decisions.FailClosed {
			t.Errorf("fail-closed path: status %q, outcome %v", s, res[0].decision.Outcome)
		}
		if s := res[1].result.Status; s != "" || res[1].decision.Outcome != decisions.FailOpen {
			t.Errorf("fail-open path: status %q, outcome %v", s, res[1].decision.Outcome)
		}
	})

}

// ssmServer is SSM's GetParameters on its wire protocol (AWS JSON 1.1):
// it answers the parameters it holds and counts the calls. It checks that
// the call asks for decryption and is signed for us-east-1.
func ssmServer(t *testing.T, params map[string]string) (url string, calls *atomic.Int64) {
	t.Helper()
	calls = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var in struct {
			Names          []string
			WithDecryption bool
		}
		if r.Header.Get("X-Amz-Target") != "AmazonSSM.GetParameters" || json.NewDecoder(r.Body).Decode(&in) != nil || !in.WithDecryption ||
			!strings.Contains(r.Header.Get("Authorization"), "/us-east-1/ssm/aws4_request") {
			t.Errorf("SSM call %s %q: want a signed GetParameters in us-east-1 with decryption", r.Header.Get("X-Amz-Target"), r.Header.Get("Authorization"))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		type param struct{ Name, Type, Value string }
		out := struct {
			Parameters        []param
			InvalidParameters []string
		}{Parameters: []param{}, InvalidParameters: []string{}}
		for _, n := range in.Names {
			if v, ok := params[n]; ok {
				out.Parameters = append(out.Parameters, param{n, "SecureString", v})
			} else {
				out.InvalidParameters = append(out.InvalidParameters, n)
			}
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, calls
}

// runIndex loads the package's entry point, index.mjs, in a fresh node
// process as Lambda does (the runtime's SDK: here tests/node_modules) and
// hands it the events one after the other; it returns the decision lines
// (stdout), the results, and what the function wrote to stderr. The SDK's
// endpoint variables point it at the stand-ins: Lambda@Edge allows no
// environment variables, so they cannot reach a deployed function.
func runIndex(t *testing.T, fnDir, ssm string, evs ...json.RawMessage) (lines []string, results []cfRequest, stderr string) {
	t.Helper()
	modules, err := filepath.Abs("node_modules")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(modules, filepath.Join(fnDir, "node_modules")); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	all, err := json.Marshal(evs)
	if err != nil {
		t.Fatal(err)
	}
	script := `import(process.argv[1]).then(async (m) => {
  for (const ev of JSON.parse(process.argv[2])) process.stderr.write("RESULT " + JSON.stringify(await m.handler(ev)) + "\n");
})`
	// The function counts on its own clock (Date.now) in the seed's
	// windows of a minute: the requests must not straddle two.
	inOneMinute(t)
	cmd := exec.Command(program(t, "node", "Node.js 20"), "--no-warnings", "-e", script, filepath.Join(fnDir, "index.mjs"), string(all))
	cmd.Env = append(os.Environ(), "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"AWS_ENDPOINT_URL_DYNAMODB="+awstest.Endpoint(t, awstest.DynamoDBEnv), "AWS_ENDPOINT_URL_SSM="+ssm)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("node: %v\n%s", err, errb.String())
	}
	for _, l := range strings.Split(errb.String(), "\n") {
		if r, ok := strings.CutPrefix(l, "RESULT "); ok {
			var res cfRequest
			if err := json.Unmarshal([]byte(r), &res); err != nil {
				t.Fatal(err)
			}
			results = append(results, res)
		}
	}
	return strings.Split(strings.TrimSpace(out.String()), "\n"), results, errb.String()
}

// TestLambdaEdgeIndex runs the package as deployed: index.mjs reads the
// challenge keys from SSM once for the container (one GetParameters for
// six requests), counts in dynalite, and a token signed with those keys
// passes the sixth hit's challenge; with SSM unreachable the function
// logs why and runs on, challenging without passing tokens.
func TestLambdaEdgeIndex(t *testing.T) {
	const keys = "k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	kr, err := challenge.ParseKeys(keys)
	if err != nil {
		t.Fatal(err)
	}
	ssm, calls := ssmServer(t, map[string]string{"/ratewarden/challenge-keys": keys})
	tok := kr.Issue(challenge.Subject(netip.MustParseAddr("203.0.113.9"), ""), time.Now(), time.Hour)
	var evs []json.RawMessage
	for range 5 {
		evs = append(evs, viewerRequest("203.0.113.9", "GET", "/api/reports", "", nil))
	}
	evs = append(evs, viewerRequest("203.0.113.9", "GET", "/api/reports", "", map[string]string{"Cookie": "rw_challenge=" + tok}))
	evs = append(evs, viewerRequest("203.0.113.9", "GET", "/api/reports", "", nil))
	lines, results, stderr := runIndex(t, buildSeedFunction(t), ssm, evs...)
	if len(lines) != len(evs) || len(results) != len(evs) {
		t.Fatalf("%d decision lines and %d results for %d requests\n%s", len(lines), len(results), len(evs), stderr)
	}
	var outcomes []string
	for _, l := range lines {
		d, _, err := decisions.ParseJSON([]byte(l))
		if err != nil {
			t.Fatalf("stdout line %q is not a decision: %v", l, err)
		}
		outcomes = append(outcomes, d.Outcome.String())
	}
	if got := fmt.Sprint(outcomes); got != "[allow allow allow allow allow token_pass challenge]" {
		t.Errorf("outcomes %s", got)
	}
	if results[5].URI != "/api/reports" || results[6].Status != "302" {
		t.Errorf("the token's request got %+v, the next %+v", results[5], results[6])
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d SSM calls for one container, want 1", n)
	}

	t.Run("SSM unreachable", func(t *testing.T) {
		lines, results, stderr := runIndex(t, buildSeedFunction(t), closedPort(t), evs...)
		if len(results) != len(evs) || !strings.Contains(stderr, "ratewarden: read secrets") {
			t.Fatalf("%d results; stderr %s", len(results), stderr)
		}
		if d, _, err := decisions.ParseJSON([]byte(lines[5])); err != nil || d.Outcome != decisions.Challenge {
			t.Errorf("without the keys the token's request was %v (%v), want challenge", d.Outcome, err)
		}
	})
}

// TestLambdaEdgeLogsToAggregate: the function's stdout, as CloudWatch
// Logs' subscription filter delivers it to the decisions stream (gzip JSON
// envelopes of log events, Lambda's console.log prefix on some, a control
// message, platform lines), goes through kinesalite into `ratewarden
// aggregate --kinesis-stream` beside one of ratewarden's own records, and
// comes out in the EMF totals; the platform lines are counted corrupt.
func TestLambdaEdgeLogsToAggregate(t *testing.T) {
	fnDir := buildSeedFunction(t)
	bin := buildBinary(t)
	env := standInEnv(t)
	now := time.Now()
	var evs []json.RawMessage
	for range 11 {
		evs = append(evs, viewerRequest("203.0.113.10", "GET", "/api/reports", "", nil))
	}
	evs = append(evs, viewerRequest("203.0.113.11", "GET", "/a/../b", "", nil))
	in := handlerInput(fnDir, awstest.Endpoint(t, awstest.DynamoDBEnv), now, evs)
	in["stdoutDecisions"] = true
	lines := runNodeHandler(t, in)
	if len(lines) != len(evs) {
		t.Fatalf("the function wrote %d lines for %d requests", len(lines), len(evs))
	}
	// What CloudWatch Logs holds: the lines as Lambda's Node.js runtime
	// writes console.log's, the first half in the text log format, the rest
	// in the JSON log format; and the platform's lines, which a
	// subscription filter without a pattern delivers too.
	var msgs []string
	for i, l := range lines {
		m := decisiontest.LambdaLine(string(l))
		if i >= len(lines)/2 {
			m = decisiontest.LambdaJSONLine(string(l))
		}
		msgs = append(msgs, m)
	}
	platform := []string{"START RequestId: 4b0f6c1e Version: 1\n", "END RequestId: 4b0f6c1e\n"}

	suffix := fmt.Sprint(time.Now().UnixNano())
	stream, leases := "lambdaedge-logs-"+suffix, "lambdaedge-leases-"+suffix
	runBinary(t, bin, env, "aws", "init", "--stream", stream, "--shards", "1", "--counters-table", "", "--lists-table", "",
		"--leases-table", leases, "--state-table", "", "--partials-table", "")
	kc := kinesis.NewFromConfig(awstest.Config(t), func(o *kinesis.Options) {
		o.BaseEndpoint = aws.String(awstest.Endpoint(t, awstest.KinesisEnv))
	})
	put := func(data []byte) {
		if _, err := kc.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: &stream, PartitionKey: aws.String("logs"), Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	put(decisiontest.LogsRecord("CONTROL_MESSAGE", now.UnixMilli(), "CWL CONTROL MESSAGE: Checking health of destination Kinesis stream."))
	put(decisiontest.LogsRecord("DATA_MESSAGE", now.UnixMilli(), append(append([]string{platform[0]}, msgs[:6]...), platform[1])...))
	put(decisiontest.LogsRecord("DATA_MESSAGE", now.UnixMilli(), msgs[6:]...))
	// One of ratewarden's own records beside them (codec json).
	own := decisions.Decision{Time: now, Node: "proxy-1", Tier: "anonymous", Path: "/", Rule: "anonymous:global", Outcome: decisions.Allow}
	put(decisions.AppendJSON([]byte{2}, &own))

	tmp := t.TempDir()
	partials := filepath.Join(tmp, "partials")
	agg := startAggregate(t, bin, env, "--kinesis-stream", stream, "--leases-table", leases, "--consumer-group", "logs",
		"--state-dir", filepath.Join(tmp, "state"), "--partials", "dir:"+partials, "--emf", "file:"+filepath.Join(tmp, "emf.jsonl"))
	want := uint64(len(evs) + 1)
	waitPartials(t, partials, want, agg)
	agg.stop(t)
	total, _, statuses := windowCounts(t, partials)
	// 200: five allowed and ratewarden's own; 302: five; 429: one; the
	// rejected path (400) counts under no status of windowCounts' table.
	if total != want || statuses[200] != 6 || statuses[302] != 5 || statuses[429] != 1 {
		t.Errorf("partials hold %d events %v; want %d with 200×6, 302×5, 429×1", total, statuses, want)
	}
	if got := emfRequests(t, filepath.Join(tmp, "emf.jsonl")); got != int(want) {
		t.Errorf("EMF Requests add up to %d, want %d", got, want)
	}
	// The two platform lines are log events that are not decisions.
	if out := agg.out.String(); !strings.Contains(out, "corrupt 2,") {
		t.Errorf("aggregate reports no 2 corrupt log events:\n%s", out)
	}
}
