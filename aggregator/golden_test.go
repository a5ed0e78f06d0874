package aggregator

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// TestPartialsGolden: the partials of 300,000 generator events, rolled up
// through the columnar path in record batches of 4,096 (and, for one
// setting, event by event), encode to the bytes recorded in
// testdata/partials.golden: digests of every output (its range and its
// encoded partial) of 1 s and 1 min windows with top-K lists of 3, 10, 100
// and 1,000 clients. The digests were recorded with the rollup before its
// per-batch speedups (hashing each client once a batch, each distinct
// client inserted once a batch into each HyperLogLog, the DDSketch index
// from a table, the top-K lists' inline hashes and sort), so they hold
// every later change to the bytes a replay, a restart or a takeover
// reproduce; they were recorded again for partial encoding version 3
// (each aggregate's encoding whole, and the refusals by tier), whose
// TestDecodePartialV2 shows every aggregate of version 2 unchanged, for
// version 4 (the unlisted tiers), for version 5 (the checksum: each
// output less its last 4 bytes, its version byte 4, gave version 4's
// digests; TestDecodePartialV4 keeps that) and for version 6 (each IPv6
// client by its /64, the lists' prefix lengths: rolled up with each IPv6
// address its own client, each output made version 5 by asV5 gives
// version 5's digests, kept in testdata/partials-v5.golden).
// -update rewrites the file; do that only for a change meant to change the
// encoding, never to make a speedup pass.
func TestPartialsGolden(t *testing.T) {
	t.Parallel()
	ds := decisiontest.NewGenerator(21, t0).Batch(300_000)
	batches := encodeBatches(t, ds, 4096)
	cases := []struct {
		name     string
		o        Options
		perEvent bool
	}{
		{"window=1s/topk=3", Options{Window: time.Second, TopK: 3}, false},
		{"window=1s/topk=100", Options{Window: time.Second, TopK: 100}, false},
		{"window=1s/topk=100/events", Options{Window: time.Second, TopK: 100}, true},
		{"window=1m/topk=10", Options{Window: time.Minute, TopK: 10}, false},
		{"window=1m/topk=100", Options{Window: time.Minute, TopK: 100}, false},
		{"window=1m/topk=1000", Options{Window: time.Minute, TopK: 1000}, false},
	}
	var got, v5 strings.Builder
	for _, c := range cases {
		sum, n, size := goldenDigest(t, batches, c.o, c.perEvent, nil)
		fmt.Fprintf(&got, "%s %d outputs %d bytes sha256:%x\n", c.name, n, size, sum)
		perAddr := c.o
		perAddr.IPv6Prefix = 128
		sum, n, size = goldenDigest(t, batches, perAddr, c.perEvent, asV5)
		fmt.Fprintf(&v5, "%s %d outputs %d bytes sha256:%x\n", c.name, n, size, sum)
	}
	// Each IPv6 address its own client, as before version 6, and each
	// output made version 5 (asV5): version 5's digests.
	if want, err := os.ReadFile(filepath.Join("testdata", "partials-v5.golden")); err != nil || v5.String() != string(want) {
		t.Errorf("partials of IPv6 addresses, as version 5, differ from testdata/partials-v5.golden (%v):\n got %s\nwant %s", err, v5.String(), want)
	}
	golden := filepath.Join("testdata", "partials.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Errorf("partials differ from %s:\n got %s\nwant %s", golden, got.String(), want)
	}
}

// goldenDigest rolls the batches up with o, through AddBatch or (perEvent)
// event by event through Add, flushing after each batch, and returns the
// digest, number and total size of the outputs, each encoded partial
// made as (when not nil) says.
func goldenDigest(t *testing.T, batches [][]byte, o Options, perEvent bool, as func([]byte) []byte) (sum [sha256.Size]byte, n, size int) {
	t.Helper()
	r := NewRollup(o)
	h := sha256.New()
	emit := func(out Output) error {
		b, err := out.Partial.AppendBinary(nil)
		if err != nil {
			return err
		}
		if as != nil {
			b = as(b)
		}
		fmt.Fprintf(h, "%v %d-%d %d\n", out.Correction, out.From, out.To, len(b))
		h.Write(b)
		n++
		size += len(b)
		return nil
	}
	dec := columnar.NewDecoder()
	var seq uint64
	var evs []decisions.Decision
	for _, data := range batches {
		var err error
		if perEvent {
			if evs, err = dec.Decode(data, evs[:0]); err != nil {
				t.Fatal(err)
			}
			for i := range evs {
				r.Add(&evs[i], seq+uint64(i))
			}
			seq += uint64(len(evs))
		} else if err = dec.DecodeColumns(data, func(c *columnar.Columns) error {
			r.AddBatch(c, seq)
			seq += uint64(c.Len)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := r.Flush(false, emit); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Flush(true, emit); err != nil {
		t.Fatal(err)
	}
	if n == 0 || bytes.Equal(h.Sum(nil), sha256.New().Sum(nil)) {
		t.Fatalf("%+v: no outputs", o)
	}
	copy(sum[:], h.Sum(nil))
	return sum, n, size
}
