package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/seglog"
)

// TestReportCommand runs report and whatif as cron would: from a log and
// from the partials aggregate stored, to --out, with exit codes that say
// what happened; a failed run leaves --out as it was.
func TestReportCommand(t *testing.T) {
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	logDir := filepath.Join(dir, "log")
	l, err := seglog.Open(logDir, seglog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ds := decisiontest.NewGenerator(3, t0).Batch(3000)
	for i := range ds {
		ds[i].Time = t0.Add(ds[i].Time.Sub(t0) * 60)
	}
	if err := decisionlog.NewWriter(l, decisionlog.WriterOptions{}).WriteBatch(ds); err != nil {
		t.Fatal(err)
	}
	l.Close()
	partials := filepath.Join(dir, "partials")
	if code, _, errs := runCLI(t, nil, "aggregate", "--decisions-dir", logDir, "--state-dir", filepath.Join(dir, "state"),
		"--partials", "dir:"+partials, "--no-follow", "--admin-listen", "off"); code != 0 {
		t.Fatalf("aggregate: exit %d: %s", code, errs)
	}
	out := filepath.Join(dir, "report.json")
	from, to := t0.Format(time.RFC3339), t0.Add(2*time.Minute).Format(time.RFC3339)
	code, stdout, errs := runCLI(t, nil, "report", "--partials", "dir:"+partials, "--from", from, "--to", to, "--format", "json", "--out", out)
	if code != 0 || stdout != "" || !strings.Contains(errs, "windows 2 of 2") || !strings.Contains(errs, "complete") {
		t.Fatalf("report from partials: exit %d, stdout %q, stderr %s", code, stdout, errs)
	}
	stored, _ := os.ReadFile(out)
	code, stdout, errs = runCLI(t, nil, "report", "--decisions-dir", logDir, "--from", from, "--to", to, "--format", "json")
	if code != 0 {
		t.Fatalf("report from the log: exit %d: %s", code, errs)
	}
	// The same report either way, but for the source line.
	strip := func(s string) string {
		_, rest, _ := strings.Cut(s, `"source"`)
		_, rest, _ = strings.Cut(rest, "\n")
		return rest
	}
	if strip(stdout) != strip(string(stored)) || len(stored) < 1000 {
		t.Errorf("the report of the log differs from the report of its stored partials:\n%s\n---\n%s", stdout, stored)
	}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"report", "--partials", "dir:" + partials, "--from", to, "--to", from, "--out", out}, 2, "--from " + to + " is not before --to " + from},
		{[]string{"report", "--partials", "dir:" + partials, "--from", from, "--to", from, "--out", out}, 2, "is not before"},
		{[]string{"report", "--partials", "dir:" + partials, "--from", from, "--to", to, "--format", "pdf", "--out", out}, 2, `--format "pdf": want md, html, json or csv`},
		{[]string{"report", "--decisions-dir", logDir, "--from", "1h", "--format", "xml", "--out", out}, 2, `--format "xml": want md, html, json or csv`},
		{[]string{"report", "--decisions-dir", logDir, "--from", from, "--window", "7s", "--out", out}, 2, "--window 7s: want 1s to 24h, dividing an hour"},
		{[]string{"report", "--decisions-dir", logDir, "--to", "1h", "--out", out}, 2, "--from is required"},
		{[]string{"report", "--decisions-dir", logDir, "--from", from, "--top", "-1", "--out", out}, 2, "--top -1: want 0 (every row) or more"},
		{[]string{"report", "--partials", "dir:" + partials, "--from", from, "--window", "10s", "--out", out}, 1, "holds no partials of 10s windows; it holds 1m0s"},
		{[]string{"report", "--partials", "dir:" + partials, "--decisions-dir", logDir, "--from", from}, 2, "Usage: ratewarden report"},
		{[]string{"report", "--partials", "dir:" + partials, "--from", "yesterday"}, 2, "invalid value"},
		{[]string{"report", "--partials", "dir:" + partials, "--from", from, "--alerts", filepath.Join(dir, "none.jsonl"), "--out", out}, 1, "none.jsonl"},
		{[]string{"whatif", "--config", "../../examples/seed.yaml", "--decisions-dir", logDir, "--from", to, "--to", from}, 2, "is not before"},
		{[]string{"whatif", "--config", "../../examples/seed.yaml", "--decisions-dir", logDir, "--from", from, "--format", "xml"}, 2, `--format "xml": want md, html, json or csv`},
		{[]string{"whatif", "--config", "no-such.yaml", "--decisions-dir", logDir, "--from", from}, 1, "no-such.yaml"},
		{[]string{"whatif", "--config", "../../examples/seed.yaml", "--decisions-dir", logDir, "--from", from, "--top", "-1"}, 2, "--top -1: want 0 (every row) or more"},
		{[]string{"whatif", "--config", "../../examples/seed.yaml", "--decisions-dir", logDir, "--from", from, "--reorder", "0s"}, 2, "--reorder 0s: want more than 0"},
		{[]string{"whatif", "--config", "../../examples/seed.yaml", "--decisions-dir", logDir, "--from", from, "--reorder", "-1s"}, 2, "--reorder -1s: want more than 0"},
		{[]string{"whatif", "--decisions-dir", logDir, "--from", from}, 2, "Usage: ratewarden whatif"},
		{[]string{"lambda", "--help"}, 0, "-report-range"},
	}
	for _, c := range cases {
		code, _, errs := runCLI(t, nil, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, want %d; stderr lacks %q:\n%s", c.args, code, c.code, c.want, errs)
		}
	}
	if after, _ := os.ReadFile(out); string(after) != string(stored) {
		t.Error("a failed run changed --out")
	}
	// The log's quiet windows around its events are empty, not missing:
	// the totals are complete.
	code, stdout, errs = runCLI(t, nil, "report", "--decisions-dir", logDir, "--from", t0.Add(-3*time.Minute).Format(time.RFC3339), "--to", t0.Add(5*time.Minute).Format(time.RFC3339))
	if code != 0 || !strings.Contains(errs, "windows 2 of 8 (6 had no events), unreadable 0, alert lines skipped 0: complete") || strings.Contains(stdout, "partial:") {
		t.Errorf("report of a log with quiet windows: exit %d, stderr %s\n%s", code, errs, stdout)
	}
	// --top 0 is every row, in report as in whatif: every client the
	// merged lists hold, where the default is 10.
	ips := func(top string) int {
		t.Helper()
		code, stdout, errs := runCLI(t, nil, "report", "--decisions-dir", logDir, "--from", from, "--to", to, "--format", "json", "--top", top)
		var r struct {
			ByIP []json.RawMessage `json:"offenders_by_ip"`
		}
		if err := json.Unmarshal([]byte(stdout), &r); code != 0 || err != nil {
			t.Fatalf("report --top %s: exit %d, %v: %s", top, code, err, errs)
		}
		return len(r.ByIP)
	}
	if all, ten, many := ips("0"), ips("10"), ips("100000"); all != many || ten != 10 || all <= ten {
		t.Errorf("report --top 0 lists %d addresses, --top 100000 %d, --top 10 %d", all, many, ten)
	}
	code, stdout, errs = runCLI(t, nil, "whatif", "--config", "../../examples/seed.yaml", "--decisions-dir", logDir, "--from", from, "--to", to, "--format", "csv")
	if code != 0 || !strings.Contains(stdout, "summary,row,requests replayed,") || !strings.Contains(errs, "whatif: replayed") {
		t.Errorf("whatif: exit %d:\n%s\n%s", code, stdout, errs)
	}
}

func TestTimeFlag(t *testing.T) {
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"now": now, "24h": now.Add(-24 * time.Hour), "-24h": now.Add(-24 * time.Hour), "90m": now.Add(-90 * time.Minute),
		"2026-03-01T00:00:00Z": time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC),
	} {
		f := &timeFlag{now: func() time.Time { return now }}
		if err := f.Set(in); err != nil || !f.t.Equal(want) {
			t.Errorf("%q: %v, %v; want %v", in, f.t, err, want)
		}
	}
	for _, in := range []string{"--24h", "yesterday", ""} {
		f := &timeFlag{now: time.Now}
		if err := f.Set(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}
