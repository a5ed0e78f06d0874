package aggregator

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/internal/sat"
)

// CountKey is one cell of the outcome counts.
type CountKey struct {
	Tier    string
	Rule    string
	Outcome decisions.Outcome
	Reason  string
}

// ErrorKey is one cell of the response error counts.
type ErrorKey struct {
	Tier  string
	Rule  string
	Error string // a decisions.Response* value, such as "upstream_timeout"
}

// Counts counts decisions by tier × rule × outcome × reason and by edge node
// × outcome, responses that failed by tier × rule × error, and the drop
// reports and feedback actions of the log. The zero value is ready to use;
// it is not safe for concurrent use.
type Counts struct {
	Cells    map[CountKey]uint64
	ByNode   map[string]*[decisions.NumOutcomes]uint64
	Errors   map[ErrorKey]uint64
	Dropped  uint64            // decisions the edges reported dropped (drops events)
	Feedback map[string]uint64 // feedback actions by "list/action", such as "challenge/add"
}

// Update counts one event.
func (c *Counts) Update(d *decisions.Decision) {
	switch d.Kind {
	case decisions.KindDrops:
		c.Dropped = sat.Add(c.Dropped, d.Dropped)
		return
	case decisions.KindFeedback:
		if c.Feedback == nil {
			c.Feedback = map[string]uint64{}
		}
		c.Feedback[d.List+"/"+d.Action]++
		return
	case decisions.KindDecision:
	default:
		return
	}
	c.add(CountKey{Tier: d.Tier, Rule: d.Rule, Outcome: d.Outcome, Reason: d.Reason}, d.Node, 1)
	if d.ResponseError != "" {
		if c.Errors == nil {
			c.Errors = map[ErrorKey]uint64{}
		}
		c.Errors[ErrorKey{d.Tier, d.Rule, d.ResponseError}]++
	}
}

func (c *Counts) add(k CountKey, node string, n uint64) {
	if c.Cells == nil {
		c.Cells = map[CountKey]uint64{}
		c.ByNode = map[string]*[decisions.NumOutcomes]uint64{}
	}
	c.Cells[k] += n
	byOutcome := c.ByNode[node]
	if byOutcome == nil {
		byOutcome = new([decisions.NumOutcomes]uint64)
		c.ByNode[node] = byOutcome
	}
	byOutcome[OutcomeIndex(k.Outcome)] += n
}

// OutcomeIndex returns o's index in arrays by outcome: o, or 0 for an
// outcome this reader does not know (a newer edge's, kept as its number),
// which Outcome.String names "unknown" as it names 0; so such decisions
// are counted with every total, as outcome "unknown".
func OutcomeIndex(o decisions.Outcome) int {
	if int(o) >= decisions.NumOutcomes {
		return 0
	}
	return int(o)
}

// Merge adds o's counts to c. Counts merge exactly whatever m says.
func (c *Counts) Merge(o *Counts, _ MergeMode) error {
	if len(o.Cells) > 0 && c.Cells == nil {
		c.Cells = map[CountKey]uint64{}
		c.ByNode = map[string]*[decisions.NumOutcomes]uint64{}
	}
	for k, n := range o.Cells {
		c.Cells[k] += n
	}
	for node, src := range o.ByNode {
		if c.ByNode == nil {
			c.ByNode = map[string]*[decisions.NumOutcomes]uint64{}
		}
		dst := c.ByNode[node]
		if dst == nil {
			dst = new([decisions.NumOutcomes]uint64)
			c.ByNode[node] = dst
		}
		for i, n := range src {
			dst[i] += n
		}
	}
	for k, n := range o.Errors {
		if c.Errors == nil {
			c.Errors = map[ErrorKey]uint64{}
		}
		c.Errors[k] += n
	}
	c.Dropped = sat.Add(c.Dropped, o.Dropped) // stored partials are read back: no wrap to a small loss
	for k, n := range o.Feedback {
		if c.Feedback == nil {
			c.Feedback = map[string]uint64{}
		}
		c.Feedback[k] += n
	}
	return nil
}

// Total is the number of decisions counted.
func (c *Counts) Total() uint64 {
	var t uint64
	for _, n := range c.Cells {
		t += n
	}
	return t
}

