package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/seglog"
)

// readPartials merges every partial under dir by window start.
func readPartials(t *testing.T, dir string, window time.Duration) map[time.Time]*aggregator.Partial {
	t.Helper()
	ps, problems, err := (&aggregator.PartialsDir{Dir: dir}).Read(t.Context(), window, time.Time{}, time.Now().Add(time.Hour))
	if err != nil || len(problems) > 0 {
		t.Fatalf("read partials: %v %v", err, problems)
	}
	return ps
}

// partialFiles returns the partial files under dir by relative path.
func partialFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if p == dir && errors.Is(err, os.ErrNotExist) {
			return filepath.SkipAll // nothing written yet
		}
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".rwp") {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// serveClients sends each requests from each of clients addresses to the
// edge at base and counts the statuses served.
func serveClients(t *testing.T, base string, clients, each int) map[int]uint64 {
	t.Helper()
	return servePath(t, base, "/api/reports", clients, each)
}

// servePath is serveClients for the path path.
func servePath(t *testing.T, base, path string, clients, each int) map[int]uint64 {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	statuses := map[int]uint64{}
	for c := range clients {
		for range each {
			res := get(t, client, base+path, "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", c))
			statuses[res.status]++
		}
	}
	return statuses
}

// TestEdgeAndAggregate: `ratewarden edge` writes the decision log while
// `ratewarden aggregate` follows it; once both stop, the partials hold
// exactly the requests served, outcome by outcome, and `replay` rebuilds
// the same files twice.
func TestEdgeAndAggregate(t *testing.T) {
	bin := buildBinary(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer origin.Close()
	tmp := t.TempDir()
	logDir, stateDir, partials := filepath.Join(tmp, "log"), filepath.Join(tmp, "state"), filepath.Join(tmp, "partials")
	base, _ := startEdge(t, bin, nil, "--config", seedTrusting(t, "[127.0.0.1]", ""), "--upstream", origin.URL, "--decisions-dir", logDir)

	emfFile := filepath.Join(tmp, "emf.jsonl")
	agg := exec.Command(bin, "aggregate", "--decisions-dir", logDir, "--state-dir", stateDir,
		"--partials", "dir:"+partials, "--emf", "file:"+emfFile, "--window", "1s", "--lateness", "100ms", "--admin-listen", "127.0.0.1:0")
	var aggOut syncBuffer // written by exec's copying goroutine while the test reads it
	agg.Stdout, agg.Stderr = &aggOut, &aggOut
	if err := agg.Start(); err != nil {
		t.Fatal(err)
	}
	defer agg.Process.Kill()

	const clients, each = 15, 20
	statuses := serveClients(t, base, clients, each)
	stops[t.Name()]()
	// Let the aggregator read the tail, then stop it: a clean shutdown
	// emits the open windows.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(aggOut.String(), fmt.Sprintf("events %d,", clients*each)) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	agg.Process.Signal(os.Interrupt)
	if err := agg.Wait(); err != nil {
		t.Fatalf("aggregate: %v\n%s", err, aggOut.String())
	}

	outcomes := map[int]uint64{}
	status := map[decisions.Outcome]int{decisions.Allow: 200, decisions.Challenge: 302, decisions.Block: 429}
	for _, p := range readPartials(t, partials, time.Second) {
		for o, n := range p.Counts.ByOutcome() {
			if n > 0 {
				outcomes[status[decisions.Outcome(o)]] += n
			}
		}
	}
	if fmt.Sprint(outcomes) != fmt.Sprint(statuses) {
		t.Fatalf("partials count %v, the edge served %v\n%s", outcomes, statuses, aggOut.String())
	}

	// The EMF: every document valid, and the service-wide Requests add up
	// to the requests served.
	runBinary(t, bin, nil, "emf", "validate", emfFile)
	if got := emfServiceRequests(t, emfFile); got != clients*each {
		t.Errorf("EMF service-wide Requests add up to %d, the edge served %d", got, clients*each)
	}

	var replays [2]map[string][]byte
	for i := range replays {
		out := filepath.Join(tmp, fmt.Sprint("replay", i))
		runBinary(t, bin, nil, "replay", "--decisions-dir", logDir, "--out", out, "--window", "1s", "--lateness", "100ms")
		replays[i] = partialFiles(t, out)
		b, err := os.ReadFile(filepath.Join(out, "emf.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		replays[i]["emf.jsonl"] = b
		runBinary(t, bin, nil, "emf", "validate", filepath.Join(out, "emf.jsonl"))
		if got := emfServiceRequests(t, filepath.Join(out, "emf.jsonl")); got != clients*each {
			t.Errorf("replay %d: EMF Requests add up to %d, want %d", i, got, clients*each)
		}
	}
	if len(replays[0]) < 2 || fmt.Sprint(replays[0]) != fmt.Sprint(replays[1]) {
		t.Fatalf("two replays wrote %d and %d files, or different bytes", len(replays[0]), len(replays[1]))
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tempFiles returns the temporary files (named *.tmp) under dir.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	var left []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".tmp") {
			rel, _ := filepath.Rel(dir, p)
			left = append(left, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// countPartials counts the partial files under dir without reading them.
func countPartials(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".rwp") {
			n++
		}
		return nil
	})
	return n
}

// emfServiceRequests sums Requests over the service-wide documents (no
// dimensions) of an EMF file.
func emfServiceRequests(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var doc struct {
			AWS struct {
				CloudWatchMetrics []struct{ Dimensions [][]string }
			} `json:"_aws"`
			Requests *float64
		}
		if err := json.Unmarshal(line, &doc); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if doc.Requests != nil && len(doc.AWS.CloudWatchMetrics[0].Dimensions) == 1 && len(doc.AWS.CloudWatchMetrics[0].Dimensions[0]) == 0 {
			total += int(*doc.Requests)
		}
	}
	return total
}

// TestAggregateKilled: `ratewarden aggregate` killed with SIGKILL twenty
// times while it reads a 300,000-event log (each life once it has
// delivered one to three windows more), each time restarted on its state,
// leaves the same partial files and the same EMF file, byte for byte, as
// one run that was never killed: the EMF documents of the outputs
// delivered again after each kill are not written twice.
func TestAggregateKilled(t *testing.T) {
	bin := buildBinary(t)
	tmp := t.TempDir()
	logDir := filepath.Join(tmp, "log")
	l, err := seglog.Open(logDir, seglog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := decisionlog.NewWriter(l, decisionlog.WriterOptions{})
	// An hour ago: CloudWatch takes the windows' EMF (14 days at most).
	g := decisiontest.NewGenerator(11, time.Now().Add(-time.Hour).Truncate(time.Minute))
	for i := range 300 {
		ds := g.Batch(1000)
		for j := i % 7; j < len(ds); j += 97 {
			ds[j].Time = ds[j].Time.Add(-3 * time.Second) // late
		}
		if err := w.WriteBatch(ds); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	args := func(state, out string) []string {
		return []string{"aggregate", "--no-follow", "--admin-listen", "off", "--decisions-dir", logDir, "--state-dir", state,
			"--partials", "dir:" + out, "--emf", "file:" + out + ".emf.jsonl", "--window", "1s", "--lateness", "500ms"}
	}
	want := filepath.Join(tmp, "want")
	runBinary(t, bin, nil, args(filepath.Join(tmp, "state-want"), want)...)

	got, state := filepath.Join(tmp, "got"), filepath.Join(tmp, "state-got")
	// Each life is killed once it has delivered one to three more windows
	// than the lives before it: mid-run, wherever a flush left it.
	killed := 0
	for i := range 20 {
		before := countPartials(got)
		cmd := exec.Command(bin, args(state, got)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		deadline := time.After(20 * time.Second)
	wait:
		for {
			select {
			case <-exited:
				break wait
			case <-deadline:
				t.Fatalf("life %d made no progress\n%s", i, out.String())
			case <-time.After(time.Millisecond):
				if countPartials(got) > before+i%3 {
					cmd.Process.Signal(syscall.SIGKILL)
					<-exited
					break wait
				}
			}
		}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			killed++ // killed before it finished
		}
	}
	if killed < 20 {
		t.Fatalf("only %d of 20 runs were killed before they finished: the log is too small", killed)
	}
	runBinary(t, bin, nil, args(state, got)...)
	w1, g1 := partialFiles(t, want), partialFiles(t, got)
	if len(w1) < 150 {
		t.Fatalf("the log made only %d partial files", len(w1))
	}
	for name, b := range w1 {
		if !bytes.Equal(g1[name], b) {
			t.Errorf("%s differs or is missing after %d kills", name, killed)
		}
	}
	if len(g1) != len(w1) {
		t.Errorf("%d files after the kills, %d without", len(g1), len(w1))
	}
	// A kill during a write leaves its temporary file; the next write of
	// the same file (the state at every batch, a partial delivered again)
	// takes it over.
	for _, dir := range []string{state, got} {
		if left := tempFiles(t, dir); len(left) > 0 {
			t.Errorf("%d temporary files left in %s after %d kills: %q", len(left), dir, killed, left)
		}
	}
	wantEMF, err := os.ReadFile(want + ".emf.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	gotEMF, err := os.ReadFile(got + ".emf.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(wantEMF, []byte("\n")); n < 1000 {
		t.Fatalf("the run never killed wrote %d EMF documents", n)
	}
	if !bytes.Equal(gotEMF, wantEMF) {
		t.Errorf("the EMF file after %d kills holds %d documents, %d bytes; the run never killed %d documents, %d bytes",
			killed, bytes.Count(gotEMF, []byte("\n")), len(gotEMF), bytes.Count(wantEMF, []byte("\n")), len(wantEMF))
	}
}

// TestAggregateFutureEvent: one decision stamped a year ahead, in a log
// that `ratewarden aggregate --window 1s --late drop` reads, neither drops
// the decisions after it as late nor, saved in the state, those a restart
// reads; it is counted as future and kept in a window of its own.
func TestAggregateFutureEvent(t *testing.T) {
	bin := buildBinary(t)
	tmp := t.TempDir()
	logDir, state, out := filepath.Join(tmp, "log"), filepath.Join(tmp, "state"), filepath.Join(tmp, "partials")
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	at := func(from, to time.Duration, step time.Duration) []decisions.Decision {
		var ds []decisions.Decision
		for d := from; d < to; d += step {
			ds = append(ds, decisions.Decision{Time: t0.Add(d), Outcome: decisions.Allow, Tier: "anonymous",
				Rule: "anonymous:global", Node: "edge-1", ClientIP: netip.AddrFrom4([4]byte{192, 0, 2, byte(len(ds) + 1)})})
		}
		return ds
	}
	write := func(batches ...[]decisions.Decision) {
		t.Helper()
		l, err := seglog.Open(logDir, seglog.Options{})
		if err != nil {
			t.Fatal(err)
		}
		w := decisionlog.NewWriter(l, decisionlog.WriterOptions{})
		for _, ds := range batches {
			if err := w.WriteBatch(ds); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	run := func() string {
		t.Helper()
		return runBinary(t, bin, nil, "aggregate", "--no-follow", "--admin-listen", "off", "--decisions-dir", logDir,
			"--state-dir", state, "--partials", "dir:"+out, "--window", "1s", "--lateness", "500ms", "--late", "drop")
	}
	const year = 365 * 24 * time.Hour
	// Two decisions a second: the second of each second was dropped as
	// late once the year-ahead decision had closed every window.
	first, ahead, after := at(0, time.Second, 100*time.Millisecond), at(year, year+1, 1), at(time.Second, 13*time.Second, 500*time.Millisecond)
	write(first, ahead, after)
	if got := run(); !strings.Contains(got, "late 0 (dropped 0), future 1,") {
		t.Fatalf("first run:\n%s", got)
	}
	restart := at(13*time.Second, 17*time.Second, 500*time.Millisecond)
	write(restart)
	// The restart reports its own run: the year-ahead decision was read
	// by the first.
	got := run()
	if !strings.Contains(got, "aggregate: events 8, late 0 (dropped 0), future 0,") {
		t.Fatalf("after the restart:\n%s", got)
	}
	ps, problems, err := (&aggregator.PartialsDir{Dir: out}).Read(context.Background(), time.Second, t0, t0.Add(2*year))
	if err != nil || len(problems) > 0 {
		t.Fatal(err, problems)
	}
	var events, yearAhead uint64
	for start, p := range ps {
		events += p.Events
		if start.Equal(t0.Add(year)) {
			yearAhead = p.Events
		}
	}
	if want := len(first) + len(ahead) + len(after) + len(restart); events != uint64(want) || yearAhead != 1 {
		t.Errorf("partials hold %d events, want %d; the year-ahead window %d\n%s", events, want, yearAhead, got)
	}
}
