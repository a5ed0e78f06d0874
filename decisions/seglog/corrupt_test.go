package seglog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// corruptLog writes the log the corruption tests damage: 40 records of 3
// events, 7 to a segment (6 segments), and returns its segments and their
// frames (frames[k][j] is record 7k+j; the last frame of a sealed segment
// is its trailer).
func corruptLog(t *testing.T, dir string) ([]Record, []segFile, [][]frameInfo) {
	t.Helper()
	l := mustOpen(t, dir, Options{SegmentBytes: 4096, Sync: SyncPolicy{Mode: SyncNever}})
	var recs []Record
	for i := range 40 {
		recs = append(recs, mkRec(i, 3, 500))
	}
	want := appendAll(t, l, recs, 1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs := segFiles(t, dir)
	var frames [][]frameInfo
	for _, s := range segs {
		frames = append(frames, framesOf(t, s.path))
	}
	if len(segs) != 6 || len(frames[2]) != 8 {
		t.Fatalf("test log has %d segments, %d frames in the third", len(segs), len(frames[2]))
	}
	return want, segs, frames
}

func rewrite(t *testing.T, path string, f func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, f(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCorruption(t *testing.T) {
	type env struct {
		dir    string
		segs   []segFile
		frames [][]frameInfo
	}
	for _, c := range []struct {
		name string
		// damage damages the log and returns the problems a reader must
		// report (Bytes -1: not checked).
		damage func(t *testing.T, e env) []Problem
		lost   []int // records lost
	}{
		{"flipped payload byte", func(t *testing.T, e env) []Problem {
			fr := e.frames[2][3]
			flipByte(t, e.segs[2].path, fr.pos+60)
			return []Problem{{Segment: e.segs[2].path, Offset: fr.pos, Bytes: fr.end - fr.pos, Events: 3, Err: ErrCorrupt}}
		}, []int{17}},
		{"flipped length", func(t *testing.T, e env) []Problem {
			fr := e.frames[2][3]
			flipByte(t, e.segs[2].path, fr.pos+6)
			return []Problem{{Segment: e.segs[2].path, Offset: fr.pos, Bytes: fr.end - fr.pos, Events: 3, Err: ErrCorrupt}}
		}, []int{17}},
		{"flipped offset", func(t *testing.T, e env) []Problem {
			fr := e.frames[2][3]
			flipByte(t, e.segs[2].path, fr.pos+frameHeaderLen+2)
			return []Problem{{Segment: e.segs[2].path, Offset: fr.pos, Bytes: fr.end - fr.pos, Events: 3, Err: ErrCorrupt}}
		}, []int{17}},
		{"zeroed record head", func(t *testing.T, e env) []Problem {
			fr := e.frames[2][3]
			rewrite(t, e.segs[2].path, func(b []byte) []byte { clear(b[fr.pos : fr.pos+100]); return b })
			return []Problem{{Segment: e.segs[2].path, Offset: fr.pos, Bytes: fr.end - fr.pos, Events: 3, Err: ErrCorrupt}}
		}, []int{17}},
		{"first record of a segment", func(t *testing.T, e env) []Problem {
			fr := e.frames[1][0]
			flipByte(t, e.segs[1].path, fr.pos+200)
			return []Problem{{Segment: e.segs[1].path, Offset: headerLen, Bytes: fr.end - fr.pos, Events: 3, Err: ErrCorrupt}}
		}, []int{7}},
		{"last record before the trailer", func(t *testing.T, e env) []Problem {
			fr := e.frames[2][6]
			flipByte(t, e.segs[2].path, fr.pos+200)
			return []Problem{{Segment: e.segs[2].path, Offset: fr.pos, Bytes: fr.end - fr.pos, Events: 3, Err: ErrCorrupt}}
		}, []int{20}},
		{"two records in a row", func(t *testing.T, e env) []Problem {
			a, b := e.frames[3][2], e.frames[3][3]
			flipByte(t, e.segs[3].path, a.pos+100)
			flipByte(t, e.segs[3].path, b.pos+100)
			return []Problem{{Segment: e.segs[3].path, Offset: a.pos, Bytes: b.end - a.pos, Events: 6, Err: ErrCorrupt}}
		}, []int{23, 24}},
		{"junk between records", func(t *testing.T, e env) []Problem {
			fr := e.frames[2][4]
			rewrite(t, e.segs[2].path, func(b []byte) []byte {
				return slices.Insert(b, int(fr.pos), bytes.Repeat([]byte("junk!"), 7)...)
			})
			return []Problem{{Segment: e.segs[2].path, Offset: fr.pos, Bytes: 35, Events: 0, Err: ErrCorrupt}}
		}, nil},
		{"duplicated record", func(t *testing.T, e env) []Problem {
			fr := e.frames[2][4]
			rewrite(t, e.segs[2].path, func(b []byte) []byte {
				return slices.Insert(b, int(fr.end), slices.Clone(b[fr.pos:fr.end])...)
			})
			return []Problem{{Segment: e.segs[2].path, Offset: fr.end, Bytes: fr.end - fr.pos, Events: 0, Err: ErrCorrupt}}
		}, nil},
		{"truncated mid-record", func(t *testing.T, e env) []Problem {
			fr := e.frames[2][3]
			if err := os.Truncate(e.segs[2].path, fr.pos+100); err != nil {
				t.Fatal(err)
			}
			return []Problem{{Segment: e.segs[2].path, Offset: fr.pos, Bytes: 100, Events: 12, Err: ErrCorrupt}}
		}, []int{17, 18, 19, 20}},
		{"corrupt trailer", func(t *testing.T, e env) []Problem {
			fr := e.frames[2][7]
			flipByte(t, e.segs[2].path, fr.pos+20)
			return []Problem{{Segment: e.segs[2].path, Offset: fr.pos, Bytes: fr.end - fr.pos, Events: 0, Err: ErrCorrupt}}
		}, nil},
		{"empty file", func(t *testing.T, e env) []Problem {
			if err := os.Truncate(e.segs[2].path, 0); err != nil {
				t.Fatal(err)
			}
			return []Problem{
				{Segment: e.segs[2].path, Offset: 0, Bytes: 0, Err: ErrCorrupt},
				{Segment: e.segs[3].path, Offset: 0, Bytes: 0, Events: 21, Err: ErrMissing},
			}
		}, []int{14, 15, 16, 17, 18, 19, 20}},
		{"not a segment", func(t *testing.T, e env) []Problem {
			path := segPath(e.dir, e.segs[2].first+1)
			junk := []byte("this is not a segment file, but its name says it is\n")
			if err := os.WriteFile(path, junk, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(e.dir, "notes.txt"), junk, 0o644); err != nil {
				t.Fatal(err)
			}
			return []Problem{{Segment: path, Offset: 0, Bytes: int64(len(junk)), Err: ErrNotSegment}}
		}, nil},
		{"not a segment, after a segment without trailer", func(t *testing.T, e env) []Problem {
			if err := os.Truncate(e.segs[2].path, e.frames[2][7].pos); err != nil {
				t.Fatal(err)
			}
			path := segPath(e.dir, e.segs[2].first+1)
			junk := []byte("this is not a segment file, but its name says it is\n")
			if err := os.WriteFile(path, junk, 0o644); err != nil {
				t.Fatal(err)
			}
			return []Problem{{Segment: path, Offset: 0, Bytes: int64(len(junk)), Err: ErrNotSegment}}
		}, nil},
		{"future version", func(t *testing.T, e env) []Problem {
			rewrite(t, e.segs[2].path, func(b []byte) []byte { b[5] = FormatVersion + 1; return b })
			return []Problem{
				{Segment: e.segs[2].path, Offset: 0, Bytes: -1, Err: ErrVersion},
				{Segment: e.segs[3].path, Offset: 0, Bytes: 0, Events: 21, Err: ErrMissing},
			}
		}, []int{14, 15, 16, 17, 18, 19, 20}},
		{"header checksum", func(t *testing.T, e env) []Problem {
			flipByte(t, e.segs[2].path, 20)
			return []Problem{{Segment: e.segs[2].path, Offset: 0, Bytes: headerLen, Err: ErrCorrupt}}
		}, nil},
		{"missing segment", func(t *testing.T, e env) []Problem {
			if err := os.Remove(e.segs[3].path); err != nil {
				t.Fatal(err)
			}
			return []Problem{{Segment: e.segs[4].path, Offset: 0, Bytes: 0, Events: 21, Err: ErrMissing}}
		}, []int{21, 22, 23, 24, 25, 26, 27}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			all, segs, frames := corruptLog(t, dir)
			wantProblems := c.damage(t, env{dir, segs, frames})
			var want []Record
			for i, r := range all {
				if !slices.Contains(c.lost, i) {
					want = append(want, r)
				}
			}
			check := func(what string, r *Reader, want []Record, wantProblems []Problem) {
				t.Helper()
				checkRecords(t, what, readAll(t, r), want)
				got := r.Problems()
				if len(got) != len(wantProblems) {
					t.Errorf("%s: problems %v, want %d", what, got, len(wantProblems))
					return
				}
				for i, w := range wantProblems {
					g := got[i]
					if g.Segment != w.Segment || g.Offset != w.Offset || g.Events != w.Events || (w.Bytes >= 0 && g.Bytes != w.Bytes) || !errors.Is(g, w.Err) {
						t.Errorf("%s: problem %d:\n got %+v\nwant %+v", what, i, g, w)
					}
					if s := g.Error(); !strings.Contains(s, w.Segment) || !strings.Contains(s, "at byte ") {
						t.Errorf("%s: problem %q does not name the file and offset", what, s)
					}
					// A gap names the segment after it, which is whole:
					// the message says which offsets are missing before it.
					if first, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(w.Segment), ".seg"), 10, 64); errors.Is(w.Err, ErrMissing) &&
						(err != nil || !strings.Contains(g.Error(), fmt.Sprintf("before this one (offsets %d to %d)", first-w.Events, first-1))) {
						t.Errorf("%s: problem %q does not name the offsets missing before %s", what, g.Error(), w.Segment)
					}
				}
			}
			var reported []Problem
			var mu sync.Mutex
			report := func(p Problem) { mu.Lock(); reported = append(reported, p); mu.Unlock() }

			check("open reader", mustReader(t)(OpenReader(dir, 0, Options{Report: report})), want, wantProblems)
			if len(reported) != len(wantProblems) {
				t.Errorf("reported %v", reported)
			}

			// The writer opens the damaged log, reads it the same way, and
			// appends after it.
			reported = nil
			l := mustOpen(t, dir, Options{Report: report, Sync: SyncPolicy{Mode: SyncNever}})
			// The writer moves files that are not segments to quarantine at
			// Open, reporting them there: its own readers meet none.
			logProblems := slices.DeleteFunc(slices.Clone(wantProblems), func(p Problem) bool { return errors.Is(p.Err, ErrNotSegment) })
			check("log reader", mustReader(t)(l.Reader(0)), want, logProblems)
			more := appendAll(t, l, []Record{mkRec(40, 5, 10)}, 1)
			if more[0].FirstOffset != 120 {
				t.Errorf("appended at %d, want 120", more[0].FirstOffset)
			}
			check("log reader after append", mustReader(t)(l.Reader(0)), append(want, more...), logProblems)
			if st := l.Stats(); st.CorruptRegions != uint64(len(wantProblems)) || len(reported) != len(wantProblems) {
				t.Errorf("stats %+v; reported %v", st, reported)
			}
		})
	}
}

