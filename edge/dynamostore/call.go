package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratewarden/ratewarden/edge/limit"
)

// Item attributes besides the key and the TTL.
const (
	attrCount  = "c" // fixed window, sliding window (current), concurrency
	attrPrev   = "p" // sliding window: the previous window's count
	attrWindow = "w" // sliding window: the current window's index
	attrTAT    = "t" // token bucket: theoretical arrival time, unix ns
)

const lo32 = 1<<32 - 1

// ttlNames maps the placeholder of TTLAttribute, a reserved word.
var ttlNames = map[string]string{"#ttl": TTLAttribute}

// call is one Take: the state it works out of the item and the updates it
// sends.
type call struct {
	s    *Store
	rule *limit.Rule
	now  int64
	n    int64
	idx  int64  // fixed window: the window the key names
	hint uint64 // sliding window, token bucket: the key's hash in the hints
	key  map[string]types.AttributeValue
}

// derivation says how an update's success tells the state it found.
type derivation uint8

const (
	// fromReturned: decode the returned attributes and subtract delta
	// from the counter the update added it to.
	fromReturned derivation = iota
	// fromRolled: a sliding window rolled over; the returned p is the
	// count of the window before.
	fromRolled
	// fromKnown: the condition pinned the state to op.old, or to a state
	// with the same outcome.
	fromKnown
)

// op is one conditional UpdateItem.
type op struct {
	update, cond string
	ttl          bool              // the expressions name #ttl
	names        map[string]string // the placeholders, when not only #ttl
	vals         map[string]types.AttributeValue
	ret          types.ReturnValue
	derive       derivation
	delta        int64
	old          limit.State
	// refuses is, for an update that adds to a fixed-window or concurrency
	// count, the least count its condition fails on: the failure itself
	// shows the hits refused, whatever the count read afterwards.
	refuses int64
}

func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// run sends updates until one succeeds or the state shows that none is
// needed.
func (c *call) run(ctx context.Context) (limit.Result, error) {
	var (
		old   limit.State
		found bool // the item exists
		known bool // old and found describe the item
		cas   bool // the update fitting old failed on old itself
	)
	for sent := 0; ; {
		var o op
		if known {
			next := old
			res := c.rule.Take(&next, c.now, c.n)
			if !c.changed(old, next) {
				c.remember(old)
				return res, nil
			}
			var ok bool
			if !cas {
				o, ok = c.fit(old, found, next)
			}
			if !ok {
				o = c.compareAndSet(old, found, next)
			}
		} else {
			var ok bool
			if o, ok = c.first(); !ok {
				item, err := c.read(ctx)
				if err != nil {
					return limit.Result{}, err
				}
				if old, found, err = c.decode(item); err != nil {
					return limit.Result{}, err
				}
				known = true
				continue
			}
		}
		if sent == c.s.attempts {
			return limit.Result{}, fmt.Errorf("%d conditional updates failed: the item kept changing", sent)
		}
		sent++
		attrs, failed, err := c.update(ctx, &o)
		if err != nil {
			return limit.Result{}, err
		}
		if !failed {
			before, err := c.derive(&o, attrs)
			if err != nil {
				return limit.Result{}, err
			}
			next := before
			res := c.rule.Take(&next, c.now, c.n)
			c.remember(next)
			return res, nil
		}
		if c.s.readAfter {
			if attrs, err = c.read(ctx); err != nil {
				return limit.Result{}, err
			}
		}
		st, ok, err := c.decode(attrs)
		if err != nil {
			return limit.Result{}, err
		}
		if o.refuses > 0 && st.B < o.refuses {
			// Read after the failure, the count had gone down since
			// (releases, refunds): the hits were refused when they were
			// tried, and would be refused at the least count that refuses
			// them; trying again could go on as long as the count swings.
			st.B, ok = o.refuses, true
		}
		// An update chosen for this very state that failed on it cannot
		// succeed: only compare-and-set is left.
		cas = known && st == old && ok == found
		old, found, known = st, ok, true
	}
}

