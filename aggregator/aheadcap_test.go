package aggregator

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
)

// hostileWindows returns n events of the present, two hundred
// microseconds apart from t0, each followed by one stamped at a distinct
// second of its own: from an hour ahead on (past false), or an hour
// behind and back (past true), never two in a row, so that no quorum
// moves the watermark to them.
func hostileWindows(n int, past bool) []decisions.Decision {
	ds := make([]decisions.Decision, 0, 2*n)
	for i := range n {
		d := decisionAt(0, "192.0.2.1")
		d.Time = t0.Add(time.Duration(i) * 200 * time.Microsecond)
		ds = append(ds, d)
		h := decisionAt(0, "198.51.100.7")
		if past {
			h.Time = t0.Add(-time.Hour - time.Duration(i)*time.Second)
		} else {
			h.Time = t0.Add(time.Hour + time.Duration(i)*time.Second)
		}
		ds = append(ds, h)
	}
	return ds
}

// cappedRun is what rolling hostileWindows up did.
type cappedRun struct {
	outs             []string // each output: key and encoded bytes
	events           uint64   // the events of every output
	stats            RollupStats
	maxOpen, maxCorr int // the most windows held at once
	emittedAt        map[string]int
}

// rollCapped rolls ds up with 1 s windows and late events corrected,
// closing windows at the event that passes them (Due after every event,
// as RunKinesis does): through Add, or through the columnar path
// (addDecoded with dueEnd) in batches of 500; with restartAt >= 0 the
// rollup is snapshotted after that event (the batch holding it, columns)
// and the rest goes to one restored from it.
func rollCapped(t *testing.T, ds []decisions.Decision, columns bool, restartAt int) cappedRun {
	t.Helper()
	return rollCappedWith(t, Options{Window: time.Second, Lateness: 500 * time.Millisecond}, 500, ds, columns, restartAt)
}

// rollCappedWith is rollCapped with options o and batches of size events.
func rollCappedWith(t *testing.T, o Options, size int, ds []decisions.Decision, columns bool, restartAt int) cappedRun {
	t.Helper()
	r := NewRollup(o)
	run := cappedRun{emittedAt: map[string]int{}}
	added := 0
	emit := func(o Output) error {
		b := encode(t, o.Partial)
		key := fmt.Sprintf("%s %v %d-%d", o.Partial.Start.Format("15:04:05"), o.Correction, o.From, o.To)
		run.outs = append(run.outs, key+" "+string(b))
		run.events += o.Partial.Events
		if !o.Correction {
			run.emittedAt[o.Partial.Start.Format(time.RFC3339)] = added
		}
		return nil
	}
	check := func() {
		open, corr := len(r.open), len(r.late)
		run.maxOpen, run.maxCorr = max(run.maxOpen, open), max(run.maxCorr, corr)
	}
	if !columns {
		for i := range ds {
			r.Add(&ds[i], uint64(i))
			added++
			check()
			if r.Due() {
				if err := r.Flush(false, emit); err != nil {
					t.Fatal(err)
				}
			}
			if i == restartAt {
				r = restarted(t, r)
			}
		}
	} else {
		dec := columnar.NewDecoder()
		for k, raw := range encodeBatches(t, ds, size) {
			seq := uint64(k * size)
			limit := func(b *Batch, lo, hi int) int { return r.dueEnd(b, lo, hi) }
			after := func(n int) error {
				added += n
				check()
				if r.Due() {
					return r.Flush(false, emit)
				}
				return nil
			}
			if err := dec.DecodeColumns(raw, func(c *columnar.Columns) error {
				return r.addDecoded(columnar.Rows{Columns: c}, 0, seq, nil, limit, after)
			}); err != nil {
				t.Fatal(err)
			}
			if restartAt >= k*size && restartAt < (k+1)*size {
				r = restarted(t, r)
			}
		}
	}
	if err := r.Flush(true, emit); err != nil {
		t.Fatal(err)
	}
	run.stats = r.Stats()
	return run
}