// TestBadLastSegment: a last segment the writer cannot read makes Open fail,
// naming the file, rather than guess offsets; readers still read the rest.
// (A last file that is no segment at all is quarantined: TestStraySegmentName.)
func TestBadLastSegment(t *testing.T) {
	for _, c := range []struct {
		name    string
		content []byte
		err     error
	}{
		{"future version", append([]byte("RWSEG\x02"), make([]byte, 60)...), ErrVersion},
		{"header checksum", appendHeader(nil, 30, t0)[:27], ErrCorrupt},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			want := writeLog(t, dir, 10, 3, 200, 2)
			content := c.content
			if c.err == ErrCorrupt {
				content = append(appendHeader(nil, 30, t0), 1, 2, 3)
				content[20] ^= 1
			}
			path := segPath(dir, 30)
			if err := os.WriteFile(path, content, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(dir, Options{}); !errors.Is(err, c.err) || !strings.Contains(err.Error(), path) {
				t.Errorf("open: %v", err)
			}
			r := mustReader(t)(OpenReader(dir, 0, Options{}))
			checkRecords(t, "reader", readAll(t, r), want)
			if p := r.Problems(); len(p) != 1 || p[0].Segment != path || !errors.Is(p[0], c.err) {
				t.Errorf("problems %v", p)
			}
		})
	}
}

