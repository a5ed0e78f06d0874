package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/big"
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

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	dkinesis "github.com/ratewarden/ratewarden/decisions/kinesis"
)

// updateKinesisEvent is -update (see aggregate_emf_golden_test.go): it also regenerates
// testdata/kinesis-event.json, the edge's Kinesis sink writing the fixture's decisions to
// kinesalite and the records read back making the event.
var updateKinesisEvent = update

// The recorded Kinesis event: the decisions of a seeded generator starting
// half a second before a minute, so that they fall into two windows of a
// minute.
const (
	kinesisEventFile   = "testdata/kinesis-event.json"
	kinesisEventSeed   = 1010
	kinesisEventCount  = 3000
	kinesisEventStream = "ratewarden-decisions"
)

var kinesisEventStart = time.Date(2026, 11, 30, 11, 59, 59, 500_000_000, time.UTC)

// TestKinesisEventFixture: the recorded event is what AWS Lambda hands a
// function mapped to the decision stream (one shard's records in sequence
// order, each with its event id, source ARN and base64 data), and its
// records decode to exactly the decisions the edge's Kinesis sink was
// given. With -update it records the event again: the sink puts the
// decisions on a kinesalite stream and the records read back from the
// shard make the event.
func TestKinesisEventFixture(t *testing.T) {
	want := decisiontest.NewGenerator(kinesisEventSeed, kinesisEventStart).Batch(kinesisEventCount)
	if *updateKinesisEvent {
		recordKinesisEvent(t, want)
	}
	raw, ev := readKinesisEvent(t)
	var shape struct {
		Records []map[string]any
	}
	if err := json.Unmarshal(raw, &shape); err != nil || len(shape.Records) < 2 {
		t.Fatalf("%s: %v, %d records", kinesisEventFile, err, len(shape.Records))
	}
	for _, r := range shape.Records {
		k, _ := r["kinesis"].(map[string]any)
		for _, key := range []string{"data", "sequenceNumber", "partitionKey", "approximateArrivalTimestamp"} {
			if k[key] == nil {
				t.Fatalf("a record's kinesis has no %s: %v", key, r)
			}
		}
		if r["eventSource"] != "aws:kinesis" || r["eventSourceARN"] == nil || r["eventID"] == nil {
			t.Fatalf("record %v: not a Kinesis event record", r)
		}
	}
	var prev *big.Int
	for _, r := range ev.Records {
		seq, ok := new(big.Int).SetString(r.Kinesis.SequenceNumber, 10)
		if !ok || prev != nil && seq.Cmp(prev) <= 0 || r.EventID != "shardId-000000000000:"+r.Kinesis.SequenceNumber {
			t.Fatalf("record %s (event id %s) is out of order or of another shard", r.Kinesis.SequenceNumber, r.EventID)
		}
		prev = seq
	}
	got := eventDecisions(t, ev)
	if len(got) != len(want) {
		t.Fatalf("the event holds %d decisions, the sink was given %d", len(got), len(want))
	}
	if g, w := jsonLines(got), jsonLines(want); !slices.Equal(g, w) {
		t.Fatal("the event's decisions differ from those the sink was given")
	}
}