// TestRollupAheadCap: a writer stamping each record at a distinct second
// an hour or more ahead, between records of the present, opens at most
// MaxAhead windows; the rest of its events are dropped and counted, none
// is lost uncounted, the present's windows still close at the event that
// passes them; and the columnar path and a restart from a snapshot
// mid-stream emit the same bytes.
func TestRollupAheadCap(t *testing.T) {
	t.Parallel()
	const n = 100_000
	ds := hostileWindows(n, false)
	ref := rollCapped(t, ds, false, -1)
	o := NewRollup(Options{}).Options()
	if ref.maxOpen > o.MaxAhead+2 {
		t.Errorf("%d windows open at once, want at most MaxAhead (%d) and the present's two", ref.maxOpen, o.MaxAhead)
	}
	if want := uint64(n - o.MaxAhead); ref.stats.AheadDropped != want {
		t.Errorf("%d events dropped ahead, want %d (one window each past MaxAhead)", ref.stats.AheadDropped, want)
	}
	if got := ref.events + ref.stats.LateDropped + ref.stats.CorrectionsDropped + ref.stats.AheadDropped; got != uint64(len(ds)) {
		t.Errorf("%d events emitted or counted as dropped (%+v), of %d", got, ref.stats, len(ds))
	}
	if ref.stats.Late != 0 {
		t.Errorf("%d events of the present late", ref.stats.Late)
	}
	presentOnTime(t, ds, ref)
	for name, got := range otherPaths(t, ds, n+1) {
		if got.maxOpen > o.MaxAhead+2 {
			t.Errorf("%s: %d windows open at once", name, got.maxOpen)
		}
		sameRun(t, name, got, ref)
	}
}

// otherPaths rolls ds up through the columnar path, and through Add and
// the columnar path with a restart after event restartAt.
func otherPaths(t *testing.T, ds []decisions.Decision, restartAt int) map[string]cappedRun {
	return map[string]cappedRun{
		"columns":         rollCapped(t, ds, true, -1),
		"restart":         rollCapped(t, ds, false, restartAt),
		"columns/restart": rollCapped(t, ds, true, restartAt),
	}
}

// TestRollupCorrectionsCap: the same writer stamping each record at a
// distinct second an hour or more behind (each late, its window corrected)
// holds at most MaxCorrections corrections between two closing windows;
// the rest is dropped and counted, through Add, columns and a restart
// alike.
func TestRollupCorrectionsCap(t *testing.T) {
	t.Parallel()
	const n = 100_000
	ds := hostileWindows(n, true)
	ref := rollCapped(t, ds, false, -1)
	o := NewRollup(Options{}).Options()
	if ref.maxCorr > o.MaxCorrections {
		t.Errorf("%d corrections pending at once, want at most %d", ref.maxCorr, o.MaxCorrections)
	}
	if ref.stats.CorrectionsDropped == 0 || ref.stats.Corrections == 0 {
		t.Errorf("no correction dropped or none emitted: %+v", ref.stats)
	}
	if got := ref.events + ref.stats.LateDropped + ref.stats.CorrectionsDropped + ref.stats.AheadDropped; got != uint64(len(ds)) {
		t.Errorf("%d events emitted or counted as dropped (%+v), of %d", got, ref.stats, len(ds))
	}
	presentOnTime(t, ds, ref)
	for name, got := range otherPaths(t, ds, n+1) {
		if got.maxCorr > o.MaxCorrections {
			t.Errorf("%s: %d corrections pending at once", name, got.maxCorr)
		}
		sameRun(t, name, got, ref)
	}
}

