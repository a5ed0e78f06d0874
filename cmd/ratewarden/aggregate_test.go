package main

import (
	"bytes"
	"context"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/seglog"
	"github.com/ratewarden/ratewarden/internal/dirlock"
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

// TestAggregateStateFromRemovedLog: `aggregate --decisions-dir` with a
// state directory whose position came from a log since removed (a new,
// shorter log in its place) exits 1 naming the offsets, the state
// directory and the way to start over, following the log or not, rather
// than reporting nothing or waiting to skip what the new log holds; it
// leaves the state, the outputs and the log's consumer offsets as they
// were. With the state moved away it reads the new log from its start.
func TestAggregateStateFromRemovedLog(t *testing.T) {
	tmp := t.TempDir()
	dir, state, partials := filepath.Join(tmp, "log"), filepath.Join(tmp, "state"), filepath.Join(tmp, "partials")
	aggregate := func(state string, extra ...string) (int, string) {
		t.Helper()
		// Bounded, so that a run that waits at the old position fails
		// rather than hangs.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		args := append([]string{"aggregate", "--admin-listen", "off", "--decisions-dir", dir, "--state-dir", state,
			"--partials", "dir:" + partials, "--window", "1s"}, extra...)
		code, _, errs := runCLIContext(t, ctx, nil, args...)
		return code, errs
	}
	writeDecisionLog(t, dir, 1200)
	if code, errs := aggregate(state, "--no-follow"); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, errs)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	writeDecisionLog(t, dir, 300)
	saved, outputs := snapshot(t, state), snapshot(t, partials)
	for _, extra := range [][]string{{"--no-follow"}, {"--linger", "1ms"}} {
		code, errs := aggregate(state, extra...)
		for _, want := range []string{"aggregate log: log " + dir + ": offset 1200: past the log's end 300", "the state in " + state + " is from a log that was removed, replaced or cut short",
			"to read " + dir + " from its start, move the state directory away"} {
			if !strings.Contains(errs, want) {
				t.Errorf("%v: stderr lacks %q:\n%s", extra, want, errs)
			}
		}
		if code != 1 {
			t.Errorf("%v: exit %d, want 1", extra, code)
		}
		if !maps.EqualFunc(snapshot(t, state), saved, bytes.Equal) || !maps.EqualFunc(snapshot(t, partials), outputs, bytes.Equal) {
			t.Errorf("%v: the state or the outputs changed", extra)
		}
		if off, ok, err := seglog.ReadOffset(dir, "aggregate"); ok || err != nil {
			t.Errorf("%v: consumer offset %d committed in the new log (%v)", extra, off, err)
		}
	}
	code, errs := aggregate(filepath.Join(tmp, "fresh"), "--no-follow")
	if code != 0 || !strings.Contains(errs, "aggregate: events 300,") {
		t.Fatalf("a fresh state: exit %d, want 300 events read\n%s", code, errs)
	}
}

// TestAggregateStateNotRestored: `aggregate --decisions-dir` with a state
// it cannot restore (saved with another window length, or with bytes
// flipped) exits 1 with an error that names the state file, so that an
// operator knows which file to inspect or move aside, and leaves the file
// as it was.
func TestAggregateStateNotRestored(t *testing.T) {
	tmp := t.TempDir()
	dir, state := filepath.Join(tmp, "log"), filepath.Join(tmp, "state")
	file := filepath.Join(state, "log.state")
	aggregate := func(window string) (int, string) {
		t.Helper()
		code, _, errs := runCLI(t, nil, "aggregate", "--no-follow", "--admin-listen", "off", "--decisions-dir", dir,
			"--state-dir", state, "--partials", "dir:"+filepath.Join(tmp, "partials"), "--window", window)
		return code, errs
	}
	writeDecisionLog(t, dir, 1200)
	// A state with open windows of 1s, as a run killed mid-way leaves it
	// (a run that ends emits its windows and keeps none).
	r := aggregator.NewRollup(aggregator.Options{Window: time.Second})
	ds := decisiontest.NewGenerator(5, time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)).Batch(600)
	for i := range ds {
		r.Add(&ds[i], uint64(i))
	}
	snap, err := r.AppendSnapshot(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := (&aggregator.StateDir{Dir: state}).Save(context.Background(), "log", aggregator.State{Snapshot: snap}); err != nil {
		t.Fatal(err)
	}
	saved, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(saved)
	flipped[len(flipped)/2] ^= 0xff
	for _, c := range []struct {
		name, window string
		state        []byte
		want         string
	}{
		{"another window length", "2s", saved, "a window of 1s, configured 2s"},
		{"bytes flipped", "1s", flipped, "checksum mismatch"},
	} {
		if err := os.WriteFile(file, c.state, 0o644); err != nil {
			t.Fatal(err)
		}
		code, errs := aggregate(c.window)
		for _, want := range []string{c.want, "state " + file + ":", "move it away to start over"} {
			if !strings.Contains(errs, want) {
				t.Errorf("%s: stderr lacks %q:\n%s", c.name, want, errs)
			}
		}
		if code != 1 {
			t.Errorf("%s: exit %d, want 1", c.name, code)
		}
		if b, _ := os.ReadFile(file); !bytes.Equal(b, c.state) {
			t.Errorf("%s: the state file changed", c.name)
		}
	}
}

