package aggregator

import (
	"context"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions/seglog"
)

// thisRun fails unless st's rollup figures are this run's alone: events
// added as want says, and a window or correction counted for each output
// it delivered that was not a redelivery of the run before.
func thisRun(t *testing.T, what string, st RunStats, events uint64) {
	t.Helper()
	ro := st.Rollup
	if ro.Events != events || st.Outputs == st.Redeliver || ro.Windows+ro.Corrections != st.Outputs-st.Redeliver {
		t.Errorf("%s: events %d (want %d), windows %d + corrections %d for %d outputs, %d of them delivered again; want this run's figures",
			what, ro.Events, events, ro.Windows, ro.Corrections, st.Outputs, st.Redeliver)
	}
}

// TestRunLogStatsThisRun: a RunLog resumed from the state an earlier run
// saved reports what it did itself (RunStats.Rollup): the events it read,
// not the state's total, and the windows it emitted.
func TestRunLogStatsThisRun(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	first, second := testEvents(3000), decisionsAt(t0.Add(time.Hour), 2000)
	writeLog(t, dir, first)
	o := LogOptions{Dir: dir, StateDir: state, Rollup: Options{Window: time.Second}, Sinks: []Sink{&PartialsDir{Dir: t.TempDir()}}}
	st, err := RunLog(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	thisRun(t, "the first run", st, uint64(len(first)))
	appendLog(t, dir, seglog.Options{}, 500, second)
	st, err = RunLog(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	thisRun(t, "the resumed run", st, uint64(len(second)))
	if st.Next != uint64(len(first)+len(second)) {
		t.Errorf("the resumed run stopped at %d, want %d", st.Next, len(first)+len(second))
	}
}

// TestRunKinesisStatsThisRun: the same on Kinesis: a worker that takes a
// stream's shards over from the states another saved reports its own
// events and windows, in KinesisStats and in its RunStats.
func TestRunKinesisStatsThisRun(t *testing.T) {
	s := newStandIns(t)
	stream, table := s.stream(t, 2)
	store, out := &StateDir{Dir: t.TempDir()}, t.TempDir()
	first, second := testEvents(3000), decisionsAt(t0.Add(time.Hour), 2000)
	s.put(t, stream, first)
	r := start(s.options(stream, table, "one", store, &PartialsDir{Dir: out}))
	waitEvents(t, out, len(first))
	st := r.stop(t)
	thisRun(t, "the first worker", st.RunStats(), uint64(len(first)))
	s.put(t, stream, second)
	r = start(s.options(stream, table, "two", store, &PartialsDir{Dir: out}))
	waitEvents(t, out, len(first)+len(second))
	st = r.stop(t)
	thisRun(t, "the second worker", st.RunStats(), uint64(len(second)))
}
