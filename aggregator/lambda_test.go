package aggregator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/stream"
)

// kinesisEvent is one invocation's worth of records as the edge's Kinesis
// sink writes them: Arrow batches of 500, one JSON decision, and a record
// that decodes to nothing.
func kinesisEvent(t *testing.T, ds []decisions.Decision) events.KinesisEvent {
	t.Helper()
	var payloads [][]byte
	for i := 0; i < len(ds)-1; i += 500 {
		b, err := columnar.Encode([]byte{byte(columnar.CodecArrow)}, ds[i:min(i+500, len(ds)-1)], columnar.Options{})
		if err != nil {
			t.Fatal(err)
		}
		payloads = append(payloads, b)
	}
	payloads = append(payloads, decisions.AppendJSON([]byte{byte(columnar.CodecJSON)}, &ds[len(ds)-1]), []byte{9, 9, 9})
	var ev events.KinesisEvent
	for i, p := range payloads {
		seq := fmt.Sprintf("4959%020d", 100+i)
		ev.Records = append(ev.Records, events.KinesisEventRecord{EventID: "shardId-000000000002:" + seq,
			EventSource: "aws:kinesis", Kinesis: events.KinesisRecord{Data: p, SequenceNumber: seq}})
	}
	return ev
}

// TestKinesisLambda: an invocation's decisions land in the partials of
// their windows, all of them once; a retried invocation rewrites the same
// files with the same bytes; a failing sink fails the invocation at its
// first record.
func TestKinesisLambda(t *testing.T) {
	ds := decisiontest.NewGenerator(12, t0).Batch(3001)
	ev := kinesisEvent(t, ds)
	dir := t.TempDir()
	l := &KinesisLambda{Sinks: []Sink{&PartialsDir{Dir: dir}}, Window: time.Second}
	resp, err := l.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("%v %+v", err, resp)
	}
	first := files(t, dir)
	if e, _ := totals(t, dir, time.Second); e != uint64(len(ds)) {
		t.Fatalf("partials hold %d events, the invocation %d", e, len(ds))
	}
	if ps := l.Problems(); len(ps) != 1 || !strings.Contains(ps[0].Error(), ev.Records[len(ev.Records)-1].Kinesis.SequenceNumber) {
		t.Errorf("problems %v, want the corrupt record named", ps)
	}
	if st := l.Stats(); st.Corrupt != 1 || st.Events != uint64(len(ds)) || int(st.Outputs) != len(first) {
		t.Fatalf("stats %+v, %d files", st, len(first))
	}
	if _, err := l.Handle(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	again := files(t, dir)
	if fmt.Sprint(again) != fmt.Sprint(first) {
		t.Fatal("a retried invocation changed the partials")
	}
	bad := &KinesisLambda{Sinks: []Sink{failing{}}, Window: time.Second}
	resp, _ = bad.Handle(context.Background(), ev)
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != ev.Records[0].Kinesis.SequenceNumber {
		t.Fatalf("a failing sink answered %+v", resp)
	}
}

// TestKinesisLambdaPartialFailure: with commit groups of three records, a
// sink that fails on the second group makes the invocation name that
// group's first record as its batch item failure; the first group's
// partials are stored and a sink after the failing one saw only them; the
// retry Lambda makes from that record on adds the rest without counting
// the first group twice, and a second retry of the same records leaves
// the same files.
func TestKinesisLambdaPartialFailure(t *testing.T) {
	ds := decisiontest.NewGenerator(13, t0).Batch(3001)
	ev := kinesisEvent(t, ds) // 6 Arrow records of 500, 1 JSON, 1 corrupt
	dir := t.TempDir()
	second := ev.Records[3].Kinesis.SequenceNumber
	flaky := &downFrom{Sink: &PartialsDir{Dir: dir}, from: second, down: true}
	after := &ranges{}
	var invs []Invocation
	l := &KinesisLambda{Sinks: []Sink{flaky, after}, Window: time.Second, CommitRecords: 3,
		OnInvocation: func(_ context.Context, inv Invocation) { invs = append(invs, inv) }}
	resp, err := l.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != second {
		t.Fatalf("a sink failing on the second group answered %v %+v, want %s", err, resp, second)
	}
	if e, _ := totals(t, dir, time.Second); e != 1500 {
		t.Fatalf("after the failure the partials hold %d events, want the first group's 1500", e)
	}
	wantRange := ev.Records[0].Kinesis.SequenceNumber + "-" + ev.Records[2].Kinesis.SequenceNumber
	for _, r := range after.seen {
		if r != wantRange {
			t.Fatalf("the sink after the failing one saw %s, want only %s", r, wantRange)
		}
	}
	if len(invs) != 1 || invs[0].FailedAt != second || invs[0].Err == nil || invs[0].Events != 3000 {
		t.Fatalf("invocation %+v", invs)
	}

	flaky.down = false
	retry := events.KinesisEvent{Records: ev.Records[3:]}
	for range 2 {
		if resp, err := l.Handle(context.Background(), retry); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("retry: %v %+v", err, resp)
		}
		if e, _ := totals(t, dir, time.Second); e != uint64(len(ds)) {
			t.Fatalf("after the retry the partials hold %d events, the records %d", e, len(ds))
		}
	}
	last := invs[len(invs)-1]
	if last.Corrupt != 1 || len(last.Problems) != 1 || last.FailedAt != "" || last.From != second {
		t.Fatalf("retry invocation %+v", last)
	}
}