// recordKinesisEvent writes testdata/kinesis-event.json from ds.
func recordKinesisEvent(t *testing.T, ds []decisions.Decision) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kc := kinesis.NewFromConfig(awstest.Config(t), func(o *kinesis.Options) {
		o.BaseEndpoint = aws.String(awstest.Endpoint(t, awstest.KinesisEnv))
	})
	name := fmt.Sprintf("lambda-fixture-%d", time.Now().UnixNano())
	if _, err := kc.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	defer kc.DeleteStream(context.Background(), &kinesis.DeleteStreamInput{StreamName: aws.String(name)})
	w := kinesis.NewStreamExistsWaiter(kc, func(o *kinesis.StreamExistsWaiterOptions) { o.MinDelay = 20 * time.Millisecond })
	if err := w.Wait(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(name)}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	sink, err := dkinesis.New(kc, dkinesis.Options{Stream: name})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(ds); i += 750 {
		if err := sink.WriteBatch(ds[i:min(i+750, len(ds))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := sink.Flush(); err != nil {
		t.Fatal(err)
	}
	it, err := kc.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(name),
		ShardId: aws.String("shardId-000000000000"), ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatal(err)
	}
	var ev events.KinesisEvent
	for iter := it.ShardIterator; iter != nil; {
		got, err := kc.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Records) == 0 {
			break
		}
		for _, r := range got.Records {
			seq := aws.ToString(r.SequenceNumber)
			ev.Records = append(ev.Records, events.KinesisEventRecord{
				AwsRegion: "us-east-1", EventID: "shardId-000000000000:" + seq, EventName: "aws:kinesis:record",
				EventSource: "aws:kinesis", EventSourceArn: "arn:aws:kinesis:us-east-1:123456789012:stream/" + kinesisEventStream,
				EventVersion: "1.0", InvokeIdentityArn: "arn:aws:iam::123456789012:role/ratewarden-aggregate",
				Kinesis: events.KinesisRecord{ApproximateArrivalTimestamp: events.SecondsEpochTime{Time: aws.ToTime(r.ApproximateArrivalTimestamp)},
					Data: r.Data, PartitionKey: aws.ToString(r.PartitionKey), SequenceNumber: seq, KinesisSchemaVersion: "1.0"},
			})
		}
		iter = got.NextShardIterator
	}
	b, err := json.MarshalIndent(ev, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kinesisEventFile, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readKinesisEvent reads the recorded event, raw and decoded.
func readKinesisEvent(t *testing.T) ([]byte, events.KinesisEvent) {
	t.Helper()
	raw, err := os.ReadFile(kinesisEventFile)
	if err != nil {
		t.Fatal(err)
	}
	return raw, unmarshalEvent(t, raw)
}

// eventDecisions decodes every record of ev.
func eventDecisions(t *testing.T, ev events.KinesisEvent) []decisions.Decision {
	t.Helper()
	var out []decisions.Decision
	for _, r := range ev.Records {
		var err error
		if out, err = columnar.DecodeRecord(r.Kinesis.Data, out); err != nil {
			t.Fatalf("record %s: %v", r.Kinesis.SequenceNumber, err)
		}
	}
	return out
}

// jsonLines returns ds as sorted JSON lines.
func jsonLines(ds []decisions.Decision) []string {
	out := make([]string, len(ds))
	for i := range ds {
		out[i] = string(decisions.AppendJSON(nil, &ds[i]))
	}
	slices.Sort(out)
	return out
}

// lambdaRuntime is an AWS Lambda runtime API on loopback: each invoke
// hands one event to the function's next-invocation poll and waits for
// what the function posts back. It serves one function process.
type lambdaRuntime struct {
	srv     *httptest.Server
	next    chan lambdaInvocation
	results chan lambdaResult
	n       int
}

type lambdaInvocation struct {
	id    string
	event []byte
}

type lambdaResult struct {
	id     string
	body   []byte
	failed bool // posted to .../error (or init/error)
}

func newLambdaRuntime(t *testing.T) *lambdaRuntime {
	rt := &lambdaRuntime{next: make(chan lambdaInvocation), results: make(chan lambdaResult, 4)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", func(w http.ResponseWriter, r *http.Request) {
		select {
		case inv := <-rt.next:
			h := w.Header()
			h.Set("Lambda-Runtime-Aws-Request-Id", inv.id)
			h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(time.Now().Add(5*time.Minute).UnixMilli(), 10))
			h.Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:123456789012:function:ratewarden-aggregate")
			h.Set("Lambda-Runtime-Trace-Id", "Root=1-5bef4de7-ad49b0e87f6ef6c87fc2e700;Parent=9a9197af755a6419;Sampled=1")
			h.Set("Content-Type", "application/json")
			w.Write(inv.event)
		case <-r.Context().Done():
		}
	})
	post := func(failed bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			rt.results <- lambdaResult{id: r.PathValue("id"), body: body, failed: failed}
			w.WriteHeader(http.StatusAccepted)
		}
	}
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", post(false))
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", post(true))
	mux.HandleFunc("POST /2018-06-01/runtime/init/error", post(true))
	rt.srv = httptest.NewServer(mux)
	t.Cleanup(rt.srv.Close)
	return rt
}

