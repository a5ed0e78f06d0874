package dynamostore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratewarden/ratewarden/edge/limit"
)

// Concurrency items keep, besides the total c, what each holder (a Store,
// so an edge process) holds: its count in h<holder> and the end of its
// lease, unix ns, in l<holder>. A holder renews its lease with every
// acquire and release of the key. An acquire that the total refuses looks
// for holders whose lease has ended (an edge that crashed holding slots)
// and takes their slots back from the total before it tries again.
const (
	attrHeld  = "h" // + holder: the holder's count
	attrLease = "l" // + holder: the end of the holder's lease
	// maxReclaim bounds the holders one update takes slots back from.
	maxReclaim = 8
	holderLen  = 16 // hex digits of a holder id
)

// newHolder returns a random holder id: a restarted edge is a new holder,
// and the slots of the one that crashed expire with its lease.
func newHolder() string {
	var b [holderLen / 2]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// holding is one holder's entry of a concurrency item.
type holding struct {
	id    string
	count int64
	lease int64
}

// slotsItem is a concurrency item as read.
type slotsItem struct {
	count    int64 // c: every slot in flight
	holdings []holding
}

// decodeSlots reads a concurrency item; a missing item holds nothing.
func decodeSlots(item map[string]types.AttributeValue) (slotsItem, error) {
	var it slotsItem
	c, _, err := getNum(item, attrCount)
	if err != nil {
		return it, err
	}
	it.count = c
	for name := range item {
		id, ok := strings.CutPrefix(name, attrHeld)
		if !ok || len(id) != holderLen {
			continue
		}
		n, _, err := getNum(item, name)
		if err != nil {
			return it, err
		}
		l, _, err := getNum(item, attrLease+id)
		if err != nil {
			return it, err
		}
		it.holdings = append(it.holdings, holding{id: id, count: n, lease: l})
	}
	return it, nil
}

// slots is Take for a concurrency rule: an acquire adds to the total and
// to this store's holding, conditioned on the total staying within the
// limit; a release takes from both, conditioned on this store holding as
// many. Results are package limit's on the total.
func (c *call) slots(ctx context.Context) (limit.Result, error) {
	r, n := c.rule, c.n
	if n == 0 || n > r.Limit {
		// Records nothing whatever the item holds: a look.
		item, err := c.read(ctx)
		if err != nil {
			return limit.Result{}, err
		}
		it, err := decodeSlots(item)
		if err != nil {
			return limit.Result{}, err
		}
		st := limit.State{B: it.count}
		return r.Take(&st, c.now, n), nil
	}
	o, reclaiming := c.acquire(), false
	if n < 0 {
		o = c.releaseHeld()
	}
	for sent := 0; ; sent++ {
		if sent == c.s.attempts {
			return limit.Result{}, fmt.Errorf("%d conditional updates failed: the item kept changing", sent)
		}
		attrs, failed, err := c.update(ctx, &o)
		if err != nil {
			return limit.Result{}, err
		}
		if !failed {
			if reclaiming {
				// Slots taken back: try the hits again.
				o, reclaiming = c.acquire(), false
				continue
			}
			total, _, err := getNum(attrs, attrCount)
			if err != nil {
				return limit.Result{}, err
			}
			st := limit.State{B: total - o.delta}
			if n < 0 {
				// The total after a release of what this store held,
				// which may be less than n: as package limit computes a
				// release of more than is in flight.
				st.B, n = total, 0
			}
			return r.Take(&st, c.now, n), nil
		}
		if c.s.readAfter {
			if attrs, err = c.read(ctx); err != nil {
				return limit.Result{}, err
			}
		}
		it, err := decodeSlots(attrs)
		if err != nil {
			return limit.Result{}, err
		}
		if n < 0 {
			own := int64(0)
			for _, h := range it.holdings {
				if h.id == c.s.holder {
					own = h.count
				}
			}
			if own <= 0 {
				// Nothing of this store's is in flight (its lease ended
				// and another store took its slots back): nothing to give
				// back.
				st := limit.State{B: it.count}
				return r.Take(&st, c.now, 0), nil
			}
			o = c.releaseAll(own)
			continue
		}
		if rc, ok := c.reclaim(&it); ok {
			o, reclaiming = rc, true
			continue
		}
		// Refused by the total: the hits are not recorded. A total read
		// after the failure may have dropped since; the hits were refused
		// at the least total that refuses them.
		st := limit.State{B: max(it.count, o.refuses)}
		return r.Take(&st, c.now, n), nil
	}
}

// holderNames maps the placeholders of this store's holding.
func (c *call) holderNames() map[string]string {
	return map[string]string{"#h": attrHeld + c.s.holder, "#l": attrLease + c.s.holder, "#ttl": TTLAttribute}
}

// leaseVals adds the end of this store's lease, and the item's time to
// live, to vals: the item is of no use once every lease in it has ended.
func (c *call) leaseVals(vals map[string]types.AttributeValue) map[string]types.AttributeValue {
	end := c.now + c.s.lease
	vals[":l"] = num(end)
	vals[":ttl"] = num(seconds(end + c.s.lease))
	return vals
}

// acquire adds n to the total and this store's holding, within the limit.
func (c *call) acquire() op {
	b := c.rule.Limit - c.n
	return op{
		update: "ADD c :n, #h :n SET #l = :l, #ttl = :ttl", cond: "attribute_not_exists(c) OR c <= :b",
		names: c.holderNames(), ret: types.ReturnValueUpdatedNew, delta: c.n, refuses: b + 1,
		vals: c.leaseVals(map[string]types.AttributeValue{":n": num(c.n), ":b": num(b)}),
	}
}

// releaseHeld takes -n from the total and this store's holding, if it
// holds that many.
func (c *call) releaseHeld() op {
	return op{
		update: "ADD c :n, #h :n SET #l = :l, #ttl = :ttl", cond: "#h >= :k",
		names: c.holderNames(), ret: types.ReturnValueUpdatedNew, delta: c.n,
		vals: c.leaseVals(map[string]types.AttributeValue{":n": num(c.n), ":k": num(-c.n)}),
	}
}

// releaseAll gives back all that this store holds, own, when a release
// asks for more.
func (c *call) releaseAll(own int64) op {
	return op{
		update: "ADD c :n REMOVE #h, #l", cond: "#h = :own",
		names: map[string]string{"#h": attrHeld + c.s.holder, "#l": attrLease + c.s.holder},
		ret:   types.ReturnValueUpdatedNew, delta: -own,
		vals: map[string]types.AttributeValue{":n": num(-own), ":own": num(own)},
	}
}

// reclaim returns the update that takes back the slots of holders whose
// lease ended before now, each conditioned on its holding being what was
// read, and false if there are none.
func (c *call) reclaim(it *slotsItem) (op, bool) {
	o := op{ret: types.ReturnValueNone,
		names: map[string]string{}, vals: map[string]types.AttributeValue{}}
	var remove, cond []string
	var total int64
	for _, h := range it.holdings {
		if h.lease >= c.now || len(remove) == 2*maxReclaim {
			continue
		}
		i := strconv.Itoa(len(cond))
		o.names["#h"+i], o.names["#l"+i] = attrHeld+h.id, attrLease+h.id
		o.vals[":h"+i], o.vals[":l"+i] = num(h.count), num(h.lease)
		remove = append(remove, "#h"+i, "#l"+i)
		cond = append(cond, "#h"+i+" = :h"+i+" AND #l"+i+" = :l"+i)
		total += h.count
	}
	if len(remove) == 0 {
		return op{}, false
	}
	o.update = "REMOVE " + strings.Join(remove, ", ")
	if total > 0 {
		o.update += " ADD c :t"
		o.vals[":t"] = num(-total)
	}
	o.cond = strings.Join(cond, " AND ")
	return o, true
}
