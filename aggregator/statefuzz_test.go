package aggregator

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// stateSeed returns the encoding of a state as a run saves it: a
// Rollup's snapshot with open and late windows of size window, the
// outputs of its last flush pending, and a cursor. In windows of a
// second each holds two clients, as many as its lists; in longer ones
// the lists are full and their filters in the snapshot.
func stateSeed(tb testing.TB, window time.Duration) []byte {
	tb.Helper()
	r := NewRollup(Options{Window: window, Lateness: 100 * time.Millisecond, TopK: 2})
	// Two events a second for four seconds, then one late for the first.
	ds := at(append(seconds(0, 3), 200*time.Millisecond)...)
	for i := range ds {
		ds[i].StoreLatency = time.Duration(i+1) * time.Millisecond // the sketches hold bins
	}
	var outs []Output // of the last flush that emitted
	for i := range ds {
		r.Add(&ds[i], uint64(i))
		var o []Output
		if err := r.Flush(false, func(p Output) error { o = append(o, p); return nil }); err != nil {
			tb.Fatal(err)
		}
		if len(o) > 0 {
			outs = o
		}
	}
	snap, err := r.AppendSnapshot(nil)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := appendState(nil, State{Snapshot: snap, Pending: outs, Cursor: []byte("shard-cursor")})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// withCRC returns b with its last 4 bytes replaced by the checksum of
// the bytes before them, so that the fuzzer reaches past the checksum.
func withCRC(b []byte) []byte {
	if len(b) < 4 {
		return b
	}
	c := bytes.Clone(b)
	binary.LittleEndian.PutUint32(c[len(c)-4:], crc32.Checksum(c[:len(c)-4], castagnoli))
	return c
}

// FuzzDecodeState: a state file or item of any bytes is refused or
// decoded, never a panic; a decoded state re-encodes to bytes that decode
// to the same state (a Load returns what was saved), and its snapshot, if
// a Rollup restores it, snapshots to bytes that restore to the same
// Rollup. The old state seed is large: run with -fuzzminimizetime 10x, or
// minimizing what it finds takes most of the time.
func FuzzDecodeState(f *testing.F) {
	f.Add(stateSeed(f, time.Second))
	f.Add(stateSeed(f, 10*time.Second))
	if old, err := os.ReadFile(filepath.Join("testdata", "oldstate", "state", "log.state")); err == nil {
		f.Add(old) // written by an earlier RunLog
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, b := range [][]byte{b, withCRC(b)} {
			st, err := decodeState(b)
			if err != nil {
				continue
			}
			enc, err := appendState(nil, st)
			if err != nil {
				t.Fatalf("a decoded state does not encode: %v", err)
			}
			back, err := decodeState(enc)
			if err != nil {
				t.Fatalf("a decoded state re-encodes to bytes that do not decode: %v", err)
			}
			if again, _ := appendState(nil, back); !bytes.Equal(again, enc) {
				t.Fatalf("a decoded state, encoded and decoded, encodes to %d bytes differing from %d", len(again), len(enc))
			}
			r := NewRollup(Options{Window: time.Second})
			if r.Restore(st.Snapshot) != nil {
				continue
			}
			snap, err := r.AppendSnapshot(nil)
			if err != nil {
				t.Fatalf("a restored rollup does not snapshot: %v", err)
			}
			r2 := NewRollup(Options{Window: time.Second})
			if err := r2.Restore(snap); err != nil {
				t.Fatalf("a restored rollup's snapshot does not restore: %v", err)
			}
			snap2, err := r2.AppendSnapshot(nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(snap, snap2) {
				t.Fatalf("a restored rollup's snapshot restores to one of %d bytes differing from %d", len(snap2), len(snap))
			}
		}
	})
}