// update sends o. failed reports a failed condition, with the item as it
// was if the service returned it.
func (c *call) update(ctx context.Context, o *op) (attrs map[string]types.AttributeValue, failed bool, err error) {
	in := &dynamodb.UpdateItemInput{
		TableName:                           c.s.table,
		Key:                                 c.key,
		UpdateExpression:                    aws.String(o.update),
		ConditionExpression:                 aws.String(o.cond),
		ExpressionAttributeValues:           o.vals,
		ReturnValues:                        o.ret,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	switch {
	case o.names != nil:
		in.ExpressionAttributeNames = o.names
	case o.ttl:
		in.ExpressionAttributeNames = ttlNames
	}
	c.s.updates.Add(1)
	out, err := c.s.api.UpdateItem(ctx, in)
	if err == nil {
		return out.Attributes, false, nil
	}
	if ccf, ok := errors.AsType[*types.ConditionalCheckFailedException](err); ok {
		c.s.condFailures.Add(1)
		return ccf.Item, true, nil
	}
	return nil, false, fmt.Errorf("update item: %w", err)
}

// read returns the item, read consistently; nil if there is none.
func (c *call) read(ctx context.Context) (map[string]types.AttributeValue, error) {
	c.s.reads.Add(1)
	out, err := c.s.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: c.s.table, Key: c.key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("get item: %w", err)
	}
	return out.Item, nil
}

// remember keeps st as the key's hint.
func (c *call) remember(st limit.State) {
	if c.hint != 0 {
		c.s.hints.put(c.hint, st.A, st.B)
	}
}

// getNum returns the integer attribute name of item, and whether it is there.
func getNum(item map[string]types.AttributeValue, name string) (int64, bool, error) {
	v, ok := item[name]
	if !ok {
		return 0, false, nil
	}
	nv, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, false, fmt.Errorf("attribute %s is %T, want a number", name, v)
	}
	x, err := strconv.ParseInt(nv.Value, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("attribute %s: %w", name, err)
	}
	return x, true, nil
}

// getCount is getNum for a count, which is 0 to 2³²-1.
func getCount(item map[string]types.AttributeValue, name string) (int64, bool, error) {
	x, ok, err := getNum(item, name)
	if err == nil && (x < 0 || x > lo32) {
		err = fmt.Errorf("attribute %s is %d, want 0 to %d", name, x, int64(lo32))
	}
	return x, ok, err
}

// decode returns the state an item holds, and whether it exists; a missing
// item is the zero State (for a fixed window, a window with no hits).
func (c *call) decode(item map[string]types.AttributeValue) (limit.State, bool, error) {
	switch c.rule.Algorithm {
	case limit.FixedWindow:
		n, ok, err := getNum(item, attrCount)
		if err == nil && n < 0 {
			err = fmt.Errorf("attribute %s is %d, want at least 0", attrCount, n)
		}
		return limit.State{A: c.idx, B: n}, ok, err
	case limit.TokenBucket:
		t, ok, err := getNum(item, attrTAT)
		return limit.State{A: t}, ok, err
	}
	w, ok, err := getNum(item, attrWindow)
	if err != nil || !ok {
		return limit.State{}, false, err
	}
	p, _, err := getCount(item, attrPrev)
	if err != nil {
		return limit.State{}, false, err
	}
	cur, _, err := getCount(item, attrCount)
	if err != nil {
		return limit.State{}, false, err
	}
	return limit.State{A: w, B: p<<32 | cur}, true, nil
}

// derive returns the state o found, from the attributes it returned.
func (c *call) derive(o *op, attrs map[string]types.AttributeValue) (limit.State, error) {
	switch o.derive {
	case fromKnown:
		return o.old, nil
	case fromRolled:
		st, _, err := c.decode(attrs)
		// The returned p is the count the rolled-over window had.
		return limit.State{A: st.A - 1, B: st.B >> 32}, err
	}
	if c.rule.Algorithm == limit.TokenBucket {
		t, ok, err := getNum(attrs, attrTAT)
		if err == nil && !ok {
			err = errors.New("update returned no " + attrTAT)
		}
		return limit.State{A: t - o.delta}, err
	}
	if c.rule.Algorithm == limit.SlidingWindow {
		st, ok, err := c.decode(attrs)
		if err == nil && !ok {
			err = errors.New("update returned no " + attrWindow)
		}
		return limit.State{A: st.A, B: st.B - o.delta}, err
	}
	n, ok, err := getNum(attrs, attrCount)
	if err == nil && !ok {
		err = errors.New("update returned no " + attrCount)
	}
	return limit.State{A: c.idx, B: n - o.delta}, err
}

// changed reports whether the hit changes what the item must hold: next
// is old after the hit.
func (c *call) changed(old, next limit.State) bool {
	switch c.rule.Algorithm {
	case limit.TokenBucket:
		return max(old.A, c.now) != max(next.A, c.now)
	case limit.SlidingWindow:
		cur := old.B & lo32
		if next.A != old.A {
			cur = 0 // the hit rolled the windows over
		}
		return next.B&lo32 != cur
	}
	return old.B != next.B
}

