package aggregator

import (
	"bytes"
	"fmt"
	"maps"
	"net/netip"
	"testing"
	"time"

	"github.com/axiomhq/hyperloglog"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// summaryOf returns what a Summary should hold of p: its counts summed
// over reasons, and the encoding of its overall distinct clients.
func summaryOf(t *testing.T, p *Partial) (map[SummaryKey]uint64, []byte) {
	t.Helper()
	sums := map[SummaryKey]uint64{}
	for k, n := range p.Counts.Cells {
		sums[SummaryKey{Tier: k.Tier, Rule: k.Rule, Outcome: k.Outcome}] += n
	}
	return sums, sketchBytes(t, p.Clients.All)
}

// sketchBytes returns the encoding of sk as a partial holds it.
func sketchBytes(t *testing.T, sk *hyperloglog.Sketch) []byte {
	t.Helper()
	b, err := appendHLL(nil, sk)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkSummary checks that s holds what p does.
func checkSummary(t *testing.T, what string, s *Summary, p *Partial) {
	t.Helper()
	counts, clients := summaryOf(t, p)
	if len(counts) == 0 || p.Clients.All == nil {
		t.Fatalf("%s: the partial counted nothing", what)
	}
	if !maps.Equal(s.Counts, counts) {
		t.Errorf("%s: %d cells, the partial's summed over reasons %d, or their counts differ", what, len(s.Counts), len(counts))
	}
	if got := sketchBytes(t, s.Clients); !bytes.Equal(got, clients) {
		t.Errorf("%s: distinct clients encode to %d bytes, the partial's to %d (estimates %d and %d)",
			what, len(got), len(clients), Estimate(s.Clients), Estimate(p.Clients.All))
	}
}

// TestSummaryEqualsPartial: a Summary of records decoded with
// SummaryColumns alone (columnar.Decoder.DecodeColumnSet), in record
// sizes and compressions the log writes, and one of the same events
// given one by one, hold the full path's counts (Counts.UpdateColumns
// over every column) summed over reasons, and distinct clients whose
// sketch encodes to the bytes of its Clients.All: over the generator's
// traffic (drop reports and feedback among it), edge cases (IPv6 zones,
// no client), the seed's scrape, and dictionaries too large for the
// arrays with outcomes of a newer writer.
func TestSummaryEqualsPartial(t *testing.T) {
	t.Parallel()
	large := decisiontest.NewGenerator(13, t0).Batch(8000)
	for i := range large {
		if large[i].Kind == decisions.KindDecision {
			large[i].Rule = fmt.Sprintf("%s:/r%d", large[i].Tier, i%3000)
			if i%97 == 0 {
				large[i].Outcome = 200 // unknown to this reader
			}
		}
	}
	traffic := append(decisiontest.NewGenerator(21, t0).Batch(30_000), decisiontest.EdgeCases()...)
	f := func(name string, ds []decisions.Decision, size int, c columnar.Compression, denseWanted bool) {
		t.Helper()
		full, one, cols := NewPartial(t0, time.Hour, 1), &Summary{}, &Summary{}
		enc := columnar.NewEncoder(columnar.Options{Compression: c})
		dec := columnar.NewDecoder()
		var b Batch
		for i := 0; i < len(ds); i += size {
			data, err := enc.Encode(nil, ds[i:min(i+size, len(ds))])
			if err != nil {
				t.Fatal(err)
			}
			if err := dec.DecodeColumns(data, func(c *columnar.Columns) error {
				b.Prepare(c)
				full.Counts.UpdateColumns(&b, 0, b.Len())
				full.Clients.UpdateColumns(&b, 0, b.Len())
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := dec.DecodeColumnSet(data, SummaryColumns, func(c *columnar.Columns) error {
				b.Prepare(c)
				half := b.Len() / 3 // in two calls, as a window cuts a batch
				cols.UpdateColumns(&b, 0, half)
				cols.UpdateColumns(&b, half, b.Len())
				if dense := len(c.Tier.Values)*len(c.Rule.Values) <= maxCells/decisions.NumOutcomes; dense != denseWanted {
					t.Fatalf("%s: dense %v: the test covers another path", name, dense)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range ds {
			one.Update(&ds[i])
		}
		checkSummary(t, name+", columns", cols, full)
		checkSummary(t, name+", events", one, full)
	}
	// Runs of one address (Summary hashes and inserts a run once), the
	// first the unspecified address, whose address is zero.
	runs := scrapeDecisions(10_000)
	for i := range 3 {
		runs[i].ClientIP, runs[i].UserID = netip.IPv4Unspecified(), ""
	}
	f("generator, 3,072 per buffer", traffic, 3072, columnar.Zstd, true)
	f("the seed's scrape", runs, 3072, columnar.Zstd, true)
	f("generator, 1,024 ZstdDict", traffic, 1024, columnar.ZstdDict, true)
	f("large dictionaries", large, 8000, columnar.Zstd, false)
}

// TestSummaryPrepareSubset: a batch decoded with SummaryColumns alone is
// prepared without the columns left out: no times, no indices of reasons,
// nodes or errors.
func TestSummaryPrepareSubset(t *testing.T) {
	data := encodeBatches(t, decisiontest.NewGenerator(3, t0).Batch(500), 500)[0]
	var b Batch
	if err := columnar.NewDecoder().DecodeColumnSet(data, SummaryColumns, func(c *columnar.Columns) error {
		b.Prepare(c)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 500 || len(b.tier) != 500 || len(b.rule) != 500 {
		t.Errorf("%d rows, %d tiers, %d rules: want 500 of each", b.Len(), len(b.tier), len(b.rule))
	}
	if len(b.times)+len(b.reason)+len(b.node)+len(b.respErr) != 0 {
		t.Errorf("columns not decoded were prepared: %d times, %d reasons, %d nodes, %d errors",
			len(b.times), len(b.reason), len(b.node), len(b.respErr))
	}
}

// TestSummaryMerge: the events split by identity into two Summaries,
// merged, equal one Summary of every event, clients byte for byte; split
// by arrival, the counts still do and the clients too (a HyperLogLog
// merges exactly whatever the split).
func TestSummaryMerge(t *testing.T) {
	ds := decisiontest.NewGenerator(4, t0).Batch(20_000)
	var whole Summary
	var byIdentity, byArrival [2]Summary
	for i := range ds {
		d := &ds[i]
		whole.Update(d)
		kb := identityKey(nil, d, 0)
		byIdentity[int(kb[len(kb)-1])%2].Update(d)
		byArrival[i%2].Update(d)
	}
	for name, halves := range map[string]*[2]Summary{"by identity": &byIdentity, "by arrival": &byArrival} {
		if err := halves[0].Merge(&halves[1]); err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(halves[0].Counts, whole.Counts) || len(whole.Counts) == 0 {
			t.Errorf("%s: merged counts differ from the whole's", name)
		}
		if got, want := sketchBytes(t, halves[0].Clients), sketchBytes(t, whole.Clients); !bytes.Equal(got, want) {
			t.Errorf("%s: merged clients encode to %d bytes, the whole's to %d", name, len(got), len(want))
		}
	}
	var empty Summary
	if err := empty.Merge(&whole); err != nil || Estimate(empty.Clients) != Estimate(whole.Clients) {
		t.Errorf("merged into the zero Summary: %v, %d clients, want %d", err, Estimate(empty.Clients), Estimate(whole.Clients))
	}
}