// downFrom fails every write of an output whose range starts at from
// while down is set.
type downFrom struct {
	Sink
	from string
	down bool
}

func (s *downFrom) Write(ctx context.Context, partition string, o Output) error {
	if s.down && strings.HasPrefix(o.Range, s.from+"-") {
		return errors.New("sink down")
	}
	return s.Sink.Write(ctx, partition, o)
}

// ranges records the ranges written to it.
type ranges struct{ seen []string }

func (r *ranges) Write(_ context.Context, _ string, o Output) error {
	r.seen = append(r.seen, o.Range)
	return nil
}
func (r *ranges) Flush(context.Context) error { return nil }

type failing struct{}

func (failing) Write(context.Context, string, Output) error { return errors.New("sink down") }
func (failing) Flush(context.Context) error                 { return nil }

// TestKinesisLambdaColumnsEqualsEvents: the Lambda aggregator rolling
// Arrow records up from their columns writes the same partials, byte for
// byte, as rolling their events up one by one, with records that cut
// windows, events out of order across windows and lists small enough to
// evict.
func TestKinesisLambdaColumnsEqualsEvents(t *testing.T) {
	ds := testEvents(12_001)
	ev := kinesisEvent(t, ds)
	var got, want map[string][]byte
	for _, perEvent := range []bool{true, false} {
		dir := t.TempDir()
		l := &KinesisLambda{Sinks: []Sink{&PartialsDir{Dir: dir}}, Window: time.Second, TopK: 4, perEvent: perEvent}
		if resp, err := l.Handle(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("%v %+v", err, resp)
		}
		if st := l.Stats(); st.Events != uint64(len(ds)) || st.Corrupt != 1 || st.Outputs < 3 {
			t.Fatalf("per event %v: stats %+v", perEvent, st)
		}
		if perEvent {
			want = files(t, dir)
		} else {
			got = files(t, dir)
		}
	}
	sameFiles(t, "columns", got, want)
}