// TestRollupAheadCapRuns: with a cap of one window ahead, events of a
// window refused one by one until a quorum of them moves the latest event
// time to it (then it opens mid-run), and windows refused within one
// batch, are refused and counted alike through Add, the columnar path in
// batches of every size that cuts these runs, and a restart.
func TestRollupAheadCapRuns(t *testing.T) {
	t.Parallel()
	cat := func(parts ...[]time.Duration) []time.Duration {
		var out []time.Duration
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	prime := make([]time.Duration, futureQuorum)
	times := cat(prime, []time.Duration{year, 2 * year}, seconds(1, 2), repeat(3*year, futureQuorum),
		seconds(1, 3), []time.Duration{4 * year, 5 * year}, seconds(1, 3))
	ds := at(times...)
	o := Options{Window: time.Second, Lateness: 500 * time.Millisecond, MaxAhead: 1}
	ref := rollCappedWith(t, o, 1, ds, false, -1)
	// 2 years and 5 years refused (a year's window was open ahead), and
	// seven of the eight at 3 years before the quorum.
	if want := uint64(2 + futureQuorum - 1); ref.stats.AheadDropped != want {
		t.Errorf("%d dropped ahead, want %d: %+v", ref.stats.AheadDropped, want, ref.stats)
	}
	if got := ref.events + ref.stats.LateDropped + ref.stats.CorrectionsDropped + ref.stats.AheadDropped; got != uint64(len(ds)) {
		t.Errorf("%d events emitted or counted as dropped (%+v), of %d", got, ref.stats, len(ds))
	}
	for _, size := range []int{1, 2, 3, 5, 7, len(ds)} {
		for _, restartAt := range []int{-1, futureQuorum + 4, futureQuorum + 9} {
			name := fmt.Sprintf("batches of %d, restart after %d", size, restartAt)
			sameRun(t, name, rollCappedWith(t, o, size, ds, true, restartAt), ref)
			sameRun(t, name+", events", rollCappedWith(t, o, size, ds, false, restartAt), ref)
		}
	}
}

// presentOnTime checks that each window of the present events (the even
// ones of hostileWindows), but the last, was emitted at the first event
// of the present at or past its end plus the lateness.
func presentOnTime(t *testing.T, ds []decisions.Decision, run cappedRun) {
	t.Helper()
	last := ds[len(ds)-2].Time.Truncate(time.Second)
	for s := t0; s.Before(last); s = s.Add(time.Second) {
		due := s.Add(1500 * time.Millisecond)
		first := len(ds)
		for i := 0; i < len(ds); i += 2 {
			if !ds[i].Time.Before(due) {
				first = i + 1
				break
			}
		}
		if at, ok := run.emittedAt[s.Format(time.RFC3339)]; !ok || at != first {
			t.Errorf("window %s emitted after %d events (emitted %v), want %d", s.Format("15:04:05"), at, ok, first)
		}
	}
}

// sameRun checks that got emitted what want did, byte for byte, and
// counted the same.
func sameRun(t *testing.T, name string, got, want cappedRun) {
	t.Helper()
	if got.stats != want.stats {
		t.Errorf("%s: stats %+v, want %+v", name, got.stats, want.stats)
	}
	if len(got.outs) != len(want.outs) {
		t.Errorf("%s: %d outputs, want %d", name, len(got.outs), len(want.outs))
		return
	}
	for i := range got.outs {
		if got.outs[i] != want.outs[i] {
			t.Errorf("%s: output %d differs: %.40q, want %.40q", name, i, got.outs[i], want.outs[i])
			return
		}
	}
}

// BenchmarkRollupHostileWindows rolls up the attack of TestRollupAheadCap
// (20,000 records at distinct seconds an hour or more ahead, between
// 20,000 of the present) through Add, Due and Flush, with the default
// MaxAhead and with no effective cap (the aggregator before it): B/op and
// allocs/op per attack, and the heap still held at its end (held-MB,
// after a GC, before the final flush) with the windows open.
func BenchmarkRollupHostileWindows(b *testing.B) {
	ds := hostileWindows(20_000, false)
	for _, c := range []struct {
		name     string
		maxAhead int
	}{{"capped", 0}, {"uncapped", 1 << 30}} {
		b.Run(c.name, func(b *testing.B) {
			var held float64
			var open int
			b.ReportAllocs()
			for b.Loop() {
				var before runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				r := NewRollup(Options{Window: time.Second, Lateness: 500 * time.Millisecond, MaxAhead: c.maxAhead})
				for i := range ds {
					r.Add(&ds[i], uint64(i))
					if r.Due() {
						r.Flush(false, func(Output) error { return nil })
					}
				}
				var after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&after)
				held = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / (1 << 20)
				open = len(r.open)
				runtime.KeepAlive(r)
			}
			b.ReportMetric(held, "held-MB")
			b.ReportMetric(float64(open), "windows")
		})
	}
}
