package columnar

import (
	"bytes"
	"errors"
	"flag"
	"hash/crc32"
	"os"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

var updateDict = flag.Bool("update-dict", false, "write zstd-dict-next.bin, a candidate dictionary (released under a new id, never over an old one)")

// dictSizes are the batch sizes whose raw streams make up the dictionary:
// the small ones it is for, and a larger one for the long strings; the
// smallest last, where zstd reaches it with the shortest offsets.
var dictSizes = []int{200, 20, 4, 1}

// TestDictionaryFrozen: a released dictionary never changes, or the
// records written with it could not be read.
func TestDictionaryFrozen(t *testing.T) {
	if *updateDict {
		g := decisiontest.NewGenerator(100, t0)
		raw := NewEncoder(Options{Compression: None})
		var content []byte
		for _, n := range dictSizes {
			var err error
			if content, err = raw.Encode(content, g.Batch(n)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile("zstd-dict-next.bin", content, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote zstd-dict-next.bin, %d bytes, crc32c %#x", len(content), crc32.Checksum(content, crc32.MakeTable(crc32.Castagnoli)))
	}
	f := func(id uint32, content []byte, size int, sum uint32) {
		t.Helper()
		if got := crc32.Checksum(content, crc32.MakeTable(crc32.Castagnoli)); len(content) != size || got != sum {
			t.Errorf("dictionary %#x: %d bytes, crc32c %#x; released as %d bytes, %#x", id, len(content), got, size, sum)
		}
	}
	f(dict1ID, dict1, 52072, 0xf5133752)
	f(dict2ID, dict2, 55864, 0x950b937a)
}

// TestEveryDictionaryDecodes: frames written with any released dictionary
// decode, whichever the writer uses now.
func TestEveryDictionaryDecodes(t *testing.T) {
	want := generate(3, 9)
	raw, err := Encode(nil, want, Options{Compression: None})
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoder()
	for _, dict := range []struct {
		id      uint32
		content []byte
	}{{dict1ID, dict1}, {dict2ID, dict2}} {
		z, err := zstd.NewWriter(nil, zstd.WithEncoderDictRaw(dict.id, dict.content))
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.Decode(z.EncodeAll(raw, nil), nil)
		if err != nil || len(got) != len(want) {
			t.Fatalf("dictionary %#x: %d events, %v", dict.id, len(got), err)
		}
		for i := range want {
			if !decisiontest.Equal(got[i], want[i]) {
				t.Fatalf("dictionary %#x, event %d:\n%s", dict.id, i, decisiontest.Diff(got[i], want[i]))
			}
		}
	}
}

// TestDictionaryTargets: with the dictionary, a batch of any size is
// smaller than its JSON lines, at least 5 times at 20 events and 10 times
// at 200, on events of another seed than the dictionary's.
func TestDictionaryTargets(t *testing.T) {
	ds := generate(2, 20_000)
	e := NewEncoder(Options{Compression: ZstdDict})
	d := NewDecoder()
	f := func(n int, factor float64) {
		t.Helper()
		var arrow, json int
		var buf []byte
		for i := 0; i+n <= len(ds) && i < 200*n; i += n {
			b, err := e.Encode(nil, ds[i:i+n])
			if err != nil {
				t.Fatal(err)
			}
			if got, err := d.Decode(b, nil); err != nil || len(got) != n {
				t.Fatalf("decode %d events: %d, %v", n, len(got), err)
			}
			arrow += len(b)
			buf = buf[:0]
			for j := i; j < i+n; j++ {
				buf = decisions.AppendJSON(buf, &ds[j])
				buf = append(buf, '\n')
			}
			json += len(buf)
		}
		events := float64(min(len(ds)/n, 200) * n)
		t.Logf("%4d events a batch: %6.1f B/event, json lines %.1f: %.1fx smaller", n, float64(arrow)/events, float64(json)/events, float64(json)/float64(arrow))
		if float64(arrow)*factor > float64(json) {
			t.Errorf("%d events a batch: %d bytes, json lines %d: not %.0f times smaller", n, arrow, json, factor)
		}
	}
	for _, n := range []int{1, 2, 4, 10} {
		f(n, 1)
	}
	f(20, 5)
	f(200, 10)
	f(1024, 10)
}

// BenchmarkEncodeSmall encodes and decodes the small batches of a low
// rate, where the dictionary is for, against the plain zstd frame.
func BenchmarkEncodeSmall(b *testing.B) {
	for _, n := range []int{4, 20} {
		ds := generate(1, n)
		for _, c := range []Compression{ZstdStream, ZstdDict} {
			b.Run(c.String()+"/batch="+itoa(n), func(b *testing.B) { benchEncode(b, c, ds, NewDecoder()) })
		}
	}
}

// TestZstdFrameChecksum: a buffer's zstd frame is checked against its own
// checksum unless its batch is sealed, whose CRC-32C, checked before
// anything is decompressed, covers the compressed bytes (TestCorruption):
// in a batch without it (another writer's), a frame whose checksum is
// wrong is refused; in a sealed one the frame's checksum is not read.
func TestZstdFrameChecksum(t *testing.T) {
	z, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	content := bytes.Repeat([]byte("ratewarden "), 200)
	good := z.EncodeAll(content, nil)
	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 1 // the last byte of the frame's checksum
	d := NewDecoder()
	dst := make([]byte, len(content))
	for _, c := range []struct {
		sealed  bool
		frame   []byte
		refused bool
	}{{false, good, false}, {false, bad, true}, {true, good, false}, {true, bad, false}} {
		clear(dst)
		d.sealed = c.sealed
		err := d.unzstd(c.frame, dst)
		switch {
		case c.refused && !errors.Is(err, zstd.ErrCRCMismatch):
			t.Errorf("sealed %v, checksum flipped: %v, want a checksum mismatch", c.sealed, err)
		case !c.refused && err != nil:
			t.Errorf("sealed %v, checksum flipped %v: %v", c.sealed, &c.frame[0] == &bad[0], err)
		case !c.refused && !bytes.Equal(dst, content):
			t.Errorf("sealed %v: decompressed to other bytes", c.sealed)
		}
	}
}
