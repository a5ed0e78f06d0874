package seglog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name         string
		segBytes     int64
		n, batch     int
		count        uint32
		size         int
		wantSegments int // at least
	}{
		{"one segment", 0, 50, 1, 256, 300, 1},
		{"many segments", 4 << 10, 200, 1, 16, 500, 20},
		{"batches across segments", 8 << 10, 300, 7, 3, 700, 20},
		{"empty payloads", 1 << 10, 100, 3, 1, 0, 2},
		{"record larger than a segment", 1 << 10, 12, 2, 5, 3000, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SegmentBytes: c.segBytes, Sync: SyncPolicy{Mode: SyncNever}}
			l := mustOpen(t, dir, opts)
			var recs []Record
			for i := range c.n {
				recs = append(recs, mkRec(i, c.count, c.size))
			}
			want := appendAll(t, l, recs, c.batch)
			if n := l.Stats().Segments; n < c.wantSegments {
				t.Errorf("%d segments, want at least %d", n, c.wantSegments)
			}
			if got, want := l.NextOffset(), uint64(c.n)*uint64(c.count); got != want {
				t.Errorf("next offset %d, want %d", got, want)
			}
			checkRecords(t, "log reader", readAll(t, mustReader(t)(l.Reader(0))), want)
			checkRecords(t, "open reader", readAll(t, mustReader(t)(OpenReader(dir, 0, Options{}))), want)

			// From every offset: the record holding it, then the rest.
			for from := uint64(0); from <= l.NextOffset(); from += max(1, l.NextOffset()/97) {
				i := 0
				for i < len(want) && want[i].FirstOffset+uint64(want[i].Count) <= from {
					i++
				}
				checkRecords(t, fmt.Sprintf("log reader from %d", from), readAll(t, mustReader(t)(l.Reader(from))), want[i:])
				checkRecords(t, fmt.Sprintf("open reader from %d", from), readAll(t, mustReader(t)(OpenReader(dir, from, Options{}))), want[i:])
			}
			if _, err := l.Reader(l.NextOffset() + 1); err == nil {
				t.Error("reader past the end: no error")
			}

			// From times: the first record whose MaxTime is not before t.
			for _, at := range []time.Time{{}, t0.Add(-time.Hour), t0, t0.Add(700 * time.Millisecond), t0.Add(time.Duration(c.n/2) * time.Second), t0.Add(time.Duration(c.n-1) * time.Second), t0.Add(time.Duration(c.n) * time.Second)} {
				i := 0
				for i < len(want) && want[i].MaxTime.Before(at) {
					i++
				}
				checkRecords(t, fmt.Sprintf("reader at %v", at), readAll(t, mustReader(t)(l.ReaderAt(at))), want[i:])
			}

			// After reopening, sealed segments are indexed from their trailers.
			before := l.Stats()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = mustOpen(t, dir, opts)
			after := l.Stats()
			if after.Segments != before.Segments || after.Records != before.Records || after.Events != before.Events || after.Bytes != before.Bytes || after.NextOffset != before.NextOffset {
				t.Errorf("stats after reopen %+v, before %+v", after, before)
			}
			if after.CorruptRegions != 0 {
				t.Errorf("%d problems in a clean log", after.CorruptRegions)
			}
			more := appendAll(t, l, []Record{mkRec(c.n, 2, 10)}, 1)
			checkRecords(t, "after reopen", readAll(t, mustReader(t)(l.Reader(0))), append(want, more...))
		})
	}
}

func TestReaderAtUnorderedTimes(t *testing.T) {
	// Event times are not monotonic across records: ReaderAt still finds
	// the first record, in offset order, whose MaxTime is not before t.
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, Sync: SyncPolicy{Mode: SyncNever}})
	var recs []Record
	for i := range 300 {
		r := mkRec(i, 1, 100)
		sec := time.Duration((i*37)%300) * time.Second
		r.MinTime, r.MaxTime = t0.Add(sec), t0.Add(sec+time.Second)
		recs = append(recs, r)
	}
	want := appendAll(t, l, recs, 1)
	for s := range 310 {
		at := t0.Add(time.Duration(s)*time.Second + time.Second/2)
		i := 0
		for i < len(want) && want[i].MaxTime.Before(at) {
			i++
		}
		checkRecords(t, fmt.Sprintf("at %v", at), readAll(t, mustReader(t)(l.ReaderAt(at))), want[i:])
	}
}

