package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/awstest"
)

// aggregateProc is a `ratewarden aggregate` the test started.
type aggregateProc struct {
	cmd *exec.Cmd
	out *syncBuffer
}

func startAggregate(t *testing.T, bin string, env []string, args ...string) *aggregateProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"aggregate", "--window", "1s", "--lateness", "100ms", "--admin-listen", "off"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	p := &aggregateProc{cmd: cmd, out: &syncBuffer{}}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return p
}

// stop interrupts the aggregator and waits for its clean exit.
func (p *aggregateProc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(os.Interrupt)
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("aggregate: %v\n%s", err, p.out.String())
	}
}

// leaseOwners counts the leases each worker of a consumer group holds.
func leaseOwners(t *testing.T, table, group string) map[string]int {
	t.Helper()
	dc := dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(awstest.Endpoint(t, awstest.DynamoDBEnv))
	})
	out, err := dc.Query(context.Background(), &dynamodb.QueryInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("#g = :g"),
		ExpressionAttributeNames:  map[string]string{"#g": "group"},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":g": &ddbtypes.AttributeValueMemberS{Value: group}}})
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]int{}
	for _, it := range out.Items {
		if o, ok := it["owner"].(*ddbtypes.AttributeValueMemberS); ok {
			owners[o.Value]++
		}
	}
	return owners
}

// windowCounts merges the partials under dir and returns, per window,
// the events and the decisions by HTTP status their outcomes answer.
func windowCounts(t *testing.T, dir string) (total uint64, byWindow map[time.Time]string, statuses map[int]uint64) {
	t.Helper()
	status := map[decisions.Outcome]int{decisions.Allow: 200, decisions.Challenge: 302, decisions.Block: 429}
	byWindow, statuses = map[time.Time]string{}, map[int]uint64{}
	for start, p := range readPartials(t, dir, time.Second) {
		total += p.Events
		outcomes := map[int]uint64{}
		for o, n := range p.Counts.ByOutcome() {
			if n > 0 {
				outcomes[status[decisions.Outcome(o)]] += n
				statuses[status[decisions.Outcome(o)]] += n
			}
		}
		byWindow[start] = fmt.Sprint(p.Events, outcomes)
	}
	return total, byWindow, statuses
}

// waitPartials waits until the partials under dir hold n events.
func waitPartials(t *testing.T, dir string, n uint64, procs ...*aggregateProc) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		total, _, _ := windowCounts(t, dir)
		if total == n {
			return
		}
		exited := slices.ContainsFunc(procs, func(p *aggregateProc) bool { return p.cmd.ProcessState != nil })
		if total > n || exited || time.Now().After(deadline) {
			var logs string
			for _, p := range procs {
				logs += p.out.String()
			}
			t.Fatalf("the partials hold %d events, want %d\n%s", total, n, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// emfRequests adds up the service-wide Requests of the EMF files, each
// output once: an output delivered again (after a change of hands) carries
// the same rw_key.
func emfRequests(t *testing.T, paths ...string) int {
	t.Helper()
	seen := map[string]bool{}
	total := 0
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			var doc struct {
				AWS struct {
					CloudWatchMetrics []struct{ Dimensions [][]string }
				} `json:"_aws"`
				Key      string `json:"rw_key"`
				Requests *float64
			}
			if err := json.Unmarshal(line, &doc); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if doc.Requests == nil || len(doc.AWS.CloudWatchMetrics[0].Dimensions) != 1 || len(doc.AWS.CloudWatchMetrics[0].Dimensions[0]) != 0 || seen[doc.Key] {
				continue
			}
			seen[doc.Key] = true
			total += int(*doc.Requests)
		}
	}
	return total
}