// TestKinesisLambdaKeyCap: MaxKeys reaches the partials of a Lambda
// invocation, from Arrow columns and event by event alike: a window of
// decisions with a rule each keeps MaxKeys rules apart and counts the
// rest under OtherKey, nothing lost, the folded decisions counted in the
// invocation and the stats; without the cap every rule is kept.
func TestKinesisLambdaKeyCap(t *testing.T) {
	ds, decided := hostileNames(1200)
	ev := kinesisEvent(t, ds)
	f := func(maxKeys int, perEvent bool, wantRules int, wantFolded uint64) {
		t.Helper()
		dir := t.TempDir()
		var inv Invocation
		l := &KinesisLambda{Sinks: []Sink{&PartialsDir{Dir: dir}}, Window: time.Hour, MaxKeys: maxKeys, perEvent: perEvent,
			OnInvocation: func(_ context.Context, i Invocation) { inv = i }}
		if resp, err := l.Handle(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("%v %+v", err, resp)
		}
		ps, problems, err := (&PartialsDir{Dir: dir}).Read(t.Context(), time.Hour, time.Time{}, t0.Add(24*time.Hour))
		if err != nil || len(problems) > 0 || len(ps) != 1 {
			t.Fatalf("max keys %d, per event %v: %d partials, %v %v", maxKeys, perEvent, len(ps), err, problems)
		}
		var p *Partial
		for _, p = range ps {
		}
		rules := map[string]bool{}
		for k := range p.Counts.Cells {
			rules[k.Rule] = true
		}
		if len(rules) != wantRules || p.Events != uint64(len(ds)) || p.Counts.Total() != uint64(decided) {
			t.Errorf("max keys %d, per event %v: %d rules (want %d), %d events of %d, %d decisions of %d",
				maxKeys, perEvent, len(rules), wantRules, p.Events, len(ds), p.Counts.Total(), decided)
		}
		if inv.Folded != wantFolded || l.Stats().Folded != wantFolded {
			t.Errorf("max keys %d, per event %v: folded %d, stats %d, want %d", maxKeys, perEvent, inv.Folded, l.Stats().Folded, wantFolded)
		}
	}
	for _, perEvent := range []bool{false, true} {
		f(8, perEvent, 8+1, uint64(decided-8)) // eight rules and OtherKey
		f(0, perEvent, decided, 0)             // DefaultMaxKeys is more than the rules
	}
}

// TestKinesisLambdaWindowCaps: a commit group whose windows pass MaxAhead
// after the window of its first decision, or MaxCorrections before it, is
// written in parts and loses nothing. An honest backlog in time order
// over ten windows, with MaxAhead and MaxCorrections 2, is cut into parts
// of three windows each, the cuts inside records, each part keyed by its
// first and last events' positions; a hostile record stamped at
// alternating far-future and far-past windows, with both caps 1, is cut
// every three events. Every event is stored once, every key is distinct,
// a retry rewrites the same files, and the Arrow columns and the
// per-event path cut alike.
func TestKinesisLambdaWindowCaps(t *testing.T) {
	t.Run("backlog", func(t *testing.T) {
		const windows = 10
		ds := backlog(14, 3001, windows)
		win := make([]int, len(ds)) // the window of each event, from t0
		for i := range ds {
			win[i] = int(ds[i].Time.Sub(t0) / time.Second)
		}
		ev := kinesisEvent(t, ds) // 6 Arrow records of 500, 1 JSON, 1 corrupt
		// In time order, each part holds its first window and the two
		// after it: windows 0-2, 3-5, 6-8 and 9.
		want := map[string]bool{}
		for i, from := 0, 0; i < len(ds); i++ {
			if i == len(ds)-1 || win[i+1] != win[i] && win[i+1]%3 == 0 {
				want[partRange(eventPos(ev, from), eventPos(ev, i))] = true
				from = i + 1
			}
		}
		got := lambdaParts(t, ev, 2, windows, want)
		if len(got) != windows {
			t.Errorf("%d files, want one per window, %d", len(got), windows)
		}
	})
	t.Run("hostile", func(t *testing.T) {
		ds := decisiontest.NewGenerator(15, t0).Batch(501)
		for i := range ds {
			// Far future windows later and later, far past ones earlier
			// and earlier: after a part's first event they fall ahead
			// and behind by turns, so with both caps 1 a part holds
			// three windows of an event each.
			off := time.Duration(1000+i) * time.Hour
			if i%2 == 1 {
				off = -off
			}
			ds[i].Time = t0.Add(off)
		}
		ev := kinesisEvent(t, ds)
		want := map[string]bool{}
		for i := 0; i < len(ds); i += 3 {
			want[partRange(eventPos(ev, i), eventPos(ev, min(i+2, len(ds)-1)))] = true
		}
		lambdaParts(t, ev, 1, len(ds), want)
	})
}

// eventPos is the position of the decision numbered i of a kinesisEvent.
func eventPos(ev events.KinesisEvent, i int) stream.Position {
	return stream.Position{Seq: ev.Records[i/500].Kinesis.SequenceNumber, Sub: int64(i % 500)}
}

// backlog returns n decisions stamped in time order over windows seconds
// from t0.
func backlog(seed uint64, n, windows int) []decisions.Decision {
	ds := decisiontest.NewGenerator(seed, t0).Batch(n)
	for i := range ds {
		ds[i].Time = t0.Add(time.Duration(i) * time.Duration(windows) * time.Second / time.Duration(n))
	}
	return ds
}

