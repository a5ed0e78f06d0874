package aggregator

import (
	"bytes"
	"testing"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// TestAggregates is the conformance suite every aggregate runs: the events
// through UpdateColumns encode as through Update; two halves merged encode
// as the whole, split by identity (MergeDisjoint, as Kinesis shards split
// them) and, with top-K lists that hold every client, by arrival
// (MergeOverlapping); the encoding decodes back to the same bytes.
func TestAggregates(t *testing.T) {
	t.Parallel()
	ds := decisiontest.NewGenerator(5, t0).Batch(20_000)
	batches := encodeBatches(t, ds, 1000)
	const k = 100_000 // every client: the lists are exact
	t.Run("Counts", func(t *testing.T) { checkAggregate(t, ds, batches, func() *Counts { return new(Counts) }) })
	t.Run("Distinct", func(t *testing.T) { checkAggregate(t, ds, batches, func() *Distinct { return new(Distinct) }) })
	t.Run("Latency", func(t *testing.T) { checkAggregate(t, ds, batches, func() *Latency { return new(Latency) }) })
	t.Run("UpstreamLatency", func(t *testing.T) {
		checkAggregate(t, ds, batches, func() *UpstreamLatency { return new(UpstreamLatency) })
	})
	t.Run("Offenders", func(t *testing.T) { checkAggregate(t, ds, batches, func() *Offenders { return NewOffenders(k) }) })
}

// checkAggregate runs the conformance suite on aggregates that mk makes
// empty, over ds and the same events in record batches.
func checkAggregate[T aggregate[T]](t *testing.T, ds []decisions.Decision, batches [][]byte, mk func() T) {
	enc := func(a T) []byte {
		t.Helper()
		b, err := a.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	whole, empty := mk(), enc(mk())
	byIdentity, byArrival := [2]T{mk(), mk()}, [2]T{mk(), mk()}
	for i := range ds {
		d := &ds[i]
		whole.Update(d)
		byIdentity[hashClient(ClientOf(d, 0))%2].Update(d)
		byArrival[i%2].Update(d)
	}
	want := enc(whole)
	if bytes.Equal(want, empty) {
		t.Fatal("the events changed nothing")
	}

	cols := mk()
	var b Batch
	dec := columnar.NewDecoder()
	for _, data := range batches {
		if err := dec.DecodeColumns(data, func(c *columnar.Columns) error {
			b.Prepare(c)
			// In two calls, as a window boundary inside a batch splits it.
			cols.UpdateColumns(&b, 0, b.Len()/3)
			cols.UpdateColumns(&b, b.Len()/3, b.Len())
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if got := enc(cols); !bytes.Equal(got, want) {
		t.Errorf("UpdateColumns: %d bytes differ from Update's %d", len(got), len(want))
	}

	for _, c := range []struct {
		name   string
		halves [2]T
		m      MergeMode
	}{{"by identity", byIdentity, MergeDisjoint}, {"by arrival", byArrival, MergeOverlapping}} {
		if bytes.Equal(enc(c.halves[0]), want) || bytes.Equal(enc(c.halves[1]), want) {
			t.Fatalf("%s: a half is the whole", c.name)
		}
		if err := c.halves[0].Merge(c.halves[1], c.m); err != nil {
			t.Fatal(err)
		}
		if got := enc(c.halves[0]); !bytes.Equal(got, want) {
			t.Errorf("%s: the halves merged encode to %d bytes that differ from the whole's %d", c.name, len(got), len(want))
		}
	}

	back, r := mk(), &reader{b: want}
	if err := back.decode(r); err != nil {
		t.Fatal(err)
	}
	if len(r.b) != 0 {
		t.Errorf("decode left %d bytes of %d", len(r.b), len(want))
	}
	if got := enc(back); !bytes.Equal(got, want) {
		t.Errorf("decoded and encoded again: %d bytes differ from %d", len(got), len(want))
	}
}
