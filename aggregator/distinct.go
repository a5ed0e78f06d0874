package aggregator

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/axiomhq/hyperloglog"
	metro "github.com/dgryski/go-metro"

	"github.com/ratewarden/ratewarden/decisions"
)

// Distinct estimates distinct clients with HyperLogLog (precision 14:
// nearly exact while sparse, up to sparseMax clients; past them dense,
// 0.81 % standard error, 16 KiB per sketch), overall, among the
// refused, per tier, and per rule (decisions with a rule; since partial
// encoding version 2: a credential-stuffing wave is many clients on one
// rule). The sketches by rule are smaller and dense (precision 10: 3.25 %
// standard error, 1 KiB each): a sparse sketch's inserts cost a merge now
// and then, and there are many rules. A client is its user id when authenticated, else
// its address, as the edge counts it. The zero value is ready to use; it is
// not safe for concurrent use.
type Distinct struct {
	All     *hyperloglog.Sketch
	Refused *hyperloglog.Sketch
	ByTier  map[string]*hyperloglog.Sketch
	ByRule  map[string]*hyperloglog.Sketch
	scratch []byte
	// known holds, for the sketches the columnar path inserts into while
	// they may be sparse (All, Refused, by tier), the hashes inserted.
	known map[*hyperloglog.Sketch]*knownHashes
}

// knownHashes is the set of hashes inserted into one HyperLogLog, so that
// a hash it holds is not inserted again: the library's sparse sketch
// collects inserts in a set that it merges into its sorted list once it
// holds m/100 keys, whether or not the list holds them already, a merge
// that walks the whole list (a tenth of the columnar rollup's time). A
// sketch's state depends only on the set of hashes inserted (see
// seenClient), so skipping one it holds changes nothing. Once the sketch
// holds more than sparseMax keys flush makes it dense, and its inserts
// are cheap: the set is dropped (at knownMax hashes whatever the keys).
//
// The columnar path also defers its inserts (add, then flush once a
// call): a sparse sketch merges its pending keys into its sorted list
// every m/100 inserts, a walk of the whole list each time, so that
// filling one key by key cost 280–390 ns an insert for 5,000 keys
// (BenchmarkSketchFill, BENCHMARKS.md), against 5–9 ns for a dense one. Each new
// window's sketches start sparse. flush inserts a call's new hashes into
// a sketch of their own and merges that in: one walk of the list a call,
// a list of at most sparseMax keys.
type knownHashes struct {
	slots   []uint64 // open addressing, linear probing; 0 is empty (the hash 0 is always inserted)
	n       int
	off     bool
	pending []uint64 // added, not yet in the sketch (see flush)
	scratch []byte   // flush's
	settled bool     // flush settled the sketch once (see sparseMax)
}

// knownMax is the register count of a precision-14 sketch: a sparse one
// turns dense when its list holds more keys.
const knownMax = 1 << 14

// insert inserts h into sk unless k holds it.
func (k *knownHashes) insert(sk *hyperloglog.Sketch, h uint64) {
	if k.hold(sk, h) {
		sk.InsertHash(h)
	}
}

// add is insert deferred: sk holds h once flush ran.
func (k *knownHashes) add(sk *hyperloglog.Sketch, h uint64) {
	if k.hold(sk, h) {
		if k.off {
			sk.InsertHash(h)
		} else {
			k.pending = append(k.pending, h)
		}
	}
}

// flushDirect is the fewest pending hashes flush inserts through a sketch
// of their own, rather than one by one.
const flushDirect = 64

// flush inserts the hashes add left pending into sk, their sketch (of
// precision 14, knownMax). Many go in as one sparse sketch holding them
// all in its set of keys not yet merged, made from the library's
// documented encoding (sparsePart), and merged in: the sketch then merges
// them into its list once. The result is the one inserting each makes: a
// sketch's state depends only on the set of hashes inserted (see
// seenClient), and merging sketches of one precision adds their sets.
func (k *knownHashes) flush(sk *hyperloglog.Sketch) {
	if len(k.pending) == 0 {
		return
	}
	if !k.mergePending(sk) {
		for _, h := range k.pending {
			sk.InsertHash(h)
		}
	}
	k.pending = k.pending[:0]
	if k.n > sparseMax || !k.settled {
		// A dense sketch inserts cheaply, and skipping what it holds
		// costs a probe of a set: make the sketch dense once it holds
		// more than sparseMax keys (the set may hold more hashes than the
		// sketch keys, and a sketch restored from a save more keys than
		// the set hashes: settle counts them), and drop the set once it
		// is.
		k.settled = true
		var dense bool
		if k.scratch, dense = settle(sk, k.scratch); dense {
			*k = knownHashes{off: true}
		}
	}
}