// TestKinesisLambdaPartsStores: commit groups of three records of a
// backlog over ten 1 s windows, with MaxAhead 1, are written in parts, a
// window split between parts of one group and between groups, to a
// directory and to a DynamoDB table alike. Both stores hold the same
// outputs under the same keys and read back the same merged windows, and
// each window holds the events and decisions of a run whose groups are
// written whole: the parts merge as separate groups do.
func TestKinesisLambdaPartsStores(t *testing.T) {
	ev := kinesisEvent(t, backlog(16, 3001, 10)) // 6 Arrow records of 500, 1 JSON, 1 corrupt
	st := newStandIns(t)
	name := fmt.Sprintf("agg-lambda-parts-%d-%d", time.Now().UnixNano(), names.Add(1))
	awstest.CreateTable(t, st.dc, PartialsTableSpec(name))
	dir, whole := &PartialsDir{Dir: t.TempDir()}, &PartialsDir{Dir: t.TempDir()}
	table := &PartialsTable{API: st.dc, Table: name}
	var invs []Invocation
	l := &KinesisLambda{Sinks: []Sink{dir, table}, Window: time.Second, CommitRecords: 3, MaxAhead: 1,
		OnInvocation: func(_ context.Context, inv Invocation) { invs = append(invs, inv) }}
	one := &KinesisLambda{Sinks: []Sink{whole}, Window: time.Second, CommitRecords: 3}
	for _, l := range []*KinesisLambda{l, one} {
		if resp, err := l.Handle(t.Context(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("%v %+v", err, resp)
		}
	}
	if len(invs) != 1 || invs[0].EarlyWrites < 2 || one.Stats().EarlyWrites != 0 {
		t.Fatalf("invocation %+v; %d early writes without the cap", invs, one.Stats().EarlyWrites)
	}
	keys := func(w PartialsWalker) (out []string, ranges map[string]bool) {
		ranges = map[string]bool{}
		problems, err := w.Walk(t.Context(), time.Second, t0, t0.Add(time.Hour), func(f PartialFile, p *Partial) {
			out = append(out, fmt.Sprint(f.Start.UnixNano(), f.Partition, f.Range, p.Events))
			ranges[f.Range] = true
		})
		if err != nil || len(problems) > 0 {
			t.Fatal(err, problems)
		}
		slices.Sort(out)
		return out, ranges
	}
	// Each early write adds a part to the groups written whole.
	d, parts := keys(dir)
	tb, _ := keys(table)
	_, groups := keys(whole)
	if !slices.Equal(d, tb) || len(d) != invs[0].Outputs || len(groups) != 3 || uint64(len(parts)) != uint64(len(groups))+invs[0].EarlyWrites {
		t.Errorf("outputs: %d in the directory, %d in the table, %d written; %d parts, %d groups, %d early writes\n%v\n%v",
			len(d), len(tb), invs[0].Outputs, len(parts), len(groups), invs[0].EarlyWrites, d, tb)
	}
	read := func(s interface {
		Read(context.Context, time.Duration, time.Time, time.Time) (map[time.Time]*Partial, []ReadProblem, error)
	}) map[time.Time]*Partial {
		ps, problems, err := s.Read(t.Context(), time.Second, t0, t0.Add(time.Hour))
		if err != nil || len(problems) > 0 {
			t.Fatal(err, problems)
		}
		return ps
	}
	fromDir, fromTable, want := read(dir), read(table), read(whole)
	if len(want) != 10 || len(fromDir) != len(want) || len(fromTable) != len(want) {
		t.Fatalf("windows: %d from the directory, %d from the table, %d without the cap", len(fromDir), len(fromTable), len(want))
	}
	for start, w := range want {
		d, tb := fromDir[start], fromTable[start]
		db, _ := d.AppendBinary(nil)
		tbb, _ := tb.AppendBinary(nil)
		if !bytes.Equal(db, tbb) || d.Events != w.Events || d.Counts.Total() != w.Counts.Total() {
			t.Errorf("window %v: %d events and %d decisions, %d and %d without the cap; the stores agree: %v",
				start, d.Events, d.Counts.Total(), w.Events, w.Counts.Total(), bytes.Equal(db, tbb))
		}
	}
}

// lambdaParts runs ev through a KinesisLambda with window 1 s and both
// window caps at capN, from Arrow columns and event by event, and checks
// that the group is written in the parts keyed by want, outputs windows
// partials in all, every event stored once; that a sink failing on the
// third part fails the group at its first record with only the parts
// before it written, to both sinks; and that the retry, and a second one,
// leave the files of a run without the failure. It returns those files.
func lambdaParts(t *testing.T, ev events.KinesisEvent, capN, outputs int, want map[string]bool) map[string][]byte {
	t.Helper()
	parts := sortedKeys(want)
	var ref map[string][]byte
	for _, perEvent := range []bool{true, false} {
		dir := t.TempDir()
		var invs []Invocation
		seen := &ranges{}
		l := &KinesisLambda{Sinks: []Sink{&PartialsDir{Dir: dir}, seen}, Window: time.Second, MaxAhead: capN, MaxCorrections: capN, perEvent: perEvent,
			OnInvocation: func(_ context.Context, inv Invocation) { invs = append(invs, inv) }}
		if resp, err := l.Handle(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("per event %v: %v %+v", perEvent, err, resp)
		}
		inv := invs[0]
		if inv.EarlyWrites != uint64(len(want)-1) || l.Stats().EarlyWrites != inv.EarlyWrites || inv.Outputs != outputs || inv.Corrupt != 1 {
			t.Errorf("per event %v: %d early writes, %d outputs, %d corrupt; want %d, %d, 1", perEvent, inv.EarlyWrites, inv.Outputs, inv.Corrupt, len(want)-1, outputs)
		}
		if events := storedEvents(t, dir); events != inv.Events {
			t.Errorf("per event %v: partials hold %d events, the invocation %d", perEvent, events, inv.Events)
		}
		written := slices.Compact(seen.seen)
		if !slices.Equal(slices.Sorted(slices.Values(written)), parts) {
			t.Errorf("per event %v: parts written\n%v\nwant\n%v", perEvent, written, parts)
		}
		whole := files(t, dir)
		if len(whole) != outputs {
			t.Errorf("per event %v: %d files, %d outputs", perEvent, len(whole), outputs)
		}
		if ref == nil {
			ref = whole
		} else {
			sameFiles(t, "columns", whole, ref)
		}

		// The third part fails: the group fails at its first record, the
		// parts before it are written to both sinks, nothing after.
		from, _, _ := strings.Cut(written[2], "-")
		dir = t.TempDir()
		flaky, after := &downFrom{Sink: &PartialsDir{Dir: dir}, from: from, down: true}, &ranges{}
		l = &KinesisLambda{Sinks: []Sink{flaky, after}, Window: time.Second, MaxAhead: capN, MaxCorrections: capN, perEvent: perEvent}
		resp, err := l.Handle(context.Background(), ev)
		if err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != ev.Records[0].Kinesis.SequenceNumber {
			t.Fatalf("per event %v: a sink failing on the third part answered %v %+v", perEvent, err, resp)
		}
		firstTwo := slices.Compact(slices.Clone(after.seen))
		if !slices.Equal(firstTwo, written[:2]) {
			t.Errorf("per event %v: before the failure the sink after saw %v", perEvent, firstTwo)
		}
		for name := range files(t, dir) {
			if !strings.Contains(name, firstTwo[0]) && !strings.Contains(name, firstTwo[1]) {
				t.Errorf("per event %v: %s written after the failed part", perEvent, name)
			}
		}
		flaky.down = false
		for range 2 {
			if resp, err := l.Handle(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("per event %v: retry: %v %+v", perEvent, err, resp)
			}
			sameFiles(t, "retried", files(t, dir), whole)
		}
	}
	return ref
}

// storedEvents sums the events of every partial of 1 s windows under dir,
// read one by one, at any time.
func storedEvents(t *testing.T, dir string) (events uint64) {
	t.Helper()
	problems, err := (&PartialsDir{Dir: dir}).Walk(t.Context(), time.Second, time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64),
		func(_ PartialFile, p *Partial) { events += p.Events })
	if err != nil || len(problems) > 0 {
		t.Fatal(err, problems)
	}
	return events
}
