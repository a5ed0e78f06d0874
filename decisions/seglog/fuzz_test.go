package seglog

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// fuzzSeeds returns segment files to start from: a clean active segment, a
// sealed one with a trailer and index, and damaged copies of them.
func fuzzSeeds(f *testing.F) [][]byte {
	dir := f.TempDir()
	l, err := Open(dir, Options{SegmentBytes: 1 << 10, Sync: SyncPolicy{Mode: SyncNever}})
	if err != nil {
		f.Fatal(err)
	}
	for i := range 8 {
		if _, err := l.Append(mkRec(i, uint32(1+i), 40+30*i), mkRec(i+100, 2, 10)); err != nil {
			f.Fatal(err)
		}
	}
	l.Close()
	segs, _ := listSegments(dir)
	var out [][]byte
	for _, s := range segs {
		b, _ := os.ReadFile(s.path)
		// Renumber the segment to 0, as the fuzz target writes it.
		b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15] = 0, 0, 0, 0, 0, 0, 0, 0
		out = append(out, b)
	}
	first, _ := os.ReadFile(segs[0].path)
	out = append(out, first)
	for _, at := range []int{0, 5, 20, headerLen + 2, headerLen + 6, headerLen + 20, len(first) / 2, len(first) - 10} {
		b := bytes.Clone(first)
		b[at] ^= 0x41
		out = append(out, b, first[:at])
	}
	return append(out, nil, []byte("RWSEG"), append([]byte("RWSEG\x07"), make([]byte, 40)...),
		bytes.Repeat(syncMarker[:], 50), append(appendHeader(nil, 0, t0), bytes.Repeat(append(syncMarker[:], 0xff, 0xff, 0xff, 0x03), 20)...))
}

// FuzzRead writes arbitrary bytes as a segment file: reading never panics
// and returns only records whose frames, checksum included, are in the
// file; the writer opens the file or refuses it, and appends after it.
func FuzzRead(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	next := mkRec(7, 1, 30)
	next.FirstOffset = 1 << 40
	nextSeg := appendRecord(appendHeader(nil, next.FirstOffset, t0), &next)

	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		seg := segPath(dir, 0)
		if err := os.WriteFile(seg, data, 0o644); err != nil {
			t.Fatal(err)
		}
		read := func(from uint64, files ...[]byte) []Record {
			r, err := OpenReader(dir, from, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var out []Record
			for range len(data) + 10 {
				rec, err := r.Next(context.Background())
				if errors.Is(err, io.EOF) {
					return out
				}
				// From past the data's end; a record returned ends past from.
				if errors.Is(err, ErrPastEnd) && len(out) == 0 && from > 0 {
					return out
				}
				if err != nil {
					t.Fatalf("read: %v", err)
				}
				frame := appendRecord(nil, &rec)
				found := false
				for _, b := range files {
					found = found || bytes.Contains(b, frame)
				}
				if !found {
					t.Fatalf("record at %d is not a frame of the file", rec.FirstOffset)
				}
				out = append(out, rec)
			}
			t.Fatal("reader does not end")
			return nil
		}
		// As the last segment, from the start and from further on.
		read(0, data)
		read(5, data)
		// As a sealed segment followed by another: its record comes last.
		if err := os.WriteFile(segPath(dir, next.FirstOffset), nextSeg, 0o644); err != nil {
			t.Fatal(err)
		}
		got := read(0, data, nextSeg)
		if len(got) == 0 || !sameRecord(got[len(got)-1], next) {
			t.Fatalf("the next segment's record is not read last: %d records", len(got))
		}
		read(3, data, nextSeg)
		os.Remove(segPath(dir, next.FirstOffset))

		// The writer recovers it, or refuses it; then appends after it.
		l, err := Open(dir, Options{Sync: SyncPolicy{Mode: SyncNever}})
		if err != nil {
			return
		}
		defer l.Close()
		first, err := l.Append(Record{Count: 1, Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		r, err := l.Reader(first)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		rec, err := r.Next(context.Background())
		if err != nil || rec.FirstOffset != first || string(rec.Payload) != "x" {
			t.Fatalf("appended record: %+v %v", rec, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "LOCK")); err != nil {
			t.Fatal(err)
		}
	})
}