// first returns the update to try before the state is known, or false when
// the store must read the item first: for a hit that records nothing
// whatever the state.
func (c *call) first() (op, bool) {
	r, n := c.rule, c.n
	if n == 0 {
		return op{}, false
	}
	switch r.Algorithm {
	case limit.FixedWindow:
		if n > 0 && r.MaxCount > 0 {
			if n > r.MaxCount {
				return op{}, false
			}
			return c.add(r.MaxCount - n), true
		}
		return c.add(math.MaxInt64), true
	case limit.TokenBucket:
		if n < 0 {
			return c.refund()
		}
		if r.MaxCount > 0 && n > r.MaxCount {
			return op{}, false
		}
		if tat, _, ok := c.s.hints.get(c.hint); ok && tat > c.now {
			if o, ok := c.busy(); ok {
				return o, true
			}
		}
		next := limit.State{}
		r.Take(&next, c.now, n)
		return c.idle(next.A), true
	}
	if n > 0 && r.MaxCount > 0 && n > r.MaxCount {
		return op{}, false
	}
	w := c.now / int64(r.Window)
	if hw, hb, ok := c.s.hints.get(c.hint); ok {
		switch hw {
		case w, w + 1: // the hint's window, or the one after a late hit's
			return c.same(hw, hb>>32&lo32)
		case w - 1:
			if n > 0 {
				return c.roll(w)
			}
		}
	}
	if n < 0 {
		return c.same(w, 0)
	}
	return c.fresh(w)
}

// fit returns the update for a hit that turns old into next, conditioned on
// the item being in the same regime (same window, bucket busy or idle) so
// that it also succeeds after concurrent hits that kept it there; false if
// only compare-and-set fits.
func (c *call) fit(old limit.State, found bool, next limit.State) (op, bool) {
	r, n := c.rule, c.n
	switch r.Algorithm {
	case limit.FixedWindow:
		if n < 0 && old.B < -n {
			return c.drain(), true
		}
		bound := int64(math.MaxInt64)
		if n > 0 && r.MaxCount > 0 {
			bound = r.MaxCount - n
		}
		return c.add(bound), true
	case limit.TokenBucket:
		switch {
		case n < 0 && next.A > c.now:
			return c.refund()
		case n < 0:
			return c.empty(), true
		case !found || old.A <= c.now:
			return c.idle(next.A), true
		}
		return c.busy()
	}
	switch {
	case found && next.A == old.A:
		return c.same(old.A, old.B>>32&lo32)
	case n < 0:
		return op{}, false
	case found && next.A == old.A+1:
		return c.roll(next.A)
	}
	return c.fresh(next.A)
}

// add is ADD c :n for a fixed window's counter, conditioned on c <= bound
// for n > 0 (bound ≥ 0), on c >= -n for n < 0.
func (c *call) add(bound int64) op {
	o := op{update: "ADD c :n SET #ttl = if_not_exists(#ttl, :ttl)", ttl: true, ret: types.ReturnValueUpdatedNew, delta: c.n,
		vals: map[string]types.AttributeValue{":n": num(c.n), ":ttl": num(seconds((c.idx + 1) * int64(c.rule.Window)))}}
	if c.n < 0 {
		o.cond = "c >= :b"
		o.vals[":b"] = num(-c.n)
		return o
	}
	bound = min(bound, math.MaxInt64-c.n) // no count passes 2⁶³-1
	o.cond = "attribute_not_exists(c) OR c <= :b"
	o.vals[":b"] = num(bound)
	o.refuses = bound + 1
	return o
}

// drain sets a fixed window's counter that holds fewer than n < 0 refunds
// to 0; the result is the same for any such count.
func (c *call) drain() op {
	return op{update: "SET c = :z", cond: "c < :b", ret: types.ReturnValueNone, derive: fromKnown,
		old:  limit.State{A: c.idx},
		vals: map[string]types.AttributeValue{":z": num(0), ":b": num(-c.n)}}
}

// interval is the token bucket's emission interval, as package limit
// computes it.
func (c *call) interval() int64 { return max(int64(c.rule.Window)/max(c.rule.Limit, 1), 1) }

// idle sets the arrival time of a bucket that is idle (no t, or t <= now)
// to tat.
func (c *call) idle(tat int64) op {
	return op{
		update: "SET t = :t, #ttl = :ttl", cond: "attribute_not_exists(t) OR t <= :now", ttl: true,
		ret: types.ReturnValueNone, derive: fromKnown,
		vals: map[string]types.AttributeValue{":t": num(tat), ":ttl": num(seconds(tat)), ":now": num(c.now)},
	}
}

