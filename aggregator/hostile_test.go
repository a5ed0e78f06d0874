package aggregator

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

const year = 365 * 24 * time.Hour

// at returns decisions at t0 plus each offset, from distinct clients.
func at(offsets ...time.Duration) []decisions.Decision {
	ds := make([]decisions.Decision, len(offsets))
	for i, o := range offsets {
		ds[i] = decisionAt(0, fmt.Sprintf("192.0.2.%d", i%250+1))
		ds[i].Time = t0.Add(o)
	}
	return ds
}

// seconds returns the offsets from..to seconds, two a second.
func seconds(from, to int) []time.Duration {
	var out []time.Duration
	for s := from; s <= to; s++ {
		out = append(out, time.Duration(s)*time.Second, time.Duration(s)*time.Second+500*time.Millisecond)
	}
	return out
}

// futureRun is what rolling events up did: every output, in order, the
// stats and the watermark.
type futureRun struct {
	outs  []emitted
	stats RollupStats
	wm    time.Duration // from t0
	// closedBy is how many events were added when the window of second 0
	// was emitted (0: not before the final flush).
	closedBy int
}

// rollFuture rolls ds up with 1 s windows, 500 ms of lateness and late
// events dropped, flushing after every event, through Add or (columns)
// through AddBatch one event a batch; with restartAt >= 0 the rollup is
// snapshotted after that event and the rest goes to one restored from it.
// A bound other than 0 is the time, from t0, every event is vouched for
// (Rollup.Bound).
func rollFuture(t *testing.T, ds []decisions.Decision, columns bool, restartAt int, bound time.Duration) futureRun {
	t.Helper()
	o := Options{Window: time.Second, Lateness: 500 * time.Millisecond, Late: LateDrop}
	r := NewRollup(o)
	vouch := func() {
		if bound != 0 {
			r.Bound(t0.Add(bound))
		}
	}
	vouch()
	var run futureRun
	dec := columnar.NewDecoder()
	batches := encodeBatches(t, ds, 1)
	for i := range ds {
		if columns {
			if err := dec.DecodeColumns(batches[i], func(c *columnar.Columns) error {
				r.AddBatch(c, uint64(i))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		} else {
			r.Add(&ds[i], uint64(i))
		}
		for _, o := range collect(t, r, false) {
			run.outs = append(run.outs, o)
			if o.start == t0.Format("15:04:05") && !o.correction && run.closedBy == 0 {
				run.closedBy = i + 1
			}
		}
		if i == restartAt {
			r = restarted(t, r)
			vouch()
		}
	}
	run.wm = r.Watermark().Sub(t0)
	run.outs = append(run.outs, collect(t, r, true)...)
	run.stats = r.Stats()
	return run
}

// TestRollupFutureEvents: events stamped far ahead of the present (a bad
// clock, a hostile writer) join windows of their own and are counted, but
// do not move the watermark: the present's windows close on time and none
// of its events is dropped as late, through Add and through the columnar
// path alike, across a restart, and whether the hostile event is the
// partition's first or comes mid-stream. After a quiet period, the next
// events do move the watermark, once futureQuorum of them came in a row.
func TestRollupFutureEvents(t *testing.T) {
	t.Parallel()
	type want struct {
		future, dropped uint64
		wm              time.Duration // the watermark at the end, from t0
		closedBy        int           // see futureRun
	}
	cat := func(parts ...[]time.Duration) []time.Duration {
		var out []time.Duration
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	prime := make([]time.Duration, futureQuorum) // eight events at second 0
	one := func(d time.Duration) []time.Duration { return []time.Duration{d} }
	cases := []struct {
		name  string
		times []time.Duration
		want  want
		bound time.Duration // see rollFuture
	}{
		// The report: one event a year ahead mid-stream, and the second
		// event of each later second was dropped as late.
		{"a year ahead mid-stream", cat(prime, one(year), seconds(1, 12)),
			want{future: 1, wm: 12 * time.Second, closedBy: futureQuorum + 3}, 0},
		// The first eight events set the watermark: the earliest of them,
		// and those within MaxSkew of it.
		{"a year ahead first", cat(one(year), seconds(0, 12)),
			want{future: 1, wm: 12 * time.Second, closedBy: futureQuorum}, 0},
		// (The last event, 30 s, is still held at the end: not counted.)
		{"several ahead, interleaved", cat(prime, one(year), seconds(1, 3), one(2*year), one(year+time.Second), seconds(4, 12), one(30*time.Second)),
			want{future: 3, wm: 12 * time.Second, closedBy: futureQuorum + 3}, 0},
		{"11 s ahead", cat(prime, one(11*time.Second), seconds(1, 12)),
			want{future: 1, wm: 12 * time.Second, closedBy: futureQuorum + 3}, 0},
		// Within MaxSkew an event moves the watermark as it always did:
		// 10 s ahead closes the windows before second 9.5, and the second
		// events of seconds 1 to 8 are dropped as late.
		{"10 s ahead", cat(prime, one(10*time.Second), seconds(1, 12)),
			want{dropped: 8, wm: 12 * time.Second, closedBy: futureQuorum + 1}, 0},
		// A quiet night: the morning's eighth event moves the watermark
		// there, and closes the night's windows.
		{"a quiet night", cat(prime, seconds(8*3600, 8*3600+11)),
			want{wm: (8*3600 + 11) * time.Second, closedBy: 2 * futureQuorum}, 0},
		// futureQuorum hostile events in a row, with nothing of the
		// present between them, move it: the documented bound.
		{"a quorum ahead", cat(prime, repeat(year, futureQuorum), seconds(1, 3)),
			want{dropped: 3, wm: year - 500*time.Millisecond, closedBy: 2 * futureQuorum}, 0},
		// Vouched for at second 12 (a Kinesis record's arrival, the wall
		// clock), the same quorum is in the future: the present closes on
		// time, none of it late.
		{"a quorum ahead, vouched for", cat(prime, repeat(year, futureQuorum), seconds(1, 12)),
			want{future: futureQuorum, wm: 12 * time.Second, closedBy: 2*futureQuorum + 2}, 12 * time.Second},
		// A partition's first record, stamped ahead: its events do not
		// make the quorum; the present's first eight events do.
		{"a record ahead first, vouched for", cat(repeat(year, 3*futureQuorum), seconds(0, 12)),
			want{future: 3 * futureQuorum, wm: 12 * time.Second, closedBy: 4 * futureQuorum}, 12 * time.Second},
		// Sparse traffic, 5 s apart under a MaxSkew of 10 s: the first
		// eight set the watermark through the last of them, and none is
		// in the future.
		{"sparse", []time.Duration{0, 5 * time.Second, 10 * time.Second, 15 * time.Second, 20 * time.Second,
			25 * time.Second, 30 * time.Second, 35 * time.Second, 40 * time.Second, 45 * time.Second},
			want{wm: 44500 * time.Millisecond, closedBy: futureQuorum}, 0},
	}
	for _, c := range cases {
		ds := at(c.times...)
		ref := rollFuture(t, ds, false, -1, c.bound)
		var events uint64
		for _, o := range ref.outs {
			events += o.events
		}
		got := want{future: ref.stats.Future, dropped: ref.stats.LateDropped, wm: ref.wm, closedBy: ref.closedBy}
		if got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
		if events+ref.stats.LateDropped != uint64(len(ds)) {
			t.Errorf("%s: %d events emitted and %d dropped of %d", c.name, events, ref.stats.LateDropped, len(ds))
		}
		for _, v := range []struct {
			name      string
			columns   bool
			restartAt int
		}{{"columns", true, -1}, {"restart", false, futureQuorum + 1}, {"columns/restart", true, futureQuorum + 2}} {
			if got := rollFuture(t, ds, v.columns, v.restartAt, c.bound); fmt.Sprint(got) != fmt.Sprint(ref) {
				t.Errorf("%s: %s:\n got %v\nwant %v", c.name, v.name, got, ref)
			}
		}
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

// TestDueEndFuture: dueEnd, which finds where a batch's rows make the
// rollup due without adding them, agrees with adding the events one by
// one and asking Due, with events held ahead and quorums among them.
func TestDueEndFuture(t *testing.T) {
	prime := make([]time.Duration, futureQuorum)
	for _, times := range [][]time.Duration{
		append(append(append(prime, year), seconds(1, 12)...), seconds(8*3600, 8*3600+10)...),
		append(append([]time.Duration{year, 2 * year}, seconds(0, 12)...), repeat(year, futureQuorum)...),
	} {
		ds := at(times...)
		o := Options{Window: time.Second, Lateness: 500 * time.Millisecond}
		one, cols := NewRollup(o), NewRollup(o)
		nop := func(Output) error { return nil }
		due := 0
		err := columnar.NewDecoder().DecodeColumns(encodeBatches(t, ds, len(ds))[0], func(c *columnar.Columns) error {
			var b Batch
			b.Prepare(c)
			for lo := 0; lo < c.Len; {
				j := cols.dueEnd(&b, lo, c.Len)
				k := lo
				for k < c.Len {
					one.Add(&ds[k], uint64(k))
					k++
					if one.Due() {
						due++
						break
					}
				}
				if j != k {
					t.Fatalf("from row %d: dueEnd %d, one by one %d", lo, j, k)
				}
				cols.addPrepared(&b, 0, lo, j)
				if err := one.Flush(false, nop); err != nil {
					return err
				}
				if err := cols.Flush(false, nop); err != nil {
					return err
				}
				lo = j
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if due < 3 || one.Stats() != cols.Stats() || !one.Watermark().Equal(cols.Watermark()) {
			t.Errorf("due %d times; stats %+v and %+v, watermarks %v and %v", due, one.Stats(), cols.Stats(), one.Watermark(), cols.Watermark())
		}
	}
}

// TestRestoreSnapshotV1: snapshots of version 1 (before MaxSkew), 2
// (before MaxAhead), 3 (before the top-K filters) and 4 (before BadTime)
// still restore.
func TestRestoreSnapshotV1(t *testing.T) {
	r := NewRollup(Options{})
	for i, d := range at(seconds(0, 70)...) {
		r.Add(&d, uint64(i))
	}
	collect(t, r, false)
	now, err := r.AppendSnapshot(nil)
	if err != nil {
		t.Fatal(err)
	}
	v4, v3 := snapshotV4(t, r, now), snapshotV3(t, r, now)
	// Version 3 appended the AheadDropped and CorrectionsDropped counts;
	// version 2 the Future and Folded counts, the number held ahead and
	// the number of windows emitted ahead: all 0.
	for _, old := range []struct {
		v    byte
		drop int
	}{{4, 0}, {3, 0}, {2, 2}, {1, 6}} {
		from := v3
		if old.v == 4 {
			from = v4
		}
		b := append([]byte(nil), from[:len(from)-old.drop]...)
		b[len(snapshotMagic)] = old.v
		back := NewRollup(Options{})
		if err := back.Restore(b); err != nil {
			t.Fatal(err)
		}
		again, err := back.AppendSnapshot(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, now) || back.Stats().Windows != 1 {
			t.Errorf("restored from version %d: %d windows; snapshot differs: %v", old.v, back.Stats().Windows, !bytes.Equal(again, now))
		}
	}
}

// TestRollupFutureIdle: a live partition's first events, too few for a
// quorum, are of the present once the idle advance has set the watermark
// by the wall clock; an event a year ahead among them is still in the
// future.
func TestRollupFutureIdle(t *testing.T) {
	ds := at(0, 200*time.Millisecond, year, 400*time.Millisecond, 2100*time.Millisecond)
	r := NewRollup(Options{Window: time.Second, Lateness: 500 * time.Millisecond, Idle: time.Second})
	for i := range 4 {
		r.Add(&ds[i], uint64(i))
	}
	if !r.Watermark().IsZero() {
		t.Fatalf("watermark %v before a quorum or the idle advance", r.Watermark())
	}
	r.Advance(t0.Add(500 * time.Millisecond))
	r.Advance(t0.Add(2 * time.Second))
	r.Add(&ds[4], 4)
	outs := collect(t, r, false)
	if st := r.Stats(); st.Future != 1 || r.Watermark().Sub(t0) != 1600*time.Millisecond || len(outs) != 1 || outs[0].events != 3 {
		t.Errorf("future %d, watermark %v, emitted %v", st.Future, r.Watermark().Sub(t0), outs)
	}
}

// hostileNames returns n generator events whose k-th decision has a rule
// of its own, one of 5,000 tiers, a node of its own every second decision
// and a reason every third: names a hostile writer chooses. It returns the
// number of decisions too.
func hostileNames(n int) ([]decisions.Decision, int) {
	ds := decisiontest.NewGenerator(17, t0).Batch(n)
	k := 0
	for i := range ds {
		if ds[i].Kind != decisions.KindDecision {
			continue
		}
		ds[i].Rule = fmt.Sprintf("t:/r/%d", k)
		ds[i].Tier = fmt.Sprintf("t%d", k%5000)
		ds[i].Node = fmt.Sprintf("edge-%d", k/2)
		ds[i].Reason = fmt.Sprintf("reason %d", k/3)
		k++
	}
	return ds, k
}

// TestPartialKeyCap: a window of 10,000 decisions with a rule name each
// keeps DefaultMaxKeys rules apart and counts the rest under OtherKey, in
// its counts, sketches and top-K lists alike; nothing is lost, the folded
// decisions are counted, and the columnar path and a partial decoded half
// way (a restart) fold the same names into the same bytes.
func TestPartialKeyCap(t *testing.T) {
	t.Parallel()
	ds, decided := hostileNames(10_000)
	p := NewPartial(t0, time.Hour, 10)
	for i := range ds {
		p.Update(&ds[i])
	}
	rules, tiers := map[string]bool{}, map[string]bool{}
	for k := range p.Counts.Cells {
		rules[k.Rule], tiers[k.Tier] = true, true
	}
	// The first DefaultMaxKeys decisions fill the rules; every later one
	// has a new rule, folded.
	if len(rules) != DefaultMaxKeys+1 || !rules[OtherKey] || len(tiers) > DefaultMaxKeys+1 || len(p.Counts.ByNode) > DefaultMaxKeys+1 {
		t.Errorf("%d rules (other %v), %d tiers, %d nodes", len(rules), rules[OtherKey], len(tiers), len(p.Counts.ByNode))
	}
	if p.Folded != uint64(decided-DefaultMaxKeys) || p.Counts.Total() != uint64(decided) {
		t.Errorf("folded %d of %d decisions, counted %d", p.Folded, decided, p.Counts.Total())
	}
	if n, m, r := len(p.Clients.ByRule), len(p.Offenders.RequestsByRule), len(p.Offenders.RefusalsByRule); n > DefaultMaxKeys+1 || m > DefaultMaxKeys+1 || r > DefaultMaxKeys+1 {
		t.Errorf("%d rule sketches, %d and %d rule top-K lists", n, m, r)
	}
	if n, m := len(p.Offenders.RequestsByTier), len(p.Offenders.RefusalsByTier); n > DefaultMaxKeys+1 || m > DefaultMaxKeys+1 {
		t.Errorf("%d and %d tier top-K lists", n, m)
	}
	want := encode(t, p)

	q := NewPartial(t0, time.Hour, 10)
	dec := columnar.NewDecoder()
	var b Batch
	for j, data := range encodeBatches(t, ds, 1000) {
		if j == 6 { // a restart: the partial comes back from its bytes
			q = restartedPartial(t, q)
		}
		if err := dec.DecodeColumns(data, func(c *columnar.Columns) error {
			b.Prepare(c)
			q.UpdateColumns(&b, 0, b.Len())
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if got := encode(t, q); !bytes.Equal(got, want) {
		t.Errorf("columns, restarted: %d bytes differ from Update's %d", len(got), len(want))
	}
}

// TestRollupKeyCap: Options.MaxKeys reaches the rollup's windows, and the
// folded decisions are counted in RollupStats.Folded, through Add and
// AddBatch alike.
func TestRollupKeyCap(t *testing.T) {
	ds, decided := hostileNames(300)
	for _, columns := range []bool{false, true} {
		r := NewRollup(Options{Window: time.Hour, MaxKeys: 8})
		if columns {
			for _, data := range encodeBatches(t, ds, 64) {
				columnar.NewDecoder().DecodeColumns(data, func(c *columnar.Columns) error {
					r.AddBatch(c, r.Next())
					return nil
				})
			}
		} else {
			for i := range ds {
				r.Add(&ds[i], uint64(i))
			}
		}
		outs := collect(t, r, true)
		if st := r.Stats(); len(outs) != 1 || st.Folded != uint64(decided-8) || st.Events != uint64(len(ds)) {
			t.Errorf("columns %v: %d outputs, folded %d of %d decisions, %d events", columns, len(outs), st.Folded, decided, st.Events)
		}
	}
}

// TestRollupFutureWindowAtShutdown: the window of an event a year ahead,
// emitted by the final flush of a clean shutdown, does not make the
// present's later events late after a restart (it used to close every
// window before it); a later event of that window itself is late, its
// window having been emitted; through Add and AddBatch alike.
func TestRollupFutureWindowAtShutdown(t *testing.T) {
	before := at(append(append(make([]time.Duration, futureQuorum), year), seconds(1, 3)...)...)
	after := at(append(seconds(4, 7), year+100*time.Millisecond)...)
	o := Options{Window: time.Second, Lateness: 500 * time.Millisecond, Late: LateDrop}
	for _, columns := range []bool{false, true} {
		r := NewRollup(o)
		add := func(ds []decisions.Decision) {
			for _, data := range encodeBatches(t, ds, 1) {
				if !columns {
					evs, err := columnar.NewDecoder().Decode(data, nil)
					if err != nil {
						t.Fatal(err)
					}
					r.Add(&evs[0], r.Next())
					continue
				}
				columnar.NewDecoder().DecodeColumns(data, func(c *columnar.Columns) error {
					r.AddBatch(c, r.Next())
					return nil
				})
			}
		}
		add(before)
		collect(t, r, true) // a clean shutdown
		r = restarted(t, r)
		add(after)
		collect(t, r, true)
		if st := r.Stats(); st.LateDropped != 1 || st.Late != 1 || st.Future != 1 {
			t.Errorf("columns %v: late %d, dropped %d, future %d; want only the year-ahead window's second event late", columns, st.Late, st.LateDropped, st.Future)
		}
	}
}

// restarted returns a rollup restored from r's snapshot, with r's options.
func restarted(t *testing.T, r *Rollup) *Rollup {
	t.Helper()
	snap, err := r.AppendSnapshot(nil)
	if err != nil {
		t.Fatal(err)
	}
	back := NewRollup(r.Options())
	if err := back.Restore(snap); err != nil {
		t.Fatal(err)
	}
	return back
}

// TestRollupFutureEventCorrect: with late events corrected, an event a
// year ahead used to close each later second's window at its first event
// and make the second a correction (a second document per window); now
// the present's windows close on the watermark, one a second, whole.
func TestRollupFutureEventCorrect(t *testing.T) {
	ds := at(append(append(make([]time.Duration, futureQuorum), year), seconds(1, 12)...)...)
	r := NewRollup(Options{Window: time.Second, Lateness: 500 * time.Millisecond})
	var live []emitted
	for i := range ds {
		r.Add(&ds[i], uint64(i))
		live = append(live, collect(t, r, false)...)
	}
	for _, o := range live {
		if o.correction {
			t.Errorf("a correction before shutdown: %v", o)
		}
	}
	if len(live) != 12 || r.Stats().Late != 0 {
		t.Errorf("%d windows before shutdown, want 12 (seconds 0 to 11); %d late", len(live), r.Stats().Late)
	}
}

// TestRollupLatestTime: an event of the last window readers take (its
// window ends past decisions.MaxTime, where start + size wraps) is skipped
// and counted as BadTime through the columnar path as through Add (see
// TestRollupLastWindowRestart), not dropped as late behind windows of the
// present that closed; an event 90 minutes before it is counted in its
// window.
func TestRollupLatestTime(t *testing.T) {
	ds := at(seconds(0, 5)...)
	ds = append(ds, ds[1], ds[2])
	ds[len(ds)-2].Time = decisions.MaxTime
	ds[len(ds)-1].Time = decisions.MaxTime.Add(-90 * time.Minute)
	events, columns := rollFuture(t, ds, false, -1, 0), rollFuture(t, ds, true, -1, 0)
	if !slices.Equal(columns.outs, events.outs) || columns.stats != events.stats {
		t.Errorf("columns: %+v %+v\nevents: %+v %+v", columns.outs, columns.stats, events.outs, events.stats)
	}
	if events.stats.Late != 0 || len(events.outs) != 7 || events.stats.BadTime != 1 {
		t.Errorf("events: %+v %+v: want 7 windows, none late and 1 of bad time", events.outs, events.stats)
	}
}

// TestRollupEarliestTime: an event at the earliest time readers accept
// (decisions.MinTime, 1677-09-21T00:12:43Z), whose window would start
// before the earliest Unix nanosecond, is rolled up into a window that
// starts at that nanosecond, in 1677, by the event-by-event and the
// columnar path alike. Before, its window's start wrapped into 2262, the
// event outside it, and the columnar path looped for ever on it: one
// such event in the log hung `aggregate` at full CPU, deaf to SIGTERM.
func TestRollupEarliestTime(t *testing.T) {
	n := decisions.MinTime.UnixNano()
	for _, w := range []time.Duration{time.Second, time.Hour, 24 * time.Hour} {
		if s := windowStartNs(n, int64(w)); s > n || n-s >= int64(w) {
			t.Fatalf("window of %v: starts at %d, after the event at %d or too far before it", w, s, n)
		}
	}
	ds := at(seconds(0, 5)...)
	ds[0].Time = decisions.MinTime
	events, columns := rollFuture(t, ds, false, -1, 0), rollFuture(t, ds, true, -1, 0)
	if !slices.Equal(columns.outs, events.outs) || columns.stats != events.stats {
		t.Errorf("columns: %+v %+v\nevents: %+v %+v", columns.outs, columns.stats, events.outs, events.stats)
	}
	if len(events.outs) == 0 || events.outs[0].events != 1 || events.stats.Events != uint64(len(ds)) {
		t.Errorf("outputs %+v, stats %+v: want the first of the earliest event alone", events.outs, events.stats)
	}
	// In one batch with the present's events, and with an event of 1700,
	// whose distance to them overflows int64: each in its own window.
	ds = append(ds, ds[1])
	ds[len(ds)-1].Time = time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC)
	want := map[time.Time]uint64{decisions.MinTime: 1, ds[len(ds)-1].Time: 1, t0: uint64(len(ds) - 2)}
	if got, _ := windowEvents(t, ds, Options{Window: time.Hour}, false); !maps.Equal(got, want) {
		t.Errorf("events by window %v, want %v", got, want)
	}
	if got, _ := windowEvents(t, ds, Options{Window: time.Hour}, true); !maps.Equal(got, want) {
		t.Errorf("columns: events by window %v, want %v", got, want)
	}
}

// TestRestoredWindowKeepsKeyCap: a window restored from a snapshot keeps
// Options.MaxKeys names apart, as it did before the restart, and folds
// the rest; before, it took DefaultMaxKeys once restored, kept all 300
// rules of hostileNames apart where the uninterrupted run kept 8 and
// __other__, and wrote a partial 21 times its size.
func TestRestoredWindowKeepsKeyCap(t *testing.T) {
	ds, _ := hostileNames(300)
	o := Options{Window: time.Hour, MaxKeys: 8}
	whole := NewRollup(o)
	for i := range ds {
		whole.Add(&ds[i], uint64(i))
	}
	r := NewRollup(o)
	for i := range ds[:4] {
		r.Add(&ds[i], uint64(i))
	}
	r = restarted(t, r)
	for i := 4; i < len(ds); i++ {
		r.Add(&ds[i], uint64(i))
	}
	only := func(r *Rollup) *Partial {
		var out []*Partial
		if err := r.Flush(true, func(o Output) error { out = append(out, o.Partial); return nil }); err != nil || len(out) != 1 {
			t.Fatalf("%d outputs, %v; want 1", len(out), err)
		}
		return out[0]
	}
	want, got := only(whole), only(r)
	if g, w := encode(t, got), encode(t, want); !bytes.Equal(g, w) {
		t.Errorf("restarted: %d rules kept apart, %d bytes; uninterrupted: %d rules, %d bytes",
			len(got.Offenders.RequestsByRule), len(g), len(want.Offenders.RequestsByRule), len(w))
	}
}