func TestTornTail(t *testing.T) {
	frame := func(first uint64, count uint32) []byte {
		r := mkRec(99, count, 200)
		r.FirstOffset = first
		return appendRecord(nil, &r)
	}
	for _, c := range []struct {
		name  string
		tail  func(size int64) []byte // appended to the last segment, of size bytes
		kept  int                     // bytes of the tail that are whole records
		extra int                     // whole records in the tail
		torn  bool
	}{
		{"partial frame header", func(int64) []byte { return frame(30, 3)[:7] }, 0, 0, true},
		{"partial body", func(int64) []byte { f := frame(30, 3); return f[:len(f)-1] }, 0, 0, true},
		{"bad checksum", func(int64) []byte { f := frame(30, 3); f[9] ^= 1; return f }, 0, 0, true},
		{"zeros", func(int64) []byte { return make([]byte, 4096) }, 0, 0, true},
		{"whole record then partial", func(int64) []byte { f := frame(30, 3); return append(f, frame(33, 3)[:100]...) }, len(frame(30, 3)), 1, true},
		{"partial trailer", func(size int64) []byte {
			tr := trailer{first: 0, end: 30, records: 10, minT: noTime, maxT: noTime}
			f := appendTrailer(nil, &tr)
			return f[:len(f)-3]
		}, 0, 0, true},
		{"whole trailer", func(size int64) []byte {
			tr := trailer{first: 0, end: 30, records: 10, minT: timeNS(t0), maxT: timeNS(t0.Add(10 * 1e9))}
			return appendTrailer(nil, &tr)
		}, 0, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir, Options{Sync: SyncPolicy{Mode: SyncNever}})
			var recs []Record
			for i := range 10 {
				recs = append(recs, mkRec(i, 3, 200))
			}
			want := appendAll(t, l, recs, 1)
			l.Close()
			path := segPath(dir, 0)
			fi, _ := os.Stat(path)
			size := fi.Size()
			tail := c.tail(size)
			rewrite(t, path, func(b []byte) []byte { return append(b, tail...) })
			if c.extra > 0 {
				r := mkRec(99, 3, 200)
				r.FirstOffset = 30
				want = append(want, r)
			}

			// A reader treats the torn tail as the end of the data.
			r := mustReader(t)(OpenReader(dir, 0, Options{}))
			checkRecords(t, "reader before open", readAll(t, r), want)
			if p := r.Problems(); len(p) != 0 {
				t.Errorf("reader reported %v", p)
			}

			var reported []Problem
			l = mustOpen(t, dir, Options{Report: func(p Problem) { reported = append(reported, p) }, Sync: SyncPolicy{Mode: SyncNever}})
			keep := size + int64(c.kept)
			var wantReported []Problem
			if c.torn {
				wantReported = []Problem{{Segment: path, Offset: keep, Bytes: int64(len(tail) - c.kept), Err: errTorn}}
			}
			if len(reported) != len(wantReported) || (c.torn && (reported[0].Segment != path || reported[0].Offset != keep || reported[0].Bytes != wantReported[0].Bytes || !errors.Is(reported[0], ErrTornTail))) {
				t.Errorf("reported %v, want %v", reported, wantReported)
			}
			if fi, _ := os.Stat(path); c.torn && fi.Size() != keep {
				t.Errorf("segment of %d bytes after open, want %d", fi.Size(), keep)
			}
			next := uint64(30 + 3*c.extra)
			if l.NextOffset() != next || l.Durable() != next {
				t.Errorf("next offset %d, durable %d, want %d", l.NextOffset(), l.Durable(), next)
			}
			more := appendAll(t, l, []Record{mkRec(50, 4, 100), mkRec(51, 4, 100)}, 2)
			if more[0].FirstOffset != next {
				t.Errorf("appended at %d, want %d", more[0].FirstOffset, next)
			}
			checkRecords(t, "after append", readAll(t, mustReader(t)(l.Reader(0))), append(want, more...))
			l.Close()
			checkRecords(t, "after reopen", readAll(t, mustReader(t)(OpenReader(dir, 0, Options{}))), append(want, more...))
		})
	}
}