// busy adds n intervals to the arrival time of a busy bucket (t > now),
// conditioned on the hits being recorded (within MaxCount) and on t not
// passing 2⁶³-1; false if no busy bucket could record them.
func (c *call) busy() (op, bool) {
	r, n, t := c.rule, c.n, c.interval()
	if n > math.MaxInt64/t {
		return op{}, false
	}
	d := n * t
	lim := int64(math.MaxInt64) - d
	byMax := false
	if r.MaxCount > 0 {
		// ⌈(tat-now)/t⌉ + n <= MaxCount ⟺ tat <= now + (MaxCount-n)×t.
		if k := r.MaxCount - n; k <= (math.MaxInt64-c.now)/t {
			if m := c.now + k*t; m <= lim {
				lim, byMax = m, true
			}
		}
	}
	if lim <= c.now {
		return op{}, false
	}
	o := op{cond: "t > :now AND t <= :lim", ttl: true, ret: types.ReturnValueUpdatedNew, delta: d,
		vals: map[string]types.AttributeValue{":d": num(d), ":now": num(c.now), ":lim": num(lim)}}
	if byMax {
		// The arrival time ends at most at lim+d.
		o.update = "ADD t :d SET #ttl = :ttl"
		o.vals[":ttl"] = num(seconds(lim + d))
	} else {
		// Unbounded: move the TTL by at least as much as the arrival time.
		o.update = "ADD t :d, #ttl :ds"
		o.vals[":ds"] = num(seconds(d))
	}
	return o, true
}

// refund takes n < 0 intervals off a busy bucket's arrival time, for a
// bucket that stays busy or just drains; false if it cannot.
func (c *call) refund() (op, bool) {
	t := c.interval()
	if -c.n > (math.MaxInt64-c.now)/t {
		return op{}, false
	}
	d := c.n * t
	// tat + d >= now ⟺ tat >= now - d: the bucket keeps tat+d; below, it
	// empties to now, which a busy bucket is set to and an idle one is.
	return op{update: "ADD t :d", cond: "t >= :lim", ret: types.ReturnValueUpdatedNew, delta: d,
		vals: map[string]types.AttributeValue{":d": num(d), ":lim": num(c.now - d)}}, true
}

// empty sets the arrival time of a bucket that n < 0 refunds empty to now;
// the result is the same for any such bucket.
func (c *call) empty() op {
	t := c.interval()
	lim := int64(math.MaxInt64)
	if -c.n <= (math.MaxInt64-c.now)/t {
		lim = c.now - c.n*t
	}
	return op{update: "SET t = :now", cond: "t > :now AND t <= :lim", ret: types.ReturnValueNone, derive: fromKnown,
		old:  limit.State{A: c.now},
		vals: map[string]types.AttributeValue{":now": num(c.now), ":lim": num(lim)}}
}

// same adds n to the current count of a sliding window whose item is in
// window w with previous count prev, conditioned on the hits being
// recorded uncapped: within MaxCount given prev's weight, and within 2³²-1.
func (c *call) same(w, prev int64) (op, bool) {
	r, n := c.rule, c.n
	o := op{update: "ADD c :n", ret: types.ReturnValueAllNew, delta: n,
		vals: map[string]types.AttributeValue{":n": num(n), ":w": num(w)}}
	if n < 0 {
		o.cond = "w = :w AND c >= :b"
		o.vals[":b"] = num(-n)
		return o, true
	}
	bound := lo32 - n
	if r.MaxCount > 0 {
		bound = min(bound, r.MaxCount-n-weight(prev, int64(r.Window), max(c.now-w*int64(r.Window), 0)))
		o.cond = "w = :w AND p = :p AND c <= :b"
		o.vals[":p"] = num(prev)
	} else {
		o.cond = "w = :w AND c <= :b"
	}
	if bound < 0 {
		return op{}, false
	}
	o.update = "ADD c :n SET #ttl = :ttl"
	o.ttl = true
	o.vals[":b"] = num(bound)
	o.vals[":ttl"] = num(seconds((w + 2) * int64(r.Window)))
	return o, true
}

// roll moves a sliding window's item from window w-1 into w: the current
// count becomes the previous one and n the current one, conditioned on the
// previous count leaving room for n within MaxCount.
func (c *call) roll(w int64) (op, bool) {
	r, n := c.rule, c.n
	if n > lo32 {
		return op{}, false
	}
	win := int64(r.Window)
	bound := int64(lo32)
	if r.MaxCount > 0 {
		bound = maxPrev(r.MaxCount-n, win, c.now-w*win)
		if bound < 0 {
			return op{}, false
		}
	}
	return op{
		update: "SET p = c, c = :n, w = :w, #ttl = :ttl", cond: "w = :pw AND c <= :b", ttl: true,
		ret: types.ReturnValueAllNew, derive: fromRolled,
		vals: map[string]types.AttributeValue{":n": num(n), ":w": num(w), ":pw": num(w - 1), ":b": num(bound),
			":ttl": num(seconds((w + 2) * win))},
	}, true
}

