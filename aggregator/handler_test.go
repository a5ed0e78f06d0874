package aggregator

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/stream"
)

// linesSource is a finite Source of decoded decisions in partitions, as
// JSON lines are: batches of size events at log positions, read from the
// position Open returns. It stops a partition (Close, not ended) after
// stop batches when stop > 0, without committing the last batch it
// handed; otherwise it reads each partition to its end and closes it as
// ended. commits are the positions it committed, by partition.
type linesSource struct {
	parts   map[string][]decisions.Decision
	size    int
	stop    int
	commits map[string]stream.Position
}

func (s *linesSource) Run(ctx context.Context, h stream.Handler) error {
	for _, name := range partitionNames(s.parts) {
		ds := s.parts[name]
		at, err := h.Open(ctx, name, s.commits[name])
		if err != nil {
			return err
		}
		handed := 0
		for off := at.Offset(); off < uint64(len(ds)); off += uint64(s.size) {
			if s.stop > 0 && handed == s.stop {
				break
			}
			end := min(off+uint64(s.size), uint64(len(ds)))
			b := &stream.Batch{Partition: name, From: stream.Offset(off), To: stream.Offset(end), Events: ds[off:end]}
			if err := h.Handle(ctx, b); err != nil {
				return err
			}
			handed++
			if s.stop == 0 || handed < s.stop {
				s.commits[name] = b.To
			}
		}
		if err := h.Close(ctx, name, s.stop == 0); err != nil {
			return err
		}
	}
	return nil
}

func partitionNames(m map[string][]decisions.Decision) []string {
	return slices.Sorted(maps.Keys(m))
}

// TestRunResumesFromItsState: a run stopped part-way, whose source then
// lost every commit, resumes each partition from the state's position
// (Open), not the source's: the partials equal those of a run never
// stopped, byte for byte, and hold every event once.
func TestRunResumesFromItsState(t *testing.T) {
	ds := testEvents(6000)
	parts := map[string][]decisions.Decision{"a": ds[:3000], "b": ds[3000:]}
	ro := func(state, out string) RunOptions {
		return RunOptions{Store: &StateDir{Dir: state}, Rollup: Options{Window: time.Second},
			Sinks: []Sink{&PartialsDir{Dir: out}}, Now: standing}
	}
	run := func(src *linesSource, o RunOptions) RunStats {
		t.Helper()
		st, err := Run(context.Background(), src, o)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	whole := t.TempDir()
	run(&linesSource{parts: parts, size: 250, commits: map[string]stream.Position{}}, ro(t.TempDir(), whole))

	state, out := t.TempDir(), t.TempDir()
	first := run(&linesSource{parts: parts, size: 250, stop: 5, commits: map[string]stream.Position{}}, ro(state, out))
	if first.Rollup.Events != 2*5*250 {
		t.Fatalf("the stopped run added %d events, want %d", first.Rollup.Events, 2*5*250)
	}
	second := run(&linesSource{parts: parts, size: 250, commits: map[string]stream.Position{}}, ro(state, out))
	if second.Rollup.Events != uint64(len(ds))-first.Rollup.Events {
		t.Fatalf("the resumed run added %d events, want the %d left", second.Rollup.Events, uint64(len(ds))-first.Rollup.Events)
	}
	sameFiles(t, "resumed", files(t, out), files(t, whole))
	if e, _ := totals(t, out, time.Second); e != uint64(len(ds)) {
		t.Fatalf("partials hold %d events, want %d", e, len(ds))
	}
}

// TestOpenLogState: a partition whose state has no cursor (a log's, as
// RunLog saves it) opens at the rollup's next offset; one without a state
// at the source's position.
func TestOpenLogState(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	ds := testEvents(1200)
	writeLog(t, dir, ds)
	if _, err := RunLog(context.Background(), LogOptions{Dir: dir, StateDir: state, Rollup: Options{Window: time.Second}}); err != nil {
		t.Fatal(err)
	}
	h, err := newPartitions(RunOptions{Store: &StateDir{Dir: state}, Rollup: Options{Window: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if at, err := h.Open(ctx, "log", stream.Position{}); err != nil || at != stream.Offset(uint64(len(ds))) {
		t.Fatalf("Open of the log's state: %v %v, want offset %d", at, err, len(ds))
	}
	from := stream.Position{Seq: "4959", Sub: 3}
	if at, err := h.Open(ctx, "shardId-000000000007", from); err != nil || at != from {
		t.Fatalf("Open without a state: %v %v, want %v", at, err, from)
	}
	if _, err := newPartitions(RunOptions{}); err == nil {
		t.Fatal("a handler without a state store")
	}
}

// TestRunReportsCorruptRecords: a batch whose source does not report its
// corrupt records itself has them passed to Problem.
func TestRunReportsCorruptRecords(t *testing.T) {
	var problems []error
	h, err := newPartitions(RunOptions{Store: &StateDir{Dir: t.TempDir()}, Problem: func(err error) { problems = append(problems, err) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := h.Open(ctx, "p", stream.Position{}); err != nil {
		t.Fatal(err)
	}
	b := &stream.Batch{Partition: "p", From: stream.Position{Seq: "1"}, To: stream.Position{Seq: "1", Sub: 1},
		Records: []stream.Record{{Pos: stream.Position{Seq: "1"}, Data: []byte{1, 2, 3}}}}
	if err := h.Handle(ctx, b); err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || errors.Unwrap(problems[0]) == nil {
		t.Fatalf("problems %v, want the corrupt record", problems)
	}
}
