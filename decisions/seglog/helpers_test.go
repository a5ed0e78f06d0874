package seglog

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

// mkRec returns record i of a test log: count events, size payload bytes
// drawn from i, event times around t0+i seconds.
func mkRec(i int, count uint32, size int) Record {
	p := make([]byte, size)
	rng := rand.New(rand.NewPCG(uint64(i), 42))
	for j := range p {
		p[j] = byte(rng.Uint32())
	}
	at := t0.Add(time.Duration(i) * time.Second)
	return Record{Count: count, MinTime: at, MaxTime: at.Add(500 * time.Millisecond), Codec: 1 + uint8(i%2), Payload: p}
}

// appendAll appends recs one Append of batch records at a time and returns
// them with their offsets.
func appendAll(t testing.TB, l *Log, recs []Record, batch int) []Record {
	t.Helper()
	out := make([]Record, 0, len(recs))
	for i := 0; i < len(recs); i += batch {
		b := recs[i:min(i+batch, len(recs))]
		first, err := l.Append(b...)
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		for _, r := range b {
			r.FirstOffset = first
			first += uint64(r.Count)
			out = append(out, r)
		}
	}
	return out
}

// writeLog writes a closed log of n records of count events and size
// payload bytes in dir, batch records an Append, and returns them.
func writeLog(t testing.TB, dir string, n int, count uint32, size, batch int) []Record {
	t.Helper()
	l := mustOpen(t, dir, Options{Sync: SyncPolicy{Mode: SyncNever}})
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = mkRec(i, count, size)
	}
	want := appendAll(t, l, recs, batch)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return want
}

func readAll(t testing.TB, r *Reader) []Record {
	t.Helper()
	var out []Record
	for range 1 << 20 {
		rec, err := r.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("read after %d records: %v", len(out), err)
		}
		out = append(out, rec)
	}
	t.Fatal("reader does not end")
	return nil
}

func sameRecord(a, b Record) bool {
	return a.FirstOffset == b.FirstOffset && a.Count == b.Count && a.Codec == b.Codec &&
		a.MinTime.Equal(b.MinTime) && a.MaxTime.Equal(b.MaxTime) && bytes.Equal(a.Payload, b.Payload)
}

func checkRecords(t testing.TB, what string, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if !sameRecord(got[i], want[i]) {
			t.Errorf("%s: record %d: offset %d count %d, want offset %d count %d (or payload/times differ)",
				what, i, got[i].FirstOffset, got[i].Count, want[i].FirstOffset, want[i].Count)
			return
		}
	}
}

func mustOpen(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// mustReader checks a reader constructor's error and closes the reader at
// the test's end: mustReader(t)(l.Reader(0)).
func mustReader(t testing.TB) func(*Reader, error) *Reader {
	return func(r *Reader, err error) *Reader {
		t.Helper()
		if err != nil {
			t.Fatalf("reader: %v", err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
}

// frameInfo is where a frame of a segment file lies.
type frameInfo struct {
	pos, end int64
	kind     byte
	first    uint64
	count    uint32
}

// framesOf lists the valid frames of a segment file.
func framesOf(t testing.TB, path string) []frameInfo {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	first, _ := parseSegName(path[len(path)-nameLen:])
	sc := newScan(path, first, f, headerLen, first)
	sc.sealed = true
	var out []frameInfo
	for {
		st, err := sc.next(fi.Size())
		if err != nil {
			t.Fatal(err)
		}
		if st.kind == stepRecord || (st.kind == stepEnd && st.fr.kind == bodyTrailer) {
			out = append(out, frameInfo{st.fr.pos, st.fr.end, st.fr.kind, st.fr.first, st.fr.count})
		}
		if st.kind != stepRecord {
			return out
		}
	}
}

func segFiles(t testing.TB, dir string) []segFile {
	t.Helper()
	s, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