// lambdaProc is `ratewarden lambda` running against a lambdaRuntime, its
// stdout and stderr in files.
type lambdaProc struct {
	rt             *lambdaRuntime
	stdout, stderr string
	exited         chan error
}

// startLambda runs the binary's lambda command with args against a new
// runtime API; it is killed when the test ends.
func startLambda(t *testing.T, bin string, args ...string) *lambdaProc {
	t.Helper()
	rt := newLambdaRuntime(t)
	dir := t.TempDir()
	p := &lambdaProc{rt: rt, stdout: filepath.Join(dir, "stdout"), stderr: filepath.Join(dir, "stderr"), exited: make(chan error, 1)}
	stdout, err := os.Create(p.stdout)
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.Create(p.stderr)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"lambda"}, args...)...)
	cmd.Env = append(cmd.Environ(), "AWS_LAMBDA_RUNTIME_API="+strings.TrimPrefix(rt.srv.URL, "http://"),
		"AWS_LAMBDA_FUNCTION_NAME=ratewarden-aggregate", "AWS_LAMBDA_FUNCTION_VERSION=$LATEST", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=512")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdout.Close()
	stderr.Close()
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// invoke serves event to the function's next poll and returns what it
// answered.
func (p *lambdaProc) invoke(t *testing.T, event []byte) lambdaResult {
	t.Helper()
	p.rt.n++
	id := fmt.Sprintf("c0ffee00-0000-4000-8000-%012d", p.rt.n)
	// Generous bounds, only so that a hung function fails the test
	// rather than the test binary's timeout.
	hung := time.After(2 * time.Minute)
	select {
	case p.rt.next <- lambdaInvocation{id: id, event: event}:
	case err := <-p.exited:
		t.Fatalf("the function exited before invocation %s: %v\n%s", id, err, readFile(t, p.stderr))
	case <-hung:
		t.Fatalf("the function did not poll for invocation %s\n%s", id, readFile(t, p.stderr))
	}
	select {
	case r := <-p.rt.results:
		if r.id != id {
			t.Fatalf("answer for %s, want %s: %s", r.id, id, r.body)
		}
		return r
	case err := <-p.exited:
		t.Fatalf("the function exited during invocation %s: %v\n%s", id, err, readFile(t, p.stderr))
	case <-hung:
		t.Fatalf("no answer to invocation %s\n%s", id, readFile(t, p.stderr))
	}
	return lambdaResult{}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// invocationLine is the JSON line the function logs per invocation.
type invocationLine struct {
	Level, Msg      string
	RequestID       string `json:"request_id"`
	Shard, From, To string
	Records, Events uint64
	Corrupt         uint64
	Outputs         int
	Folded          uint64
	EarlyWrites     uint64 `json:"early_writes"`
	FailedAt        string `json:"failed_at"`
	Err             string
	Problems        []string
}

// invocationLines parses the stderr lines of the function's invocations.
func invocationLines(t *testing.T, path string) []invocationLine {
	t.Helper()
	var out []invocationLine
	for _, line := range bytes.Split(readFile(t, path), []byte("\n")) {
		var l invocationLine
		if json.Unmarshal(line, &l) == nil && l.Msg == "lambda aggregate" {
			out = append(out, l)
		}
	}
	return out
}

// batchItemFailures decodes a Kinesis handler's answer.
func batchItemFailures(t *testing.T, r lambdaResult) []string {
	t.Helper()
	if r.failed {
		t.Fatalf("the invocation failed: %s", r.body)
	}
	var resp events.KinesisEventResponse
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatalf("answer %s: %v", r.body, err)
	}
	var out []string
	for _, f := range resp.BatchItemFailures {
		out = append(out, f.ItemIdentifier)
	}
	return out
}

// requestsServed counts the decisions of ds that the EMF counts as
// Requests: the edge's decisions, not its drop counts or feedback actions.
func requestsServed(ds []decisions.Decision) int {
	n := 0
	for i := range ds {
		if ds[i].Kind == decisions.KindDecision {
			n++
		}
	}
	return n
}

// TestLambdaAggregate runs `ratewarden lambda --aggregate --partials dir:`
// against a runtime API serving the recorded Kinesis event:
//   - the first invocation answers no batch item failures; its stdout is
//     EMF that `ratewarden emf validate` accepts, whose service-wide
//     Requests are the event's; its partials hold every decision; stderr
//     has one JSON line with its counts;
//   - a retry of the same event leaves the partial files byte for byte as
//     they were (replaced, not doubled) and writes the same EMF again,
//     with the same rw_key;
//   - a second function given the event with a corrupt record among the
//     others skips and counts it (named in its stderr line) and writes the
//     same partial files, the rest being aggregated;
//   - a function whose partials store fails names the first record as the
//     batch item failure, writes no EMF and logs the error.
func TestLambdaAggregate(t *testing.T) {
	bin := buildBinary(t)
	raw, ev := readKinesisEvent(t)
	ds := eventDecisions(t, ev)
	partials := t.TempDir()
	args := []string{"--aggregate", "--partials", "dir:" + partials, "--ignore-time"}
	f := startLambda(t, bin, args...)

	if fails := batchItemFailures(t, f.invoke(t, raw)); len(fails) != 0 {
		t.Fatalf("batch item failures %v", fails)
	}
	emf1 := readFile(t, f.stdout)
	emfFile := filepath.Join(t.TempDir(), "emf.jsonl")
	if err := os.WriteFile(emfFile, emf1, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "emf", "validate", "--now", kinesisEventStart.Add(time.Hour).Format(time.RFC3339), emfFile).CombinedOutput(); err != nil {
		t.Fatalf("emf validate: %v\n%s", err, out)
	}
	if got, want := emfServiceRequests(t, emfFile), requestsServed(ds); got != want || want == 0 {
		t.Fatalf("EMF Requests %d, the event's requests %d", got, want)
	}
	var total uint64
	windows := readPartials(t, partials, time.Minute)
	for _, p := range windows {
		total += p.Events
	}
	files := partialFiles(t, partials)
	if total != uint64(len(ds)) || len(windows) != 2 {
		t.Fatalf("partials hold %d events in %d windows, the event %d decisions in 2", total, len(windows), len(ds))
	}
	lines := invocationLines(t, f.stderr)
	first, last := ev.Records[0].Kinesis.SequenceNumber, ev.Records[len(ev.Records)-1].Kinesis.SequenceNumber
	want := invocationLine{Level: "INFO", Msg: "lambda aggregate", RequestID: "c0ffee00-0000-4000-8000-000000000001",
		Shard: "shardId-000000000000", From: first, To: last, Records: uint64(len(ev.Records)), Events: uint64(len(ds)), Outputs: len(files)}
	if len(lines) != 1 || fmt.Sprint(lines[0]) != fmt.Sprint(want) {
		t.Fatalf("stderr lines %+v, want %+v", lines, want)
	}

	// Lambda retries the same records.
	if fails := batchItemFailures(t, f.invoke(t, raw)); len(fails) != 0 {
		t.Fatalf("retry: batch item failures %v", fails)
	}
	if again := partialFiles(t, partials); !maps.EqualFunc(again, files, bytes.Equal) {
		t.Fatal("a retry changed the partial files")
	}
	if emf2 := readFile(t, f.stdout)[len(emf1):]; !bytes.Equal(emf2, emf1) {
		t.Fatalf("a retry wrote other EMF documents than the first invocation:\n%.400s\nthen\n%.400s", emf1, emf2)
	}

	// The event with a corrupt record between its second and third.
	bad := ev
	bad.Records = slices.Clone(ev.Records)
	corrupt := bad.Records[1]
	seq, _ := new(big.Int).SetString(corrupt.Kinesis.SequenceNumber, 10)
	corrupt.Kinesis.SequenceNumber = seq.Add(seq, big.NewInt(1)).String()
	corrupt.EventID = "shardId-000000000000:" + corrupt.Kinesis.SequenceNumber
	corrupt.Kinesis.Data = []byte{byte(columnar.CodecArrow), 0xde, 0xad, 0xbe, 0xef}
	bad.Records = slices.Insert(bad.Records, 2, corrupt)
	badRaw, err := json.Marshal(bad)
	if err != nil {
		t.Fatal(err)
	}
	partials2 := t.TempDir()
	g := startLambda(t, bin, "--aggregate", "--partials", "dir:"+partials2, "--ignore-time")
	if fails := batchItemFailures(t, g.invoke(t, badRaw)); len(fails) != 0 {
		t.Fatalf("with a corrupt record: batch item failures %v", fails)
	}
	if got := partialFiles(t, partials2); !maps.EqualFunc(got, files, bytes.Equal) {
		t.Fatal("with a corrupt record the other records' partials differ")
	}
	lines = invocationLines(t, g.stderr)
	if len(lines) != 1 || lines[0].Corrupt != 1 || lines[0].Events != uint64(len(ds)) || lines[0].Records != uint64(len(bad.Records)) ||
		len(lines[0].Problems) != 1 || !strings.Contains(lines[0].Problems[0], corrupt.Kinesis.SequenceNumber) {
		t.Fatalf("with a corrupt record: stderr lines %+v", lines)
	}

	// A partials store that cannot be written.
	blocked := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocked, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h := startLambda(t, bin, "--aggregate", "--partials", "dir:"+filepath.Join(blocked, "partials"), "--ignore-time")
	if fails := batchItemFailures(t, h.invoke(t, raw)); !slices.Equal(fails, []string{first}) {
		t.Fatalf("with the partials store failing: batch item failures %v, want [%s]", fails, first)
	}
	if out := readFile(t, h.stdout); len(out) != 0 {
		t.Fatalf("with the partials store failing the function wrote EMF:\n%.400s", out)
	}
	lines = invocationLines(t, h.stderr)
	if len(lines) != 1 || lines[0].Level != "ERROR" || lines[0].FailedAt != first || lines[0].Err == "" || lines[0].Outputs != 0 {
		t.Fatalf("with the partials store failing: stderr lines %+v", lines)
	}
}

// TestLambdaAggregatePartialFailure: `ratewarden lambda --aggregate
// --commit-records 4` whose partials store cannot take a group's last
// window (a directory stands where its file goes) answers a partial batch
// failure naming that group's first record; the groups before it have
// their partials and EMF out, and of that group only the partial of its
// window before the blocked one, no EMF. Lambda's retry of
// the rest of the batch (BisectBatchOnFunctionError's split at that record),
// once the store mends, stores the rest: the partials and the EMF then hold
// every decision of the event once.
func TestLambdaAggregatePartialFailure(t *testing.T) {
	bin := buildBinary(t)
	_, ev := readKinesisEvent(t)
	ds := eventDecisions(t, ev)
	// The commit groups of about four records (where the records'
	// sequence numbers say): the failing one is the first after the first
	// group that touches two windows and is not the last.
	const group = 4
	var starts []int
	for i, rec := range ev.Records {
		if i == 0 || dkinesis.StartsCommitGroup(rec.Kinesis.SequenceNumber, group) {
			starts = append(starts, i)
		}
	}
	at := -1
	for g := 1; g+1 < len(starts) && at < 0; g++ {
		rs := eventDecisions(t, events.KinesisEvent{Records: ev.Records[starts[g]:starts[g+1]]})
		if len(rs) > 0 && !rs[0].Time.Truncate(time.Minute).Equal(rs[len(rs)-1].Time.Truncate(time.Minute)) {
			at = g
		}
	}
	if at < 0 {
		t.Fatalf("no commit group of the recorded event (groups at records %v) touches two windows with one after it", starts)
	}
	second := ev.Records[starts[at]:starts[at+1]]
	before := ev.Records[:starts[at]]
	var last time.Time
	secondDs := eventDecisions(t, events.KinesisEvent{Records: second})
	for _, d := range secondDs {
		if w := d.Time.Truncate(time.Minute); w.After(last) {
			last = w
		}
	}
	// The second group's windows before the blocked one are stored
	// before the failure (and replaced by the retry).
	var storedBefore uint64
	for _, d := range secondDs {
		if d.Time.Before(last) {
			storedBefore++
		}
	}
	if storedBefore == 0 {
		t.Fatal("the second group of the recorded event touches one window; the test wants two")
	}
	// The blocked window's output is keyed by its first event in the
	// group: its record and the events before it there.
	key := ""
	for _, rec := range second {
		for i, d := range eventDecisions(t, events.KinesisEvent{Records: []events.KinesisEventRecord{rec}}) {
			if key == "" && !d.Time.Before(last) {
				key = fmt.Sprintf("%s_%d", rec.Kinesis.SequenceNumber, i)
			}
		}
	}
	partials := t.TempDir()
	block := filepath.Join(partials, "1m0s", last.UTC().Format(time.DateOnly), fmt.Sprintf("%d.shardId-000000000000.%s.rwp", last.UnixNano(), key))
	if err := os.MkdirAll(filepath.Join(block, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := startLambda(t, bin, "--aggregate", "--partials", "dir:"+partials, "--commit-records", strconv.Itoa(group), "--ignore-time")
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	failedAt := second[0].Kinesis.SequenceNumber
	if fails := batchItemFailures(t, f.invoke(t, raw)); !slices.Equal(fails, []string{failedAt}) {
		t.Fatalf("batch item failures %v, want [%s]", fails, failedAt)
	}
	firstEvents := uint64(len(eventDecisions(t, events.KinesisEvent{Records: before})))
	// The reader skips and names the directory in the way.
	ps, problems, err := (&aggregator.PartialsDir{Dir: partials}).Read(context.Background(), time.Minute, time.Time{}, time.Now().Add(time.Hour))
	if err != nil || len(problems) != 1 || problems[0].Path != block {
		t.Fatalf("read partials: %v %v", err, problems)
	}
	var stored uint64
	for _, p := range ps {
		stored += p.Events
	}
	if stored != firstEvents+storedBefore {
		t.Fatalf("after the failure the partials hold %d events, the groups before %d and the failing one's first window %d", stored, firstEvents, storedBefore)
	}
	emfFile := filepath.Join(t.TempDir(), "emf.jsonl")
	if err := os.WriteFile(emfFile, readFile(t, f.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := emfServiceRequests(t, emfFile), requestsServed(eventDecisions(t, events.KinesisEvent{Records: before})); got != want {
		t.Fatalf("after the failure the EMF counts %d requests, the groups before %d", got, want)
	}
	lines := invocationLines(t, f.stderr)
	if len(lines) != 1 || lines[0].FailedAt != failedAt || lines[0].Level != "ERROR" || !strings.Contains(lines[0].Err, key) {
		t.Fatalf("stderr lines %+v", lines)
	}

	if err := os.RemoveAll(block); err != nil {
		t.Fatal(err)
	}
	// Lambda's retry from the named record holds fewer records than the
	// failed invocation did: it ends inside the failed group (or just
	// after its first record), and the next invocation holds the rest.
	// The partial the failed group stored is replaced, not added to.
	cut := starts[at] + max(1, len(second)/2)
	for _, recs := range [][]events.KinesisEventRecord{ev.Records[starts[at]:cut], ev.Records[cut:]} {
		rest := ev
		rest.Records = recs
		if raw, err = json.Marshal(rest); err != nil {
			t.Fatal(err)
		}
		if fails := batchItemFailures(t, f.invoke(t, raw)); len(fails) != 0 {
			t.Fatalf("retry: batch item failures %v", fails)
		}
	}
	stored = 0
	for _, p := range readPartials(t, partials, time.Minute) {
		stored += p.Events
	}
	if stored != uint64(len(ds)) {
		t.Fatalf("after the retry the partials hold %d events, the event %d", stored, len(ds))
	}
	if err := os.WriteFile(emfFile, readFile(t, f.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := emfServiceRequests(t, emfFile), requestsServed(ds); got != want {
		t.Fatalf("after the retry the EMF counts %d requests, the event %d", got, want)
	}
}

// TestLambdaAggregateMapping checks deploy/lambda-aggregate.yaml against
// what the function's failure semantics need: batch item failures
// reported, the batch split at the failed record (so that the retry holds
// the failed commit group's records and writes its keys again), one batch
// of a shard at a time, from the stream's oldest record.
func TestLambdaAggregateMapping(t *testing.T) {
	tmpl := readTemplate(t, "../deploy/lambda-aggregate.yaml")
	var mappings []map[string]any
	for _, r := range tmpl.Resources {
		if r.Type == "AWS::Lambda::EventSourceMapping" {
			mappings = append(mappings, r.Properties)
		}
	}
	if len(mappings) != 1 {
		t.Fatalf("%d event-source mappings, want 1", len(mappings))
	}
	m := mappings[0]
	for key, want := range map[string]string{
		"FunctionResponseTypes":      "[ReportBatchItemFailures]",
		"BisectBatchOnFunctionError": "true",
		"ParallelizationFactor":      "1",
		"StartingPosition":           "TRIM_HORIZON",
		"BatchSize":                  "map[Ref:BatchSize]",
	} {
		if got := fmt.Sprint(m[key]); got != want {
			t.Errorf("%s: %s, want %s", key, got, want)
		}
	}
}

// TestLambdaAggregateFlags: `ratewarden lambda --aggregate` takes --top-k,
// --max-names and --rules as aggregate does: with --top-k 3 every
// top-offenders list of its partials holds at most three clients (the
// recorded event has more in each window, as a function without the flag
// keeps them); with --max-names 2 each window keeps two rules apart and
// counts the other decisions under __other__, as its invocation line
// says, where the default keeps every rule and folds none; and with
// --rules the EMF has [Tier, Rule] documents for that rule and __other__
// only; with --max-ahead 1, the recorded decisions restamped in time
// order over ten minutes make a backlog of more windows than a group
// holds (its first and the one after): it is cut at each record whose
// first decision begins another epoch, here a window, a new group
// beginning there, counted as early writes, and its windows hold the
// events and decisions they hold without the flag, nothing lost, a window
// that spans a cut in a partial per group. Out-of-range
// values are refused in TestAggregatorCapFlags, one table for every
// command that runs the aggregator.
func TestLambdaAggregateFlags(t *testing.T) {
	bin := buildBinary(t)
	raw, ev := readKinesisEvent(t)
	ds := eventDecisions(t, ev)
	rule := ""
	for _, d := range ds {
		if d.Kind == decisions.KindDecision && d.Rule != "" {
			rule = d.Rule
			break
		}
	}
	var folded, early uint64 // the last run's, from its invocation line
	var outputs int
	payload := raw // the event invoked
	run := func(args ...string) (map[time.Time]*aggregator.Partial, map[string]bool) {
		t.Helper()
		partials := t.TempDir()
		f := startLambda(t, bin, append([]string{"--aggregate", "--partials", "dir:" + partials, "--ignore-time"}, args...)...)
		if fails := batchItemFailures(t, f.invoke(t, payload)); len(fails) != 0 {
			t.Fatalf("%q: batch item failures %v", args, fails)
		}
		lines := invocationLines(t, f.stderr)
		if len(lines) != 1 {
			t.Fatalf("%q: %d invocation lines\n%s", args, len(lines), readFile(t, f.stderr))
		}
		folded, early, outputs = lines[0].Folded, lines[0].EarlyWrites, lines[0].Outputs
		return readPartials(t, partials, time.Minute), emfRules(t, readFile(t, f.stdout))
	}
	topLen := func(ps map[time.Time]*aggregator.Partial) (most int) {
		for _, p := range ps {
			most = max(most, p.Offenders.Requests.Len(), p.Offenders.Refusals.Len())
		}
		return most
	}
	defaults, allRules := run()
	if rule == "" || topLen(defaults) <= 3 || len(allRules) < 2 || !allRules[rule] {
		t.Fatalf("without flags: rule %q, top lists of %d clients, EMF rules %v; the test wants a rule and more than 3 clients", rule, topLen(defaults), allRules)
	}
	if most, other := windowRules(defaults); most <= 2 || other != 0 || folded != 0 {
		t.Fatalf("without flags: up to %d rules a window, %d decisions under %s, %d folded; the test wants more than 2 rules and none folded",
			most, other, aggregator.OtherKey, folded)
	}
	if early != 0 {
		t.Fatalf("without flags: %d early writes", early)
	}
	payload = restamped(t, ev, 10*time.Minute)
	spread, _ := run()
	windows, whole := map[time.Time]bool{}, outputs
	for _, d := range eventDecisions(t, unmarshalEvent(t, payload)) {
		windows[d.Time.Truncate(time.Minute)] = true
	}
	ps, _ := run("--max-ahead", "1")
	// With --max-ahead 1 an epoch is a window: a record whose first
	// decision falls in another window than the record before it's
	// begins a group. Each cut falls at a record and splits at most the
	// window that record begins in, the events being in time order.
	spreadEv := unmarshalEvent(t, payload)
	cuts, prev := uint64(0), time.Time{}
	for i, rec := range spreadEv.Records {
		ds := eventDecisions(t, events.KinesisEvent{Records: []events.KinesisEventRecord{rec}})
		if len(ds) == 0 {
			continue
		}
		if w := ds[0].Time.Truncate(time.Minute); i > 0 && !w.Equal(prev) {
			cuts++
		}
		prev = ds[0].Time.Truncate(time.Minute)
	}
	payload = raw
	if len(windows) < 4 || early != cuts || outputs < whole || outputs > whole+int(early) {
		t.Errorf("--max-ahead 1: %d windows, %d early writes (want %d), %d outputs (%d without the flag, want at most one more a write); the test wants 4 windows or more",
			len(windows), early, cuts, outputs, whole)
	}
	if len(ps) != len(spread) || len(ps) != len(windows) {
		t.Errorf("--max-ahead 1: %d windows, %d without the flag, %d in the event", len(ps), len(spread), len(windows))
	}
	for start, want := range spread {
		if p := ps[start]; p == nil || p.Events != want.Events || p.Counts.Total() != want.Counts.Total() {
			t.Errorf("--max-ahead 1: window %v holds %v, without the flag %d events, %d decisions", start, p, want.Events, want.Counts.Total())
		}
	}
	ps, _ = run("--max-names", "2")
	if most, other := windowRules(ps); most > 2 || other == 0 || folded < other {
		t.Errorf("--max-names 2: up to %d rules a window, %d decisions under %s, %d folded", most, other, aggregator.OtherKey, folded)
	}
	ps, rules := run("--top-k", "3", "--rules", rule)
	if n := topLen(ps); n != 3 {
		t.Errorf("--top-k 3: top lists of up to %d clients", n)
	}
	if want := map[string]bool{rule: true, aggregator.OtherRule: true}; !maps.Equal(rules, want) {
		t.Errorf("--rules %s: EMF rules %v, want %v", rule, rules, want)
	}
}

// restamped returns ev, as JSON, with its decisions stamped in order over
// spread from the minute of the first, each record's re-encoded as Arrow.
func restamped(t *testing.T, ev events.KinesisEvent, spread time.Duration) []byte {
	t.Helper()
	n := len(eventDecisions(t, ev))
	start, i := time.Time{}, 0
	out := events.KinesisEvent{Records: slices.Clone(ev.Records)}
	for r := range out.Records {
		ds, err := columnar.DecodeRecord(out.Records[r].Kinesis.Data, nil)
		if err != nil {
			t.Fatal(err)
		}
		for j := range ds {
			if start.IsZero() {
				start = ds[j].Time.Truncate(time.Minute)
			}
			ds[j].Time = start.Add(time.Duration(i) * spread / time.Duration(n))
			i++
		}
		if out.Records[r].Kinesis.Data, err = columnar.Encode([]byte{byte(columnar.CodecArrow)}, ds, columnar.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// unmarshalEvent decodes a Kinesis event's JSON.
func unmarshalEvent(t *testing.T, raw []byte) events.KinesisEvent {
	t.Helper()
	var ev events.KinesisEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// emfRules returns the Rule values of the [Tier, Rule] documents of EMF
// lines.
func emfRules(t *testing.T, emf []byte) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, line := range bytes.Split(bytes.TrimSpace(emf), []byte("\n")) {
		var doc struct {
			AWS struct {
				CloudWatchMetrics []struct{ Dimensions [][]string }
			} `json:"_aws"`
			Rule string
		}
		if err := json.Unmarshal(line, &doc); err != nil {
			t.Fatalf("EMF line %.200s: %v", line, err)
		}
		if m := doc.AWS.CloudWatchMetrics; len(m) == 1 && len(m[0].Dimensions) == 1 && slices.Equal(m[0].Dimensions[0], []string{"Tier", "Rule"}) {
			out[doc.Rule] = true
		}
	}
	return out
}
