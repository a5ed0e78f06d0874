package aggregator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/kinesis"
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

// TestKinesisLambdaPartialFailure: with commit groups of about three records, a
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
	// The second group: the first record after the first that starts one.
	at := 1
	for !kinesis.StartsCommitGroup(ev.Records[at].Kinesis.SequenceNumber, 3) {
		at++
	}
	if at > 5 {
		t.Fatalf("the first group holds %d records: the test wants its Arrow records only", at)
	}
	second := ev.Records[at].Kinesis.SequenceNumber
	flaky := &downFrom{Sink: &PartialsDir{Dir: dir}, from: second, down: true}
	after := &ranges{}
	var invs []Invocation
	l := &KinesisLambda{Sinks: []Sink{flaky, after}, Window: time.Second, CommitRecords: 3,
		OnInvocation: func(_ context.Context, inv Invocation) { invs = append(invs, inv) }}
	resp, err := l.Handle(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != second {
		t.Fatalf("a sink failing on the second group answered %v %+v, want %s", err, resp, second)
	}
	if e, _ := totals(t, dir, time.Second); e != uint64(500*at) {
		t.Fatalf("after the failure the partials hold %d events, want the first group's %d", e, 500*at)
	}
	if len(after.seen) == 0 {
		t.Fatal("the sink after the failing one saw nothing of the first group")
	}
	for _, r := range after.seen {
		if !before(r, second) {
			t.Fatalf("the sink after the failing one saw %s, want only outputs of the first group, before %s", r, second)
		}
	}
	// The invocation read the records up to the end of the second group.
	end := at + 1
	for end < len(ev.Records) && !kinesis.StartsCommitGroup(ev.Records[end].Kinesis.SequenceNumber, 3) {
		end++
	}
	read := uint64(500 * min(end, 6))
	if end > 6 {
		read++ // the JSON record's
	}
	if len(invs) != 1 || invs[0].FailedAt != second || invs[0].Err == nil || invs[0].Events != read {
		t.Fatalf("invocation %+v, want %d events read", invs, read)
	}

	flaky.down = false
	retry := events.KinesisEvent{Records: ev.Records[at:]}
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

// downFrom fails every write of an output keyed at or after the position
// from ("seq" or "seq_sub", see positionKey) while down is set.
type downFrom struct {
	Sink
	from string
	down bool
}

func (s *downFrom) Write(ctx context.Context, partition string, o Output) error {
	if s.down && !before(o.Range, s.from) {
		return errors.New("sink down")
	}
	return s.Sink.Write(ctx, partition, o)
}

// before reports whether the output key k (positionKey) comes before the
// position p, "seq" (its record's first event) or "seq_sub"; the
// sequence numbers of kinesisEvent have one length.
func before(k, p string) bool {
	ks, ksub, _ := strings.Cut(k, "_")
	ps, psub, _ := strings.Cut(p, "_")
	if ks != ps {
		return ks < ps
	}
	a, _ := strconv.Atoi(ksub)
	b, _ := strconv.Atoi(psub)
	return a < b
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

// TestKinesisLambdaWindowCaps: commit groups are cut so that the windows
// they hold stay within the caps, and lose nothing. An honest backlog in
// time order over ten windows, with both caps 4, is cut at the records
// whose first events enter another epoch of two windows; records whose
// first events share a window but whose others stray out of their reach
// (with both caps 1, the window before and after the first of their
// epoch) are cut at the next record; a hostile record stamped at
// alternating far-future and far-past windows, with both caps 1, is cut
// within itself every three events. Every event is stored once, each
// window's output of a group keyed by its first event, a failure names
// the record where its group began and the retry from there rewrites the
// same files, and the Arrow columns and the per-event path cut alike.
func TestKinesisLambdaWindowCaps(t *testing.T) {
	t.Run("backlog", func(t *testing.T) {
		ds := backlog(14, 3001, 10)
		ev := kinesisEvent(t, ds) // 6 Arrow records of 500, 1 JSON, 1 corrupt
		// The records' first events fall in windows 0, 1, 3, 4, 6, 8
		// and 9 (the JSON record): epochs 0, 0, 1, 2, 3, 4 and 4.
		groups := []int{0, 2, 3, 4, 5}
		got := lambdaParts(t, ev, 4, groupKeys(ev, ds, groups), 4, groups)
		if len(got) != 14 {
			t.Errorf("%d files, want 14: one per window and group", len(got))
		}
	})
	t.Run("stray", func(t *testing.T) {
		ds := backlog(17, 3001, 10)
		for i := range ds {
			// Each record's first event (and the JSON record's) in window
			// 0, the others of record k in windows 2k+1 and 2k+2.
			k := i / 500
			ds[i].Time = t0.Add(time.Duration(2*k+1)*time.Second + time.Duration(i%500)*time.Second/250)
			if i%500 == 0 {
				ds[i].Time = t0.Add(500 * time.Millisecond)
			}
		}
		ev := kinesisEvent(t, ds)
		groups := []int{0, 1, 2, 3, 4, 5, 6}
		lambdaParts(t, ev, 1, groupKeys(ev, ds, groups), 6, groups)
	})
	t.Run("hostile", func(t *testing.T) {
		ds := decisiontest.NewGenerator(15, t0).Batch(501)
		for i := range ds {
			// Far future windows later and later, far past ones earlier
			// and earlier, one event each: with both caps 1 a record adds
			// three windows at most to a group, so record 0 is written in
			// parts of three events (166 early writes); record 1, the
			// JSON one, begins in another epoch (one more).
			off := time.Duration(1000+i) * time.Hour
			if i%2 == 1 {
				off = -off
			}
			ds[i].Time = t0.Add(off)
		}
		ev := kinesisEvent(t, ds)
		want := map[string]bool{}
		for i := range ds {
			want[positionKey(eventPos(ev, i))] = true
		}
		lambdaParts(t, ev, 1, want, 167, []int{0, 1})
	})
}

// groupKeys returns the keys of the outputs of ds, a kinesisEvent's
// decisions, in commit groups beginning at the records groups lists: in
// each group, the position of each window's first event.
func groupKeys(ev events.KinesisEvent, ds []decisions.Decision, groups []int) map[string]bool {
	want := map[string]bool{}
	for g, first := range groups {
		end := len(ds)
		if g+1 < len(groups) {
			end = min(500*groups[g+1], len(ds))
		}
		seen := map[int64]bool{}
		for i := 500 * first; i < end; i++ {
			if w := windowStart(ds[i].Time, time.Second); !seen[w] {
				seen[w] = true
				want[positionKey(eventPos(ev, i))] = true
			}
		}
	}
	return want
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
	// The capped run splits windows between groups: more outputs than
	// the run without the cap, the same in both stores.
	d, _ := keys(dir)
	tb, _ := keys(table)
	w, _ := keys(whole)
	if !slices.Equal(d, tb) || len(d) != invs[0].Outputs || len(d) <= len(w) {
		t.Errorf("outputs: %d in the directory, %d in the table, %d written, %d without the cap\n%v\n%v",
			len(d), len(tb), invs[0].Outputs, len(w), d, tb)
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
// that it writes the outputs keyed by want, earlyWrites of them before
// the end of their group, every event stored once; that a sink failing
// from the middle output on fails the invocation at the record where that
// output's commit group began (the last of groups at or before it), with
// only outputs before it written to the sinks; and that the retry from
// there, and a second one, leave the files of a run without the failure.
// It returns those files.
func lambdaParts(t *testing.T, ev events.KinesisEvent, capN int, want map[string]bool, earlyWrites uint64, groups []int) map[string][]byte {
	t.Helper()
	keys := sortedKeys(want)
	from := keys[len(keys)/2]
	failAt := 0
	for _, g := range groups {
		if seq, _, _ := strings.Cut(from, "_"); ev.Records[g].Kinesis.SequenceNumber <= seq {
			failAt = g
		}
	}
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
		if inv.EarlyWrites != earlyWrites || l.Stats().EarlyWrites != inv.EarlyWrites || inv.Outputs != len(want) || inv.Corrupt != 1 {
			t.Errorf("per event %v: %d early writes, %d outputs, %d corrupt; want %d, %d, 1", perEvent, inv.EarlyWrites, inv.Outputs, inv.Corrupt, earlyWrites, len(want))
		}
		if events := storedEvents(t, dir); events != inv.Events {
			t.Errorf("per event %v: partials hold %d events, the invocation %d", perEvent, events, inv.Events)
		}
		if written := slices.Sorted(slices.Values(seen.seen)); !slices.Equal(written, keys) {
			t.Errorf("per event %v: outputs written\n%v\nwant\n%v", perEvent, written, keys)
		}
		whole := files(t, dir)
		if len(whole) != len(want) {
			t.Errorf("per event %v: %d files, %d outputs", perEvent, len(whole), len(want))
		}
		if ref == nil {
			ref = whole
		} else {
			sameFiles(t, "columns", whole, ref)
		}

		// Every output from the middle one on fails: the invocation
		// names the record where its group began, and nothing at or
		// after it reached either sink.
		dir = t.TempDir()
		flaky, after := &downFrom{Sink: &PartialsDir{Dir: dir}, from: from, down: true}, &ranges{}
		l = &KinesisLambda{Sinks: []Sink{flaky, after}, Window: time.Second, MaxAhead: capN, MaxCorrections: capN, perEvent: perEvent}
		resp, err := l.Handle(context.Background(), ev)
		if err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != ev.Records[failAt].Kinesis.SequenceNumber {
			t.Fatalf("per event %v: a sink failing from %s on answered %v %+v, want record %d", perEvent, from, err, resp, failAt)
		}
		for _, k := range after.seen {
			if !before(k, from) {
				t.Errorf("per event %v: the sink after the failing one saw %s, at or after %s", perEvent, k, from)
			}
		}
		for name := range files(t, dir) {
			if k := strings.Split(name, ".")[2]; !before(k, from) {
				t.Errorf("per event %v: %s written at or after %s", perEvent, name, from)
			}
		}
		flaky.down = false
		for range 2 {
			retry := events.KinesisEvent{Records: ev.Records[failAt:]}
			if resp, err := l.Handle(context.Background(), retry); err != nil || len(resp.BatchItemFailures) != 0 {
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

// TestKinesisLambdaBadLatency: an invocation counts the latencies below 0
// it left out of the sketches (Invocation.BadLatency, LambdaStats), from
// Arrow columns and event by event alike, every decision counted.
func TestKinesisLambdaBadLatency(t *testing.T) {
	ds := decisiontest.NewGenerator(5, t0).Batch(1201)
	var bad uint64
	for i := 3; i < len(ds); i += 50 {
		ds[i].StoreLatency = -time.Millisecond
		if ds[i].Kind == decisions.KindDecision {
			bad++
		}
	}
	if bad < 10 {
		t.Fatalf("%d bad latencies", bad)
	}
	ev := kinesisEvent(t, ds)
	for _, perEvent := range []bool{false, true} {
		var inv Invocation
		l := &KinesisLambda{Sinks: []Sink{&PartialsDir{Dir: t.TempDir()}}, Window: time.Hour, perEvent: perEvent,
			OnInvocation: func(_ context.Context, i Invocation) { inv = i }}
		if resp, err := l.Handle(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("%v %+v", err, resp)
		}
		if inv.BadLatency != bad || l.Stats().BadLatency != bad || inv.Events != uint64(len(ds)) {
			t.Errorf("per event %v: bad latencies %d, stats %d, want %d; events %d of %d", perEvent, inv.BadLatency, l.Stats().BadLatency, bad, inv.Events, len(ds))
		}
	}
}

// TestKinesisLambdaEmptyEvent: an invocation of no records (an event that
// is not Kinesis's: a mis-wired trigger) still gets its line, so that it
// is seen; before, it returned before saying anything.
func TestKinesisLambdaEmptyEvent(t *testing.T) {
	var lines []Invocation
	l := &KinesisLambda{Sinks: []Sink{&PartialsDir{Dir: t.TempDir()}}, Window: time.Second,
		OnInvocation: func(_ context.Context, i Invocation) { lines = append(lines, i) }}
	resp, err := l.Handle(context.Background(), events.KinesisEvent{})
	if err != nil || len(resp.BatchItemFailures) != 0 || len(lines) != 1 || lines[0].Records != 0 || l.Stats().Invocations != 1 {
		t.Errorf("response %+v, %v; lines %+v; stats %+v", resp, err, lines, l.Stats())
	}
}

// BenchmarkKinesisLambdaRows is an invocation of one Arrow record of n
// minimal decisions (a time each, one client), as a hostile writer to the
// stream compresses the most events into the fewest bytes: the bytes
// allocated (-benchmem) are what the handler holds for it at most. At
// columnar.MaxRows it is the most any record can make it hold; one more
// event and the record is refused.
func BenchmarkKinesisLambdaRows(b *testing.B) {
	for _, n := range []int{1 << 16, columnar.MaxRows, columnar.MaxRows + 1} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			ds := make([]decisions.Decision, n)
			for i := range ds {
				ds[i].Time = t0
			}
			data, err := columnar.Encode([]byte{byte(columnar.CodecArrow)}, ds, columnar.Options{Compression: columnar.Zstd})
			if err != nil {
				b.Fatal(err)
			}
			ds = nil
			seq := "49590000000000000000000100"
			ev := events.KinesisEvent{Records: []events.KinesisEventRecord{{EventID: "shardId-000000000001:" + seq,
				EventSource: "aws:kinesis", Kinesis: events.KinesisRecord{Data: data, SequenceNumber: seq}}}}
			var inv Invocation
			l := &KinesisLambda{Sinks: []Sink{&PartialsDir{Dir: b.TempDir()}}, Window: time.Minute,
				OnInvocation: func(_ context.Context, i Invocation) { inv = i }}
			for b.Loop() {
				l.Handle(context.Background(), ev)
			}
			if want := uint64(n); n > columnar.MaxRows && inv.Corrupt != 1 || n <= columnar.MaxRows && inv.Events != want {
				b.Fatalf("%d events: handled %d, corrupt %d", n, inv.Events, inv.Corrupt)
			}
			b.ReportMetric(float64(len(data)), "record-bytes")
		})
	}
}

// TestKinesisLambdaForgedSequence: through the handler and the partials
// directory as lambda --aggregate assembles them, a record whose sequence
// number is a path writes nothing outside --partials, and is counted;
// the records around it are stored. Before, "../../../../../outside"
// with CommitRecords 1 wrote outside_0.rwp two directories above it.
func TestKinesisLambdaForgedSequence(t *testing.T) {
	ds := decisiontest.NewGenerator(13, t0).Batch(1501)
	ev := kinesisEvent(t, ds)
	ev.Records[1].Kinesis.SequenceNumber = "../../../../../outside"
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b", "partials")
	var inv Invocation
	l := &KinesisLambda{Sinks: []Sink{&PartialsDir{Dir: dir}}, Window: time.Hour, CommitRecords: 1,
		OnInvocation: func(_ context.Context, i Invocation) { inv = i }}
	if resp, err := l.Handle(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("%v %+v", err, resp)
	}
	var outside []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			outside = append(outside, p)
		}
		return err
	})
	if len(outside) > 0 || inv.Corrupt < 2 { // the forged record and the garbage one
		t.Errorf("files outside the partials directory %q; %d records skipped", outside, inv.Corrupt)
	}
	if n, _ := totals(t, dir, time.Hour); n == 0 {
		t.Error("nothing stored of the records around it")
	}
}

// TestKinesisLambdaRemovesLeftovers: an attempt that its timeout cut
// short left a temporary file beside each partial it was writing (made
// here by hand, as atomicfile names them); the retry, writing the same
// partials, removes them, and counts them on its invocation line.
// Before, on an EFS mount, they stayed for good.
func TestKinesisLambdaRemovesLeftovers(t *testing.T) {
	ds := decisiontest.NewGenerator(12, t0).Batch(3000)
	ev := kinesisEvent(t, ds)
	dir := t.TempDir()
	var invs []Invocation
	l := &KinesisLambda{Sinks: []Sink{&PartialsDir{Dir: dir}}, Window: time.Second,
		OnInvocation: func(_ context.Context, inv Invocation) { invs = append(invs, inv) }}
	if _, err := l.Handle(t.Context(), ev); err != nil {
		t.Fatal(err)
	}
	partials := files(t, dir)
	var temps []string
	for name := range partials {
		d, base := filepath.Split(filepath.Join(dir, name))
		tmp := filepath.Join(d, "."+base+".2718281828.tmp")
		if err := os.WriteFile(tmp, []byte("cut short"), 0o644); err != nil {
			t.Fatal(err)
		}
		temps = append(temps, tmp)
	}
	if _, err := l.Handle(t.Context(), ev); err != nil {
		t.Fatal(err)
	}
	for _, tmp := range temps {
		if _, err := os.Stat(tmp); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want it removed", tmp, err)
		}
	}
	if got := files(t, dir); len(got) != len(partials) {
		t.Errorf("%d files after the retry, want the %d partials", len(got), len(partials))
	}
	if len(invs) != 2 || invs[0].Leftovers != 0 || invs[1].Leftovers != uint64(len(temps)) || l.Stats().Leftovers != uint64(len(temps)) {
		t.Fatalf("leftovers counted %+v (stats %d), want 0 then %d", invs, l.Stats().Leftovers, len(temps))
	}
}