// TestTornSegmentHeader: a last segment without a whole header (left by a
// tool that does not create segments whole) is removed at Open.
func TestTornSegmentHeader(t *testing.T) {
	for _, content := range [][]byte{nil, []byte("RWS"), appendHeader(nil, 30, t0)[:20]} {
		dir := t.TempDir()
		l := mustOpen(t, dir, Options{Sync: SyncPolicy{Mode: SyncNever}})
		want := appendAll(t, l, []Record{mkRec(0, 30, 10)}, 1)
		l.Close()
		if err := os.WriteFile(segPath(dir, 30), content, 0o644); err != nil {
			t.Fatal(err)
		}
		r := mustReader(t)(OpenReader(dir, 0, Options{}))
		checkRecords(t, "reader", readAll(t, r), want)
		l = mustOpen(t, dir, Options{Sync: SyncPolicy{Mode: SyncNever}})
		if st := l.Stats(); st.CorruptRegions != 1 || st.NextOffset != 30 {
			t.Errorf("%q: stats %+v", content, st)
		}
		want = append(want, appendAll(t, l, []Record{mkRec(1, 3, 10)}, 1)...)
		checkRecords(t, "after append", readAll(t, mustReader(t)(l.Reader(0))), want)
	}
}

// TestReaderWaitsAtTornTail: a follower at a torn tail waits there; when
// the writer reopens the log, truncates the tail and appends, the follower
// reads on from the same place.
func TestReaderWaitsAtTornTail(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{Sync: SyncPolicy{Mode: SyncNever}})
	want := appendAll(t, l, []Record{mkRec(0, 3, 10)}, 1)
	l.Close()
	rewrite(t, segPath(dir, 0), func(b []byte) []byte { return append(b, syncMarker[:]...) })
	r := mustReader(t)(OpenReader(dir, 0, Options{}))
	checkRecords(t, "before", readAll(t, r), want)
	if _, err := r.Next(context.Background()); !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, Options{Sync: SyncPolicy{Mode: SyncNever}})
	more := appendAll(t, l, []Record{mkRec(1, 3, 10)}, 1)
	checkRecords(t, "after", readAll(t, r), more)
	if p := r.Problems(); len(p) != 0 {
		t.Errorf("problems %v", p)
	}
}