// TestEdgeAndAggregateKinesis: `ratewarden edge --kinesis-stream` serves
// requests onto a 4-shard stream while two `ratewarden aggregate
// --kinesis-stream --config` processes share its shards through the lease
// table and the state table. The merged partials and the EMF hold exactly
// the requests served; every EMF document passes `emf validate`; and a
// single aggregator of another consumer group makes of the same stream the
// same merged partial of every window, byte for byte (counts, distinct
// clients, latencies, top-K lists), and the same [Tier, Rule] Requests by
// window and rule, none folded.
func TestEdgeAndAggregateKinesis(t *testing.T) {
	bin := buildBinary(t)
	env := standInEnv(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	stream, leases, stateTable := "e2e-agg-"+suffix, "e2e-agg-leases-"+suffix, "e2e-agg-state-"+suffix
	runBinary(t, bin, env, "aws", "init", "--stream", stream, "--shards", "4", "--counters-table", "", "--lists-table", "",
		"--leases-table", leases, "--state-table", stateTable, "--partials-table", "")
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer origin.Close()
	cfg := seedTrusting(t, "[127.0.0.1]", "")
	base, _ := startEdge(t, bin, env, "--config", cfg, "--upstream", origin.URL,
		"--kinesis-stream", stream, "--kinesis-spill-dir", filepath.Join(t.TempDir(), "spill"))

	// The pair keeps its state in DynamoDB, as aggregators on two
	// machines would; they share the partials directory.
	tmp := t.TempDir()
	partials := filepath.Join(tmp, "partials")
	pair := func(name string) *aggregateProc {
		return startAggregate(t, bin, env, "--kinesis-stream", stream, "--leases-table", leases, "--consumer-group", "pair",
			"--lease-duration", "1s", "--state-table", stateTable, "--partials", "dir:"+partials, "--emf", "file:"+filepath.Join(tmp, name+".emf.jsonl"),
			"--config", cfg)
	}
	a := pair("a")
	b := pair("b")
	deadline := time.Now().Add(30 * time.Second)
	for {
		owners := leaseOwners(t, leases, "pair/"+stream)
		if len(owners) == 2 && fmt.Sprint(slices.Collect(maps.Values(owners))) == "[2 2]" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the two aggregators hold %v, want two shards each\n%s%s", owners, a.out.String(), b.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	const clients, each, root = 16, 20, 3
	const requests = clients * (each + root)
	served := serveClients(t, base, clients, each)
	// Once the pair has emitted those, the site's root: another rule
	// (anonymous:global), in a later window. The edge lingers up to 5 s
	// (decisions.kinesis.linger) before it ships, so the pair's shards have
	// gone quiet, closed their windows and take the decisions as late:
	// corrections, which must leave while the edge keeps running and no
	// other window of those shards closes.
	waitPartials(t, partials, clients*each, a, b)
	for status, n := range servePath(t, base, "/", clients, root) {
		served[status] += n
	}
	stops[t.Name()]() // the edge ships what it holds
	waitPartials(t, partials, requests, a, b)
	a.stop(t)
	b.stop(t)
	total, pairWindows, statuses := windowCounts(t, partials)
	if total != requests || fmt.Sprint(statuses) != fmt.Sprint(served) {
		t.Fatalf("the pair's partials hold %d events, %v; the edge served %v", total, statuses, served)
	}
	pairEMF := []string{filepath.Join(tmp, "a.emf.jsonl"), filepath.Join(tmp, "b.emf.jsonl")}
	runBinary(t, bin, nil, append([]string{"emf", "validate"}, pairEMF...)...)
	if got := emfRequests(t, pairEMF...); got != requests {
		t.Errorf("the pair's EMF Requests add up to %d, the edge served %d", got, requests)
	}
	for _, p := range []*aggregateProc{a, b} {
		if !bytes.Contains([]byte(p.out.String()), []byte("outputs ")) {
			t.Errorf("an aggregator of the pair delivered nothing:\n%s", p.out.String())
		}
	}

	// One aggregator alone, another consumer group, the whole stream, its
	// state in a directory.
	solo := filepath.Join(tmp, "solo")
	if err := os.MkdirAll(solo, 0o755); err != nil {
		t.Fatal(err)
	}
	one := startAggregate(t, bin, env, "--kinesis-stream", stream, "--leases-table", leases, "--consumer-group", "solo",
		"--state-dir", filepath.Join(solo, "state"), "--partials", "dir:"+filepath.Join(solo, "partials"),
		"--emf", "file:"+filepath.Join(solo, "emf.jsonl"), "--admin-listen", "127.0.0.1:0", "--config", cfg)
	waitPartials(t, filepath.Join(solo, "partials"), requests, one)
	checkShardMetrics(t, one, 4)
	one.stop(t)
	_, soloWindows, _ := windowCounts(t, filepath.Join(solo, "partials"))
	if fmt.Sprint(soloWindows) != fmt.Sprint(pairWindows) {
		t.Errorf("windows of the pair %v, of one aggregator %v", pairWindows, soloWindows)
	}
	if got := emfRequests(t, filepath.Join(solo, "emf.jsonl")); got != requests {
		t.Errorf("one aggregator's EMF Requests add up to %d, the edge served %d", got, requests)
	}
	runBinary(t, bin, nil, "emf", "validate", filepath.Join(solo, "emf.jsonl"))
	// Not only the counts: the merged partial of every window (distinct
	// clients, latencies, top-K lists) is the same bytes. The files differ:
	// the pair, reading while the edge served, may have emitted a window
	// and then a correction of it where the single aggregator, reading
	// afterwards, emitted the window once, with other sequence ranges in
	// the names; merged, they hold the same events, and each shard's
	// clients are its own.
	sameMerged(t, mergedPartials(t, partials), mergedPartials(t, filepath.Join(solo, "partials")))
	// With the edges' configuration, both keep every rule in every shard:
	// Rule=X over the pair's documents is X's count, as over the single
	// aggregator's, window by window, and nothing was folded.
	pairRules, soloRules := emfRuleRequests(t, pairEMF...), emfRuleRequests(t, filepath.Join(solo, "emf.jsonl"))
	t.Logf("the pair wrote %d partial files, one aggregator %d, for %d windows; [Tier, Rule] Requests %v",
		len(partialFiles(t, partials)), len(partialFiles(t, filepath.Join(solo, "partials"))), len(mergedPartials(t, partials)), pairRules)
	if len(pairRules) == 0 || fmt.Sprint(pairRules) != fmt.Sprint(soloRules) || strings.Contains(fmt.Sprint(pairRules), "__other__") {
		t.Errorf("[Tier, Rule] Requests by window of the pair %v, of one aggregator %v", pairRules, soloRules)
	}
	t.Logf("a:\n%sb:\n%sone:\n%s", a.out.String(), b.out.String(), one.out.String())
}

// mergedPartials merges the partials under dir by window, as readers do,
// and encodes each window's merged partial.
func mergedPartials(t *testing.T, dir string) map[time.Time][]byte {
	t.Helper()
	out := map[time.Time][]byte{}
	for start, p := range readPartials(t, dir, time.Second) {
		b, err := p.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		out[start] = b
	}
	return out
}

// sameMerged checks that two runs' merged partials are the same windows
// and the same bytes, and describes a window that differs.
func sameMerged(t *testing.T, got, want map[time.Time][]byte) {
	t.Helper()
	describe := func(b []byte) string {
		p, err := aggregator.DecodePartial(b)
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("events %d, clients %d, top requests %v", p.Events, aggregator.Estimate(p.Clients.All), p.Offenders.Requests.Top(5))
	}
	if len(got) == 0 || len(got) != len(want) {
		t.Errorf("%d merged windows, want %d", len(got), len(want))
	}
	for start, b := range want {
		if !bytes.Equal(got[start], b) {
			t.Errorf("window %v: the merged partials differ:\n got %s\nwant %s", start, describe(got[start]), describe(b))
		}
	}
}

// emfRuleRequests adds up the Requests of the [Tier, Rule] documents of
// the EMF files by window and rule, each output once.
func emfRuleRequests(t *testing.T, paths ...string) map[string]float64 {
	t.Helper()
	seen := map[string]bool{}
	out := map[string]float64{}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			var doc struct {
				Key        string `json:"rw_key"`
				Start      string `json:"rw_window_start"`
				Tier, Rule string
				Requests   *float64
			}
			if err := json.Unmarshal(line, &doc); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			key := doc.Key + " " + doc.Tier + " " + doc.Rule
			if doc.Rule == "" || doc.Requests == nil || seen[key] {
				continue
			}
			seen[key] = true
			out[doc.Start+" "+doc.Tier+" "+doc.Rule] += *doc.Requests
		}
	}
	return out
}

