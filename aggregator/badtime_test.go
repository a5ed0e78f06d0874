package aggregator

import (
	"context"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// lastWindow is the start of the last 1 s window of int64 time, which
// ends past decisions.MaxTime.
var lastWindow = time.Unix(0, math.MaxInt64-math.MaxInt64%int64(time.Second)).UTC()

// TestRollupBadTime: an event without a time (the zero time, which JSON
// lines and records can carry) and an event of the last window of int64
// time (2262-04-11, whose end no Unix nanosecond holds) are skipped and
// counted as BadTime: they open no window (before, the zero time opened
// one in 1754, whose EMF CloudWatch refuses) and do not move the
// watermark, even as a partition's first events; through Add and the
// columnar path alike, across a restart, and within a batch beside an
// event of 1754 itself and events of the present.
func TestRollupBadTime(t *testing.T) {
	ds := at(append(make([]time.Duration, 3), seconds(0, 4)...)...)
	ds[0].Time, ds[1].Time, ds[2].Time = time.Time{}, decisions.MaxTime, lastWindow
	ds[7].Time = time.Time{}
	bad := uint64(4)
	for _, restartAt := range []int{-1, 1, 8} {
		events, columns := rollFuture(t, ds, false, restartAt, 0), rollFuture(t, ds, true, restartAt, 0)
		if !slices.Equal(columns.outs, events.outs) || columns.stats != events.stats || columns.wm != events.wm {
			t.Errorf("restart at %d: columns: %+v %+v\nevents: %+v %+v", restartAt, columns.outs, columns.stats, events.outs, events.stats)
		}
		var n uint64
		for _, o := range events.outs {
			n += o.events
		}
		st := events.stats
		if n != uint64(len(ds))-bad || len(events.outs) != 5 || st.BadTime != bad || st.Events != uint64(len(ds)) || st.Late != 0 || st.Future != 0 {
			t.Errorf("restart at %d: %d events in %+v, stats %+v: want the present's %d in 5 windows and %d of bad time",
				restartAt, n, events.outs, st, uint64(len(ds))-bad, bad)
		}
		if events.wm != 4*time.Second {
			t.Errorf("restart at %d: watermark at %v, want 4s (the last event of the present, less the lateness)", restartAt, events.wm)
		}
	}

	// In one batch, a zero time right after an event of its 1754 window.
	old := time.Unix(0, windowStartNs(time.Time{}.UnixNano(), int64(time.Second))).UTC()
	batch := append(slices.Clone(ds), ds[3], ds[4])
	batch[len(batch)-2].Time = old
	batch[len(batch)-1].Time = time.Time{}
	want := map[time.Time]uint64{old: 1}
	for s := range 5 {
		want[t0.Add(time.Duration(s)*time.Second)] = 2
	}
	want[t0.Add(2*time.Second)] = 1 // ds[7]
	for _, columns := range []bool{false, true} {
		got, st := windowEvents(t, batch, Options{Window: time.Second}, columns)
		if !maps.Equal(got, want) || st.BadTime != bad+1 {
			t.Errorf("columns %v: events by window %v, %d of bad time; want %v, %d", columns, got, st.BadTime, want, bad+1)
		}
	}
}

// windowEvents rolls ds up in one batch (columns) or event by event, with
// options o, and returns the events of each window a final flush emits,
// by its start, with the rollup's stats.
func windowEvents(t *testing.T, ds []decisions.Decision, o Options, columns bool) (map[time.Time]uint64, RollupStats) {
	t.Helper()
	r := NewRollup(o)
	addAll(t, r, ds, columns, len(ds))
	out := map[time.Time]uint64{}
	if err := r.Flush(true, func(o Output) error { out[o.Partial.Start] += o.Partial.Events; return nil }); err != nil {
		t.Fatal(err)
	}
	return out, r.Stats()
}

// TestRollupLastWindowRestart: events of the last window of int64 time
// that moved the watermark (a quorum of them), then a clean shutdown that
// emits their window, then an event of the present's emitted windows: the
// restarted rollup finds it late, as the uninterrupted one does. Before,
// the window's end, the rollup's closing time, wrapped into 1677 in the
// snapshot, and the restarted rollup counted the event in a window of its
// own, which --late drop drops.
func TestRollupLastWindowRestart(t *testing.T) {
	before := at(append(seconds(0, 4), repeat(0, futureQuorum+1)...)...)
	for i := 10; i < len(before); i++ {
		before[i].Time = lastWindow.Add(time.Duration(i) * time.Millisecond)
	}
	after := at(2 * time.Second)
	o := Options{Window: time.Second, Lateness: 500 * time.Millisecond, Late: LateDrop}
	run := func(restart bool) (RollupStats, []emitted) {
		r := NewRollup(o)
		for i := range before {
			r.Add(&before[i], r.Next())
		}
		outs := collect(t, r, true)
		if restart {
			r = restarted(t, r)
		}
		r.Add(&after[0], r.Next())
		return r.Stats(), append(outs, collect(t, r, true)...)
	}
	whole, wholeOuts := run(false)
	st, outs := run(true)
	if st.Late != whole.Late || st.LateDropped != whole.LateDropped || !slices.Equal(outs, wholeOuts) {
		t.Errorf("restarted: late %d (dropped %d), outputs %+v; uninterrupted: late %d (dropped %d), outputs %+v",
			st.Late, st.LateDropped, outs, whole.Late, whole.LateDropped, wholeOuts)
	}
	if whole.LateDropped != 1 {
		t.Errorf("uninterrupted: late %d (dropped %d), want the event of an emitted window dropped", whole.Late, whole.LateDropped)
	}
}

// TestRunLogBadTime: a log whose records hold events without a time and
// events of the last window of int64 time writes no window for them,
// counts them (RunStats.Rollup.BadTime), and writes the same files
// reading by record batch as event by event.
func TestRunLogBadTime(t *testing.T) {
	ds := testEvents(3000)
	for i := 5; i < len(ds); i += 97 {
		ds[i].Time = time.Time{}
	}
	ds[1000].Time, ds[2000].Time = decisions.MaxTime, lastWindow
	var bad uint64
	for _, d := range ds {
		if d.Time.IsZero() || !d.Time.Before(lastWindow) {
			bad++
		}
	}
	logDir := filepath.Join(t.TempDir(), "log")
	writeLog(t, logDir, ds)
	var outs [2]map[string][]byte
	for i, perEvent := range []bool{true, false} {
		out := t.TempDir()
		o := LogOptions{Dir: logDir, StateDir: t.TempDir(), FlushEvery: 500, Rollup: Options{Window: time.Second},
			Sinks: []Sink{&PartialsDir{Dir: out}}, perEvent: perEvent}
		st, err := RunLog(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if st.Rollup.BadTime != bad || st.Rollup.Events != uint64(len(ds)) {
			t.Errorf("per event %v: %d events, %d of bad time; want %d, %d", perEvent, st.Rollup.Events, st.Rollup.BadTime, len(ds), bad)
		}
		outs[i] = files(t, out)
		for name := range outs[i] {
			if filepath.Base(filepath.Dir(name)) != t0.Format(time.DateOnly) {
				t.Errorf("per event %v: %s: want only windows of %s", perEvent, name, t0.Format(time.DateOnly))
			}
		}
	}
	sameFiles(t, "by record batch", outs[1], outs[0])
}

// TestKinesisLambdaBadTime: the Lambda aggregator skips and counts
// (Invocation.BadTime, LambdaStats.BadTime) events without a time and
// events of the last window of int64 time, as the Rollup does, from Arrow
// columns and event by event alike, as the first event of a record and
// alone in one; before, the zero time opened a window of 1754, written as
// a partial and as EMF CloudWatch refuses.
func TestKinesisLambdaBadTime(t *testing.T) {
	ds := testEvents(1201)
	for _, i := range []int{0, 7, 500, 501, 777, 1200} { // 500: a record's first; 1200: the JSON record, alone
		ds[i].Time = time.Time{}
	}
	ds[900].Time, ds[901].Time = decisions.MaxTime, lastWindow
	const bad = 8
	ev := kinesisEvent(t, ds)
	var outs [2]map[string][]byte
	for i, perEvent := range []bool{true, false} {
		dir := t.TempDir()
		var inv Invocation
		l := &KinesisLambda{Sinks: []Sink{&PartialsDir{Dir: dir}}, Window: time.Second, perEvent: perEvent,
			OnInvocation: func(_ context.Context, got Invocation) { inv = got }}
		if resp, err := l.Handle(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("%v %+v", err, resp)
		}
		if st := l.Stats(); st.Events != uint64(len(ds)) || st.BadTime != bad || inv.BadTime != bad {
			t.Errorf("per event %v: stats %+v, invocation %d of bad time; want %d events, %d of bad time", perEvent, st, inv.BadTime, len(ds), bad)
		}
		if n := storedEvents(t, dir); n != uint64(len(ds)-bad) {
			t.Errorf("per event %v: %d events stored, want %d", perEvent, n, len(ds)-bad)
		}
		outs[i] = files(t, dir)
		for name := range outs[i] {
			if filepath.Base(filepath.Dir(name)) != t0.Format(time.DateOnly) {
				t.Errorf("per event %v: %s: want only windows of %s", perEvent, name, t0.Format(time.DateOnly))
			}
		}
	}
	sameFiles(t, "columns", outs[1], outs[0])
}
