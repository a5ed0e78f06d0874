package decisionlog_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/seglog"
	"github.com/ratewarden/ratewarden/decisions/stream"
)

var _ stream.Handler = (*recorder)(nil)

// recorder is a stream.Handler that reads every batch's rows and records
// what it was handed.
type recorder struct {
	mu      sync.Mutex      // the synctest tests read it while Run goes on
	resume  stream.Position // what Open returns; zero: what it is offered
	offered []stream.Position
	dec     *columnar.Decoder
	batches []batchSeen
	bytes   []int   // each batch's records' payload bytes
	events  []event // the rows read, not skipped
	idles   int
	closes  []closeSeen
	// handle, if set, is called with each batch after its rows are read,
	// and its error returned.
	handle func(*stream.Batch) error
	// idle, if set, is called by Idle.
	idle func()
}

type batchSeen struct {
	from, to stream.Position
	recs     []stream.Position
	events   int // events of its records from From on
}

type event struct {
	off  uint64
	time int64
}

type closeSeen struct {
	ended  bool
	ctxErr error
}

func (r *recorder) Open(_ context.Context, partition string, from stream.Position) (stream.Position, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.offered = append(r.offered, from)
	r.dec = columnar.NewDecoder()
	if r.resume != (stream.Position{}) {
		return r.resume, nil
	}
	return from, nil
}