// ByOutcome sums the cells by outcome.
func (c *Counts) ByOutcome() [decisions.NumOutcomes]uint64 {
	var out [decisions.NumOutcomes]uint64
	for k, n := range c.Cells {
		out[OutcomeIndex(k.Outcome)] += n
	}
	return out
}

// SortedCells returns the cells in a fixed order: tier, rule, outcome, reason.
func (c *Counts) SortedCells() []CountKey {
	keys := make([]CountKey, 0, len(c.Cells))
	for k := range c.Cells {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareCountKeys)
	return keys
}

func compareCountKeys(a, b CountKey) int {
	return cmp.Or(cmp.Compare(a.Tier, b.Tier), cmp.Compare(a.Rule, b.Rule),
		cmp.Compare(a.Outcome, b.Outcome), cmp.Compare(a.Reason, b.Reason))
}

// AppendBinary appends c's encoding: every map in sorted order, so equal
// counts encode to equal bytes. It returns no error.
func (c *Counts) AppendBinary(b []byte) ([]byte, error) {
	keys := c.SortedCells()
	b = appendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k.Tier)
		b = appendString(b, k.Rule)
		b = append(b, byte(k.Outcome))
		b = appendString(b, k.Reason)
		b = appendUvarint(b, c.Cells[k])
	}
	nodes := sortedKeys(c.ByNode)
	b = appendUvarint(b, uint64(len(nodes)))
	for _, node := range nodes {
		b = appendString(b, node)
		for _, n := range c.ByNode[node] {
			b = appendUvarint(b, n)
		}
	}
	errs := make([]ErrorKey, 0, len(c.Errors))
	for k := range c.Errors {
		errs = append(errs, k)
	}
	slices.SortFunc(errs, func(a, b ErrorKey) int {
		return cmp.Or(cmp.Compare(a.Tier, b.Tier), cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Error, b.Error))
	})
	b = appendUvarint(b, uint64(len(errs)))
	for _, k := range errs {
		b = appendString(b, k.Tier)
		b = appendString(b, k.Rule)
		b = appendString(b, k.Error)
		b = appendUvarint(b, c.Errors[k])
	}
	b = appendUvarint(b, c.Dropped)
	fb := sortedKeys(c.Feedback)
	b = appendUvarint(b, uint64(len(fb)))
	for _, k := range fb {
		b = appendString(b, k)
		b = appendUvarint(b, c.Feedback[k])
	}
	return b, nil
}

// decode reads what AppendBinary wrote into c, which must be empty.
func (c *Counts) decode(r *reader) error {
	n := r.count(4)
	for range n {
		k := CountKey{Tier: r.string(), Rule: r.string()}
		k.Outcome = decisions.Outcome(r.byte())
		k.Reason = r.string()
		v := r.uvarint()
		if r.err != nil {
			return r.err
		}
		if c.Cells == nil {
			c.Cells = map[CountKey]uint64{}
		}
		c.Cells[k] += v
	}
	nodes := r.count(1 + decisions.NumOutcomes)
	for range nodes {
		node := r.string()
		var byOutcome [decisions.NumOutcomes]uint64
		for i := range byOutcome {
			byOutcome[i] = r.uvarint()
		}
		if r.err != nil {
			return r.err
		}
		if c.ByNode == nil {
			c.ByNode = map[string]*[decisions.NumOutcomes]uint64{}
		}
		c.ByNode[node] = &byOutcome
	}
	errs := r.count(4)
	for range errs {
		k := ErrorKey{Tier: r.string(), Rule: r.string(), Error: r.string()}
		v := r.uvarint()
		if r.err != nil {
			return fmt.Errorf("decode counts: %w", r.err)
		}
		if c.Errors == nil {
			c.Errors = map[ErrorKey]uint64{}
		}
		c.Errors[k] = v
	}
	c.Dropped = r.uvarint()
	fb := r.count(2)
	for range fb {
		k, v := r.string(), r.uvarint()
		if r.err != nil {
			return r.err
		}
		if c.Feedback == nil {
			c.Feedback = map[string]uint64{}
		}
		c.Feedback[k] = v
	}
	if r.err != nil {
		return fmt.Errorf("decode counts: %w", r.err)
	}
	return nil
}