// TestStraySegmentName: a file that is named like a segment but is not one
// (no segment header) says nothing about offsets. Readers report it without
// a loss and go on reading the real segments, a follower keeps following
// the active segment, and the writer moves it to the quarantine directory,
// saying where, and opens the log.
func TestStraySegmentName(t *testing.T) {
	for _, c := range []struct {
		name    string
		content []byte
		err     error
	}{
		{"text", []byte("notes that happen to have a segment's name\n"), ErrNotSegment},
		{"compressed", []byte("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03 a gzip file"), ErrNotSegment},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			want := writeLog(t, dir, 10, 2000, 100, 1) // offsets 0 to 19999
			stray := filepath.Join(dir, "00000000000000099999.seg")
			if err := os.WriteFile(stray, c.content, 0o644); err != nil {
				t.Fatal(err)
			}

			r := mustReader(t)(OpenReader(dir, 0, Options{}))
			checkRecords(t, "reader", readAll(t, r), want)
			for _, p := range r.Problems() {
				if errors.Is(p, ErrMissing) || p.Events != 0 {
					t.Errorf("reader reports a loss: %v", p)
				}
			}

			var reported []Problem
			l, err := Open(dir, Options{Sync: SyncPolicy{Mode: SyncNever}, Report: func(p Problem) { reported = append(reported, p) }})
			if err != nil {
				t.Fatalf("open with a stray file: %v", err)
			}
			defer l.Close()
			moved := filepath.Join(dir, QuarantineDir, "00000000000000099999.seg")
			if _, err := os.Stat(stray); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("stray file still in the log directory: %v", err)
			}
			if b, err := os.ReadFile(moved); err != nil || !bytes.Equal(b, c.content) {
				t.Errorf("quarantined file: %q, %v", b, err)
			}
			if len(reported) != 1 || !errors.Is(reported[0], c.err) || reported[0].Events != 0 ||
				!strings.Contains(reported[0].Error(), stray) || !strings.Contains(reported[0].Error(), "moved to "+moved) {
				t.Errorf("reported %v", reported)
			}
			more := appendAll(t, l, []Record{mkRec(10, 5, 100)}, 1)
			if more[0].FirstOffset != 20000 {
				t.Errorf("appended at %d, want 20000", more[0].FirstOffset)
			}
			r = mustReader(t)(OpenReader(dir, 0, Options{}))
			checkRecords(t, "reader after open", readAll(t, r), append(want, more...))
			if p := r.Problems(); len(p) != 0 {
				t.Errorf("problems after quarantine: %v", p)
			}
		})
	}
}

// TestFollowPastStrayFile: a follower at the end of the active segment is
// not sent past it by a stray file named like a later segment.
func TestFollowPastStrayFile(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Options{Sync: SyncPolicy{Mode: SyncNever}})
	want := appendAll(t, l, []Record{mkRec(0, 3, 10)}, 1)
	if err := os.WriteFile(filepath.Join(dir, "00000000000000099999.seg"), []byte("stray"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := mustReader(t)(OpenReader(dir, 0, Options{}))
	checkRecords(t, "before", readAll(t, r), want)
	more := appendAll(t, l, []Record{mkRec(1, 3, 10)}, 1)
	checkRecords(t, "after", readAll(t, r), more)
	for _, p := range r.Problems() {
		if p.Events != 0 {
			t.Errorf("reader reports a loss: %v", p)
		}
	}
}