func TestRoll(t *testing.T) {
	clock := t0
	for _, c := range []struct {
		name    string
		opts    Options
		steps   []time.Duration // clock advance before each append
		size    int
		wantSeg []int // records per segment
	}{
		{"by size", Options{SegmentBytes: 4096}, make([]time.Duration, 10), 1000, []int{3, 3, 3, 1}},
		{"by age", Options{SegmentAge: time.Minute}, []time.Duration{0, 30 * time.Second, 29 * time.Second, time.Second, 0, 2 * time.Hour, 0}, 10, []int{3, 2, 2}},
		{"age and size", Options{SegmentAge: time.Minute, SegmentBytes: 4096}, []time.Duration{0, 0, 0, 0, time.Minute, 0}, 1000, []int{3, 1, 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.opts.Now = func() time.Time { return clock }
			c.opts.Sync.Mode = SyncNever
			l := mustOpen(t, dir, c.opts)
			for i, d := range c.steps {
				clock = clock.Add(d)
				if _, err := l.Append(mkRec(i, 1, c.size)); err != nil {
					t.Fatal(err)
				}
			}
			var got []int
			for _, s := range segFiles(t, dir) {
				n := 0
				for _, f := range framesOf(t, s.path) {
					if f.kind == bodyRecord {
						n++
					}
				}
				got = append(got, n)
				if fi, _ := os.Stat(s.path); c.opts.SegmentBytes > 0 && fi.Size() > c.opts.SegmentBytes {
					t.Errorf("%s: %d bytes, more than SegmentBytes", s.path, fi.Size())
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(c.wantSeg) {
				t.Errorf("records per segment %v, want %v", got, c.wantSeg)
			}
			if st := l.Stats(); st.Rolls != uint64(len(c.wantSeg)-1) || st.Segments != len(c.wantSeg) {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestRetention(t *testing.T) {
	// Each record fills a segment: segment i holds record i, whose events
	// are at t0+i seconds.
	for _, c := range []struct {
		name      string
		opts      Options
		now       time.Duration // since t0, for Retain
		wantFirst int           // the oldest record kept
	}{
		{"keep", Options{}, time.Hour, 0},
		{"age", Options{RetainAge: 10 * time.Second}, 15 * time.Second, 5}, // records 0-4 end before t0+5s
		{"age keeps the active segment", Options{RetainAge: time.Second}, time.Hour, 19},
		{"bytes", Options{RetainBytes: 5 * 1024}, 0, 14}, // 5 sealed segments of 832 bytes and the active one of 770
		{"bytes below one segment", Options{RetainBytes: 1}, 0, 19},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			clock := t0
			c.opts.SegmentBytes, c.opts.Sync.Mode, c.opts.Now = 1024, SyncNever, func() time.Time { return clock }
			l := mustOpen(t, dir, c.opts)
			var recs []Record
			for i := range 20 {
				recs = append(recs, mkRec(i, 10, 700))
			}
			want := appendAll(t, l, recs, 1)
			clock = t0.Add(c.now)
			if _, err := l.Retain(clock); err != nil {
				t.Fatal(err)
			}
			checkRecords(t, "log reader", readAll(t, mustReader(t)(l.Reader(0))), want[c.wantFirst:])
			r := mustReader(t)(OpenReader(dir, 0, Options{}))
			checkRecords(t, "open reader", readAll(t, r), want[c.wantFirst:])
			if p := r.Problems(); len(p) != 0 {
				t.Errorf("problems %v", p)
			}
			if st := l.Stats(); st.Segments != 20-c.wantFirst || st.Removed != uint64(c.wantFirst) {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestRetentionAtRoll(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 1024, RetainBytes: 4 * 1024, Sync: SyncPolicy{Mode: SyncNever}})
	for i := range 50 {
		if _, err := l.Append(mkRec(i, 1, 700)); err != nil {
			t.Fatal(err)
		}
	}
	var total int64
	for _, s := range segFiles(t, dir) {
		fi, _ := os.Stat(s.path)
		total += fi.Size()
	}
	if st := l.Stats(); total > 5*1024 || st.Bytes != total || st.Removed == 0 {
		t.Errorf("%d bytes on disk; stats %+v", total, st)
	}
}

func TestSyncPolicy(t *testing.T) {
	for _, c := range []struct {
		mode        SyncMode
		wantDurable bool // right after Append
	}{
		{SyncEveryBatch, true},
		{SyncNever, false},
	} {
		t.Run(c.mode.String(), func(t *testing.T) {
			l := mustOpen(t, t.TempDir(), Options{Sync: SyncPolicy{Mode: c.mode}})
			for i := range 5 {
				if _, err := l.Append(mkRec(i, 3, 10)); err != nil {
					t.Fatal(err)
				}
				if got := l.Durable() == l.NextOffset(); got != c.wantDurable {
					t.Errorf("durable %d, next %d", l.Durable(), l.NextOffset())
				}
			}
			if err := l.Sync(); err != nil || l.Durable() != 15 {
				t.Errorf("after Sync: durable %d, %v", l.Durable(), err)
			}
		})
	}
	t.Run("interval", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, err := Open(t.TempDir(), Options{}) // the default: every 10ms
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Append(mkRec(0, 256, 100)); err != nil {
				t.Fatal(err)
			}
			if l.Durable() != 0 {
				t.Errorf("durable %d before the interval", l.Durable())
			}
			time.Sleep(10 * time.Millisecond) // the bubble's fake clock
			synctest.Wait()
			if l.Durable() != 256 || l.Stats().Syncs != 1 {
				t.Errorf("durable %d after the interval, %d syncs", l.Durable(), l.Stats().Syncs)
			}
			time.Sleep(time.Second) // nothing new: no sync
			synctest.Wait()
			if n := l.Stats().Syncs; n != 1 {
				t.Errorf("%d syncs while idle", n)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		})
	})
}

func TestSyncEveryBatchConcurrent(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 16 << 10, Sync: SyncPolicy{Mode: SyncEveryBatch}})
	const writers, each = 8, 40
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := range each {
				first, err := l.Append(mkRec(w*each+i, 4, 300))
				if err == nil && l.Durable() < first+4 {
					err = fmt.Errorf("append returned before its records were durable: %d < %d", l.Durable(), first+4)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	got := readAll(t, mustReader(t)(l.Reader(0)))
	next := uint64(0)
	for _, r := range got {
		if r.FirstOffset != next {
			t.Fatalf("offset %d, want %d", r.FirstOffset, next)
		}
		next += uint64(r.Count)
	}
	if st := l.Stats(); len(got) != writers*each || st.Syncs > st.Appends+st.Rolls {
		t.Errorf("%d records; stats %+v", len(got), st)
	}
}

func TestFollow(t *testing.T) {
	const bound = 10 * time.Second // a failing test ends, rather than hangs
	type result struct {
		rec Record
		err error
	}
	follow := func(ctx context.Context, r *Reader) chan result {
		ch := make(chan result, 1)
		go func() {
			rec, err := r.Follow(ctx)
			ch <- result{rec, err}
		}()
		return ch
	}
	await := func(t *testing.T, ch chan result) result {
		t.Helper()
		select {
		case res := <-ch:
			return res
		case <-time.After(bound):
			t.Fatal("follower did not return")
			return result{}
		}
	}

	t.Run("wakes on append", func(t *testing.T) {
		// The poll interval is an hour: only the notification can wake it.
		l := mustOpen(t, t.TempDir(), Options{SegmentBytes: 2048, FollowPoll: time.Hour, Sync: SyncPolicy{Mode: SyncNever}})
		r := mustReader(t)(l.Reader(0))
		for i := range 20 {
			ch := follow(context.Background(), r)
			want := appendAll(t, l, []Record{mkRec(i, 2, 600)}, 1) // rolls now and then
			if res := await(t, ch); res.err != nil || !sameRecord(res.rec, want[0]) {
				t.Fatalf("record %d: got offset %d, %v", i, res.rec.FirstOffset, res.err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		ch := follow(ctx, r)
		cancel()
		if res := await(t, ch); !errors.Is(res.err, context.Canceled) {
			t.Errorf("after cancel: %v", res.err)
		}
		ch = follow(context.Background(), r)
		l.Close()
		if res := await(t, ch); !errors.Is(res.err, ErrClosed) {
			t.Errorf("after Close: %v", res.err)
		}
	})
	t.Run("another process polls", func(t *testing.T) {
		dir := t.TempDir()
		l := mustOpen(t, dir, Options{SegmentBytes: 2048, Sync: SyncPolicy{Mode: SyncNever}})
		r := mustReader(t)(OpenReader(dir, 0, Options{FollowPoll: time.Millisecond}))
		for i := range 10 {
			ch := follow(context.Background(), r)
			want := appendAll(t, l, []Record{mkRec(i, 2, 600)}, 1)
			if res := await(t, ch); res.err != nil || !sameRecord(res.rec, want[0]) {
				t.Fatalf("record %d: got offset %d, %v", i, res.rec.FirstOffset, res.err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		ch := follow(ctx, r)
		cancel()
		if res := await(t, ch); !errors.Is(res.err, context.Canceled) {
			t.Errorf("after cancel: %v", res.err)
		}
	})
}

// TestConcurrentReadersAndWriter is for the race detector: followers read
// while writers append and segments roll and retention removes them.
func TestConcurrentReadersAndWriter(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, RetainBytes: 1 << 20})
	const n = 400
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 3)
	for range 2 {
		r := mustReader(t)(l.Reader(0))
		go func() {
			next := uint64(0)
			for next < n {
				rec, err := r.Follow(ctx)
				if err != nil {
					done <- err
					return
				}
				if rec.FirstOffset != next {
					done <- fmt.Errorf("offset %d, want %d", rec.FirstOffset, next)
					return
				}
				next += uint64(rec.Count)
			}
			done <- nil
		}()
	}
	r := mustReader(t)(OpenReader(dir, 0, Options{FollowPoll: time.Millisecond}))
	go func() {
		next := uint64(0)
		for next < n {
			rec, err := r.Follow(ctx)
			if err != nil {
				done <- err
				return
			}
			next = rec.FirstOffset + uint64(rec.Count)
		}
		done <- nil
	}()
	for i := range n {
		if _, err := l.Append(mkRec(i, 1, 200)); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			l.Stats()
			l.Sync()
		}
	}
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func TestReplay(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{SegmentBytes: 4 << 10, Sync: SyncPolicy{Mode: SyncNever}})
	var recs []Record
	for i := range 100 {
		recs = append(recs, mkRec(i, uint32(1+i%5), 300+i))
	}
	appendAll(t, l, recs, 3)
	l.Close()
	// A corrupt record makes replay more interesting: it is skipped the
	// same way each time.
	seg := segFiles(t, dir)[2]
	fr := framesOf(t, seg.path)[1]
	flipByte(t, seg.path, fr.pos+40)

	var runs [2][]Record
	var problems [2][]Problem
	for i := range runs {
		r := mustReader(t)(OpenReader(dir, 0, Options{}))
		runs[i], problems[i] = readAll(t, r), r.Problems()
	}
	checkRecords(t, "replay", runs[1], runs[0])
	if len(runs[0]) != 99 || fmt.Sprint(problems[0]) != fmt.Sprint(problems[1]) || len(problems[0]) != 1 {
		t.Errorf("%d records; problems %v then %v", len(runs[0]), problems[0], problems[1])
	}
}

func TestConsumerOffsets(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{Sync: SyncPolicy{Mode: SyncNever}})
	appendAll(t, l, []Record{mkRec(0, 100, 10)}, 1)
	if _, ok, err := l.Offset("rollup"); ok || err != nil {
		t.Errorf("before any commit: %v %v", ok, err)
	}
	for _, c := range []struct {
		consumer string
		offset   uint64
		wantErr  string
	}{
		{"rollup", 40, ""},
		{"rollup", 60, ""},
		{"alerts-1.v2_x", 100, ""},
		{"rollup", 101, "past the log's end"},
		{"", 1, "consumer"},
		{"../escape", 1, "consumer"},
		{".hidden", 1, "consumer"},
		{"a/b", 1, "consumer"},
		{strings.Repeat("x", 129), 1, "consumer"},
	} {
		err := l.CommitOffset(c.consumer, c.offset)
		if (err == nil) != (c.wantErr == "") || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("commit %q %d: %v, want %q", c.consumer, c.offset, err, c.wantErr)
		}
	}
	// Committing syncs the log first: the offset never runs ahead of it.
	if l.Durable() < 100 {
		t.Errorf("durable %d after committing 100", l.Durable())
	}
	l.Close()
	l = mustOpen(t, dir, Options{})
	for _, c := range []struct {
		consumer string
		want     uint64
		ok       bool
	}{{"rollup", 60, true}, {"alerts-1.v2_x", 100, true}, {"nobody", 0, false}} {
		got, ok, err := l.Offset(c.consumer)
		got2, ok2, err2 := ReadOffset(dir, c.consumer)
		if got != c.want || ok != c.ok || err != nil || got2 != c.want || ok2 != c.ok || err2 != nil {
			t.Errorf("%s: %d %v %v / %d %v %v, want %d %v", c.consumer, got, ok, err, got2, ok2, err2, c.want, c.ok)
		}
	}
	if err := os.WriteFile(offsetPath(dir, "rollup"), []byte("RWOFF\x01garbage!!!!!"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadOffset(dir, "rollup"); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "rollup.off") {
		t.Errorf("corrupt offset file: %v", err)
	}
}

func TestAppendInvalid(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Options{Sync: SyncPolicy{Mode: SyncNever}})
	for _, c := range []struct {
		name string
		rec  Record
		want string
	}{
		{"no events", Record{Count: 0}, "count is 0"},
		{"times reversed", Record{Count: 1, MinTime: t0.Add(time.Second), MaxTime: t0}, "after max time"},
		{"min time only", Record{Count: 1, MinTime: t0}, "after max time"},
		{"time out of range", Record{Count: 1, MinTime: time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC), MaxTime: t0}, "years"},
		{"payload too large", Record{Count: 1, Payload: make([]byte, MaxPayload+1)}, "payload of"},
	} {
		if _, err := l.Append(mkRec(0, 1, 1), c.rec); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if l.NextOffset() != 0 || l.Stats().Appends != 0 {
		t.Errorf("a refused batch was written in part: next %d", l.NextOffset())
	}
	// A record without times, and one with only a max time, are fine.
	want := appendAll(t, l, []Record{{Count: 1}, {Count: 2, MaxTime: t0}, {Count: 1, Payload: make([]byte, MaxPayload)}}, 3)
	checkRecords(t, "read back", readAll(t, mustReader(t)(l.Reader(0))), want)
	if first, err := l.Append(); err != nil || first != 4 {
		t.Errorf("empty append: %d %v", first, err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{})
	// The refusal says which process writes the log.
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("second writer: %v, want ErrLocked naming pid %d", err, os.Getpid())
	}
	l.Close()
	if _, err := l.Append(mkRec(0, 1, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("append after close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{SegmentBytes: 10}, "SegmentBytes"},
		{Options{SegmentAge: -1}, "SegmentAge"},
		{Options{Sync: SyncPolicy{Mode: 7}}, "Sync.Mode"},
		{Options{RetainBytes: -1}, "RetainBytes"},
	} {
		if _, err := Open(t.TempDir(), c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.opts, err, c.want)
		}
	}
	if _, err := OpenReader(filepath.Join(dir, "nope"), 0, Options{}); err == nil {
		t.Error("reader of a missing directory: no error")
	}
	r := mustReader(t)(OpenReader(t.TempDir(), 0, Options{}))
	if _, err := r.Next(context.Background()); !errors.Is(err, io.EOF) {
		t.Errorf("reader of an empty directory: %v", err)
	}
}

func flipByte(t testing.TB, path string, at int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[at] ^= 0x5a
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRemoveBefore removes exactly the segments a consumer has read past,
// never the active one, and reading from the consumer's offset is whole.
func TestRemoveBefore(t *testing.T) {
	dir := t.TempDir()
	l, recs := smallSegments(t, dir)
	segsBefore := countSegments(t, dir)
	if segsBefore < 5 {
		t.Fatalf("%d segments, want several", segsBefore)
	}
	cut := recs[25].FirstOffset
	removed, err := l.RemoveBefore(cut)
	if err != nil {
		t.Fatal(err)
	}
	if removed == 0 || countSegments(t, dir) != segsBefore-removed {
		t.Fatalf("removed %d of %d segments, %d left", removed, segsBefore, countSegments(t, dir))
	}
	r, err := l.Reader(cut)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := readAll(t, r)
	if len(got) != 15 || got[0].FirstOffset != cut {
		t.Fatalf("read %d records from %d, want 15 from %d", len(got), got[0].FirstOffset, cut)
	}
	// Everything read: all but the active segment goes.
	if _, err := l.RemoveBefore(l.NextOffset()); err != nil {
		t.Fatal(err)
	}
	if n := countSegments(t, dir); n != 1 {
		t.Fatalf("%d segments after removing all read ones, want the active one", n)
	}
}

// smallSegments writes 40 records of 3 events, one an Append, in segments
// of 1 KiB, and returns the open log and the records.
func smallSegments(t *testing.T, dir string) (*Log, []Record) {
	t.Helper()
	l := mustOpen(t, dir, Options{SegmentBytes: 1 << 10, Sync: SyncPolicy{Mode: SyncNever}})
	var recs []Record
	for i := range 40 {
		recs = append(recs, mkRec(i, 3, 200))
	}
	return l, appendAll(t, l, recs, 1)
}

func countSegments(t *testing.T, dir string) int {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if _, ok := parseSegName(e.Name()); ok {
			n++
		}
	}
	return n
}

// TestReaderLossRemoved: a reader asked to start at an offset the log no
// longer holds counts the events between it and the oldest segment, in
// process and in another (OpenReader); one that starts where the log
// starts, or by time, counts none.
func TestReaderLossRemoved(t *testing.T) {
	dir := t.TempDir()
	l, recs := smallSegments(t, dir)
	if _, err := l.RemoveBefore(recs[25].FirstOffset); err != nil {
		t.Fatal(err)
	}
	start := segFiles(t, dir)[0].first
	if start == 0 || start > recs[25].FirstOffset {
		t.Fatalf("the log starts at %d", start)
	}
	for name, r := range map[string]*Reader{
		"in process": mustReader(t)(l.Reader(7)),
		"OpenReader": mustReader(t)(OpenReader(dir, 7, Options{})),
	} {
		readAll(t, r)
		if lo := r.Loss(); lo != (Loss{Removed: start - 7, Start: start}) || len(r.Problems()) != 0 {
			t.Errorf("%s: loss %+v, problems %v; want %d removed before %d", name, lo, r.Problems(), start-7, start)
		}
	}
	for name, r := range map[string]*Reader{
		"from the start": mustReader(t)(OpenReader(dir, start, Options{})),
		"by time":        mustReader(t)(l.ReaderAt(t0)),
	} {
		readAll(t, r)
		if lo := r.Loss(); lo != (Loss{}) {
			t.Errorf("%s: loss %+v, want none", name, lo)
		}
	}
}

// TestRetainReportsUnread: retention removes what its bounds say even
// when a consumer has not read it, and reports each removed segment that
// holds events the slowest consumer with a committed offset had not read,
// counting those events; what every consumer has read goes silently.
func TestRetainReportsUnread(t *testing.T) {
	f := func(slow uint64, wantReports int, wantUnread uint64) {
		t.Helper()
		dir := t.TempDir()
		var reports []Problem
		l := mustOpen(t, dir, Options{SegmentBytes: 1024, Sync: SyncPolicy{Mode: SyncNever}, RetainAge: 10 * time.Second,
			Now: func() time.Time { return t0 }, Report: func(p Problem) { reports = append(reports, p) }})
		var recs []Record
		for i := range 20 {
			recs = append(recs, mkRec(i, 10, 700)) // one segment each, offsets 10i to 10i+9
		}
		appendAll(t, l, recs, 1)
		if err := l.CommitOffset("fast", 200); err != nil {
			t.Fatal(err)
		}
		if err := CommitReaderOffset(dir, "slow", slow); err != nil {
			t.Fatal(err)
		}
		if n, err := l.Retain(t0.Add(15 * time.Second)); err != nil || n != 5 {
			t.Fatalf("removed %d segments, %v; want 5", n, err)
		}
		if len(reports) != wantReports || l.Stats().RemovedUnread != wantUnread {
			t.Fatalf("slow consumer at %d: reports %v, unread %d; want %d reports, %d unread", slow, reports, l.Stats().RemovedUnread, wantReports, wantUnread)
		}
		for _, p := range reports {
			if !errors.Is(p, ErrUnread) || !errors.Is(p, ErrMissing) || !strings.Contains(p.Error(), "consumer slow had read to offset 25") {
				t.Errorf("report %v", p)
			}
		}
	}
	f(25, 3, 5+10+10) // segments 2 (offsets 25-29 unread), 3 and 4
	f(200, 0, 0)
}
