package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/seglog"
)

var update = flag.Bool("update", false, "rewrite the golden and recorded files in testdata")

// fixedLog writes the decisions of the JSON-lines file path into a new
// decision log, in one batch, and returns the log's directory and the
// decisions.
func fixedLog(t *testing.T, path string) (string, []decisions.Decision) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ds []decisions.Decision
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		d, _, err := decisions.ParseJSON(sc.Bytes())
		if err != nil {
			t.Fatalf("%s:%d: %v", path, len(ds)+1, err)
		}
		ds = append(ds, d)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return writeLog(t, ds), ds
}

// writeLog writes ds into a new decision log, in one batch, and returns
// the log's directory.
func writeLog(t *testing.T, ds []decisions.Decision) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "log")
	l, err := seglog.Open(dir, seglog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := decisionlog.NewWriter(l, decisionlog.WriterOptions{}).WriteBatch(ds); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// emfDoc is what the totals below read of an EMF document.
type emfDoc struct {
	Dims    string // the dimension set, such as "[Tier Rule]"
	Metrics map[string]float64
}

// readEMF reads the documents of an EMF file: each document's dimension
// set and its single-valued metrics.
func readEMF(t *testing.T, path string) []emfDoc {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []emfDoc
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var raw map[string]json.RawMessage
		var meta struct {
			CloudWatchMetrics []struct {
				Dimensions [][]string
				Metrics    []struct{ Name string }
			}
		}
		if err := json.Unmarshal(line, &raw); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if err := json.Unmarshal(raw["_aws"], &meta); err != nil || len(meta.CloudWatchMetrics) != 1 || len(meta.CloudWatchMetrics[0].Dimensions) != 1 {
			t.Fatalf("%s: not one directive with one dimension set: %s", path, line)
		}
		d := emfDoc{Dims: fmt.Sprint(meta.CloudWatchMetrics[0].Dimensions[0]), Metrics: map[string]float64{}}
		for _, m := range meta.CloudWatchMetrics[0].Metrics {
			var v float64
			if json.Unmarshal(raw[m.Name], &v) == nil {
				d.Metrics[m.Name] = v
			}
		}
		docs = append(docs, d)
	}
	return docs
}

