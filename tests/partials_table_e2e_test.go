package tests

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/report"
	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/seglog"
)

// TestAggregatePartialsTable: `ratewarden aws init` creates the partials
// table; `ratewarden aggregate --partials dynamodb:T` over a decision log
// with late events stores partials that the reports' reader merges into
// the same windows, byte for byte, as the partials the same log gives with
// --partials dir:PATH; `ratewarden report` prints the same report from
// either; report and alerts at another window length than the table's
// are refused naming the lengths it holds; and a bad spec is refused
// naming the allowed forms.
func TestAggregatePartialsTable(t *testing.T) {
	bin := buildBinary(t)
	env := standInEnv(t)
	tmp := t.TempDir()
	table := fmt.Sprint("e2e-partials-", time.Now().UnixNano())
	out := runBinary(t, bin, env, "aws", "init", "--stream", "", "--counters-table", "", "--lists-table", "",
		"--leases-table", "", "--state-table", "", "--partials-table", table)
	if !strings.Contains(out, "table "+table+": created") {
		t.Fatalf("aws init said:\n%s", out)
	}
	dc := dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(awstest.Endpoint(t, awstest.DynamoDBEnv))
	})
	t.Cleanup(func() { dc.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)}) })

	logDir := filepath.Join(tmp, "log")
	l, err := seglog.Open(logDir, seglog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := decisionlog.NewWriter(l, decisionlog.WriterOptions{})
	start := time.Date(2026, 11, 30, 23, 59, 50, 0, time.UTC) // across a UTC midnight
	g := decisiontest.NewGenerator(17, start)
	for i := range 30 {
		ds := g.Batch(1000)
		for j := i % 5; j < len(ds); j += 89 {
			ds[j].Time = ds[j].Time.Add(-2 * time.Second) // late: corrections
		}
		if err := w.WriteBatch(ds); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "partials")
	for i, spec := range []string{"dynamodb:" + table, "dir:" + dir} {
		runBinary(t, bin, env, "aggregate", "--no-follow", "--admin-listen", "off", "--decisions-dir", logDir,
			"--state-dir", filepath.Join(tmp, fmt.Sprint("state-", i)), "--partials", spec, "--window", "1s", "--lateness", "200ms")
	}

	from, to := start.Add(-time.Minute), start.Add(time.Minute)
	fromTable, err := report.ReadPartials(t.Context(), &aggregator.PartialsTable{API: dc, Table: table}, time.Second, from, to, nil)
	if err != nil {
		t.Fatal(err)
	}
	fromDir, err := report.ReadDir(t.Context(), dir, time.Second, from, to, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(fromTable.Problems)+len(fromDir.Problems) > 0 {
		t.Fatalf("problems: table %v, dir %v", fromTable.Problems, fromDir.Problems)
	}
	var events uint64
	got, want := encodeWindows(t, fromTable.Parts), encodeWindows(t, fromDir.Parts)
	for _, p := range fromDir.Parts {
		events += p.Events
	}
	if len(want) < 10 || events != 30_000 {
		t.Fatalf("the directory holds %d windows of %d events, want at least 10 of 30000", len(want), events)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the table's %d merged windows differ from the directory's %d", len(got), len(want))
	}

	// The reports are on stdout; stderr may hold the AWS SDK's own
	// warnings (a connection dynalite closed under load), which differ
	// from run to run.
	reportOf := func(spec string) string {
		cmd := exec.Command(bin, "report", "--partials", spec, "--window", "1s", "--format", "json",
			"--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339))
		cmd.Env = append(cmd.Environ(), env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("report --partials %s: %v\n%s", spec, err, stderr.Bytes())
		}
		return strings.ReplaceAll(string(out), spec, "SPEC")
	}
	if a, b := reportOf("dynamodb:"+table), reportOf("dir:"+dir); a != b {
		t.Fatalf("report from the table:\n%s\nfrom the directory:\n%s", a, b)
	}

	// Read at another length than the table holds (--window left at
	// 1m), report and alerts exit 1 naming the table and its lengths,
	// where they read nothing and said the range was quiet.
	cfgPath := filepath.Join(tmp, "ratewarden.yaml")
	if err := os.WriteFile(cfgPath, []byte("tiers:\n  anonymous:\n    global: {limit: 120, window: 1m}\nalerts:\n  sinks:\n    file: \"-\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refused := "partials table " + table + " holds no partials of 1m0s windows; it holds 1s: give --window"
	for _, args := range [][]string{
		{"report", "--partials", "dynamodb:" + table, "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339)},
		{"alerts", "--config", cfgPath, "--partials", "dynamodb:" + table, "--state-dir", filepath.Join(tmp, "alerts-state")},
	} {
		if code, out := runBinaryStatus(t, bin, env, args...); code != 1 || !strings.Contains(out, refused) {
			t.Errorf("%s at 1m over a table of 1s partials: exit %d, want 1 and %q:\n%s", args[0], code, refused, out)
		}
	}

	cmd := exec.Command(bin, "aggregate", "--no-follow", "--admin-listen", "off", "--decisions-dir", logDir,
		"--state-dir", filepath.Join(tmp, "state-bad"), "--partials", "s3:bucket")
	cmd.Env = append(cmd.Environ(), env...)
	bad, err := cmd.CombinedOutput()
	if err == nil || !bytes.Contains(bad, []byte("want dir:PATH or dynamodb:TABLE")) {
		t.Fatalf("aggregate --partials s3:bucket: %v\n%s", err, bad)
	}
}

// encodeWindows encodes merged windows in order of start.
func encodeWindows(t *testing.T, m map[time.Time]*aggregator.Partial) []string {
	t.Helper()
	var out []string
	for _, s := range slices.SortedFunc(maps.Keys(m), time.Time.Compare) {
		b, err := m[s].AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s.Format(time.RFC3339Nano)+" "+string(b))
	}
	return out
}
