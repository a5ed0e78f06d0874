package aggregator

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// encodeBatches encodes ds as the decision log does (ZstdDict), in batches
// of the sizes given in turn.
func encodeBatches(t testing.TB, ds []decisions.Decision, sizes ...int) [][]byte {
	t.Helper()
	return encodeBatchesWith(t, columnar.ZstdDict, ds, sizes...)
}

// encodeBatchesWith is encodeBatches with compression c.
func encodeBatchesWith(t testing.TB, c columnar.Compression, ds []decisions.Decision, sizes ...int) [][]byte {
	t.Helper()
	enc := columnar.NewEncoder(columnar.Options{Compression: c})
	var out [][]byte
	for i, k := 0, 0; i < len(ds); k++ {
		j := min(i+sizes[k%len(sizes)], len(ds))
		b, err := enc.Encode(nil, ds[i:j])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
		i = j
	}
	return out
}

// eachBatch encodes ds in batches of size as encodeBatches does, and calls
// f with each decoded and prepared.
func eachBatch(t testing.TB, ds []decisions.Decision, size int, f func(*Batch)) {
	t.Helper()
	dec := columnar.NewDecoder()
	var b Batch
	for _, data := range encodeBatches(t, ds, size) {
		if err := dec.DecodeColumns(data, func(c *columnar.Columns) error {
			b.Prepare(c)
			f(&b)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestColumnsEqualsDecisions: the columnar path (DecodeColumns, then
// Rollup.AddBatch or Partial.UpdateColumns) makes partials that encode to
// the same bytes as the decoded events added one by one, over the
// generator's traffic (rejected outcomes, response errors, feedback and
// drop reports among it), with lists small enough to evict, windows that
// cut batches, and late events both corrected and dropped.
func TestColumnsEqualsDecisions(t *testing.T) {
	t.Parallel()
	ds := decisiontest.NewGenerator(9, t0).Batch(60_000)
	for i := 500; i < len(ds); i += 331 { // some late, some out of order within the lateness
		ds[i].Time = ds[i].Time.Add(-time.Duration(i%7) * 300 * time.Millisecond)
	}
	var whole Partial
	for _, d := range ds {
		whole.Events++
		whole.Counts.Update(&d)
	}
	byOutcome := whole.Counts.ByOutcome()
	if byOutcome[decisions.Rejected] == 0 || byOutcome[decisions.Challenge] == 0 || byOutcome[decisions.TokenPass] == 0 || len(whole.Counts.Errors) == 0 || len(whole.Counts.Feedback) == 0 || whole.Counts.Dropped == 0 {
		t.Fatalf("the traffic lacks a kind of event: %v, errors %d, feedback %d, dropped %d",
			byOutcome, len(whole.Counts.Errors), len(whole.Counts.Feedback), whole.Counts.Dropped)
	}
	f := func(o Options, late bool, sizes ...int) {
		t.Helper()
		batches := encodeBatches(t, ds, sizes...)
		dec := columnar.NewDecoder()
		one, cols := NewRollup(o), NewRollup(o)
		var want, got [][]byte
		emit := func(out *[][]byte) func(Output) error {
			return func(o Output) error {
				b, err := o.Partial.AppendBinary(nil)
				*out = append(*out, append([]byte(fmt.Sprintf("%v %d-%d ", o.Correction, o.From, o.To)), b...))
				return err
			}
		}
		var seq uint64
		for _, data := range batches {
			seq += addBoth(t, dec, data, seq, one, cols)
			if one.Due() != cols.Due() {
				t.Fatalf("%+v %v: after event %d, Due %v, want %v", o, sizes, seq, cols.Due(), one.Due())
			}
			one.Flush(false, emit(&want))
			cols.Flush(false, emit(&got))
		}
		one.Flush(true, emit(&want))
		cols.Flush(true, emit(&got))
		if one.Stats() != cols.Stats() || one.Next() != cols.Next() || !one.Watermark().Equal(cols.Watermark()) {
			t.Errorf("%+v %v: stats %+v next %d watermark %v, want %+v %d %v", o, sizes,
				cols.Stats(), cols.Next(), cols.Watermark(), one.Stats(), one.Next(), one.Watermark())
		}
		if len(got) != len(want) {
			t.Fatalf("%+v %v: %d outputs, want %d", o, sizes, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Errorf("%+v %v: output %d differs (%d bytes, want %d)", o, sizes, i, len(got[i]), len(want[i]))
			}
		}
		if late && one.Stats().Late == 0 {
			t.Errorf("%+v: no late events", o)
		}
	}
	f(Options{Window: time.Second, TopK: 10}, true, 4096)
	f(Options{Window: time.Second, TopK: 3, Late: LateDrop}, true, 1, 7, 1000, 333)
	f(Options{Window: 10 * time.Second, Lateness: 100 * time.Millisecond, TopK: 100}, false, 20_000)

	// One partial of every event, through UpdateColumns.
	checkOnePartial(t, ds, 4096, nil)
}

// TestBadLatencyCounted: latencies below 0 (hand-made or damaged
// records: no edge measures one) are left out of the latency sketches
// and counted, their decisions counted all the same, alike event by event
// and through the columns; before, they were left out without a count.
func TestBadLatencyCounted(t *testing.T) {
	ds := decisiontest.NewGenerator(3, t0).Batch(5_000)
	var bad, decided, store, upstream uint64
	for i := range ds {
		d := &ds[i]
		if d.Kind != decisions.KindDecision {
			continue
		}
		decided++
		switch i % 97 {
		case 5:
			d.StoreLatency = -time.Duration(i) * time.Microsecond
			bad++
		case 11:
			d.UpstreamLatency, d.StoreLatency = -1, -2
			bad += 2
		}
		if d.StoreLatency > 0 {
			store++
		}
		if d.UpstreamLatency > 0 {
			upstream++
		}
	}
	if bad < 100 || store == 0 || upstream == 0 {
		t.Fatalf("the traffic has %d bad latencies, %d store and %d origin latencies", bad, store, upstream)
	}
	o := Options{Window: time.Hour}
	one, cols := NewRollup(o), NewRollup(o)
	dec := columnar.NewDecoder()
	var seq uint64
	for _, data := range encodeBatches(t, ds, 777) {
		seq += addBoth(t, dec, data, seq, one, cols)
	}
	for name, r := range map[string]*Rollup{"events": one, "columns": cols} {
		if got := r.Stats().BadLatency; got != bad {
			t.Errorf("%s: %d bad latencies counted, want %d", name, got, bad)
		}
		var outs []Output
		r.Flush(true, func(o Output) error { outs = append(outs, o); return nil })
		if len(outs) != 1 {
			t.Fatalf("%s: %d outputs", name, len(outs))
		}
		p := outs[0].Partial
		if p.Counts.Total() != decided || p.Latency.Count() != store || p.Upstream.Count() != upstream {
			t.Errorf("%s: %d decisions, %d store and %d origin latencies; want %d, %d, %d", name,
				p.Counts.Total(), p.Latency.Count(), p.Upstream.Count(), decided, store, upstream)
		}
	}
}

// addBoth adds the events of the record data, numbered from seq, to one
// event by event and to cols through its columns, and returns how many
// it holds.
func addBoth(t *testing.T, dec *columnar.Decoder, data []byte, seq uint64, one, cols *Rollup) uint64 {
	t.Helper()
	evs, err := dec.Decode(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range evs {
		one.Add(&evs[i], seq+uint64(i))
	}
	if err := dec.DecodeColumns(data, func(c *columnar.Columns) error { cols.AddBatch(c, seq); return nil }); err != nil {
		t.Fatal(err)
	}
	return uint64(len(evs))
}

// checkOnePartial rolls ds, in batches of size, into one partial event by
// event and one through UpdateColumns, and compares their encodings; check,
// if set, sees each prepared batch.
func checkOnePartial(t *testing.T, ds []decisions.Decision, size int, check func(*Batch)) {
	t.Helper()
	p, q := NewPartial(t0, time.Hour, 50), NewPartial(t0, time.Hour, 50)
	dec := columnar.NewDecoder()
	var b Batch
	for _, data := range encodeBatches(t, ds, size) {
		evs, err := dec.Decode(data, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range evs {
			p.Update(&evs[i])
		}
		dec.DecodeColumns(data, func(c *columnar.Columns) error {
			b.Prepare(c)
			if check != nil {
				check(&b)
			}
			q.UpdateColumns(&b, 0, b.Len())
			return nil
		})
	}
	if got, want := encode(t, q), encode(t, p); !bytes.Equal(got, want) {
		t.Errorf("UpdateColumns: %d bytes differ from Update's %d", len(got), len(want))
	}
}

// TestSortKey: sortKey orders clients as CompareClients does wherever two
// keys differ, so that the lowest counters sort on integers.
func TestSortKey(t *testing.T) {
	var cs []Client
	for _, s := range []string{"0.0.0.0", "1.2.3.4", "1.2.3.5", "255.255.255.255", "::", "::1", "::ffff:1.2.3.4",
		"2a02:8108::1", "2a02:8108::2", "2a02:8109::1", "fe80::1%eth0", "fe80::1%eth1", "ffff::"} {
		cs = append(cs, Client{Addr: netip.MustParseAddr(s)})
	}
	cs = append(cs, Client{})
	for _, u := range []string{"a", "a\x00", "ab", "abcdefg", "abcdefgh", "abcdefgi", "u_1", "u_10", "\xff"} {
		cs = append(cs, Client{User: u})
	}
	for _, a := range cs {
		for _, b := range cs {
			ka, kb := sortKey(a), sortKey(b)
			if ka != kb && (ka < kb) != (CompareClients(a, b) < 0) {
				t.Errorf("%v, %v: keys %x, %x disagree with CompareClients %d", a, b, ka, kb, CompareClients(a, b))
			}
		}
	}
}

// TestColumnsLargeDictionaries: a batch whose dictionaries make more count
// cells than the arrays address, and outcomes of a newer writer, are
// counted through the maps, to the same bytes.
func TestColumnsLargeDictionaries(t *testing.T) {
	t.Parallel()
	ds := decisiontest.NewGenerator(13, t0).Batch(8000)
	for i := range ds {
		if ds[i].Kind == decisions.KindDecision {
			ds[i].Rule = fmt.Sprintf("%s:/r%d", ds[i].Tier, i%3000)
			ds[i].Reason = fmt.Sprintf("reason %d", i%40)
			if i%97 == 0 {
				ds[i].Outcome = 200 // unknown to this reader
			}
		}
	}
	checkOnePartial(t, ds, 8000, func(b *Batch) {
		if b.dense {
			t.Fatal("the dictionaries fit the arrays: the test covers nothing")
		}
	})
}

// TestTablesSpreadHostileKeys: clients are the edge's untrusted input, so
// the per-batch table of clients and the sets of known hashes place keys
// by a keyed mix of all their bits. IPv4 addresses that differ only above
// their low 13 bits (which an unkeyed multiply would send to one place of
// a table of 8,192) and hashes that differ only in their top bits spread
// over their tables, and a batch of such addresses rolls up to the bytes
// of the per-event path.
func TestTablesSpreadHostileKeys(t *testing.T) {
	spread := func(n, size int, key func(i int) uint64) int {
		seen := map[uint64]bool{}
		for i := range n {
			seen[key(i)&uint64(size-1)] = true
		}
		return len(seen)
	}
	if got := spread(4096, 8192, func(i int) uint64 { return v4Fingerprint(uint32(i) << 13) }); got < 2500 {
		t.Errorf("4,096 addresses alike in their low 13 bits take %d places of 8,192", got)
	}
	if got := spread(16384, 32768, func(i int) uint64 { return mix64(uint64(i) << 48) }); got < 10000 {
		t.Errorf("16,384 hashes alike in their low 48 bits take %d places of 32,768", got)
	}
	ds := decisiontest.NewGenerator(17, t0).Batch(8192)
	for i := range ds {
		ds[i].UserID = ""
		ds[i].ClientIP = netip.AddrFrom4([4]byte{byte(i >> 3), byte(i<<5) | 0x1f, 0x7a, 0x01})
	}
	checkOnePartial(t, ds, 4096, nil)
}