// TestAggregateEMFGolden: the fixed decision log
// testdata/aggregate/decisions.jsonl (80 decisions of the traffic
// generator, seed 10, spread over 24 s with blocks, challenges, fails open,
// an origin timeout, one event 15 s out of order, a drop report and a
// feedback action edited in; a log this small is read in one flush, so the
// event out of order still joins its window), written with the log writer
// and rolled up by the
// built binary's `replay` in 10 s windows with the seed configuration's
// rules and in 1 min windows with the rule budget, gives the EMF of
// testdata/aggregate/emf-*.jsonl (-update rewrites them); `emf validate`
// accepts every document; and every dimension set's totals equal the
// log's. (`replay`, not `aggregate`, because the windows of a fixed log
// are older than the 14 days CloudWatch accepts: replay stamps them as
// they are, aggregate would refuse them and count them as emf rejected.
// Replay checks no timestamp against the clock, so the test passes
// whatever the date.)
func TestAggregateEMFGolden(t *testing.T) {
	bin := buildBinary(t)
	logDir, ds := fixedLog(t, filepath.Join("testdata", "aggregate", "decisions.jsonl"))
	var want struct {
		requests, ruled, dropped, originErrors float64
		byOutcome                              map[string]float64
	}
	want.byOutcome = map[string]float64{}
	for _, d := range ds {
		switch d.Kind {
		case decisions.KindDrops:
			want.dropped += float64(d.Dropped)
		case decisions.KindDecision:
			want.requests++
			want.byOutcome[d.Outcome.String()]++
			if d.Rule != "" {
				want.ruled++
			}
			if d.ResponseError == decisions.UpstreamTimeout {
				want.originErrors++
			}
		}
	}
	metricOf := map[string]string{"allow": "Allowed", "block": "Blocked", "challenge": "Challenged", "fail_open": "FailOpen",
		"shadow_block": "ShadowBlocked", "deny_listed": "DenyListed", "allow_listed": "AllowListed"}
	if len(want.byOutcome) != len(metricOf) || want.dropped == 0 || want.originErrors == 0 {
		t.Fatalf("the fixture's outcomes %v, drops %v, origin errors %v: not what this test checks", want.byOutcome, want.dropped, want.originErrors)
	}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"emf-10s.jsonl", []string{"--window", "10s", "--config", "../examples/seed.yaml"}},
		{"emf-1m.jsonl", []string{"--window", "1m"}},
	} {
		out := filepath.Join(t.TempDir(), "replay")
		runBinary(t, bin, nil, append([]string{"replay", "--decisions-dir", logDir, "--out", out}, c.args...)...)
		file := filepath.Join(out, "emf.jsonl")
		runBinary(t, bin, nil, "emf", "validate", "--ignore-time", file)
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		golden := filepath.Join("testdata", "aggregate", c.name)
		if *update {
			if err := os.WriteFile(golden, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if b, err := os.ReadFile(golden); err != nil || !bytes.Equal(got, b) {
			t.Errorf("%s: the EMF differs from %s (%v; run with -update after checking)", c.name, golden, err)
		}

		sums := map[string]float64{}
		service := map[string]float64{}
		for _, d := range readEMF(t, file) {
			sums[d.Dims] += d.Metrics["Requests"]
			if d.Dims == "[]" {
				for name, v := range d.Metrics {
					service[name] += v
				}
			}
		}
		for _, dims := range []string{"[]", "[Tier]", "[Outcome]", "[Node]"} {
			if sums[dims] != want.requests {
				t.Errorf("%s: Requests by %s add up to %v, the log holds %v decisions", c.name, dims, sums[dims], want.requests)
			}
		}
		if sums["[Tier Rule]"] != want.ruled {
			t.Errorf("%s: Requests by [Tier Rule] add up to %v, the log holds %v decisions with a rule", c.name, sums["[Tier Rule]"], want.ruled)
		}
		for outcome, n := range want.byOutcome {
			if service[metricOf[outcome]] != n {
				t.Errorf("%s: %s adds up to %v, the log holds %v %s decisions", c.name, metricOf[outcome], service[metricOf[outcome]], n, outcome)
			}
		}
		if service["DecisionsDropped"] != want.dropped || service["OriginErrors"] != want.originErrors {
			t.Errorf("%s: DecisionsDropped %v and OriginErrors %v, the log %v and %v", c.name,
				service["DecisionsDropped"], service["OriginErrors"], want.dropped, want.originErrors)
		}
	}
}

// TestAggregateOldLogEMFRejected: `ratewarden aggregate --emf file:`
// over a log whose windows are 20 days old, and one decision stamped 3
// hours ahead of the clock, writes no document CloudWatch would drop:
// its summary line counts them by reason, "emf rejected N (older than 14
// days N, over 2h ahead N, invalid 0)", and stderr says once for each
// reason why, however many documents; a log of the last minutes rejects
// none and its summary says nothing of it.
func TestAggregateOldLogEMFRejected(t *testing.T) {
	bin := buildBinary(t)
	now := time.Now().UTC()
	at := func(start time.Time, n int) []decisions.Decision {
		var ds []decisions.Decision
		for i := range n {
			ds = append(ds, decisions.Decision{Time: start.Add(time.Duration(i) * 20 * time.Second), Outcome: decisions.Allow, Tier: "anonymous",
				Rule: "anonymous:global", Node: "edge-1", ClientIP: netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)})})
		}
		return ds
	}
	run := func(ds []decisions.Decision) (string, []byte) {
		t.Helper()
		emfFile := filepath.Join(t.TempDir(), "emf.jsonl")
		out := runBinary(t, bin, nil, "aggregate", "--no-follow", "--admin-listen", "off", "--decisions-dir", writeLog(t, ds),
			"--state-dir", t.TempDir(), "--emf", "file:"+emfFile, "--window", "1m")
		b, err := os.ReadFile(emfFile)
		if err != nil {
			t.Fatal(err)
		}
		return out, b
	}

	// 6 windows 20 days old, then a decision 3 h ahead, a window of its own.
	out, written := run(append(at(now.Add(-20*24*time.Hour), 18), at(now.Add(3*time.Hour), 1)...))
	// The last summary line is the run's; those before it, its progress.
	ms := regexp.MustCompile(`aggregate: events 19, .*, emf rejected (\d+) \(older than 14 days (\d+), over 2h ahead (\d+), invalid 0\)\n`).FindAllStringSubmatch(out, -1)
	if ms == nil {
		t.Fatalf("no summary of the rejected documents:\n%s", out)
	}
	m := ms[len(ms)-1]
	total, old, ahead := atoi(t, m[1]), atoi(t, m[2]), atoi(t, m[3])
	if old < 6 || ahead < 1 || total != old+ahead {
		t.Errorf("rejected %d: %d older than 14 days (want one a window or more, of 6), %d ahead\n%s", total, old, ahead, out)
	}
	if len(bytes.TrimSpace(written)) > 0 {
		t.Errorf("the EMF file holds documents CloudWatch drops:\n%s", written)
	}
	for _, reason := range []string{"older than 14 days", "over 2h ahead"} {
		if n := strings.Count(out, "aggregate: warning: emf documents "+reason+" "); n != 1 {
			t.Errorf("%d warnings of documents %s, want 1:\n%s", n, reason, out)
		}
	}

	out, written = run(at(now.Add(-5*time.Minute), 6))
	if strings.Contains(out, "emf rejected") || strings.Contains(out, "warning") || len(bytes.TrimSpace(written)) == 0 {
		t.Errorf("a log of the last minutes: the EMF file holds %d bytes\n%s", len(written), out)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAggregateEMFFileNewDirectory: `ratewarden aggregate --emf
// file:DIR/emf.jsonl` with DIR not made yet makes it, as --decisions-dir
// and --state-dir are made, and writes the window's documents there,
// where it failed at the start with "no such file or directory".
func TestAggregateEMFFileNewDirectory(t *testing.T) {
	bin := buildBinary(t)
	var ds []decisions.Decision
	start := time.Now().UTC().Add(-5 * time.Minute)
	for i := range 5 {
		ds = append(ds, decisions.Decision{Time: start.Add(time.Duration(i) * time.Second), Outcome: decisions.Allow, Tier: "anonymous",
			Rule: "anonymous:global", Node: "edge-1", ClientIP: netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)})})
	}
	emfFile := filepath.Join(t.TempDir(), "metrics", "emf", "emf.jsonl")
	out := runBinary(t, bin, nil, "aggregate", "--no-follow", "--admin-listen", "off", "--decisions-dir", writeLog(t, ds),
		"--state-dir", t.TempDir(), "--emf", "file:"+emfFile, "--window", "1m")
	if docs := readEMF(t, emfFile); len(docs) == 0 {
		t.Errorf("no documents in %s\n%s", emfFile, out)
	}
}
