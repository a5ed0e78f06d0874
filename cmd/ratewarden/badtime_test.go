package main

import (
	"bytes"
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// badTimeDecisions returns decisions of the hour before now, with one
// whose time is the zero time (no "time" a reader can place) and one at
// decisions.MaxTime (the last window of int64 nanoseconds) among them.
func badTimeDecisions() []decisions.Decision {
	start := time.Now().UTC().Add(-time.Hour).Truncate(time.Minute)
	var ds []decisions.Decision
	for i := range 20 {
		ds = append(ds, decisions.Decision{Kind: decisions.KindDecision, Time: start.Add(time.Duration(i) * 5 * time.Second), Node: "edge-1",
			Tier: "anonymous", Rule: "anonymous:global", Outcome: decisions.Allow, ClientIP: netip.MustParseAddr("203.0.113.7")})
	}
	ds[3].Time, ds[11].Time = time.Time{}, decisions.MaxTime
	return ds
}

// TestAggregateBadTime: `aggregate --stdin` and `replay` skip an event
// whose time is the zero time and one of the last window of int64
// nanoseconds, count them on the summary line ("bad time 2"), and write no
// window for them. Before, the zero time opened a window of 1754, whose
// EMF documents aggregate refused and counted ("emf rejected 5") and
// replay wrote, and the event of 2262 opened one there.
func TestAggregateBadTime(t *testing.T) {
	ds := badTimeDecisions()
	out, errs := aggregateLines(t, ds)
	if !strings.Contains(errs.String(), " events 20, late 0 (dropped 0), ") || !strings.Contains(errs.String(), " bad time 2,") || strings.Contains(errs.String(), "emf rejected") {
		t.Errorf("aggregate --stdin: stderr %q, want 20 events, 2 of bad time, no EMF rejected", errs.String())
	}
	for _, year := range []string{"1754-", "2262-"} {
		if strings.Contains(out.String(), year) {
			t.Errorf("aggregate --stdin: EMF of a window of %s", year)
		}
	}

	dir := t.TempDir()
	writeDecisions(t, filepath.Join(dir, "log"), ds)
	code, _, stderr := runCLI(t, nil, "replay", "--decisions-dir", filepath.Join(dir, "log"), "--out", filepath.Join(dir, "out"))
	if code != 0 || !strings.Contains(stderr, "replay: events 20, late 0 (dropped 0), ") || !strings.Contains(stderr, " bad time 2,") {
		t.Fatalf("replay: exit %d, stderr %q, want 20 events, 2 of bad time", code, stderr)
	}
	days := map[string]bool{ds[0].Time.Format(time.DateOnly): true, ds[len(ds)-1].Time.Format(time.DateOnly): true}
	for name := range snapshot(t, filepath.Join(dir, "out", "partials")) {
		if !days[filepath.Base(filepath.Dir(name))] {
			t.Errorf("replay wrote %s, want only windows of %v", name, days)
		}
	}
}

// TestAggregateRecordAhead: a run of events stamped an hour ahead of the
// wall clock (an edge whose clock jumped, a hand-made record), between
// events of the hour before, moves neither `aggregate --stdin`'s
// watermark nor `replay`'s: its events are counted in the future, none of
// the present's is late but the last, which is, and is dropped (both
// summaries say so). Before, the run made a quorum and moved the
// watermark an hour ahead: the forty events after it were late too.
func TestAggregateRecordAhead(t *testing.T) {
	start := time.Now().UTC().Add(-time.Hour).Truncate(time.Minute)
	decided := func(at time.Time) decisions.Decision {
		return decisions.Decision{Kind: decisions.KindDecision, Time: at, Node: "edge-1", Tier: "anonymous",
			Rule: "anonymous:global", Outcome: decisions.Allow, ClientIP: netip.MustParseAddr("203.0.113.7")}
	}
	var ds []decisions.Decision
	for i := range 40 {
		ds = append(ds, decided(start.Add(time.Duration(i)*250*time.Millisecond)))
	}
	for range 20 {
		ds = append(ds, decided(start.Add(2*time.Hour)))
	}
	for i := range 40 {
		ds = append(ds, decided(start.Add(10*time.Second+time.Duration(i)*250*time.Millisecond)))
	}
	ds = append(ds, decided(start)) // its window closed
	var in bytes.Buffer
	for i := range ds {
		in.Write(append(decisions.AppendJSON(nil, &ds[i]), '\n'))
	}
	var out, errs bytes.Buffer
	if err := runAggregate(context.Background(), []string{"--stdin", "--window", "1s", "--late", "drop", "--emf", "stdout", "--admin-listen", "off"}, &in, &out, &errs); err != nil {
		t.Fatalf("aggregate --stdin: %v\n%s", err, errs.String())
	}
	if !strings.Contains(errs.String(), " events 101, late 1 (dropped 1), ") || !strings.Contains(errs.String(), " future 20,") {
		t.Errorf("aggregate --stdin: stderr %q, want 101 events, one late and dropped, 20 in the future", errs.String())
	}

	dir := t.TempDir()
	writeDecisions(t, filepath.Join(dir, "log"), ds)
	code, _, stderr := runCLI(t, nil, "replay", "--window", "1s", "--late", "drop", "--decisions-dir", filepath.Join(dir, "log"), "--out", filepath.Join(dir, "out"))
	if code != 0 || !strings.Contains(stderr, "replay: events 101, late 1 (dropped 1), ") || !strings.Contains(stderr, " future 20,") {
		t.Fatalf("replay: exit %d, stderr %q, want 101 events, one late and dropped, 20 in the future", code, stderr)
	}
}

// TestAggregateBadLatency: `aggregate --stdin` and `replay` count the
// decisions of a latency below 0 (store's or origin's, which no edge
// measures) with the rest, and say how many latencies they left out
// ("bad latency 3"); EMF's Requests holds every decision. Before, the
// latencies were left out without a word.
func TestAggregateBadLatency(t *testing.T) {
	ds := badTimeDecisions()[:12]
	for i := range ds {
		ds[i].Time = time.Now().Add(-time.Hour).Truncate(time.Minute).Add(time.Duration(i) * time.Millisecond)
	}
	ds[2].StoreLatency, ds[5].StoreLatency, ds[5].UpstreamLatency = -time.Millisecond, -1, -time.Second
	out, errs := aggregateLines(t, ds)
	if !strings.Contains(errs.String(), " events 12, late 0 (dropped 0), ") || !strings.Contains(errs.String(), " bad latency 3,") {
		t.Errorf("aggregate --stdin: stderr %q, want 12 events, 3 bad latencies", errs.String())
	}
	if !strings.Contains(out.String(), `"Requests":12`) {
		t.Errorf("aggregate --stdin: no service-wide EMF document of 12 requests in\n%s", out.String())
	}
	dir := t.TempDir()
	writeDecisions(t, filepath.Join(dir, "log"), ds)
	code, _, stderr := runCLI(t, nil, "replay", "--decisions-dir", filepath.Join(dir, "log"), "--out", filepath.Join(dir, "out"))
	if code != 0 || !strings.Contains(stderr, "replay: events 12, ") || !strings.Contains(stderr, " bad latency 3,") {
		t.Fatalf("replay: exit %d, stderr %q, want 12 events, 3 bad latencies", code, stderr)
	}
}

// aggregateLines runs `aggregate --stdin --emf stdout` over ds as JSON
// lines and returns its standard output and error.
func aggregateLines(t *testing.T, ds []decisions.Decision) (out, errs *bytes.Buffer) {
	t.Helper()
	var in bytes.Buffer
	for i := range ds {
		in.Write(append(decisions.AppendJSON(nil, &ds[i]), '\n'))
	}
	out, errs = new(bytes.Buffer), new(bytes.Buffer)
	if err := runAggregate(context.Background(), []string{"--stdin", "--emf", "stdout", "--admin-listen", "off"}, &in, out, errs); err != nil {
		t.Fatalf("aggregate --stdin: %v\n%s", err, errs.String())
	}
	return out, errs
}
