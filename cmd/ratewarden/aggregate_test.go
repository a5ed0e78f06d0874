package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/seglog"
)

// TestAggregateReportsLoss: `aggregate` over a log with bytes flipped in
// one segment and a middle segment deleted prints a line per problem,
// naming the segment file, and a summary that counts what was lost; the
// exit code is 0, as the rest was read.
func TestAggregateReportsLoss(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "log")
	l, err := seglog.Open(dir, seglog.Options{SegmentBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	w := decisionlog.NewWriter(l, decisionlog.WriterOptions{})
	ds := decisiontest.NewGenerator(3, time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)).Batch(6000)
	for i := 0; i < len(ds); i += 100 {
		if err := w.WriteBatch(ds[i : i+100]); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segs) < 5 {
		t.Fatalf("%d segments, want five or more", len(segs))
	}
	b, err := os.ReadFile(segs[1])
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 2; i < len(b)/2+40; i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(segs[1], b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(segs[3]); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCLI(t, nil, "aggregate", "--no-follow", "--admin-listen", "off", "--decisions-dir", dir,
		"--state-dir", filepath.Join(tmp, "state"), "--partials", "dir:"+filepath.Join(tmp, "partials"))
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	for _, want := range []string{
		"aggregate: skipped: seglog: " + segs[1] + " at byte ",
		"aggregate: skipped: seglog: " + segs[4] + " at byte 0: 0 bytes skipped, 300 events lost: segment missing or removed",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	lost := func(s string) int { n, _ := strconv.Atoi(s); return n }
	m := regexp.MustCompile(`aggregate: events (\d+), .*, lost (\d+) events \(corrupt regions 1, corrupt bytes [1-9]\d*, missing segments 1, undecodable records 0, removed before read 0\)\n$`).FindStringSubmatch(errs)
	if m == nil {
		t.Fatalf("the summary does not count the loss:\n%s", errs)
	}
	if events, _ := strconv.Atoi(m[1]); events+lost(m[2]) != len(ds) || lost(m[2]) < 300 {
		t.Fatalf("events and lost do not add up to %d:\n%s", len(ds), errs)
	}
}