// fresh starts a sliding window's item in window w, for a key with no item
// or one last counted two or more windows before (or after: a clock that
// went back).
func (c *call) fresh(w int64) (op, bool) {
	r, n := c.rule, c.n
	if n > lo32 || (r.MaxCount > 0 && n > r.MaxCount) {
		return op{}, false
	}
	return op{
		update: "SET w = :w, p = :z, c = :n, #ttl = :ttl", cond: "attribute_not_exists(w) OR w < :pw OR w > :nw", ttl: true,
		ret: types.ReturnValueNone, derive: fromKnown,
		vals: map[string]types.AttributeValue{":n": num(n), ":w": num(w), ":z": num(0), ":pw": num(w - 1), ":nw": num(w + 1),
			":ttl": num(seconds((w + 2) * int64(r.Window)))},
	}, true
}

// compareAndSet writes next over exactly old, the fallback for what the
// regime updates do not cover: refunds of sliding windows, counts at 2³²-1,
// arrival times at 2⁶³-1.
func (c *call) compareAndSet(old limit.State, found bool, next limit.State) op {
	o := op{ret: types.ReturnValueNone, derive: fromKnown, old: old, vals: map[string]types.AttributeValue{}}
	win := int64(c.rule.Window)
	switch c.rule.Algorithm {
	case limit.FixedWindow:
		o.update, o.cond = "SET c = :c", "c = :oc"
		if !found {
			o.cond = "attribute_not_exists(c)"
		} else {
			o.vals[":oc"] = num(old.B)
		}
		o.vals[":c"] = num(next.B)
	case limit.TokenBucket:
		o.update, o.cond, o.ttl = "SET t = :t, #ttl = :ttl", "t = :ot", true
		if !found {
			o.cond = "attribute_not_exists(t)"
		} else {
			o.vals[":ot"] = num(old.A)
		}
		o.vals[":t"] = num(next.A)
		o.vals[":ttl"] = num(seconds(max(next.A, c.now)))
	default:
		o.update, o.cond, o.ttl = "SET w = :w, p = :p, c = :c, #ttl = :ttl", "w = :ow AND p = :op AND c = :oc", true
		if !found {
			o.cond = "attribute_not_exists(w)"
		} else {
			o.vals[":ow"] = num(old.A)
			o.vals[":op"] = num(old.B >> 32 & lo32)
			o.vals[":oc"] = num(old.B & lo32)
		}
		o.vals[":w"] = num(next.A)
		o.vals[":p"] = num(next.B >> 32 & lo32)
		o.vals[":c"] = num(next.B & lo32)
		o.vals[":ttl"] = num(seconds((next.A + 2) * win))
	}
	if c.rule.Algorithm == limit.FixedWindow {
		o.update += ", #ttl = if_not_exists(#ttl, :ttl)"
		o.ttl = true
		o.vals[":ttl"] = num(seconds((c.idx + 1) * win))
	}
	return o
}

// weight is the previous window's count as it weighs at elapsed into the
// current window: ⌈prev×(w-elapsed)/w⌉, as package limit computes it.
func weight(prev, w, elapsed int64) int64 {
	hi, lo := bits.Mul64(uint64(prev), uint64(w-elapsed))
	q, rem := bits.Div64(hi, lo, uint64(w))
	if rem != 0 {
		q++
	}
	return int64(q)
}

// maxPrev is the largest previous count whose weight at elapsed into the
// window is at most k ≥ 0: ⌈p×(w-e)/w⌉ ≤ k ⟺ p×(w-e) ≤ k×w ⟺
// p ≤ ⌊k×w/(w-e)⌋. It is at most 2³²-1, and -1 for k < 0.
func maxPrev(k, w, elapsed int64) int64 {
	if k < 0 {
		return -1
	}
	hi, lo := bits.Mul64(uint64(k), uint64(w))
	d := uint64(w - elapsed)
	if hi >= d {
		return lo32 // the quotient overflows: every count fits
	}
	q, _ := bits.Div64(hi, lo, d)
	return int64(min(q, lo32))
}

// seconds is the epoch second at or after unix nanoseconds ns.
func seconds(ns int64) int64 {
	const s = 1e9
	if ns <= 0 {
		return ns / s
	}
	return (ns-1)/s + 1
}
