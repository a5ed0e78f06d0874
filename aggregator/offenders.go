package aggregator

import (
	"fmt"

	"github.com/ratewarden/ratewarden/decisions"
)

// Offenders are the heaviest clients: by requests and by refusals overall,
// per tier and per rule, and the clients most often challenged and most
// often passed on a challenge token (the CAPTCHA loop: who is challenged
// and never solves). Decisions without a rule (the allow and deny lists
// decide before any rule) have no per-rule lists. The zero value is not usable: use NewOffenders. It is not
// safe for concurrent use.
type Offenders struct {
	k              int
	Requests       *TopK
	Refusals       *TopK
	RequestsByTier map[string]*TopK
	RefusalsByRule map[string]*TopK
	RequestsByRule map[string]*TopK // since partial encoding version 2
	Challenged     *TopK            // outcome challenge; since version 2
	TokenPassed    *TopK            // outcome token_pass; since version 2
	RefusalsByTier map[string]*TopK // since version 3
	// TiersUnlisted names the tiers whose refusals RefusalsByTier may
	// leave out: those that refused requests in a partial of encoding
	// version 1 or 2, which listed no client by refusals per tier,
	// decoded (DecodePartial) or merged in (Merge). A reader shows those
	// tiers' refusals per client as unknown, or as lower bounds. The
	// partial encodes it since its version 4 (Partial.AppendBinary).
	TiersUnlisted map[string]bool
	// order is AppendBinary's scratch, for each list in turn (see
	// TopK.appendBinary).
	order []ranked
}

// NewOffenders returns Offenders whose every TopK holds k clients.
func NewOffenders(k int) *Offenders {
	return &Offenders{k: k, Requests: NewTopK(k), Refusals: NewTopK(k),
		RequestsByTier: map[string]*TopK{}, RefusalsByRule: map[string]*TopK{},
		RequestsByRule: map[string]*TopK{}, Challenged: NewTopK(k), TokenPassed: NewTopK(k),
		RefusalsByTier: map[string]*TopK{}}
}

func (o *Offenders) topk(m map[string]*TopK, key string) *TopK {
	t := m[key]
	if t == nil {
		t = NewTopK(o.k)
		m[key] = t
	}
	return t
}

// Update counts d's client, an IPv6 client by its prefix of
// DefaultIPv6Prefix bits (Partial.Update takes the partial's).
func (o *Offenders) Update(d *decisions.Decision) {
	if d.Kind != decisions.KindDecision {
		return
	}
	c := ClientOf(d, 0)
	o.add(c, hashClient(c), d.Tier, d.Outcome, d.Rule)
}

// add counts one request of c, whose hashClient is h and whose outcome is
// oc, overall, by tier and by rule, and as a refusal, a challenge or a
// token pass.
func (o *Offenders) add(c Client, h uint64, tier string, oc decisions.Outcome, rule string) {
	o.Requests.add(c, h, 1)
	o.topk(o.RequestsByTier, tier).add(c, h, 1)
	if rule != "" {
		o.topk(o.RequestsByRule, rule).add(c, h, 1)
	}
	if Refused(oc) {
		o.Refusals.add(c, h, 1)
		o.topk(o.RefusalsByTier, tier).add(c, h, 1)
		o.topk(o.RefusalsByRule, rule).add(c, h, 1)
	}
	switch oc {
	case decisions.Challenge:
		o.Challenged.add(c, h, 1)
	case decisions.TokenPass:
		o.TokenPassed.add(c, h, 1)
	}
}

// Merge adds p's counts to o; m says whether they counted disjoint
// clients (see TopK.Merge).
func (o *Offenders) Merge(p *Offenders, m MergeMode) error {
	disjoint := m == MergeDisjoint
	for _, l := range [...]struct{ dst, src *TopK }{
		{o.Requests, p.Requests}, {o.Refusals, p.Refusals},
		{o.Challenged, p.Challenged}, {o.TokenPassed, p.TokenPassed},
	} {
		l.dst.Merge(l.src, disjoint)
	}
	for _, m := range [...]struct{ dst, src map[string]*TopK }{
		{o.RequestsByTier, p.RequestsByTier}, {o.RefusalsByTier, p.RefusalsByTier},
		{o.RequestsByRule, p.RequestsByRule}, {o.RefusalsByRule, p.RefusalsByRule},
	} {
		for k, t := range m.src {
			o.topk(m.dst, k).Merge(t, disjoint)
		}
	}
	for tier := range p.TiersUnlisted {
		o.unlisted(tier)
	}
	return nil
}

// unlisted adds tier to TiersUnlisted.
func (o *Offenders) unlisted(tier string) {
	if o.TiersUnlisted == nil {
		o.TiersUnlisted = map[string]bool{}
	}
	o.TiersUnlisted[tier] = true
}

