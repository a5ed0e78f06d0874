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
	"time"
)

// TestOpenReaderPastEnd: a reader of another process started past the end
// of the log it finds (a position kept from a log since removed, replaced
// or cut short) fails with ErrPastEnd, naming both offsets, where it first
// reaches the end and from then on, following or not; it returns no
// record. A reader that waited there instead would skip what a new log
// writes before its start.
func TestOpenReaderPastEnd(t *testing.T) {
	f := func(name string, from, end uint64, setup func(t *testing.T, dir string)) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			setup(t, dir)
			want := fmt.Sprintf("offset %d: %v %d", from, ErrPastEnd, end)
			for _, follow := range []bool{false, true} {
				r := mustReader(t)(OpenReader(dir, from, Options{FollowPoll: time.Millisecond}))
				read := r.Next
				if follow {
					read = r.Follow
				}
				// Bounded, so that a reader that waits fails rather than hangs.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				for i := range 2 {
					rec, err := read(ctx)
					if !errors.Is(err, ErrPastEnd) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), dir) {
						t.Fatalf("follow %v, read %d: record at %d, %v; want an error with %q", follow, i, rec.FirstOffset, err, want)
					}
				}
			}
		})
	}
	f("one segment", 31, 30, func(t *testing.T, dir string) { writeLog(t, dir, 10, 3, 200, 1) })
	f("far past, sealed segments", 1200, 120, func(t *testing.T, dir string) {
		l, _ := smallSegments(t, dir)
		if n := countSegments(t, dir); n < 5 {
			t.Fatalf("%d segments, want several", n)
		}
		l.Close()
	})
	// The writer is open, its active segment last, as when the edge runs.
	f("live writer", 121, 120, func(t *testing.T, dir string) { smallSegments(t, dir) })
	f("empty directory", 5, 0, func(*testing.T, string) {})
	f("cut short, torn tail", 30, 27, func(t *testing.T, dir string) {
		writeLog(t, dir, 10, 3, 200, 1)
		path := segPath(dir, 0)
		frames := framesOf(t, path)
		if len(frames) < 10 || frames[9].first != 27 {
			t.Fatalf("frames %+v", frames)
		}
		// The last record's frame cut after 5 bytes: a torn tail.
		if err := os.Truncate(path, frames[9].pos+5); err != nil {
			t.Fatal(err)
		}
	})
	f("a stranger's file named past the end", 40, 30, func(t *testing.T, dir string) {
		writeLog(t, dir, 10, 3, 200, 1)
		if err := os.WriteFile(filepath.Join(dir, "00000000000000099999.seg"), []byte("notes\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
}

// TestOpenReaderAtEnd: a reader of another process started exactly at the
// end of the log (at 0 on an empty log, at a torn tail's start) has
// nothing to read yet, without an error, and reads what the writer appends
// next, following or not.
func TestOpenReaderAtEnd(t *testing.T) {
	f := func(name string, from uint64, setup func(t *testing.T, dir string)) {
		t.Run(name, func(t *testing.T) {
			for _, follow := range []bool{false, true} {
				dir := t.TempDir()
				setup(t, dir)
				r := mustReader(t)(OpenReader(dir, from, Options{FollowPoll: time.Millisecond}))
				if follow {
					// It waits: the short deadline passes, no error comes.
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
					rec, err := r.Follow(ctx)
					cancel()
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("follow at the end: record at %d, %v; want it to wait", rec.FirstOffset, err)
					}
				} else if rec, err := r.Next(context.Background()); !errors.Is(err, io.EOF) {
					t.Fatalf("at the end: record at %d, %v; want io.EOF", rec.FirstOffset, err)
				}
				l := mustOpen(t, dir, Options{Sync: SyncPolicy{Mode: SyncNever}})
				more := appendAll(t, l, []Record{mkRec(40, 2, 100), mkRec(41, 2, 100)}, 1)
				if more[0].FirstOffset != from {
					t.Fatalf("appended at %d, want %d", more[0].FirstOffset, from)
				}
				if !follow {
					checkRecords(t, "appended", readAll(t, r), more)
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				for _, w := range more {
					rec, err := r.Follow(ctx)
					if err != nil || !sameRecord(rec, w) {
						t.Fatalf("follow: record at %d, %v; want the one at %d", rec.FirstOffset, err, w.FirstOffset)
					}
				}
			}
		})
	}
	f("log", 30, func(t *testing.T, dir string) { writeLog(t, dir, 10, 3, 200, 1) })
	f("sealed segments", 120, func(t *testing.T, dir string) {
		l, _ := smallSegments(t, dir)
		l.Close()
	})
	f("empty directory", 0, func(*testing.T, string) {})
	f("torn tail", 30, func(t *testing.T, dir string) {
		writeLog(t, dir, 10, 3, 200, 1)
		rewrite(t, segPath(dir, 0), func(b []byte) []byte { return append(b, syncMarker[:]...) })
	})
}