// checkShardMetrics scrapes the aggregator's /metrics and checks that
// each of the shards it holds has its lags: how far its last read is
// behind the stream (kinesalite says 0 for an open shard) and its
// watermark behind the wall clock.
func checkShardMetrics(t *testing.T, p *aggregateProc, shards int) {
	t.Helper()
	_, rest, ok := strings.Cut(p.out.String(), "aggregate: metrics on ")
	if !ok {
		t.Fatalf("no metrics address in the aggregator's output:\n%s", p.out.String())
	}
	url, _, _ := strings.Cut(rest, "\n")
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	behind, lag := map[string]string{}, map[string]string{}
	for _, line := range strings.Split(string(body), "\n") {
		name, labels, ok := strings.Cut(line, "{")
		_, shard, hasShard := strings.Cut(labels, `shard="`)
		if !ok || !hasShard {
			continue
		}
		shard = shard[:strings.IndexByte(shard, '"')]
		value := line[strings.LastIndexByte(line, ' ')+1:]
		switch name {
		case "ratewarden_aggregator_shard_behind_milliseconds":
			behind[shard] = value
		case "ratewarden_aggregator_shard_lag_milliseconds":
			lag[shard] = value
		}
	}
	if len(behind) != shards || len(lag) != shards {
		t.Fatalf("shard lags for %v and %v, want %d shards each\n%s", behind, lag, shards, body)
	}
	for shard, v := range behind {
		if v != "0" {
			t.Errorf("shard %s: %s ms behind, want 0 (caught up)", shard, v)
		}
		if ms, err := strconv.ParseFloat(lag[shard], 64); err != nil || ms < 0 {
			t.Errorf("shard %s: lag %q ms", shard, lag[shard])
		}
	}
}