// AppendBinary appends o's encoding: the lists of partial encoding
// version 1 (by requests and by refusals, by requests per tier and by
// refusals per rule), then those version 2 added (by requests per rule,
// the challenged and the token-passing clients), then version 3's (by
// refusals per tier). It returns no error.
func (o *Offenders) AppendBinary(b []byte) ([]byte, error) { return o.appendBinary(b, false), nil }

// appendBinary is AppendBinary with each list's clients in Top order, or
// in the list's own with layout, for a state save (see TopK).
func (o *Offenders) appendBinary(b []byte, layout bool) []byte {
	b = appendUvarint(b, uint64(o.k))
	b = o.Requests.appendBinary(b, &o.order, layout)
	b = o.Refusals.appendBinary(b, &o.order, layout)
	b = o.appendTopKs(b, o.RequestsByTier, layout)
	b = o.appendTopKs(b, o.RefusalsByRule, layout)
	b = o.appendTopKs(b, o.RequestsByRule, layout)
	b = o.Challenged.appendBinary(b, &o.order, layout)
	b = o.TokenPassed.appendBinary(b, &o.order, layout)
	return o.appendTopKs(b, o.RefusalsByTier, layout)
}

// lists calls f with each of o's lists, in the order of appendBinary.
func (o *Offenders) lists(f func(*TopK) error) error {
	for _, l := range [...]any{o.Requests, o.Refusals, o.RequestsByTier, o.RefusalsByRule,
		o.RequestsByRule, o.Challenged, o.TokenPassed, o.RefusalsByTier} {
		switch l := l.(type) {
		case *TopK:
			if err := f(l); err != nil {
				return err
			}
		case map[string]*TopK:
			for _, k := range sortedKeys(l) {
				if err := f(l[k]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// appendFilters appends each list's filter (TopK.appendFilter), in the
// order of appendBinary: what a state save keeps beside the lists' layout
// encoding.
func (o *Offenders) appendFilters(b []byte) []byte {
	_ = o.lists(func(t *TopK) error {
		b = t.appendFilter(b)
		return nil
	})
	return b
}

// decodeFilters reads what appendFilters wrote into o, decoded from its
// layout encoding.
func (o *Offenders) decodeFilters(r *reader) error {
	return o.lists(func(t *TopK) error { return t.decodeFilter(r) })
}

// appendTopKs appends m's lists by name, in sorted order.
func (o *Offenders) appendTopKs(b []byte, m map[string]*TopK, layout bool) []byte {
	keys := sortedKeys(m)
	b = appendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		b = m[k].appendBinary(b, &o.order, layout)
	}
	return b
}

// decodeTopKs reads what appendTopKs wrote into m.
func decodeTopKs(r *reader, m map[string]*TopK) error {
	n := r.count(3)
	for range n {
		key := r.string()
		t, err := decodeTopK(r)
		if err != nil {
			return err
		}
		m[key] = t
	}
	if r.err != nil {
		return fmt.Errorf("decode offenders: %w", r.err)
	}
	return nil
}

// decodeV2 reads the lists partial encoding version 2 added into o.
func (o *Offenders) decodeV2(r *reader) error {
	if err := decodeTopKs(r, o.RequestsByRule); err != nil {
		return err
	}
	var err error
	if o.Challenged, err = decodeTopK(r); err != nil {
		return err
	}
	if o.TokenPassed, err = decodeTopK(r); err != nil {
		return err
	}
	return r.err
}

// decode reads what AppendBinary wrote into o, replacing what it held.
func (o *Offenders) decode(r *reader) error {
	if err := o.decodeV1(r); err != nil {
		return err
	}
	if err := o.decodeV2(r); err != nil {
		return err
	}
	return decodeTopKs(r, o.RefusalsByTier)
}

// decodeV1 reads the lists of partial encoding version 1 into o,
// replacing what it held.
func (o *Offenders) decodeV1(r *reader) error {
	k := r.uvarint()
	if r.err == nil && (k == 0 || k > 1<<20) {
		r.fail(fmt.Errorf("offenders of %d clients", k))
	}
	if r.err != nil {
		return fmt.Errorf("decode offenders: %w", r.err)
	}
	*o = *NewOffenders(int(k))
	var err error
	if o.Requests, err = decodeTopK(r); err != nil {
		return err
	}
	if o.Refusals, err = decodeTopK(r); err != nil {
		return err
	}
	if err := decodeTopKs(r, o.RequestsByTier); err != nil {
		return err
	}
	if err := decodeTopKs(r, o.RefusalsByRule); err != nil {
		return err
	}
	if r.err != nil {
		return fmt.Errorf("decode offenders: %w", r.err)
	}
	return nil
}
