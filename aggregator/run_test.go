package aggregator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/seglog"
	emf "github.com/ratewarden/ratewarden/embedded-metrics"
	"github.com/ratewarden/ratewarden/embedded-metrics/agenttest"
)

// writeLog writes ds to a new decision log in batches of 500, some of
// their events late.
func writeLog(t *testing.T, dir string, ds []decisions.Decision) {
	t.Helper()
	appendLog(t, dir, seglog.Options{}, 500, ds)
}

// appendLog appends ds to the decision log in dir, opened with o, in
// records of batch events.
func appendLog(t *testing.T, dir string, o seglog.Options, batch int, ds []decisions.Decision) {
	t.Helper()
	l, err := seglog.Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	w := decisionlog.NewWriter(l, decisionlog.WriterOptions{})
	for i := 0; i < len(ds); i += batch {
		if err := w.WriteBatch(ds[i:min(i+batch, len(ds))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func testEvents(n int) []decisions.Decision {
	ds := decisiontest.NewGenerator(9, t0).Batch(n)
	for i := 50; i < len(ds); i += 211 {
		ds[i].Time = ds[i].Time.Add(-700 * time.Millisecond)
	}
	return ds
}

// files returns every file under dir by relative path.
func files(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if !d.IsDir() {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(dir, p)
			out[rel] = b
		}
		return nil
	})
	return out
}

// totals sums the counts of the partials under dir.
func totals(t *testing.T, dir string, size time.Duration) (events, decided uint64) {
	t.Helper()
	ps, problems, err := (&PartialsDir{Dir: dir}).Read(t.Context(), size, time.Time{}, t0.Add(24*time.Hour))
	if err != nil || len(problems) > 0 {
		t.Fatal(err, problems)
	}
	for _, p := range ps {
		events += p.Events
		decided += p.Counts.Total()
	}
	return events, decided
}

// TestRunLogTotalsAndReplay: the partials of a log hold every event once,
// and a second run on a fresh state writes the same files, byte for byte.
func TestRunLogTotalsAndReplay(t *testing.T) {
	ds := testEvents(20_000)
	logDir := filepath.Join(t.TempDir(), "log")
	writeLog(t, logDir, ds)
	var decided uint64
	for _, d := range ds {
		if d.Kind == decisions.KindDecision {
			decided++
		}
	}
	var outs [2]map[string][]byte
	for i := range outs {
		out := t.TempDir()
		st, err := RunLog(context.Background(), LogOptions{Dir: logDir, StateDir: t.TempDir(),
			Rollup: Options{Window: time.Second, Lateness: 100 * time.Millisecond}, Sinks: []Sink{&PartialsDir{Dir: out}}})
		if err != nil {
			t.Fatal(err)
		}
		if st.Rollup.Late == 0 || st.Rollup.Corrections == 0 || st.Outputs < 5 {
			t.Fatalf("the test log made %+v", st)
		}
		e, n := totals(t, out, time.Second)
		if e != uint64(len(ds)) || n != decided {
			t.Fatalf("partials hold %d events and %d decisions, the log %d and %d", e, n, len(ds), decided)
		}
		outs[i] = files(t, out)
	}
	if len(outs[0]) != len(outs[1]) {
		t.Fatalf("%d files, then %d", len(outs[0]), len(outs[1]))
	}
	for name, b := range outs[0] {
		if !bytes.Equal(outs[1][name], b) {
			t.Errorf("%s differs between two runs", name)
		}
	}
}

// failingSink fails every write once n writes have passed: a crash
// between the state write and the delivery.
type failingSink struct {
	PartialsDir
	n int
}

var errCrash = errors.New("crashed")

func (s *failingSink) Write(ctx context.Context, partition string, o Output) error {
	if s.n <= 0 {
		return errCrash
	}
	s.n--
	return s.PartialsDir.Write(ctx, partition, o)
}

// TestRunLogResumes: runs that stop after a number of delivered outputs
// (with the outputs of their last flush written to the state but not
// delivered), each followed by a restart, leave the same files as one
// uninterrupted run.
func TestRunLogResumes(t *testing.T) {
	ds := testEvents(20_000)
	logDir := filepath.Join(t.TempDir(), "log")
	writeLog(t, logDir, ds)
	opts := func(state string, sink Sink) LogOptions {
		return LogOptions{Dir: logDir, StateDir: state, FlushEvery: 300,
			Rollup: Options{Window: time.Second, Lateness: 100 * time.Millisecond}, Sinks: []Sink{sink}}
	}
	// The reference reads event by event; the interrupted runs by record
	// batch, and resume inside records.
	wantDir := t.TempDir()
	ref := opts(t.TempDir(), &PartialsDir{Dir: wantDir})
	ref.perEvent = true
	if _, err := RunLog(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	want := files(t, wantDir)
	for _, crashAfter := range []int{0, 1, 3, 8} {
		out, state := t.TempDir(), t.TempDir()
		restarts := 0
		for {
			// Each life delivers a few more outputs than the last, so that
			// the redelivery of a failed flush eventually gets through.
			_, err := RunLog(context.Background(), opts(state, &failingSink{PartialsDir{out}, crashAfter + restarts}))
			if err == nil {
				break
			}
			if !errors.Is(err, errCrash) || restarts > 100 {
				t.Fatalf("crash after %d: %v after %d restarts", crashAfter, err, restarts)
			}
			restarts++
		}
		sameFiles(t, fmt.Sprint("crash after ", crashAfter), files(t, out), want)
		if crashAfter < 8 && restarts == 0 {
			t.Errorf("crash after %d: never crashed", crashAfter)
		}
	}
}

// TestRunLogRemovesLeftovers: the temporary files that a crash in the
// middle of writing the state and the undelivered outputs' partials left
// (named as atomicfile names them) are removed when the next run resumes,
// and counted; the files themselves are written.
func TestRunLogRemovesLeftovers(t *testing.T) {
	logDir := filepath.Join(t.TempDir(), "log")
	writeLog(t, logDir, testEvents(5_000))
	out, state := t.TempDir(), t.TempDir()
	opts := func(sink Sink) LogOptions {
		return LogOptions{Dir: logDir, StateDir: state, FlushEvery: 300,
			Rollup: Options{Window: time.Second, Lateness: 100 * time.Millisecond}, Sinks: []Sink{sink}}
	}
	if _, err := RunLog(t.Context(), opts(&failingSink{PartialsDir{out}, 2})); !errors.Is(err, errCrash) {
		t.Fatalf("the first run: %v, want the crash", err)
	}
	st, ok, err := (&StateDir{Dir: state}).Load(t.Context(), "log")
	if err != nil || !ok || len(st.Pending) == 0 {
		t.Fatalf("the state after the crash: %d pending, %v, %v", len(st.Pending), ok, err)
	}
	leave := func(path string) {
		dir, base := filepath.Split(path)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "."+base+".3141592653.tmp"), []byte("half"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pd := &PartialsDir{Dir: out}
	for _, o := range st.Pending {
		leave(pd.path("log", o))
	}
	leave(filepath.Join(state, "log.state"))
	run, err := RunLog(t.Context(), opts(pd))
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(len(st.Pending) + 1); run.Leftovers != want {
		t.Errorf("the run removed %d temporary files, want %d", run.Leftovers, want)
	}
	for _, dir := range []string{out, state} {
		for name := range files(t, dir) {
			if strings.HasSuffix(name, ".tmp") {
				t.Errorf("%s left in %s", name, dir)
			}
		}
	}
	for _, o := range st.Pending {
		if _, err := os.Stat(pd.path("log", o)); err != nil {
			t.Errorf("a pending output was not written: %v", err)
		}
	}
}

// TestRunLogColumnsEqualsEvents: RunLog reading the log by record batch,
// rolling Arrow records up from their columns and JSON-lines records
// event by event, writes the same files, byte for byte, and counts the
// same, as reading it event by event: with flushes inside records, time
// filters that cut records, late events corrected or dropped, small
// top-K lists, and an undecodable record.
func TestRunLogColumnsEqualsEvents(t *testing.T) {
	ds := testEvents(30_000)
	logDir := filepath.Join(t.TempDir(), "log")
	l, err := seglog.Open(logDir, seglog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	arrow := decisionlog.NewWriter(l, decisionlog.WriterOptions{})
	jsonl := decisionlog.NewWriter(l, decisionlog.WriterOptions{Codec: columnar.CodecJSON})
	sizes := []int{1000, 1, 4500, 7, 300, 2000}
	for i, k := 0, 0; i < len(ds); k++ {
		j := min(i+sizes[k%len(sizes)], len(ds))
		w := arrow
		if k%4 == 3 {
			w = jsonl
		}
		if err := w.WriteBatch(ds[i:j]); err != nil {
			t.Fatal(err)
		}
		if k == 5 {
			if _, err := l.Append(seglog.Record{Count: 2, MinTime: ds[i].Time, MaxTime: ds[i].Time, Codec: uint8(columnar.CodecArrow), Payload: []byte("not arrow")}); err != nil {
				t.Fatal(err)
			}
		}
		i = j
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	f := func(o LogOptions) {
		t.Helper()
		var got, want map[string][]byte
		var gotSt, wantSt RunStats
		for _, perEvent := range []bool{true, false} {
			out := t.TempDir()
			o := o
			o.Dir, o.StateDir, o.Sinks, o.perEvent = logDir, t.TempDir(), []Sink{&PartialsDir{Dir: out}}, perEvent
			st, err := RunLog(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if perEvent {
				want, wantSt = files(t, out), st
			} else {
				got, gotSt = files(t, out), st
			}
		}
		if !reflect.DeepEqual(gotSt, wantSt) || wantSt.Read.BadBatch != 1 || wantSt.Outputs < 3 {
			t.Errorf("%+v: stats %+v, want %+v (one bad record, outputs)", o.Rollup, gotSt, wantSt)
		}
		sameFiles(t, fmt.Sprintf("%+v", o.Rollup), got, want)
	}
	f(LogOptions{FlushEvery: 300, Rollup: Options{Window: time.Second, Lateness: 100 * time.Millisecond, TopK: 5}})
	f(LogOptions{FlushEvery: 4096, Rollup: Options{Window: time.Second, Lateness: 100 * time.Millisecond, Late: LateDrop}})
	f(LogOptions{FlushEvery: 777, Since: ds[2500].Time, Until: ds[27_000].Time, Rollup: Options{Window: 2 * time.Second, TopK: 3}})
}

// TestRunLogPositionIsTheState: a run's position is its state's, not the
// log's consumer offset: a fresh state directory reads the log from its
// start though another run, under the same consumer name, committed the
// log's end; and each run commits its own position.
func TestRunLogPositionIsTheState(t *testing.T) {
	ds := testEvents(3000)
	logDir := filepath.Join(t.TempDir(), "log")
	writeLog(t, logDir, ds)
	for i := range 2 {
		st, err := RunLog(context.Background(), LogOptions{Dir: logDir, StateDir: t.TempDir(), Consumer: "aggregate",
			Rollup: Options{Window: time.Second}, Sinks: []Sink{&PartialsDir{Dir: t.TempDir()}}})
		if err != nil {
			t.Fatal(err)
		}
		if st.Read.Events != 3000 || st.Next != 3000 {
			t.Errorf("run %d: read %d events to %d, want the whole log", i, st.Read.Events, st.Next)
		}
		if off, _, err := seglog.ReadOffset(logDir, "aggregate"); off != 3000 || err != nil {
			t.Errorf("run %d: consumer offset %d (%v), want 3000", i, off, err)
		}
	}
}

// TestRunLogStateFromAnotherLog: a state whose position is past the end
// of the log it is given (the log was removed and a new one begun) stops
// the run with an error that says so and how to start over, instead of
// waiting for the new log to reach the old position and skipping what
// comes before it: through the process's own writer of the log, and
// through the files alone (aggregate --decisions-dir beside the edge),
// following the log or not. The state, the outputs and the log's consumer
// offset are left as they were.
func TestRunLogStateFromAnotherLog(t *testing.T) {
	old, state := t.TempDir(), t.TempDir()
	writeLog(t, old, testEvents(1200))
	if _, err := RunLog(context.Background(), LogOptions{Dir: old, StateDir: state, Rollup: Options{Window: time.Second}}); err != nil {
		t.Fatal(err)
	}
	saved := files(t, state)
	f := func(ownLog, follow bool) {
		t.Helper()
		dir, partials := t.TempDir(), t.TempDir()
		writeLog(t, dir, testEvents(300))
		o := LogOptions{Dir: dir, StateDir: state, Follow: follow, Consumer: "aggregate", Rollup: Options{Window: time.Second},
			Sinks: []Sink{&PartialsDir{Dir: partials}}}
		if ownLog {
			l, err := seglog.Open(dir, seglog.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			o.Log = l
		}
		// Bounded, so that a run that waits at the old position fails
		// rather than hangs.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		st, err := RunLog(ctx, o)
		if !errors.Is(err, seglog.ErrPastEnd) || !strings.Contains(err.Error(), state) || !strings.Contains(err.Error(), "move the state directory away") {
			t.Fatalf("own log %v, follow %v: RunLog on a new log with the old log's state: %v", ownLog, follow, err)
		}
		if st.Next != 1200 || st.Rollup.Events != 0 || st.Outputs != 0 {
			t.Errorf("own log %v, follow %v: stats %+v, want the state's position 1200 and nothing read", ownLog, follow, st)
		}
		if got := files(t, state); !reflect.DeepEqual(got, saved) {
			t.Errorf("own log %v, follow %v: the state changed", ownLog, follow)
		}
		if got := files(t, partials); len(got) != 0 {
			t.Errorf("own log %v, follow %v: outputs written: %v", ownLog, follow, got)
		}
		if off, ok, err := seglog.ReadOffset(dir, "aggregate"); ok || err != nil {
			t.Errorf("own log %v, follow %v: consumer offset %d committed (%v)", ownLog, follow, off, err)
		}
	}
	for _, ownLog := range []bool{true, false} {
		f(ownLog, true)
		f(ownLog, false)
	}
	// Moved away, the log is read from its start.
	dir := t.TempDir()
	writeLog(t, dir, testEvents(300))
	st, err := RunLog(context.Background(), LogOptions{Dir: dir, StateDir: t.TempDir(), Rollup: Options{Window: time.Second}})
	if err != nil || st.Rollup.Events != 300 {
		t.Fatalf("a fresh state: %+v %v, want 300 events", st.Rollup, err)
	}
}

// TestRunLogEMFAgentAway: with the CloudWatch agent hung (accepts, never
// reads) or away (a closed port), the EMF documents it cannot take in
// time are dropped and counted, and the run goes on: every window's
// partials are stored and the log is read to its end, where the run
// without the fix stopped at the first flush.
func TestRunLogEMFAgentAway(t *testing.T) {
	ds := testEvents(5_000)
	logDir := filepath.Join(t.TempDir(), "log")
	writeLog(t, logDir, ds)
	for _, tc := range []struct {
		name string
		addr func(testing.TB) string
	}{{"hung", agenttest.Hung}, {"closed", agenttest.Closed}} {
		t.Run(tc.name, func(t *testing.T) {
			agent, err := emf.NewAgentSink(emf.AgentOptions{Address: tc.addr(t), FlushTimeout: 100 * time.Millisecond,
				BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { agent.Close(context.Background()) })
			w, err := emf.NewWriter(emf.WriterOptions{IgnoreTimestampWindow: true}, agent)
			if err != nil {
				t.Fatal(err)
			}
			out := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st, err := RunLog(ctx, LogOptions{Dir: logDir, StateDir: t.TempDir(), Rollup: Options{Window: time.Second},
				Sinks: []Sink{&PartialsDir{Dir: out}, &EMFSink{W: w}}})
			if err != nil {
				t.Fatal(err)
			}
			if st.Next != uint64(len(ds)) || st.Outputs < 3 {
				t.Fatalf("the run stopped at offset %d of %d after %d outputs", st.Next, len(ds), st.Outputs)
			}
			if e, _ := totals(t, out, time.Second); e != uint64(len(ds)) {
				t.Errorf("partials hold %d events, the log %d", e, len(ds))
			}
			as := agent.Stats()
			if as.Dropped == 0 || as.Written+as.Dropped+as.Buffered != w.Stats().Documents {
				t.Errorf("agent %+v after %d documents, want them all counted, some dropped", as, w.Stats().Documents)
			}
		})
	}
}
