package aggregator

import (
	"fmt"

	"github.com/axiomhq/hyperloglog"
	metro "github.com/dgryski/go-metro"

	"github.com/ratewarden/ratewarden/decisions"
)

// Distinct estimates distinct clients with HyperLogLog (precision 14:
// 0.81 % standard error, at most 16 KiB per sketch), overall, among the
// refused, and per tier. A client is its user id when authenticated, else
// its address, as the edge counts it. The zero value is ready to use; it is
// not safe for concurrent use.
type Distinct struct {
	All     *hyperloglog.Sketch
	Refused *hyperloglog.Sketch
	ByTier  map[string]*hyperloglog.Sketch
	scratch []byte
}

// Refused reports whether a decision's outcome refused the request: every
// outcome that did not pass it to the origin (decisions.Outcome.Passed), so
// an outcome added to the schema is classified once, there.
func Refused(o decisions.Outcome) bool {
	return o != 0 && int(o) < decisions.NumOutcomes && !o.Passed()
}

// identityKey appends the bytes that identify d's client: 'u' and the user
// id, or 'a' and the 16-byte address.
func identityKey(b []byte, d *decisions.Decision) []byte { return appendIdentity(b, ClientOf(d)) }

// hashKey is the hash the HyperLogLog library gives an element on
// Insert (MetroHash64, seed 1337): the rollup hashes each client once and
// hands the hash to every sketch (InsertHash) and top-K list, which gives
// the sketches exactly what Insert would.
func hashKey(b []byte) uint64 { return metro.Hash64(b, 1337) }

// Update counts d's client.
func (s *Distinct) Update(d *decisions.Decision) {
	if d.Kind != decisions.KindDecision {
		return
	}
	s.scratch = identityKey(s.scratch[:0], d)
	s.add(hashKey(s.scratch), Refused(d.Outcome), s.tier(d.Tier))
}

// tier returns the sketch of the tier named name, made if needed.
func (s *Distinct) tier(name string) *hyperloglog.Sketch {
	t := s.ByTier[name]
	if t == nil {
		if s.ByTier == nil {
			s.ByTier = map[string]*hyperloglog.Sketch{}
		}
		t = hyperloglog.New14()
		s.ByTier[name] = t
	}
	return t
}

// add counts the client whose key hashes to h, refused or not, in its
// tier's sketch.
func (s *Distinct) add(h uint64, refused bool, tier *hyperloglog.Sketch) {
	if s.All == nil {
		s.All = hyperloglog.New14()
	}
	s.All.InsertHash(h)
	if refused {
		if s.Refused == nil {
			s.Refused = hyperloglog.New14()
		}
		s.Refused.InsertHash(h)
	}
	tier.InsertHash(h)
}

// Merge adds o's clients to s.
func (s *Distinct) Merge(o *Distinct) error {
	if err := mergeHLL(&s.All, o.All); err != nil {
		return err
	}
	if err := mergeHLL(&s.Refused, o.Refused); err != nil {
		return err
	}
	for tier, sk := range o.ByTier {
		if s.ByTier == nil {
			s.ByTier = map[string]*hyperloglog.Sketch{}
		}
		dst := s.ByTier[tier]
		if err := mergeHLL(&dst, sk); err != nil {
			return err
		}
		s.ByTier[tier] = dst
	}
	return nil
}

func mergeHLL(dst **hyperloglog.Sketch, src *hyperloglog.Sketch) error {
	if src == nil {
		return nil
	}
	if *dst == nil {
		*dst = src.Clone()
		return nil
	}
	if err := (*dst).Merge(src); err != nil {
		return fmt.Errorf("merge distinct clients: %w", err)
	}
	return nil
}

// Estimate returns the estimated number of distinct clients in sk (0 for nil).
func Estimate(sk *hyperloglog.Sketch) uint64 {
	if sk == nil {
		return 0
	}
	return sk.Estimate()
}

// AppendBinary appends s's encoding.
func (s *Distinct) AppendBinary(b []byte) ([]byte, error) {
	var err error
	if b, err = appendHLL(b, s.All); err != nil {
		return b, err
	}
	if b, err = appendHLL(b, s.Refused); err != nil {
		return b, err
	}
	tiers := sortedKeys(s.ByTier)
	b = appendUvarint(b, uint64(len(tiers)))
	for _, t := range tiers {
		b = appendString(b, t)
		if b, err = appendHLL(b, s.ByTier[t]); err != nil {
			return b, err
		}
	}
	return b, nil
}

func appendHLL(b []byte, sk *hyperloglog.Sketch) ([]byte, error) {
	if sk == nil {
		return appendUvarint(b, 0), nil
	}
	// The library's encoding is not canonical: it depends on whether a
	// sparse sketch was compacted, and on whether it turned dense. Estimate
	// compacts, and turns dense exactly the sketches whose compacted list
	// is too long, so equal contents encode to equal bytes.
	sk.Estimate()
	p, err := sk.MarshalBinary()
	if err != nil {
		return b, fmt.Errorf("encode distinct clients: %w", err)
	}
	return appendBytes(b, p), nil
}

func (s *Distinct) decode(r *reader) error {
	var err error
	if s.All, err = decodeHLL(r); err != nil {
		return err
	}
	if s.Refused, err = decodeHLL(r); err != nil {
		return err
	}
	n := r.count(2)
	for range n {
		tier := r.string()
		sk, err := decodeHLL(r)
		if err != nil {
			return err
		}
		if s.ByTier == nil {
			s.ByTier = map[string]*hyperloglog.Sketch{}
		}
		s.ByTier[tier] = sk
	}
	return r.err
}

func decodeHLL(r *reader) (*hyperloglog.Sketch, error) {
	p := r.bytes()
	if r.err != nil || len(p) == 0 {
		return nil, r.err
	}
	sk := new(hyperloglog.Sketch)
	if err := sk.UnmarshalBinary(p); err != nil {
		r.fail(err)
		return nil, fmt.Errorf("decode distinct clients: %w", err)
	}
	return sk, nil
}
