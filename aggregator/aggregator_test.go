package aggregator

import (
	"bytes"
	"fmt"
	"math"
	"net/netip"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

var t0 = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

// standing is a wall clock that stands a day after t0: a run reading it
// never finds a partition idle, and it vouches for every test event
// (Rollup.Bound).
func standing() time.Time { return t0.Add(24 * time.Hour) }

func encode(t *testing.T, p *Partial) []byte {
	t.Helper()
	b, err := p.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMergeEqualsWhole: the events split by identity (as Kinesis shards
// split them) into two partials, merged, encode to the same bytes as one
// partial of every event; split by arrival instead, every exact aggregate
// (counts, events) still matches and the sketches stay within their bounds.
func TestMergeEqualsWhole(t *testing.T) {
	t.Parallel()
	ds := decisiontest.NewGenerator(1, t0).Batch(50_000)
	// k holds every client, so that the top-K lists are exact and the whole
	// can be compared byte for byte; TestTopKMergeBounds covers overflow.
	const k = 200_000
	whole := NewPartial(t0, time.Hour, k)
	byIdentity := [2]*Partial{NewPartial(t0, time.Hour, k), NewPartial(t0, time.Hour, k)}
	byArrival := [2]*Partial{NewPartial(t0, time.Hour, k), NewPartial(t0, time.Hour, k)}
	for i := range ds {
		d := &ds[i]
		whole.Update(d)
		var kb []byte
		kb = identityKey(kb, d, 0)
		byIdentity[int(kb[len(kb)-1])%2].Update(d)
		byArrival[i%2].Update(d)
	}
	if whole.Counts.Total() == 0 || whole.Offenders.Requests.Len() == 0 || whole.Latency.Count() == 0 {
		t.Fatal("the generator's events filled nothing")
	}
	if err := byArrival[0].Merge(byArrival[1], false); err != nil {
		t.Fatal(err)
	}
	if err := byIdentity[0].Merge(byIdentity[1], true); err != nil {
		t.Fatal(err)
	}
	merged := byArrival[0]
	if merged.Events != whole.Events || merged.Counts.Total() != whole.Counts.Total() {
		t.Fatalf("events %d/%d, counts %d/%d", merged.Events, whole.Events, merged.Counts.Total(), whole.Counts.Total())
	}
	mc, _ := merged.Counts.AppendBinary(nil)
	wc, _ := whole.Counts.AppendBinary(nil)
	if !bytes.Equal(mc, wc) {
		t.Error("merged counts differ from the whole's")
	}
	if a, b := Estimate(merged.Clients.All), Estimate(whole.Clients.All); a != b {
		t.Errorf("distinct clients: merged %d, whole %d (HyperLogLog merges exactly)", a, b)
	}
	if a, b := merged.Latency.Quantile(0.99), whole.Latency.Quantile(0.99); a != b {
		t.Errorf("p99 latency: merged %v, whole %v (DDSketch merges exactly)", a, b)
	}
	// Disjoint identities: the top-K lists merge exactly too, so the whole
	// partial encodes to the same bytes.
	if got, want := encode(t, byIdentity[0]), encode(t, whole); !bytes.Equal(got, want) {
		t.Errorf("merged by identity: %d bytes differ from the whole's %d", len(got), len(want))
	}
}

// TestPartialRoundTrip: decoding gives a partial that encodes to the same
// bytes, every truncation is refused, and every flipped byte of the
// encoding, its checksum made again (so that it reaches the aggregates'
// decoders), is refused or decodes to something (never a panic).
func TestPartialRoundTrip(t *testing.T) {
	t.Parallel()
	p := NewPartial(t0, time.Minute, 10)
	for _, d := range decisiontest.NewGenerator(2, t0).Batch(5000) {
		p.Update(&d)
	}
	b := encode(t, p)
	q, err := DecodePartial(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := encode(t, q); !bytes.Equal(got, b) {
		t.Fatalf("re-encoded %d bytes differ from %d", len(got), len(b))
	}
	for n := range len(b) {
		if _, err := DecodePartial(b[:n]); err == nil {
			t.Fatalf("a partial cut at %d of %d bytes decoded", n, len(b))
		}
	}
	for i := len(partialMagic) + 1; i < len(b)-sumLen; i += 7 {
		c := slices.Clone(b)
		c[i] ^= 0x55
		DecodePartial(withCRC(c)) // must not panic
	}
}

func FuzzDecodePartial(f *testing.F) {
	p := NewPartial(t0, time.Minute, 4)
	for _, d := range decisiontest.NewGenerator(3, t0).Batch(300) {
		p.Update(&d)
	}
	b, _ := p.AppendBinary(nil)
	f.Add(b)
	if v1, err := os.ReadFile("testdata/partial-v1.rwp"); err == nil {
		f.Add(v1) // the encoding before version 2
	}
	if v2, err := os.ReadFile("testdata/partial-v2.rwp"); err == nil {
		f.Add(v2) // the encoding before version 3
	}
	if v4, err := os.ReadFile("testdata/partial-v4.rwp"); err == nil {
		f.Add(v4) // without a checksum: its mutations reach the decoders
	}
	if v5, err := os.ReadFile("testdata/partial-v5.rwp"); err == nil {
		f.Add(v5) // IPv6 clients by address, before their prefix lengths
	}
	q := NewPartial(t0, time.Minute, 4)
	for _, d := range v6FixtureDecisions() {
		q.Update(&d)
	}
	if b, err := q.AppendBinary(nil); err == nil {
		f.Add(b) // IPv6 clients by prefix
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, b := range [][]byte{b, withCRC(b)} { // past the checksum too
			p, err := DecodePartial(b)
			if err != nil {
				continue
			}
			again, err := p.AppendBinary(nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := DecodePartial(again); err != nil {
				t.Fatalf("a decoded partial re-encodes to bytes that do not decode: %v", err)
			}
		}
	})
}

// TestDistinctError: the HyperLogLog estimate is within 2 % of the truth
// from 1,000 to 1,000,000 distinct clients.
func TestDistinctError(t *testing.T) {
	for _, n := range []int{1_000, 10_000, 100_000, 1_000_000} {
		var s Distinct
		d := decisions.Decision{Tier: "anonymous"}
		for i := range n {
			d.ClientIP = netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
			s.Update(&d)
			s.Update(&d) // a client seen twice is one client
		}
		got := float64(Estimate(s.All))
		if e := math.Abs(got-float64(n)) / float64(n); e > 0.02 {
			t.Errorf("%d clients: estimated %.0f, error %.2f%% > 2%%", n, got, 100*e)
		}
	}
}

// TestLatencyQuantiles: every quantile is within 1 % of the exact one.
func TestLatencyQuantiles(t *testing.T) {
	var l Latency
	var exact []float64
	d := decisions.Decision{}
	for i := range 100_000 {
		// 50 µs to about 2 s, log-uniformly.
		v := time.Duration(50_000 * math.Pow(40_000, float64(i*7919%100_000)/100_000))
		d.StoreLatency = v
		l.Update(&d)
		exact = append(exact, float64(v)/1e6)
	}
	sort.Float64s(exact)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := exact[int(q*float64(len(exact)-1))]
		got := l.Quantile(q)
		if e := math.Abs(got-want) / want; e > LatencyAccuracy {
			t.Errorf("q%v: %v ms, exact %v ms, error %.3f%%", q, got, want, 100*e)
		}
	}
	var n float64
	l.Bins(func(_, c float64) { n += c })
	if n != 100_000 {
		t.Errorf("bins count %v values, want 100000", n)
	}
}

// TestTopKFindsHeavyHitters: every client with more than n/k hits is
// found, its count within the bound.
func TestTopKFindsHeavyHitters(t *testing.T) {
	const k = 20
	top := NewTopK(k)
	truth := map[Client]uint64{}
	n := uint64(0)
	add := func(c Client) { top.Add(c, 1); truth[c]++; n++ }
	for i := range 200_000 {
		switch {
		case i%10 == 0:
			add(Client{Addr: netip.MustParseAddr("203.0.113.7")}) // the scraper: 10 %
		case i%12 == 1:
			add(Client{User: "stuffer"}) // 8.3 %, over n/k = 5 %
		default:
			add(Client{Addr: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})})
		}
	}
	got := top.Top(2)
	if got[0].Client.String() != "203.0.113.7" || got[1].Client.String() != "user:stuffer" {
		t.Fatalf("top two: %+v", got)
	}
	for _, h := range top.Top(k) {
		if h.Count < truth[h.Client] || h.Count-h.Err > truth[h.Client] || h.Err > n/k {
			t.Errorf("%s: count %d err %d, true %d, bound %d", h.Client, h.Count, h.Err, truth[h.Client], n/k)
		}
	}
}

// TestTopKMergeBounds: merged counts of overflowing lists stay upper and
// lower bounds of the truth, whether the hits were split by arrival or by
// client (disjoint).
func TestTopKMergeBounds(t *testing.T) {
	f := func(disjoint bool, side func(i int, c Client) int) {
		t.Helper()
		tops := [2]*TopK{NewTopK(8), NewTopK(8)}
		truth := map[Client]uint64{}
		var n uint64
		for i := range 10_000 {
			c := Client{Addr: netip.AddrFrom4([4]byte{10, 0, byte(i % 7), byte(i % 40 * (i % 3))})}
			truth[c]++
			n++
			tops[side(i, c)].Add(c, 1)
		}
		if tops[0].Floor() == 0 || tops[1].Floor() == 0 {
			t.Fatal("the lists did not overflow")
		}
		tops[0].Merge(tops[1], disjoint)
		for _, h := range tops[0].Top(8) {
			if h.Count < truth[h.Client] || h.Count-h.Err > truth[h.Client] || h.Err > n/8 {
				t.Errorf("disjoint %v: %s: count %d err %d, true %d", disjoint, h.Client, h.Count, h.Err, truth[h.Client])
			}
		}
	}
	f(false, func(i int, _ Client) int { return i % 2 })
	f(true, func(_ int, c Client) int { return int(c.Addr.As4()[3] % 2) })
}

func decisionAt(sec float64, ip string) decisions.Decision {
	return decisions.Decision{Time: t0.Add(time.Duration(sec * float64(time.Second))), Outcome: decisions.Allow,
		Tier: "anonymous", Rule: "anonymous:global", ClientIP: netip.MustParseAddr(ip)}
}

type emitted struct {
	start      string
	events     uint64
	correction bool
	from, to   uint64
}

func collect(t *testing.T, r *Rollup, final bool) []emitted {
	t.Helper()
	var out []emitted
	if err := r.Flush(final, func(o Output) error {
		out = append(out, emitted{o.Partial.Start.Format("15:04:05"), o.Partial.Events, o.Correction, o.From, o.To})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// primed returns times after futureQuorum events at second 0: the first
// events of a partition, which set its watermark (see Options.MaxSkew).
func primed(times ...float64) []float64 {
	return append(make([]float64, futureQuorum), times...)
}

// TestRollupWindows: windows close on the watermark (latest event time
// less the lateness), late events become corrections or are dropped, and a
// final flush emits what is open.
func TestRollupWindows(t *testing.T) {
	f := func(policy LatePolicy, times []float64, want [][]emitted, late uint64) {
		t.Helper()
		r := NewRollup(Options{Window: 10 * time.Second, Lateness: 2 * time.Second, Late: policy})
		var got [][]emitted
		times = primed(times...)
		want = append(make([][]emitted, futureQuorum), want...)
		for i, s := range times {
			d := decisionAt(s, "192.0.2.1")
			r.Add(&d, uint64(i))
			got = append(got, collect(t, r, false))
		}
		got = append(got, collect(t, r, true))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%v %v:\n got %v\nwant %v", policy, times, got, want)
		}
		if r.Stats().Late != late {
			t.Errorf("late %d, want %d", r.Stats().Late, late)
		}
	}
	w := func(start string, n uint64, from, to uint64) emitted { return emitted{start, n, false, from, to} }
	c := func(start string, n uint64, from, to uint64) emitted { return emitted{start, n, true, from, to} }
	// 11.9 s is within the lateness of the first window's end; 12 s closes it.
	// (Each case starts with futureQuorum events at second 0, numbered 0-7.)
	f(LateCorrect, []float64{1, 5, 11.9, 12, 3, 22},
		[][]emitted{nil, nil, nil, {w("03:00:00", 10, 0, 9)}, nil, {w("03:00:10", 2, 10, 11), c("03:00:00", 1, 12, 12)}, {w("03:00:20", 1, 13, 13)}}, 1)
	f(LateDrop, []float64{1, 5, 11.9, 12, 3, 22},
		[][]emitted{nil, nil, nil, {w("03:00:00", 10, 0, 9)}, nil, {w("03:00:10", 2, 10, 11)}, {w("03:00:20", 1, 13, 13)}}, 1)
	// Out of order within the lateness joins its window.
	f(LateCorrect, []float64{9, 10.5, 8, 13},
		[][]emitted{nil, nil, nil, {w("03:00:00", 10, 0, 10)}, {w("03:00:10", 2, 9, 11)}}, 0)
}

// TestRollupIdle: a quiet partition's last window is emitted once the
// partition has been idle for Options.Idle past the window's end and
// lateness.
func TestRollupIdle(t *testing.T) {
	r := NewRollup(Options{Window: 10 * time.Second, Lateness: time.Second, Idle: 2 * time.Second})
	d := decisionAt(4, "192.0.2.1")
	r.Add(&d, 0)
	steps := []struct {
		wall float64
		want int
	}{{5, 0}, {6, 0}, {8, 0}, {12, 0}, {13, 1}}
	for _, s := range steps {
		r.Advance(t0.Add(time.Duration(s.wall * float64(time.Second))))
		if got := len(collect(t, r, false)); got != s.want {
			t.Fatalf("at %v s: emitted %d windows, want %d", s.wall, got, s.want)
		}
	}
}

// TestRollupRestore: a rollup killed at any event and restored from the
// snapshot taken at its last emitting flush emits, over both lives, exactly
// what one rollup emits, byte for byte, outputs emitted twice (between the
// snapshot and the kill) being identical.
func TestRollupRestore(t *testing.T) {
	var ds []decisions.Decision
	g := decisiontest.NewGenerator(5, t0)
	for range 3000 {
		ds = append(ds, g.Next())
	}
	// Some events arrive late.
	for i := 100; i < len(ds); i += 97 {
		ds[i].Time = ds[i].Time.Add(-120 * time.Millisecond)
	}
	opts := Options{Window: 50 * time.Millisecond, Lateness: 10 * time.Millisecond}
	type key struct {
		start    string
		from, to uint64
	}
	// run adds events [from, stop) and records every output by key; a key
	// emitted twice must carry the same bytes. It returns the last snapshot.
	run := func(r *Rollup, from, stop int, out map[key][]byte, final bool) []byte {
		snap, err := r.AppendSnapshot(nil)
		if err != nil {
			t.Fatal(err)
		}
		emit := func(o Output) error {
			b := encode(t, o.Partial)
			k := key{o.Partial.Start.Format("15:04:05.000"), o.From, o.To}
			if prev, ok := out[k]; ok && !bytes.Equal(prev, b) {
				t.Errorf("%v emitted twice with different bytes", k)
			}
			out[k] = b
			return nil
		}
		for i := from; i < stop; i++ {
			r.Add(&ds[i], uint64(i))
			before := r.Stats().Windows
			if err := r.Flush(false, emit); err != nil {
				t.Fatal(err)
			}
			if r.Stats().Windows != before {
				if snap, err = r.AppendSnapshot(nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		if final {
			r.Flush(true, emit)
		}
		return snap
	}
	want := map[key][]byte{}
	one := NewRollup(opts)
	run(one, 0, len(ds), want, true)
	if len(want) < 20 || one.Stats().Late == 0 || one.Stats().Corrections == 0 {
		t.Fatalf("the test stream made %d outputs, %d late events", len(want), one.Stats().Late)
	}
	for _, stop := range []int{0, 1, 150, 1001, 2500, 2999} {
		got := map[key][]byte{}
		snap := run(NewRollup(opts), 0, stop, got, false) // then killed
		second := NewRollup(opts)
		if err := second.Restore(snap); err != nil {
			t.Fatal(err)
		}
		run(second, int(second.Next()), len(ds), got, true)
		if len(got) != len(want) {
			t.Errorf("stopped at %d: %d outputs, want %d", stop, len(got), len(want))
		}
		for k, b := range want {
			if g, ok := got[k]; !bytes.Equal(g, b) {
				t.Errorf("stopped at %d: output %v differs (present %v, %d vs %d bytes)", stop, k, ok, len(g), len(b))
			}
		}
	}
}

// TestRefusedFollowsTheSchema: every outcome the edge answers itself is a
// refusal, whatever outcomes the schema gains (rejected, 400, was missed by
// a list of our own).
func TestRefusedFollowsTheSchema(t *testing.T) {
	for o := decisions.Outcome(1); int(o) < decisions.NumOutcomes; o++ {
		if Refused(o) == o.Passed() {
			t.Errorf("%s: refused %v, passed %v", o, Refused(o), o.Passed())
		}
	}
	if !Refused(decisions.Rejected) || Refused(0) {
		t.Error("rejected must be a refusal, the zero outcome not")
	}
}
