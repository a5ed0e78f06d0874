package aggregator

import (
	"encoding/binary"

	"github.com/axiomhq/hyperloglog"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
)

// SummaryKey is one cell of a Summary's counts.
type SummaryKey struct {
	Tier    string
	Rule    string
	Outcome decisions.Outcome
}

// SummaryColumns are the columns a Summary reads: decode a record with
// columnar.Decoder.DecodeColumnSet and these, and under body compression
// the others are not even decompressed.
const SummaryColumns = columnar.ColumnKind | columnar.ColumnTier | columnar.ColumnRule | columnar.ColumnOutcome |
	columnar.ColumnUserID | columnar.ColumnClientIP

// Summary counts decisions by tier, rule and outcome, and estimates how
// many distinct clients made them: a Partial's Counts.Cells summed over
// reasons, and its Clients.All, without the rest of the rollup. It is for
// a reader that needs no more (a report over a range of the log, an
// ad-hoc query) and would otherwise decode every column and keep four
// families of sketches: from records, it reads only SummaryColumns. The
// same events give the same counts as a Partial and a Clients sketch
// that encodes to the same bytes as its Clients.All (a client is its user
// id when authenticated, else its address or IPv6 prefix, and is hashed
// as Distinct hashes it). The zero value is ready to use; it is not safe for
// concurrent use.
type Summary struct {
	Counts  map[SummaryKey]uint64
	Clients *hyperloglog.Sketch // precision 14, as Distinct.All; nil before the first decision

	// IPv6Prefix is the length of the prefix an IPv6 client is counted
	// under, as Partial.IPv6Prefix: 0 takes DefaultIPv6Prefix.
	IPv6Prefix int

	known   knownHashes // the hashes inserted into Clients (see knownHashes)
	scratch []byte
}

// Update counts one event (the events of other kinds are not decisions:
// they are left out).
func (s *Summary) Update(d *decisions.Decision) {
	if d.Kind != decisions.KindDecision {
		return
	}
	s.add(SummaryKey{Tier: d.Tier, Rule: d.Rule, Outcome: d.Outcome}, 1)
	s.scratch = identityKey(s.scratch[:0], d, s.IPv6Prefix)
	s.insert(hashKey(s.scratch))
}

// UpdateColumns counts rows [lo, hi) of b, as Update would count each of
// their events. b needs only SummaryColumns.
//
// It hashes each row's client from the columns rather than find the
// batch's distinct clients first (identify, which the rollup's lists
// need): in the generator's traffic half a batch's rows are distinct
// clients, so finding them cost more than the hashing it saved. A run of
// rows of one IPv4 address, as a scraper's, is hashed and inserted once. BenchmarkColumnsFromLog/zstd-3072, summary and
// summary-scrape, and BENCHMARKS.md: "The query's leg without a table of
// clients".
func (s *Summary) UpdateColumns(b *Batch, lo, hi int) {
	c := b.c
	b.countIPv6Under(s.IPv6Prefix)
	nt, nr := len(c.Tier.Values), len(c.Rule.Values)
	dense := nt*nr <= maxCells/decisions.NumOutcomes
	if dense {
		b.outcomes.grow(nt * nr * decisions.NumOutcomes)
	}
	var (
		last    [4]byte // the last IPv4 address inserted: a run of it is hashed and inserted once
		hasLast bool
	)
	for i := lo; i < hi; i++ {
		if decisions.Kind(c.Kind[i]) != decisions.KindDecision {
			continue
		}
		t, r, o := b.tier[i], b.rule[i], c.Outcome[i]
		if dense && int(o) < decisions.NumOutcomes {
			b.outcomes.inc((int(t)*nr+int(r))*decisions.NumOutcomes + int(o))
		} else {
			s.add(SummaryKey{Tier: c.Tier.Values[t], Rule: c.Rule.Values[r], Outcome: decisions.Outcome(o)}, 1)
		}
		if a, ok := b.v4(i); !ok {
			s.known.add(s.sketch(), hashClientInto(b.client(i), &b.scratch))
		} else if !hasLast || a != last {
			s.known.add(s.sketch(), hashV4(binary.BigEndian.Uint32(a[:])))
			last, hasLast = a, true
		}
	}
	if s.Clients != nil {
		s.known.flush(s.Clients)
	}
	b.outcomes.drain(func(k int, n uint64) {
		tr := k / decisions.NumOutcomes
		s.add(SummaryKey{Tier: c.Tier.Values[tr/nr], Rule: c.Rule.Values[tr%nr], Outcome: decisions.Outcome(k % decisions.NumOutcomes)}, n)
	})
}

func (s *Summary) add(k SummaryKey, n uint64) {
	if s.Counts == nil {
		s.Counts = map[SummaryKey]uint64{}
	}
	s.Counts[k] += n
}

// insert inserts the hash of a client into Clients, made if needed.
func (s *Summary) insert(h uint64) { s.known.insert(s.sketch(), h) }

// sketch returns Clients, made if needed.
func (s *Summary) sketch() *hyperloglog.Sketch {
	if s.Clients == nil {
		s.Clients = hyperloglog.New14()
	}
	return s.Clients
}

// Merge adds o's counts and clients to s.
func (s *Summary) Merge(o *Summary) error {
	for k, n := range o.Counts {
		s.add(k, n)
	}
	return mergeHLL(&s.Clients, o.Clients)
}