// mergePending merges the pending hashes into sk as one sparse sketch of
// their own, when they are flushDirect or more, and reports whether it
// did; otherwise (or if the library refused the sketch, which its tests
// rule out: TestSparseKey) flush inserts them one by one.
func (k *knownHashes) mergePending(sk *hyperloglog.Sketch) bool {
	if len(k.pending) < flushDirect {
		return false
	}
	var part hyperloglog.Sketch
	k.scratch = sparsePart(k.scratch[:0], k.pending)
	return part.UnmarshalBinary(k.scratch) == nil && sk.Merge(&part) == nil
}

// sparseMax is the most keys a precision-14 sketch keeps sparse: one
// holding more is made dense (settle) where it is encoded (appendHLL) or
// estimated (Estimate), and by the columnar path once it inserted more
// hashes. The library keeps a sketch sparse until its list of keys takes
// more than 2^14 bytes, about 11,700 keys, and inserting into a sparse
// sketch costs 10 to 80 times what a dense one does
// (BenchmarkSketchFill, BENCHMARKS.md): in a new window with more than a
// few thousand clients, most of the distinct clients' time. Past 2,048
// keys a dense sketch estimates within 0.81 % (one standard error) where
// the sparse one is nearly exact, and takes 16 KiB where the sparse list
// took 3 to 16 KiB. The rule depends on the set of keys alone, so equal
// contents still encode to equal bytes, wherever they were made.
const sparseMax = 2048

// settle gives sk its canonical form: compacted (Estimate), and dense if
// it is a sparse precision-14 sketch holding more than sparseMax keys. It
// encodes sk into scratch to find out (the encoding states the form and
// the number of keys), and returns scratch and whether sk is dense.
func settle(sk *hyperloglog.Sketch, scratch []byte) ([]byte, bool) {
	sk.Estimate()
	scratch, err := sk.AppendBinary(scratch[:0])
	if err != nil || len(scratch) < 4 {
		return scratch, false // not a sketch the library encodes: left as it is
	}
	if overSparse(scratch) && densify(sk) {
		return scratch, true
	}
	return scratch, scratch[3] == 0
}

// overSparse reports whether enc, a sketch's encoding (version 2:
// version, precision, b and the sparse flag, then the count of the set of
// keys not yet merged and its keys, then the count of merged keys), is a
// sparse precision-14 sketch of more than sparseMax keys. Its set of keys
// not yet merged must be empty, as Estimate leaves it; otherwise it
// reports false.
func overSparse(enc []byte) bool {
	return len(enc) >= 12 && enc[0] == 2 && enc[1] == 14 && enc[3] == 1 &&
		binary.BigEndian.Uint32(enc[4:8]) == 0 && binary.BigEndian.Uint32(enc[8:12]) > sparseMax
}

// densify makes sk, a sparse precision-14 sketch, dense, holding the same
// keys: a dense sketch that merges a sparse one inserts each of its keys'
// register and value, as inserting their hashes would (TestSettle). It
// reports whether it did: the library refuses to merge sketches of two
// precisions, and sk is then left as it was.
func densify(sk *hyperloglog.Sketch) bool {
	d := hyperloglog.NewNoSparse()
	if d.Merge(sk) != nil {
		return false
	}
	*sk = *d
	return true
}

// emptySparse is the encoding of an empty precision-14 sketch: the
// header (version 2, precision, 0, sparse), the count of the set of keys
// not yet merged (4 bytes, 0), then the empty list of merged keys.
var emptySparse = func() []byte {
	b, err := hyperloglog.New14().MarshalBinary()
	if err != nil || len(b) < 8 || b[0] != 2 || b[1] != 14 || b[3] != 1 {
		panic(fmt.Sprintf("the library's encoding changed: % x, %v", b, err))
	}
	return b
}()

// sparsePart appends the encoding of a precision-14 sparse sketch whose
// set of keys not yet merged holds the keys of hs (in any order, which the
// encoding allows; a key twice is one).
func sparsePart(b []byte, hs []uint64) []byte {
	b = append(b, emptySparse[:4]...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(hs)))
	for _, h := range hs {
		b = binary.BigEndian.AppendUint32(b, sparseKey(h))
	}
	return append(b, emptySparse[8:]...)
}

// sparseKey is the key a precision-14 sketch's sparse representation
// holds for the hash x: its index at the sparse precision 25, and, when
// the bits between the two precisions are zero, the count of leading
// zeros after them (the library's encodeHash, which its encoding version
// 2 pins; TestSparseKey holds it to the library).
func sparseKey(x uint64) uint32 {
	const p, pp = 14, 25
	idx := uint32(x >> (64 - pp))
	if idx&(1<<(pp-p)-1) == 0 {
		zeros := bits.LeadingZeros64(x<<pp|(1<<pp-1)) + 1
		return idx<<7 | uint32(zeros<<1) | 1
	}
	return idx << 1
}

