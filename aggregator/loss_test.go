package aggregator

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/seglog"
)

// writeSegments writes ds to a new decision log in records of 100 events
// and small segments, and returns the segment files, oldest first.
func writeSegments(t *testing.T, dir string, ds []decisions.Decision) []string {
	t.Helper()
	appendLog(t, dir, seglog.Options{SegmentBytes: 16 << 10}, 100, ds)
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil || len(segs) < 5 {
		t.Fatalf("%d segments (%v): the test needs five or more", len(segs), err)
	}
	return segs
}

// TestRunLogReportsLoss: a log with 40 bytes flipped in the middle of one
// segment and a middle segment deleted is read past both; the run counts
// the corrupt bytes, the events lost and the missing segment, passes each
// problem on as it meets it, naming the segment, and every event not lost
// is rolled up.
func TestRunLogReportsLoss(t *testing.T) {
	ds := testEvents(6000)
	dir := t.TempDir()
	segs := writeSegments(t, dir, ds)
	flipped := segs[1]
	b, err := os.ReadFile(flipped)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 2; i < len(b)/2+40; i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(flipped, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(segs[3]); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var problems []error
	st, err := RunLog(context.Background(), LogOptions{Dir: dir, StateDir: t.TempDir(), Rollup: Options{Window: time.Second},
		Sinks: []Sink{&PartialsDir{Dir: out}}, Problem: func(err error) { problems = append(problems, err) }})
	if err != nil {
		t.Fatal(err)
	}
	lo := st.Lost
	if lo.Bytes < 40 || lo.Gaps != 1 || lo.Problems != 2 || lo.Removed != 0 {
		t.Fatalf("lost %+v, want 40 bytes or more, one gap, two problems", lo)
	}
	if lo.Events == 0 || st.Rollup.Events+lo.Events+st.Read.BadEvents != uint64(len(ds)) {
		t.Fatalf("events %d + lost %d + undecodable %d, want %d in all", st.Rollup.Events, lo.Events, st.Read.BadEvents, len(ds))
	}
	if e, _ := totals(t, out, time.Second); e != st.Rollup.Events {
		t.Fatalf("partials hold %d events, want %d", e, st.Rollup.Events)
	}
	if len(problems) != 2 || !strings.Contains(problems[0].Error(), flipped) || !strings.Contains(problems[1].Error(), filepath.Base(segs[4])) ||
		!errors.Is(problems[0], seglog.ErrCorrupt) || !errors.Is(problems[1], seglog.ErrMissing) {
		t.Fatalf("problems passed on: %v", problems)
	}
}

// TestRunLogReportsRemoved: an aggregator commits its position as the
// log's consumer offset; one that resumes from a position whose segments
// were removed meanwhile counts and reports the events it lost, and reads
// the rest; a first run on the same log, which never had a position there,
// loses nothing.
func TestRunLogReportsRemoved(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	first := testEvents(3000)
	writeSegments(t, dir, first)
	o := LogOptions{Dir: dir, StateDir: state, Rollup: Options{Window: time.Second}, Sinks: []Sink{&PartialsDir{Dir: t.TempDir()}},
		Consumer: "aggregate"}
	if st, err := RunLog(context.Background(), o); err != nil || st.Next != 3000 {
		t.Fatal(st.Next, err)
	}
	// The position is the log's consumer offset, which retention reports
	// against (seglog's TestRetainReportsUnread).
	if off, ok, err := seglog.ReadOffset(dir, "aggregate"); off != 3000 || !ok || err != nil {
		t.Fatalf("consumer offset %d, %v, %v; want 3000", off, ok, err)
	}
	writeSegments(t, dir, decisiontest.NewGenerator(10, t0.Add(time.Hour)).Batch(3000))
	// Retention removes the segments up to one past the position.
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	var keep uint64
	for _, s := range segs {
		n, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(s), ".seg"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if n > 3000 {
			keep = n
			break
		}
	}
	l, err := seglog.Open(dir, seglog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.RemoveBefore(keep); err != nil || keep == 0 {
		t.Fatal(keep, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var problems []error
	o.Problem = func(err error) { problems = append(problems, err) }
	st, err := RunLog(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if st.Lost.Removed != keep-3000 || st.Lost.Start != keep || st.Rollup.Events != 6000-keep {
		t.Fatalf("lost %+v, events %d; want %d removed, the log starting at %d, %d events read", st.Lost, st.Rollup.Events, keep-3000, keep, 6000-keep)
	}
	if len(problems) != 1 || !errors.Is(problems[0], seglog.ErrMissing) || !strings.Contains(problems[0].Error(), "offsets 3000 to "+strconv.FormatUint(keep-1, 10)) {
		t.Fatalf("problems passed on: %v", problems)
	}
	if off, _, err := seglog.ReadOffset(dir, "aggregate"); off != st.Next || err != nil {
		t.Fatalf("consumer offset %d, %v; want %d", off, err, st.Next)
	}
	fresh, err := RunLog(context.Background(), LogOptions{Dir: dir, StateDir: t.TempDir(), Rollup: o.Rollup, Sinks: o.Sinks})
	if err != nil || fresh.Lost != (seglog.Loss{}) || fresh.Rollup.Events != 6000-keep {
		t.Fatalf("a first run: lost %+v, events %d, %v", fresh.Lost, fresh.Rollup.Events, err)
	}
}
