package aggregator

import (
	"errors"
	"fmt"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// Partial is the mergeable summary of one window of one source partition:
// every aggregate of the window's events. The zero value is not usable: use
// NewPartial. It is not safe for concurrent use.
type Partial struct {
	Start time.Time     // the window's start, in event time
	Size  time.Duration // the window's length
	// Events is the number of events of any kind in the partial.
	Events    uint64
	Counts    Counts
	Clients   Distinct
	Latency   Latency         // the counter store's
	Upstream  UpstreamLatency // the origin's, to its response headers
	Offenders *Offenders

	// MaxKeys caps the distinct tiers, rules, nodes and reasons the
	// partial keeps apart, each (DefaultMaxKeys when 0): an event with a
	// name past it is counted under OtherKey. Names are admitted in the
	// order of the events, so the same events fold the same names. Merge
	// does not fold: a merged partial holds the names of both. Not
	// encoded.
	MaxKeys int
	// Folded counts the decisions Update and UpdateColumns counted with a
	// name folded into OtherKey. Not encoded.
	Folded uint64
	// BadLatency counts the latencies below 0 (the store's or the
	// origin's) that Update and UpdateColumns left out of the latency
	// sketches: no edge measures one (its clocks are monotonic), so a
	// record carrying one is hand-made or damaged. Their decisions are
	// counted. Not encoded.
	BadLatency uint64
	// IPv6Prefix is the length of the prefix Update and UpdateColumns
	// count an IPv6 client under in the top-K lists and the distinct
	// clients, as the edge counts it (identity.ipv6_prefix): 0 takes
	// DefaultIPv6Prefix, 128 counts each address. Not encoded: each
	// client of a list carries its own (Client.Bits).
	IPv6Prefix int

	keySets *keySets           // see keys
	scratch decisions.Decision // foldDecision's
}

// NewPartial returns an empty partial of the window [start, start+size)
// whose top-K lists hold k clients.
func NewPartial(start time.Time, size time.Duration, k int) *Partial {
	return &Partial{Start: start.UTC(), Size: size, Offenders: NewOffenders(k)}
}

// End is the end of the window, exclusive.
func (p *Partial) End() time.Time { return p.Start.Add(p.Size) }

// parts returns p's aggregates, in the order of the encoding.
func (p *Partial) parts() [5]part {
	return [5]part{&p.Counts, &p.Clients, &p.Latency, &p.Upstream, p.Offenders}
}

// Update adds one event. It calls each aggregate's own update rather than
// their Update, to hash the client once for all of them.
func (p *Partial) Update(d *decisions.Decision) {
	p.Events++
	if d.Kind == decisions.KindDecision {
		d = p.foldDecision(d)
	}
	p.Counts.Update(d)
	if d.Kind != decisions.KindDecision {
		return
	}
	p.Latency.Add(d.StoreLatency)
	p.Upstream.Add(d.UpstreamLatency)
	if d.StoreLatency < 0 {
		p.BadLatency++
	}
	if d.UpstreamLatency < 0 {
		p.BadLatency++
	}
	// The client is hashed once, for the sketches and the top-K lists.
	c := ClientOf(d, p.IPv6Prefix)
	h := hashClientInto(c, &p.Clients.scratch)
	p.Clients.add(h, Refused(d.Outcome), p.Clients.tier(d.Tier), p.Clients.rule(d.Rule))
	p.Offenders.add(c, h, d.Tier, d.Outcome, d.Rule)
}

// Merge adds q's events to p. Partials of different lengths do not merge;
// partials of different starts do (a reader merging a time range).
// disjoint says p and q counted disjoint clients, as partials of two
// Kinesis shards do (the edge partitions records by identity): their top-K
// lists then merge without widening their error bounds.
func (p *Partial) Merge(q *Partial, disjoint bool) error {
	if p.Size != q.Size {
		return fmt.Errorf("merge partials: windows of %v and %v", p.Size, q.Size)
	}
	p.Events += q.Events
	p.keySets = nil // rebuilt from the merged counts when next needed
	m := mergeMode(disjoint)
	if err := p.Counts.Merge(&q.Counts, m); err != nil {
		return err
	}
	if err := p.Clients.Merge(&q.Clients, m); err != nil {
		return err
	}
	if err := p.Latency.Merge(&q.Latency, m); err != nil {
		return err
	}
	if err := p.Upstream.Merge(&q.Upstream, m); err != nil {
		return err
	}
	if err := p.Offenders.Merge(q.Offenders, m); err != nil {
		return err
	}
	if q.Start.Before(p.Start) {
		p.Start = q.Start
	}
	return nil
}

// partialMagic starts every encoded partial; the byte after it is the
// encoding's version.
const partialMagic = "RWP"

// partialVersion is the version AppendBinary writes: after the magic, the
// version, the window's start, its length and the events, each aggregate's
// encoding whole, in the order of parts, then the tiers whose refusals by
// tier are unlisted (Offenders.TiersUnlisted), sorted, then the CRC-32C of
// all that, magic and version included (appendSum). Versions 1 and 2, which DecodePartial still reads, wrote
// each aggregate's version 1 part in that order, then (version 2) the
// distinct clients by rule, the requests by rule and the challenged and
// token-passing clients; version 3 added the refusals by tier, which
// partials of the earlier versions have empty (and their refusing tiers
// unlisted), as version 1's have the lists of version 2; version 4 the
// unlisted tiers, which version 3 lost when it encoded a partial that held
// some (a window of an earlier version restored from a state and
// emitted); version 5 the checksum, without which a flipped bit that left
// the bytes well formed (a count's varint, a client's name) was read as
// other figures. Versions 1 to 4 have none. Version 6 gives each client of
// a top-K list its prefix length (Client.Bits) after its address: a list
// of version 5 or earlier holds addresses alone.
const partialVersion = 6

// AppendBinary appends p's encoding. Equal partials encode to equal bytes.
func (p *Partial) AppendBinary(b []byte) ([]byte, error) { return p.appendBinary(b, false) }

// appendBinary is AppendBinary with, when layout, the top-K lists in
// their own order (see TopK).
func (p *Partial) appendBinary(b []byte, layout bool) ([]byte, error) {
	start := len(b)
	b = append(b, partialMagic...)
	b = append(b, partialVersion)
	b = appendUvarint(b, uint64(p.Start.UnixNano()))
	b = appendUvarint(b, uint64(p.Size))
	b = appendUvarint(b, p.Events)
	var err error
	parts := p.parts()
	for _, a := range parts[:len(parts)-1] { // the lists, last, below
		if b, err = a.AppendBinary(b); err != nil {
			return b, err
		}
	}
	b = p.Offenders.appendBinary(b, layout)
	unlisted := sortedKeys(p.Offenders.TiersUnlisted)
	b = appendUvarint(b, uint64(len(unlisted)))
	for _, tier := range unlisted {
		b = appendString(b, tier)
	}
	return appendSum(b, start), nil
}

// appendPartial appends p's encoding as appendBytes would, encoded in
// place (see openFrame): a state holds every open window's partial and
// is saved at every batch. With layout, p's top-K lists are in their own
// order (see TopK), as a window still open must be saved to evict as it
// would have once restored.
func appendPartial(b []byte, p *Partial, layout bool) ([]byte, error) {
	b, at := openFrame(b)
	b, err := p.appendBinary(b, layout)
	if err != nil {
		return b[:at], err
	}
	return closeFrame(b, at), nil
}

// DecodePartial reads a partial AppendBinary wrote, of any version. It
// refuses one of version 5 or later whose checksum does not match.
func DecodePartial(b []byte) (*Partial, error) {
	if len(b) < len(partialMagic)+1 || string(b[:len(partialMagic)]) != partialMagic {
		return nil, errors.New("decode partial: not a partial")
	}
	v := b[len(partialMagic)]
	if v < 1 || v > partialVersion {
		return nil, fmt.Errorf("decode partial: version %d, want 1 to %d", v, partialVersion)
	}
	if v >= 5 {
		if len(b) < len(partialMagic)+1+sumLen {
			return nil, errors.New("decode partial: cut short")
		}
		var ok bool
		if b, ok = checkSum(b); !ok {
			return nil, errors.New("decode partial: checksum mismatch")
		}
	}
	r := &reader{b: b[len(partialMagic)+1:], addrsOnly: v < 6}
	p := &Partial{Offenders: new(Offenders)}
	p.Start = time.Unix(0, int64(r.uvarint())).UTC()
	p.Size = time.Duration(r.uvarint())
	p.Events = r.uvarint()
	if r.err == nil && p.Size <= 0 {
		r.fail(errors.New("window length not positive"))
	}
	if r.err != nil {
		return nil, fmt.Errorf("decode partial: %w", r.err)
	}
	var err error
	if v >= 3 {
		for _, a := range p.parts() {
			if err = a.decode(r); err != nil {
				break
			}
		}
		if err == nil && v >= 4 {
			for range r.count(1) {
				p.Offenders.unlisted(r.string())
			}
			if err = r.err; err != nil {
				err = fmt.Errorf("unlisted tiers: %w", err)
			}
		}
	} else {
		err = p.decodeV2(r, v)
	}
	if err != nil {
		return nil, fmt.Errorf("decode partial: %w", err)
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("decode partial: %d bytes after the end", len(r.b))
	}
	return p, nil
}

// decodeV2 reads the aggregates of a partial of encoding version v, 1 or
// 2, into p, and names the tiers that refused requests unlisted
// (Offenders.TiersUnlisted): these versions kept no refusals per tier.
func (p *Partial) decodeV2(r *reader, v byte) error {
	steps := []func(*reader) error{p.Counts.decode, p.Clients.decodeV1, p.Latency.decode,
		p.Upstream.decode, p.Offenders.decodeV1}
	if v >= 2 {
		steps = append(steps, p.Clients.decodeV2, p.Offenders.decodeV2)
	}
	for _, decode := range steps {
		if err := decode(r); err != nil {
			return err
		}
	}
	for k, n := range p.Counts.Cells {
		if n > 0 && Refused(k.Outcome) {
			p.Offenders.unlisted(k.Tier)
		}
	}
	return nil
}