// hold adds h to the hashes k holds and reports whether it must go into
// sk, their sketch: when it was missing, or k no longer keeps them (off).
func (k *knownHashes) hold(sk *hyperloglog.Sketch, h uint64) bool {
	if k.off || h == 0 {
		return true
	}
	if 2*(k.n+1) > len(k.slots) {
		if k.n >= knownMax {
			k.flush(sk)
			*k = knownHashes{off: true}
			return true
		}
		old := k.slots
		k.slots = make([]uint64, max(256, 2*len(old)))
		for _, x := range old {
			if x != 0 {
				k.put(x)
			}
		}
	}
	if k.put(h) {
		k.n++
		return true
	}
	return false
}

// put adds h to the slots and reports whether it was missing.
func (k *knownHashes) put(h uint64) bool {
	mask := uint64(len(k.slots) - 1)
	for i := mix64(h) & mask; ; i = (i + 1) & mask {
		switch k.slots[i] {
		case h:
			return false
		case 0:
			k.slots[i] = h
			return true
		}
	}
}

// knownOf returns the set of hashes the columnar path inserted into sk.
func (s *Distinct) knownOf(sk *hyperloglog.Sketch) *knownHashes {
	if s.known == nil {
		s.known = map[*hyperloglog.Sketch]*knownHashes{}
	}
	k := s.known[sk]
	if k == nil {
		k = &knownHashes{}
		s.known[sk] = k
	}
	return k
}

// Refused reports whether a decision's outcome refused the request: every
// outcome that did not pass it to the origin (decisions.Outcome.Passed), so
// an outcome added to the schema is classified once, there.
func Refused(o decisions.Outcome) bool {
	return o != 0 && int(o) < decisions.NumOutcomes && !o.Passed()
}

// identityKey appends the bytes that identify d's client, an IPv6 client
// by its prefix of ipv6Prefix bits (appendIdentity of ClientOf).
func identityKey(b []byte, d *decisions.Decision, ipv6Prefix int) []byte {
	return appendIdentity(b, ClientOf(d, ipv6Prefix))
}

// hashKey is the hash the HyperLogLog library gives an element on
// Insert (MetroHash64, seed 1337): the rollup hashes each client once and
// hands the hash to every sketch (InsertHash) and top-K list, which gives
// the sketches exactly what Insert would.
func hashKey(b []byte) uint64 { return metro.Hash64(b, 1337) }

// Update counts d's client, an IPv6 client by its prefix of
// DefaultIPv6Prefix bits (Partial.Update takes the partial's).
func (s *Distinct) Update(d *decisions.Decision) {
	if d.Kind != decisions.KindDecision {
		return
	}
	s.add(hashClientInto(ClientOf(d, 0), &s.scratch), Refused(d.Outcome), s.tier(d.Tier), s.rule(d.Rule))
}

// tier returns the sketch of the tier named name, made if needed.
func (s *Distinct) tier(name string) *hyperloglog.Sketch {
	return sketchOf(&s.ByTier, name, hyperloglog.New14)
}

// rule returns the sketch of the rule named name, made if needed; nil for
// the empty name.
func (s *Distinct) rule(name string) *hyperloglog.Sketch {
	if name == "" {
		return nil
	}
	return sketchOf(&s.ByRule, name, newRuleSketch)
}

// RulePrecision is the precision of the sketches by rule.
const RulePrecision = 10

func newRuleSketch() *hyperloglog.Sketch {
	sk, err := hyperloglog.NewSketch(RulePrecision, false)
	if err != nil {
		panic(err) // a constant precision the library accepts
	}
	return sk
}

// sketchOf returns (*m)[name], made by newSketch if needed.
func sketchOf(m *map[string]*hyperloglog.Sketch, name string, newSketch func() *hyperloglog.Sketch) *hyperloglog.Sketch {
	t := (*m)[name]
	if t == nil {
		if *m == nil {
			*m = map[string]*hyperloglog.Sketch{}
		}
		t = newSketch()
		(*m)[name] = t
	}
	return t
}