// TestDecisionsCatFromPastEnd: `decisions cat --from` past the end of the
// log is an error naming both offsets, not an empty listing; at the end it
// lists nothing.
func TestDecisionsCatFromPastEnd(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	writeDecisionLog(t, dir, 300)
	code, out, errs := runCLI(t, nil, "decisions", "cat", "--dir", dir, "--from", "1200")
	if code != 1 || out != "" || !strings.Contains(errs, "offset 1200: past the log's end 300") {
		t.Errorf("--from 1200: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = runCLI(t, nil, "decisions", "cat", "--dir", dir, "--from", "300")
	if code != 0 || out != "" {
		t.Errorf("--from 300: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// writeDecisionLog writes n generated decisions to a new decision log in
// dir.
func writeDecisionLog(t *testing.T, dir string, n int) {
	t.Helper()
	writeDecisions(t, dir, decisiontest.NewGenerator(5, time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)).Batch(n))
}

// writeDecisions writes ds to a new decision log in dir.
func writeDecisions(t *testing.T, dir string, ds []decisions.Decision) {
	t.Helper()
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
}

// snapshot returns the files under dir by path relative to dir.
func snapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err == nil {
			out[rel], err = os.ReadFile(p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDecisionsExportLeavesFilesAlone: `decisions export` that fails (here
// interrupted before it read anything) leaves a file already at --out as
// it was, and an --out inside the log's directory (a segment's name,
// which it would replace) is refused with the log untouched; a good
// export then writes the events.
func TestDecisionsExportLeavesFilesAlone(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "log")
	writeDecisionLog(t, dir, 300)
	out := filepath.Join(tmp, "prev.parquet")
	if err := os.WriteFile(out, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	code, _, errs := runCLIContext(t, ctx, nil, "decisions", "export", "--dir", dir, "--out", out)
	if code != 1 || !strings.Contains(errs, "context canceled") {
		t.Errorf("interrupted export: exit %d, stderr %q; want 1 and the reason", code, errs)
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != "precious" {
		t.Errorf("after an interrupted export --out holds %q (%v), want its old content", b, err)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 2 {
		t.Errorf("%d entries beside the log, want 2 (no temporary file left)", len(ents))
	}

	before := snapshot(t, dir)
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	for _, o := range []string{segs[0], filepath.Join(dir, "export.parquet"), filepath.Join(dir, ".", "x", "..", "y.parquet")} {
		code, out, errs := runCLI(t, nil, "decisions", "export", "--dir", dir, "--out", o)
		if code != 2 || out != "" || !strings.Contains(errs, "is inside the decision log") {
			t.Errorf("--out %s: exit %d, stdout %q, stderr %q; want a refusal", o, code, out, errs)
		}
	}
	if after := snapshot(t, dir); !maps.EqualFunc(before, after, bytes.Equal) {
		t.Errorf("the log changed under refused exports: %d files before, %d after", len(before), len(after))
	}
	code, _, errs = runCLI(t, nil, "decisions", "export", "--dir", dir, "--out", out, "--since", "2026-12-01T03:01:00Z", "--until", "2026-12-01T03:00:00Z")
	if code != 2 || !strings.Contains(errs, "--since 2026-12-01T03:01:00Z is not before --until 2026-12-01T03:00:00Z") {
		t.Errorf("an inverted range: exit %d, stderr %q; want 2 and both flags", code, errs)
	}

	code, stdout, errs := runCLI(t, nil, "decisions", "export", "--dir", dir, "--out", out)
	if code != 0 || !strings.Contains(stdout, "300 events") {
		t.Fatalf("export: exit %d, stdout %q, stderr %q", code, stdout, errs)
	}
	if b, _ := os.ReadFile(out); len(b) < 4 || string(b[:4]) != "PAR1" {
		t.Errorf("--out does not hold a Parquet file after the export")
	}
}

// TestReplayWholeWindows: a replay of a range that cuts windows widens it
// to whole windows and says so, so that each window it stores is the
// whole window (the partials equal those of the aligned range, byte for
// byte), never a part stored under the window's key as if whole.
func TestReplayWholeWindows(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "log")
	start := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	writeDecisions(t, dir, decisiontest.NewGenerator(5, start).Batch(3000))
	replay := func(name, from, to string) (map[string][]byte, string) {
		t.Helper()
		out := filepath.Join(tmp, name)
		code, _, errs := runCLI(t, nil, "replay", "--decisions-dir", dir, "--out", out, "--window", "1s", "--from", from, "--to", to)
		if code != 0 {
			t.Fatalf("replay %s to %s: exit %d, stderr %q", from, to, code, errs)
		}
		return snapshot(t, filepath.Join(out, "partials")), errs
	}
	cut, errs := replay("cut", "2026-12-01T03:00:00.3Z", "2026-12-01T03:00:01.6Z")
	if !strings.Contains(errs, "replay: range widened to whole 1s windows: from 2026-12-01T03:00:00Z to 2026-12-01T03:00:02Z") {
		t.Errorf("stderr %q does not say the range was widened", errs)
	}
	whole, errs := replay("whole", "2026-12-01T03:00:00Z", "2026-12-01T03:00:02Z")
	if strings.Contains(errs, "widened") {
		t.Errorf("an aligned range was said to be widened: %q", errs)
	}
	if len(whole) != 2 || !maps.EqualFunc(cut, whole, bytes.Equal) {
		t.Errorf("the cut range stored %d partials, the aligned one %d; want the same 2, byte for byte", len(cut), len(whole))
	}
}

// TestReplayFailureLeavesOutEmpty: a replay that fails (here interrupted)
// leaves nothing in --out but its LOCK file (which locks nothing once it
// has exited), so that the retry is not refused for a non-empty --out; a
// log directory that is not there is refused before --out is made.
func TestReplayFailureLeavesOutEmpty(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "log")
	writeDecisionLog(t, dir, 3000)
	out := filepath.Join(tmp, "out")
	code, _, errs := runCLI(t, nil, "replay", "--decisions-dir", filepath.Join(tmp, "nope"), "--out", out)
	if _, err := os.Stat(out); code != 1 || !strings.Contains(errs, "is not a decision log directory") || err == nil {
		t.Errorf("a missing log: exit %d, stderr %q, --out made: %v", code, errs, err == nil)
	}
	code, _, errs = runCLI(t, nil, "replay", "--decisions-dir", dir, "--out", out, "--from", "2026-12-01T03:01:00Z", "--to", "2026-12-01T03:00:00Z")
	if _, err := os.Stat(out); code != 2 || !strings.Contains(errs, "--from 2026-12-01T03:01:00Z is not before --to 2026-12-01T03:00:00Z") || err == nil {
		t.Errorf("an inverted range: exit %d, stderr %q, --out made: %v; want 2, both flags, none", code, errs, err == nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	code, _, errs = runCLIContext(t, ctx, nil, "replay", "--decisions-dir", dir, "--out", out)
	ents, err := os.ReadDir(out)
	if code != 1 || err != nil || len(ents) != 1 || ents[0].Name() != dirlock.File {
		t.Errorf("an interrupted replay: exit %d, stderr %q, %d entries left in --out (%v); want 1 and its LOCK alone", code, errs, len(ents), err)
	}
	if code, _, errs := runCLI(t, nil, "replay", "--decisions-dir", dir, "--out", out); code != 0 {
		t.Errorf("the retry: exit %d, stderr %q", code, errs)
	}
}

// hungPutMetricData is a CloudWatch endpoint that reads each request and
// never answers: a call ends when its client gives up on it.
type hungPutMetricData struct {
	stop  chan struct{} // closed when the test ends
	calls atomic.Int64
}

func (h *hungPutMetricData) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body) // so that the server sees the client go
	h.calls.Add(1)
	select {
	case <-r.Context().Done():
	case <-h.stop:
	}
}

// TestAggregateEMFMetricsHung: `aggregate --emf metrics --emf-timeout
// 300ms --no-follow` with the CloudWatch API hung (PutMetricData accepts
// the request and never answers) reads the log to its end, its partials
// stored, and ends by itself with exit 0 (the documents not delivered are
// the sink's counted drops, not a failure of the run), its last line
// saying how many documents did not reach CloudWatch, and how many of
// them were in calls sent whole and unanswered, so may have. It used to
// wait for the hung calls at every flush and at the close, for minutes.
func TestAggregateEMFMetricsHung(t *testing.T) {
	api := &hungPutMetricData{stop: make(chan struct{})}
	useCloudWatch(t, api)
	t.Cleanup(func() { close(api.stop) })
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "log")
	// Stamped now, or CloudWatch's timestamp window refuses the documents
	// before they reach the sink.
	writeDecisions(t, dir, decisiontest.NewGenerator(12, time.Now().Add(-time.Minute)).Batch(9000)) // some 3 s of traffic: windows of 1 s, flushed one after another
	// The bound of the test: a run that ends by itself ends long before.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	code, _, errs := runCLIContext(t, ctx, nil, "aggregate", "--no-follow", "--admin-listen", "off", "--decisions-dir", dir,
		"--state-dir", filepath.Join(tmp, "state"), "--partials", "dir:"+filepath.Join(tmp, "partials"), "--window", "1s",
		"--emf", "metrics", "--emf-timeout", "300ms")
	if ctx.Err() != nil {
		t.Fatalf("aggregate still ran after a minute with the CloudWatch API hung\n%s", errs)
	}
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, errs)
	}
	if api.calls.Load() == 0 {
		t.Fatalf("no PutMetricData call reached the endpoint\n%s", errs)
	}
	// Every call was read whole and went unanswered: its documents may
	// have arrived, and the line says how many they were.
	last := regexp.MustCompile(`\naggregate: emf metric data: written 0, not delivered ([1-9]\d*) \(([1-9]\d*) of them sent, not acknowledged: they may have arrived\), errors \d+, retries \d+\n$`)
	m := last.FindStringSubmatch(errs)
	if m == nil {
		t.Fatalf("the last line does not say what CloudWatch did not get, and what of it may have arrived\n%s", errs)
	}
	dropped, _ := strconv.Atoi(m[1])
	sent, _ := strconv.Atoi(m[2])
	if sent > dropped {
		t.Errorf("%d of the %d not delivered sent: more than were not delivered", sent, dropped)
	}
}

// TestNotALogDirectory: `replay` and `aggregate --no-follow` given a
// directory that holds no segment (a typo'd parent, an empty directory)
// exit 1 naming it, before they make their output or state directory;
// before, they read it as an empty log and exited 0 with "events 0". An
// empty log (one the edge opened and never wrote) is read; `aggregate`
// that follows waits for the edge to make the log.
func TestNotALogDirectory(t *testing.T) {
	tmp := t.TempDir()
	empty := filepath.Join(tmp, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	out, state := filepath.Join(tmp, "out"), filepath.Join(tmp, "state")
	for _, args := range [][]string{
		{"replay", "--decisions-dir", empty, "--out", out},
		{"aggregate", "--no-follow", "--admin-listen", "off", "--decisions-dir", empty, "--state-dir", state, "--emf", "stdout"},
	} {
		code, _, errs := runCLI(t, nil, args...)
		if code != 1 || !strings.Contains(errs, "--decisions-dir "+empty+" is not a decision log directory: it holds no segment") {
			t.Errorf("%s: exit %d, want 1 naming the directory:\n%s", args[0], code, errs)
		}
	}
	for _, d := range []string{out, state} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s was made (%v)", d, err)
		}
	}
	l, err := seglog.Open(filepath.Join(tmp, "log"), seglog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runCLI(t, nil, "replay", "--decisions-dir", filepath.Join(tmp, "log"), "--out", out); code != 0 || !strings.Contains(errs, "replay: events 0,") {
		t.Errorf("replay of an empty log: exit %d:\n%s", code, errs)
	}
}
