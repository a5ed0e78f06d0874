package aggregator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/seglog"
)

// writeLog writes ds to a new decision log in batches of 500, some of
// their events late.
func writeLog(t *testing.T, dir string, ds []decisions.Decision) {
	t.Helper()
	l, err := seglog.Open(dir, seglog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := decisionlog.NewWriter(l, decisionlog.WriterOptions{})
	for i := 0; i < len(ds); i += 500 {
		if err := w.WriteBatch(ds[i:min(i+500, len(ds))]); err != nil {
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
	ps, problems, err := (&PartialsDir{Dir: dir}).Read(size, time.Time{}, t0.Add(24*time.Hour))
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
	wantDir := t.TempDir()
	if _, err := RunLog(context.Background(), opts(t.TempDir(), &PartialsDir{Dir: wantDir})); err != nil {
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