// add counts the client whose key hashes to h, refused or not, in its
// tier's sketch and its rule's (nil: none).
func (s *Distinct) add(h uint64, refused bool, tier, rule *hyperloglog.Sketch) {
	if rule != nil {
		rule.InsertHash(h)
	}
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

// Merge adds o's clients to s. HyperLogLogs merge alike whatever m says.
func (s *Distinct) Merge(o *Distinct, _ MergeMode) error {
	if err := mergeHLL(&s.All, o.All); err != nil {
		return err
	}
	if err := mergeHLL(&s.Refused, o.Refused); err != nil {
		return err
	}
	if err := mergeHLLs(&s.ByTier, o.ByTier); err != nil {
		return err
	}
	return mergeHLLs(&s.ByRule, o.ByRule)
}

// mergeHLLs merges each sketch of src into *dst's of the same name.
func mergeHLLs(dst *map[string]*hyperloglog.Sketch, src map[string]*hyperloglog.Sketch) error {
	for name, sk := range src {
		if *dst == nil {
			*dst = map[string]*hyperloglog.Sketch{}
		}
		d := (*dst)[name]
		if err := mergeHLL(&d, sk); err != nil {
			return err
		}
		(*dst)[name] = d
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

// Estimate returns the estimated number of distinct clients in sk (0 for
// nil), in its canonical form (settle): the estimate its encoding gives
// once decoded. A sparse sketch estimates at least its number of keys, so
// one estimated at sparseMax or fewer is canonical as it is, and so is a
// dense one: only a larger estimate costs an encoding, to tell (the
// dashboard and the reports estimate every partial they read), and only a
// sketch made dense is estimated again.
func Estimate(sk *hyperloglog.Sketch) uint64 {
	if sk == nil {
		return 0
	}
	n := sk.Estimate() // compacts a sparse sketch, as settle does
	if n <= sparseMax {
		return n
	}
	if enc, err := sk.AppendBinary(nil); err == nil && overSparse(enc) && densify(sk) {
		return sk.Estimate()
	}
	return n
}

// AppendBinary appends s's encoding: the sketches of partial encoding
// version 1 (all clients, the refused, by tier), then those version 2
// added (by rule).
func (s *Distinct) AppendBinary(b []byte) ([]byte, error) {
	var err error
	if b, err = appendHLL(b, s.All); err != nil {
		return b, err
	}
	if b, err = appendHLL(b, s.Refused); err != nil {
		return b, err
	}
	if b, err = appendHLLs(b, s.ByTier); err != nil {
		return b, err
	}
	return appendHLLs(b, s.ByRule)
}

// appendHLLs appends m's sketches by name, in sorted order.
func appendHLLs(b []byte, m map[string]*hyperloglog.Sketch) ([]byte, error) {
	names := sortedKeys(m)
	b = appendUvarint(b, uint64(len(names)))
	var err error
	for _, t := range names {
		b = appendString(b, t)
		if b, err = appendHLL(b, m[t]); err != nil {
			return b, err
		}
	}
	return b, nil
}

func appendHLL(b []byte, sk *hyperloglog.Sketch) ([]byte, error) {
	if sk == nil {
		return appendUvarint(b, 0), nil
	}
	// Encoded in place, not copied from MarshalBinary's bytes: the
	// snapshot encodes every open window's sketches at every save.
	b, at := openFrame(b)
	p, err := sk.AppendBinary(b)
	// The library's encoding is not canonical: it depends on whether a
	// sparse sketch was compacted, and on whether it turned dense. Estimate
	// compacts, and turns dense exactly the sketches whose compacted list
	// is too long; past sparseMax keys appendHLL makes the sketch dense
	// (settle's rule); so equal contents encode to equal bytes. A dense
	// sketch's Estimate changes nothing and reads all its registers (half
	// a save's time): a sketch is encoded again after Estimate only if
	// its encoding says sparse (after the version, precision and b bytes,
	// 1; TestHyperLogLogSetOnly fails if that changes).
	if err == nil && len(p) > at+4 && p[at+4] == 1 {
		sk.Estimate()
		if p, err = sk.AppendBinary(b); err == nil && overSparse(p[at+1:]) {
			densify(sk) // past sparseMax keys, dense, as settle makes it
			p, err = sk.AppendBinary(b)
		}
	}
	if err != nil {
		return b[:at], fmt.Errorf("encode distinct clients: %w", err)
	}
	return closeFrame(p, at), nil
}

// decode reads what AppendBinary wrote into s.
func (s *Distinct) decode(r *reader) error {
	if err := s.decodeV1(r); err != nil {
		return err
	}
	return s.decodeV2(r)
}

// decodeV1 reads the sketches of partial encoding version 1 into s.
func (s *Distinct) decodeV1(r *reader) error {
	var err error
	if s.All, err = decodeHLL(r); err != nil {
		return err
	}
	if s.Refused, err = decodeHLL(r); err != nil {
		return err
	}
	return decodeHLLs(r, &s.ByTier)
}

// decodeV2 reads the sketches partial encoding version 2 added into s.
func (s *Distinct) decodeV2(r *reader) error { return decodeHLLs(r, &s.ByRule) }

// decodeHLLs reads what appendHLLs wrote into *m.
func decodeHLLs(r *reader, m *map[string]*hyperloglog.Sketch) error {
	n := r.count(2)
	for range n {
		name := r.string()
		sk, err := decodeHLL(r)
		if err != nil {
			return err
		}
		if *m == nil {
			*m = map[string]*hyperloglog.Sketch{}
		}
		(*m)[name] = sk
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
