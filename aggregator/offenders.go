package aggregator

import (
	"fmt"

	"github.com/ratewarden/ratewarden/decisions"
)

// Offenders are the heaviest clients: by requests and by refusals overall,
// by requests per tier, by requests and by refusals per rule, and the
// clients most often challenged and most often passed on a challenge token
// (the CAPTCHA loop: who is challenged and never solves). Decisions without
// a rule (the allow and deny lists decide before any rule) have no
// per-rule lists. The zero value is not usable: use NewOffenders. It is not
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
}

// NewOffenders returns Offenders whose every TopK holds k clients.
func NewOffenders(k int) *Offenders {
	return &Offenders{k: k, Requests: NewTopK(k), Refusals: NewTopK(k),
		RequestsByTier: map[string]*TopK{}, RefusalsByRule: map[string]*TopK{},
		RequestsByRule: map[string]*TopK{}, Challenged: NewTopK(k), TokenPassed: NewTopK(k)}
}

func (o *Offenders) topk(m map[string]*TopK, key string) *TopK {
	t := m[key]
	if t == nil {
		t = NewTopK(o.k)
		m[key] = t
	}
	return t
}

// Update counts d's client.
func (o *Offenders) Update(d *decisions.Decision) {
	if d.Kind != decisions.KindDecision {
		return
	}
	c := ClientOf(d)
	o.add(c, hashClient(c), o.topk(o.RequestsByTier, d.Tier), d.Outcome, d.Rule)
}

// add counts one request of c, whose hashClient is h and whose outcome is
// oc, in its tier's list, by rule, and as a refusal, a challenge or a
// token pass.
func (o *Offenders) add(c Client, h uint64, tier *TopK, oc decisions.Outcome, rule string) {
	o.Requests.add(c, h, 1)
	tier.add(c, h, 1)
	if rule != "" {
		o.topk(o.RequestsByRule, rule).add(c, h, 1)
	}
	if Refused(oc) {
		o.Refusals.add(c, h, 1)
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
	o.Requests.Merge(p.Requests, disjoint)
	o.Refusals.Merge(p.Refusals, disjoint)
	for k, t := range p.RequestsByTier {
		o.topk(o.RequestsByTier, k).Merge(t, disjoint)
	}
	for k, t := range p.RefusalsByRule {
		o.topk(o.RefusalsByRule, k).Merge(t, disjoint)
	}
	for k, t := range p.RequestsByRule {
		o.topk(o.RequestsByRule, k).Merge(t, disjoint)
	}
	o.Challenged.Merge(p.Challenged, disjoint)
	o.TokenPassed.Merge(p.TokenPassed, disjoint)
	return nil
}

// AppendBinary appends o's encoding: the lists of partial encoding
// version 1 (appendBinaryV1), then those version 2 added (appendBinaryV2).
// It returns no error.
func (o *Offenders) AppendBinary(b []byte) ([]byte, error) {
	return o.appendBinaryV2(o.appendBinaryV1(b)), nil
}

// appendBinaryV1 appends the lists of partial encoding version 1: by
// requests and by refusals, by requests per tier and by refusals per rule.
func (o *Offenders) appendBinaryV1(b []byte) []byte {
	b = appendUvarint(b, uint64(o.k))
	b = o.Requests.AppendBinary(b)
	b = o.Refusals.AppendBinary(b)
	for _, m := range []map[string]*TopK{o.RequestsByTier, o.RefusalsByRule} {
		keys := sortedKeys(m)
		b = appendUvarint(b, uint64(len(keys)))
		for _, k := range keys {
			b = appendString(b, k)
			b = m[k].AppendBinary(b)
		}
	}
	return b
}

// appendBinaryV2 appends what encoding version 2 added: the requests by
// rule, the challenged and the token-passing clients.
func (o *Offenders) appendBinaryV2(b []byte) []byte {
	keys := sortedKeys(o.RequestsByRule)
	b = appendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		b = o.RequestsByRule[k].AppendBinary(b)
	}
	b = o.Challenged.AppendBinary(b)
	return o.TokenPassed.AppendBinary(b)
}

// decodeV2 reads what appendBinaryV2 wrote into o.
func (o *Offenders) decodeV2(r *reader) error {
	n := r.count(3)
	for range n {
		key := r.string()
		t, err := decodeTopK(r)
		if err != nil {
			return err
		}
		o.RequestsByRule[key] = t
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
	return o.decodeV2(r)
}

// decodeV1 reads what appendBinaryV1 wrote into o, replacing what it held.
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
	for _, m := range []map[string]*TopK{o.RequestsByTier, o.RefusalsByRule} {
		n := r.count(3)
		for range n {
			key := r.string()
			t, err := decodeTopK(r)
			if err != nil {
				return err
			}
			m[key] = t
		}
	}
	if r.err != nil {
		return fmt.Errorf("decode offenders: %w", r.err)
	}
	return nil
}