func (r *recorder) Handle(_ context.Context, b *stream.Batch) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := batchSeen{from: b.From, to: b.To}
	bytes := 0
	var times []int64
	for _, rec := range b.Records {
		seen.recs = append(seen.recs, rec.Pos)
		seen.events += rec.Count - int(max(b.From.Sub-rec.Pos.Sub, 0))
		bytes += len(rec.Data)
	}
	_, err := b.Rows(r.dec, func(rows *stream.Rows) error {
		if rows.Columns != nil {
			times = rows.Columns.Times(times)
		}
		for i := rows.Lo; i < rows.Len(); i++ {
			if rows.Skip != nil && rows.Skip[i] {
				continue
			}
			t := int64(0)
			if rows.Columns != nil {
				t = times[i]
			} else {
				t = rows.Events[i].Time.UnixNano()
			}
			r.events = append(r.events, event{rows.Pos.Offset() + uint64(i), t})
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.batches = append(r.batches, seen)
	r.bytes = append(r.bytes, bytes)
	if r.handle != nil {
		return r.handle(b)
	}
	return nil
}

func (r *recorder) Idle(context.Context, string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.idles++
	if r.idle != nil {
		r.idle()
	}
	return nil
}

func (r *recorder) Close(ctx context.Context, _ string, ended bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closes = append(r.closes, closeSeen{ended, ctx.Err()})
	return nil
}

// counts returns the events read and the Idle calls so far.
func (r *recorder) counts() (events, idles int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events), r.idles
}

// readerEvents reads dir with a Reader and f, as the reference.
func readerEvents(t *testing.T, dir string, f decisionlog.Filter) ([]event, decisionlog.ReadStats, seglog.Loss) {
	t.Helper()
	r, err := decisionlog.Open(dir, f)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []event
	for {
		d, off, err := r.Next(context.Background(), false)
		if decisionlog.IsEnd(err) {
			return out, r.Stats(), r.Loss()
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, event{off, d.Time.UnixNano()})
	}
}

// writeRecords writes records of the given sizes to a fresh log in dir.
func writeRecords(t *testing.T, dir string, codec columnar.Codec, sizes ...int) {
	t.Helper()
	l := openLog(t, dir)
	w := decisionlog.NewWriter(l, decisionlog.WriterOptions{Codec: codec})
	g := decisiontest.NewGenerator(21, time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	for _, n := range sizes {
		if err := w.WriteBatch(g.Batch(n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSourceBatchesAtRecords: batches are whole records, each the
// shortest run of them holding BatchEvents events (the last up to the
// end), they hand every event once, as the Reader reads them, with its
// counts, and the partition ends with Close(ended).
func TestSourceBatchesAtRecords(t *testing.T) {
	dir := t.TempDir()
	writeRecords(t, dir, columnar.CodecArrow, 100, 300, 50, 500, 20, 20, 20, 4000, 7)
	writeRecords(t, dir, columnar.CodecJSON, 30, 30)
	src := decisionlog.NewSource(dir, decisionlog.SourceOptions{BatchEvents: 400})
	h := &recorder{}
	if err := src.Run(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	want := []batchSeen{
		{stream.Offset(0), stream.Offset(400), []stream.Position{stream.Offset(0), stream.Offset(100)}, 400},
		{stream.Offset(400), stream.Offset(950), []stream.Position{stream.Offset(400), stream.Offset(450)}, 550},
		{stream.Offset(950), stream.Offset(5010), []stream.Position{stream.Offset(950), stream.Offset(970), stream.Offset(990), stream.Offset(1010)}, 4060},
		{stream.Offset(5010), stream.Offset(5077), []stream.Position{stream.Offset(5010), stream.Offset(5017), stream.Offset(5047)}, 67},
	}
	if !slices.EqualFunc(h.batches, want, batchEqual) {
		t.Errorf("batches\n%+v, want\n%+v", h.batches, want)
	}
	evs, stats, _ := readerEvents(t, dir, decisionlog.Filter{})
	if !slices.Equal(h.events, evs) {
		t.Errorf("%d events handed, want the Reader's %d", len(h.events), len(evs))
	}
	if src.Stats() != stats {
		t.Errorf("stats %+v, want the Reader's %+v", src.Stats(), stats)
	}
	if !slices.Equal(h.closes, []closeSeen{{true, nil}}) || h.idles != 0 {
		t.Errorf("closes %v, idles %d: want one Close(ended), no Idle", h.closes, h.idles)
	}
}

// TestSourceBatchBytes: records of large events (8 KiB paths, as clients
// of the edge may send; the JSON codec, which does not compress them) are
// handed in batches of at most DefaultBatchBytes of records, not held
// until a batch has 65,536 events (hundreds of MB); every event is handed
// once.
func TestSourceBatchBytes(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir)
	w := decisionlog.NewWriter(l, decisionlog.WriterOptions{Codec: columnar.CodecJSON})
	g := decisiontest.NewGenerator(22, time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	long := "/" + strings.Repeat("a", 8<<10-1)
	for range 50 {
		ds := g.Batch(100)
		for i := range ds {
			ds[i].Path = long
		}
		if err := w.WriteBatch(ds); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	h := &recorder{}
	if err := decisionlog.NewSource(dir, decisionlog.SourceOptions{}).Run(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	for i, b := range h.batches {
		if h.bytes[i] > decisionlog.DefaultBatchBytes {
			t.Errorf("a batch of %d records holds %d bytes, want at most %d", len(b.recs), h.bytes[i], decisionlog.DefaultBatchBytes)
		}
	}
	if evs, _, _ := readerEvents(t, dir, decisionlog.Filter{}); len(evs) != 5000 || !slices.Equal(h.events, evs) {
		t.Errorf("%d events handed, want the Reader's %d (5000)", len(h.events), len(evs))
	}
}

func batchEqual(a, b batchSeen) bool {
	return a.from == b.from && a.to == b.to && a.events == b.events && slices.Equal(a.recs, b.recs)
}

// TestSourceResumesInsideRecord: a handler resuming inside a record gets
// that record whole, its events from the position on, and the events
// before are counted as skipped, as a Reader from that offset counts them.
// The consumer offset is what Open is offered.
func TestSourceResumesInsideRecord(t *testing.T) {
	dir := t.TempDir()
	writeRecords(t, dir, columnar.CodecArrow, 100, 300, 50)
	if err := seglog.CommitReaderOffset(dir, "agg", 120); err != nil {
		t.Fatal(err)
	}
	src := decisionlog.NewSource(dir, decisionlog.SourceOptions{BatchEvents: 250, Consumer: "agg"})
	h := &recorder{resume: stream.Offset(150)}
	if err := src.Run(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.offered, []stream.Position{stream.Offset(120)}) {
		t.Errorf("Open offered %v, want the consumer offset 120", h.offered)
	}
	want := []batchSeen{
		{stream.Offset(150), stream.Offset(400), []stream.Position{stream.Offset(100)}, 250},
		{stream.Offset(400), stream.Offset(450), []stream.Position{stream.Offset(400)}, 50},
	}
	if !slices.EqualFunc(h.batches, want, batchEqual) {
		t.Errorf("batches\n%+v, want\n%+v", h.batches, want)
	}
	evs, stats, _ := readerEvents(t, dir, decisionlog.Filter{From: 150})
	if !slices.Equal(h.events, evs) || evs[0].off != 150 {
		t.Errorf("%d events handed, want the Reader's %d from 150", len(h.events), len(evs))
	}
	if src.Stats() != stats || stats.Skipped != 50 {
		t.Errorf("stats %+v, want the Reader's %+v (50 skipped)", src.Stats(), stats)
	}
	if off, _, _ := seglog.ReadOffset(dir, "agg"); off != 450 {
		t.Errorf("consumer offset %d, want 450", off)
	}
}

// TestSourceTimeRange: Since and Until leave out what the Reader's filter
// leaves out, counted as skipped, whole records before Since unread.
func TestSourceTimeRange(t *testing.T) {
	dir := t.TempDir()
	sizes := slices.Repeat([]int{200}, 30)
	writeRecords(t, dir, columnar.CodecArrow, sizes...)
	all, _, _ := readerEvents(t, dir, decisionlog.Filter{})
	since, until := time.Unix(0, all[1234].time), time.Unix(0, all[4321].time)
	for _, f := range []decisionlog.Filter{{Since: since}, {Until: until}, {Since: since, Until: until}} {
		src := decisionlog.NewSource(dir, decisionlog.SourceOptions{BatchEvents: 1000, Since: f.Since, Until: f.Until})
		h := &recorder{}
		if err := src.Run(context.Background(), h); err != nil {
			t.Fatal(err)
		}
		evs, stats, _ := readerEvents(t, dir, f)
		if !slices.Equal(h.events, evs) || len(evs) == 0 || len(evs) == len(all) {
			t.Errorf("%+v: %d events handed, want the Reader's %d of %d", f, len(h.events), len(evs), len(all))
		}
		if src.Stats() != stats || stats.Skipped == 0 {
			t.Errorf("%+v: stats %+v, want the Reader's %+v", f, src.Stats(), stats)
		}
		if last := h.batches[len(h.batches)-1]; last.to != stream.Offset(6000) {
			t.Errorf("%+v: the last batch ends at %v, want 6000", f, last.to)
		}
	}
}

// TestSourceLoss: a corrupt region, a deleted segment and a record that
// cannot be decoded are read past, counted as the Reader counts them, and
// each reported once through Problem.
func TestSourceLoss(t *testing.T) {
	dir := t.TempDir()
	l, err := seglog.Open(dir, seglog.Options{SegmentBytes: 1 << 10, Sync: seglog.SyncPolicy{Mode: seglog.SyncNever}})
	if err != nil {
		t.Fatal(err)
	}
	w := decisionlog.NewWriter(l, decisionlog.WriterOptions{})
	g := decisiontest.NewGenerator(5, time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	for i := range 8 {
		if err := w.WriteBatch(g.Batch(40)); err != nil {
			t.Fatal(err)
		}
		if i == 5 {
			ds := g.Batch(3)
			if _, err := l.Append(seglog.Record{Count: 3, MinTime: ds[0].Time, MaxTime: ds[2].Time, Codec: uint8(columnar.CodecArrow), Payload: []byte("not an arrow batch")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segs) < 6 {
		t.Fatalf("%d segments, want a record a segment", len(segs))
	}
	if err := os.Remove(segs[2]); err != nil {
		t.Fatal(err)
	}
	flipMiddle(t, segs[4])

	var problems []error
	src := decisionlog.NewSource(dir, decisionlog.SourceOptions{BatchEvents: 100, Problem: func(err error) { problems = append(problems, err) }})
	h := &recorder{}
	if err := src.Run(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	evs, stats, loss := readerEvents(t, dir, decisionlog.Filter{})
	if !slices.Equal(h.events, evs) || len(evs) != 6*40 {
		t.Errorf("%d events handed, want the Reader's %d (240)", len(h.events), len(evs))
	}
	if src.Stats() != stats || stats.BadBatch != 1 || stats.BadEvents != 3 {
		t.Errorf("stats %+v, want the Reader's %+v (one bad record of 3)", src.Stats(), stats)
	}
	if src.Loss() != loss || loss.Gaps != 1 || loss.Problems != 2 || loss.Events != 80 {
		t.Errorf("loss %+v, want the Reader's %+v (a gap and a corrupt region of 40 events each)", src.Loss(), loss)
	}
	var corrupt, missing, undecodable int
	for _, p := range problems {
		var sp seglog.Problem
		switch {
		case errors.As(p, &sp) && errors.Is(p, seglog.ErrMissing):
			missing++
		case errors.As(p, &sp) && errors.Is(p, seglog.ErrCorrupt):
			corrupt++
		case !errors.As(p, &sp):
			undecodable++
		}
	}
	if len(problems) != 3 || corrupt != 1 || missing != 1 || undecodable != 1 {
		t.Errorf("problems %q: want a corrupt region, a missing segment and an undecodable record", problems)
	}
}

// TestSourceCommitsAfterHandle: the consumer offset moves to a batch's end
// only once Handle returned nil, and a Handle error ends Run with it,
// leaving the offset at the last batch handled.
func TestSourceCommitsAfterHandle(t *testing.T) {
	dir := t.TempDir()
	writeRecords(t, dir, columnar.CodecArrow, 100, 100, 100, 100)
	failed := errors.New("outputs not durable")
	h := &recorder{}
	h.handle = func(b *stream.Batch) error {
		off, _, err := seglog.ReadOffset(dir, "agg")
		if err != nil || stream.Offset(off) != b.From {
			t.Errorf("during Handle of %v: consumer offset %d (%v), want the batch's start", b.From, off, err)
		}
		if b.From == stream.Offset(200) {
			return failed
		}
		return nil
	}
	src := decisionlog.NewSource(dir, decisionlog.SourceOptions{BatchEvents: 100, Consumer: "agg"})
	if err := src.Run(context.Background(), h); !errors.Is(err, failed) {
		t.Fatalf("Run: %v, want the handler's error", err)
	}
	if off, _, _ := seglog.ReadOffset(dir, "agg"); off != 200 {
		t.Errorf("consumer offset %d, want 200", off)
	}
	if len(h.closes) != 0 {
		t.Errorf("closed %v after a handler error", h.closes)
	}
	// A restart is offered the committed offset.
	h2 := &recorder{}
	if err := decisionlog.NewSource(dir, decisionlog.SourceOptions{Consumer: "agg"}).Run(context.Background(), h2); err != nil {
		t.Fatal(err)
	}
	if h2.offered[0] != stream.Offset(200) || h2.events[0].off != 200 || len(h2.events) != 200 {
		t.Errorf("restart offered %v, read %d events: want 200 on", h2.offered, len(h2.events))
	}
}

// TestSourceCommitFailure: a consumer offset that cannot be committed is
// reported once and the run goes on.
func TestSourceCommitFailure(t *testing.T) {
	dir := t.TempDir()
	writeRecords(t, dir, columnar.CodecArrow, 100, 100, 100)
	var problems []error
	src := decisionlog.NewSource(dir, decisionlog.SourceOptions{BatchEvents: 100, Consumer: "agg",
		Problem: func(err error) { problems = append(problems, err) }})
	h := &recorder{}
	h.handle = func(b *stream.Batch) error {
		if b.From != (stream.Position{}) {
			return nil
		}
		// A directory in the offset file's place: renaming onto it fails.
		path := filepath.Join(dir, "offsets", "agg.off")
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(path, "x"), 0o755); err != nil {
			t.Fatal(err)
		}
		return nil
	}
	if err := src.Run(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || len(h.events) != 300 {
		t.Errorf("problems %q, %d events: want one problem, every event", problems, len(h.events))
	}
}

// TestSourceUnreadableOffset: a consumer offset file that cannot be read
// is reported, the handler is offered the log's start, and the next
// commit replaces the file.
func TestSourceUnreadableOffset(t *testing.T) {
	dir := t.TempDir()
	writeRecords(t, dir, columnar.CodecArrow, 100, 100)
	if err := seglog.CommitReaderOffset(dir, "agg", 100); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "offsets", "agg.off"), []byte("not an offset"), 0o644); err != nil {
		t.Fatal(err)
	}
	var problems []error
	h := &recorder{}
	src := decisionlog.NewSource(dir, decisionlog.SourceOptions{Consumer: "agg", Problem: func(err error) { problems = append(problems, err) }})
	if err := src.Run(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || !errors.Is(problems[0], seglog.ErrCorrupt) || h.offered[0] != (stream.Position{}) || len(h.events) != 200 {
		t.Errorf("problems %q, offered %v, %d events: want the corrupt offset reported, the start offered, every event", problems, h.offered, len(h.events))
	}
	if off, _, err := seglog.ReadOffset(dir, "agg"); off != 200 || err != nil {
		t.Errorf("consumer offset %d (%v), want 200", off, err)
	}
}

// TestSourceFollowIdles: at the end of a followed log Idle is called once
// a Tick while nothing is written; an append, polled from the files,
// wakes the follower within FollowPoll; a done context closes the
// partition as ended, with a context that is not done.
func TestSourceFollowIdles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		writeRecords(t, dir, columnar.CodecArrow, 100)
		ctx, cancel := context.WithCancel(context.Background())
		h, done := runSource(ctx, dir, decisionlog.SourceOptions{Follow: true, Tick: time.Second, Linger: 100 * time.Millisecond})
		synctest.Wait()
		if evs, idles := h.counts(); idles != 0 || evs != 0 {
			t.Fatalf("within the linger: %d idles, %d events; want none", idles, evs)
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if evs, idles := h.counts(); idles != 1 || evs != 100 {
			t.Fatalf("at the end: %d idles, %d events; want 1, 100", idles, evs)
		}
		time.Sleep(5*time.Second + time.Millisecond)
		synctest.Wait()
		if _, idles := h.counts(); idles != 6 {
			t.Errorf("after 5 ticks: %d idles, want 6", idles)
		}
		writeRecords(t, dir, columnar.CodecArrow, 50)
		time.Sleep(160 * time.Millisecond) // seglog's FollowPoll, 50 ms, and the linger
		synctest.Wait()
		if evs, idles := h.counts(); evs != 150 || idles != 7 {
			t.Errorf("after an append: %d events, %d idles; want 150, 7", evs, idles)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(h.closes, []closeSeen{{true, nil}}) {
			t.Errorf("closes %v, want one Close(ended) with a live context", h.closes)
		}
	})
}

// runSource runs a Source of the log in dir with o in the background,
// handing its batches to the recorder it returns; Run's error is sent on
// the channel.
func runSource(ctx context.Context, dir string, o decisionlog.SourceOptions) (*recorder, chan error) {
	h := &recorder{}
	src := decisionlog.NewSource(dir, o)
	done := make(chan error)
	go func() { done <- src.Run(ctx, h) }()
	return h, done
}

// liveLog opens a log in dir to write in the test, and returns it with a
// function that writes a record of n generated events.
func liveLog(t *testing.T, dir string, seed uint64) (*seglog.Log, func(n int)) {
	t.Helper()
	l, err := seglog.Open(dir, seglog.Options{Sync: seglog.SyncPolicy{Mode: seglog.SyncNever}})
	if err != nil {
		t.Fatal(err)
	}
	w := decisionlog.NewWriter(l, decisionlog.WriterOptions{})
	g := decisiontest.NewGenerator(seed, time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	return l, func(n int) {
		t.Helper()
		if err := w.WriteBatch(g.Batch(n)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSourceAppendWakes: reading through the process's own Log, an append
// wakes the follower at once, with no time passing.
func TestSourceAppendWakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		l, write := liveLog(t, dir, 3)
		write(10)
		ctx, cancel := context.WithCancel(context.Background())
		h, done := runSource(ctx, dir, decisionlog.SourceOptions{Follow: true, Log: l, Tick: time.Hour, BatchEvents: 15})
		synctest.Wait()
		start := time.Now()
		write(5)
		synctest.Wait()
		if evs, idles := h.counts(); evs != 15 || time.Since(start) != 0 || idles != 1 {
			t.Errorf("after an append that fills a batch: %d events after %v, %d idles; want 15 at once, 1", evs, time.Since(start), idles)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSourceCancelledWithoutFollow: a one-pass read stopped by its context
// returns the context's error and closes the partition as not ended.
func TestSourceCancelledWithoutFollow(t *testing.T) {
	dir := t.TempDir()
	writeRecords(t, dir, columnar.CodecArrow, 100, 100, 100)
	ctx, cancel := context.WithCancel(context.Background())
	h := &recorder{handle: func(*stream.Batch) error { cancel(); return nil }}
	err := decisionlog.NewSource(dir, decisionlog.SourceOptions{BatchEvents: 100}).Run(ctx, h)
	if !errors.Is(err, context.Canceled) || len(h.batches) != 1 {
		t.Errorf("Run: %v after %d batches, want canceled after 1", err, len(h.batches))
	}
	if !slices.Equal(h.closes, []closeSeen{{false, nil}}) {
		t.Errorf("closes %v, want one Close(not ended)", h.closes)
	}
}

// TestSourceLingers: a following source caught up with the log holds a
// short batch for more records until Linger has passed since its first
// record, so a quiet tail's events are handed within the linger and a
// busy tail's appends share a batch; a batch that reaches BatchEvents is
// handed at once; a shutdown hands what is held before the partition is
// closed. Every batch is whole records.
func TestSourceLingers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		l, write := liveLog(t, dir, 5)
		const linger = 100 * time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		h, done := runSource(ctx, dir, decisionlog.SourceOptions{Follow: true, Log: l, Tick: time.Hour, BatchEvents: 1000, Linger: linger})
		synctest.Wait()
		batches := func() []batchSeen {
			h.mu.Lock()
			defer h.mu.Unlock()
			return slices.Clone(h.batches)
		}
		off := stream.Offset

		// A quiet tail: one record, handed when the linger has passed.
		write(10)
		time.Sleep(linger - time.Millisecond)
		synctest.Wait()
		if n := len(batches()); n != 0 {
			t.Fatalf("within the linger: %d batches, want 0", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		want := []batchSeen{{off(0), off(10), []stream.Position{off(0)}, 10}}
		if got := batches(); !slices.EqualFunc(got, want, batchEqual) {
			t.Fatalf("at the linger: batches %+v, want %+v", got, want)
		}

		// A busy tail: appends every 30 ms share one batch, handed a
		// linger after its first record.
		for range 4 {
			write(20)
			time.Sleep(30 * time.Millisecond)
		}
		synctest.Wait()
		want = append(want, batchSeen{off(10), off(90), []stream.Position{off(10), off(30), off(50), off(70)}, 80})
		if got := batches(); !slices.EqualFunc(got, want, batchEqual) {
			t.Fatalf("a busy tail: batches %+v, want %+v", got, want)
		}

		// A batch that reaches BatchEvents goes at once, whole records.
		write(600)
		write(600)
		synctest.Wait()
		want = append(want, batchSeen{off(90), off(1290), []stream.Position{off(90), off(690)}, 1200})
		if got := batches(); !slices.EqualFunc(got, want, batchEqual) {
			t.Fatalf("a full batch: batches %+v, want %+v", got, want)
		}

		// Shutdown hands what is held, then closes the partition.
		write(7)
		synctest.Wait()
		if n := len(batches()); n != 3 {
			t.Fatalf("held: %d batches, want 3", n)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		want = append(want, batchSeen{off(1290), off(1297), []stream.Position{off(1290)}, 7})
		if got := batches(); !slices.EqualFunc(got, want, batchEqual) {
			t.Errorf("at shutdown: batches %+v, want %+v", got, want)
		}
		if !slices.Equal(h.closes, []closeSeen{{true, nil}}) {
			t.Errorf("closes %v, want one Close(ended) after the held batch", h.closes)
		}
		if evs, _ := h.counts(); evs != 1297 {
			t.Errorf("%d events handed, want 1297", evs)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSourceLingerLogClosed: the process's Log closed while a batch is
// held hands the batch, then ends the run with the Log's error.
func TestSourceLingerLogClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		l, write := liveLog(t, dir, 7)
		write(10)
		h, done := runSource(context.Background(), dir, decisionlog.SourceOptions{Follow: true, Log: l, Tick: time.Hour, Linger: time.Hour})
		synctest.Wait()
		if evs, _ := h.counts(); evs != 0 {
			t.Fatalf("%d events handed within the linger, want 0", evs)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, seglog.ErrClosed) {
			t.Errorf("Run: %v, want the Log's ErrClosed", err)
		}
		if evs, _ := h.counts(); evs != 10 || len(h.batches) != 1 {
			t.Errorf("%d events in %d batches handed, want 10 in 1", evs, len(h.batches))
		}
	})
}

// TestRecordCountDisagrees: a record whose payload holds more events than
// the record says (their offsets would run into the next record's) is
// skipped, and one that holds fewer (a payload cut short) gives the events
// it holds; both are counted and reported with the events the record says
// it has and could not give, alike by the Reader (Next and NextRows) and
// the Source.
func TestRecordCountDisagrees(t *testing.T) {
	for _, codec := range []columnar.Codec{columnar.CodecArrow, columnar.CodecJSON} {
		t.Run(codec.String(), func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir)
			g := decisiontest.NewGenerator(4, time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
			var enc columnar.SizedEncoder
			// declared and held: offsets 0-2, 3-4 (5 held), 5-9 (2 held), 10-12.
			for _, rec := range []struct{ declared, held int }{{3, 3}, {2, 5}, {5, 2}, {3, 3}} {
				ds := g.Batch(rec.held)
				var payload []byte
				if codec == columnar.CodecArrow {
					var err error
					if payload, err = enc.Encode(nil, ds); err != nil {
						t.Fatal(err)
					}
				} else {
					for i := range ds {
						payload = append(decisions.AppendJSON(payload, &ds[i]), '\n')
					}
				}
				if _, err := l.Append(seglog.Record{Count: uint32(rec.declared), MinTime: ds[0].Time, MaxTime: ds[len(ds)-1].Time, Codec: uint8(codec), Payload: payload}); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			wantOffs := []uint64{0, 1, 2, 5, 6, 10, 11, 12}
			offsets := func(evs []event) []uint64 {
				var out []uint64
				for _, e := range evs {
					out = append(out, e.off)
				}
				return out
			}
			evs, stats, _ := readerEvents(t, dir, decisionlog.Filter{})
			if got := offsets(evs); !slices.Equal(got, wantOffs) {
				t.Errorf("Next read offsets %v, want %v", got, wantOffs)
			}
			if stats.Events != 8 || stats.BadBatch != 2 || stats.BadEvents != 5 {
				t.Errorf("Next: stats %+v, want 8 events, 2 bad records of 5 events", stats)
			}

			r, err := decisionlog.Open(dir, decisionlog.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var rowOffs []uint64
			for {
				err := r.NextRows(context.Background(), false, func(rows *decisionlog.Rows) error {
					for i := range rows.Len() {
						rowOffs = append(rowOffs, rows.Offset+uint64(i))
					}
					return nil
				})
				if decisionlog.IsEnd(err) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(rowOffs, wantOffs) || r.Stats() != stats || len(r.Undecodable()) != 2 {
				t.Errorf("NextRows read offsets %v, stats %+v, %d undecodable; want %v, %+v, 2", rowOffs, r.Stats(), len(r.Undecodable()), wantOffs, stats)
			}

			var problems []error
			src := decisionlog.NewSource(dir, decisionlog.SourceOptions{Problem: func(err error) { problems = append(problems, err) }})
			h := &recorder{}
			if err := src.Run(context.Background(), h); err != nil {
				t.Fatal(err)
			}
			if got := offsets(h.events); !slices.Equal(got, wantOffs) || src.Stats() != stats {
				t.Errorf("Source handed offsets %v, stats %+v; want %v, %+v", got, src.Stats(), wantOffs, stats)
			}
			var ce *columnar.CountError
			if len(problems) != 2 || !errors.As(problems[0], &ce) || !strings.Contains(problems[1].Error(), "holds 2 events where its record says 5") {
				t.Errorf("problems %q: want the two records' counts", problems)
			}
		})
	}
}

// TestSourceLossOutsideRange: a corrupt region between records wholly
// before Since, or wholly at or after Until, is counted apart (Outside),
// not among the range's losses, and its problem says so; one beside a
// record of the range is the range's. The Source and the Reader agree.
func TestSourceLossOutsideRange(t *testing.T) {
	dir := t.TempDir()
	l, err := seglog.Open(dir, seglog.Options{SegmentBytes: 1 << 10, Sync: seglog.SyncPolicy{Mode: seglog.SyncNever}})
	if err != nil {
		t.Fatal(err)
	}
	w := decisionlog.NewWriter(l, decisionlog.WriterOptions{})
	start := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	for i := range 10 { // a record of 40 events a minute, a segment each
		if err := w.WriteBatch(decisiontest.NewGenerator(uint64(i), start.Add(time.Duration(i)*time.Minute)).Batch(40)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segs) != 10 {
		t.Fatalf("%d segments, want a record a segment", len(segs))
	}
	flipMiddle(t, segs[1]) // the record of 03:01
	flipMiddle(t, segs[8]) // of 03:08
	// since and until in minutes after 03:00, -1 for no bound.
	f := func(since, until int, inside, outside uint64) {
		t.Helper()
		var problems []string
		o := decisionlog.SourceOptions{Problem: func(err error) { problems = append(problems, err.Error()) }}
		if since >= 0 {
			o.Since = start.Add(time.Duration(since) * time.Minute)
		}
		if until >= 0 {
			o.Until = start.Add(time.Duration(until) * time.Minute)
		}
		src := decisionlog.NewSource(dir, o)
		if err := src.Run(context.Background(), &recorder{}); err != nil {
			t.Fatal(err)
		}
		marked := 0
		for _, p := range problems {
			if strings.Contains(p, "the time range read: not counted") {
				marked++
			}
		}
		if lo, out := src.Loss(), src.Outside(); lo.Problems != inside || lo.Events != 40*inside || out.Problems != outside || out.Events != 40*outside || len(problems) != 2 || marked != int(outside) {
			t.Errorf("03:%02d to 03:%02d: loss %+v, outside %+v, problems %q; want %d regions lost and %d outside, so marked", since, until, lo, out, problems, inside, outside)
		}
		// The Reader (decisions cat, report, whatif) alike.
		r, err := decisionlog.Open(dir, decisionlog.Filter{Since: o.Since, Until: o.Until})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for {
			if _, _, err := r.Next(context.Background(), false); err != nil {
				break
			}
		}
		var rproblems []string
		for _, p := range r.Problems() {
			rproblems = append(rproblems, p.Error())
		}
		if r.Loss() != src.Loss() || r.Outside() != src.Outside() || !slices.Equal(rproblems, problems) {
			t.Errorf("03:%02d to 03:%02d: Reader: loss %+v, outside %+v, problems %q; want the Source's", since, until, r.Loss(), r.Outside(), rproblems)
		}
	}
	f(4, 6, 0, 2)
	f(1, 2, 1, 1)
	f(0, 9, 2, 0)
	f(2, 8, 2, 0)   // each beside a record of the range
	f(-1, -1, 2, 0) // no range
	f(4, -1, 1, 1)
	f(-1, 5, 1, 1)
}
