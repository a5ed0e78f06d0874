package lists

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratewarden/ratewarden/internal/ddbtable"
)

// The DynamoDB table of lists, for edges that share their lists through
// DynamoDB: one item per entry of a list.
//
//	list     (S, hash key)   the list's name: allow, deny, challenge
//	entry    (S, range key)  the entry's target, normalized: an address,
//	                         a CIDR prefix or user:<id>
//	expires  (N)             Unix seconds after which the entry no longer
//	                         applies (for a tombstone: after which it is
//	                         dropped); DynamoDB's time to live deletes it
//	                         some time later, so readers compare too
//	reason   (S)             why the entry is there, for people
//	by       (S)             who wrote it (who removed it, for a tombstone)
//	added    (N)             Unix seconds when it was written
//	pending  (BOOL)          true while it waits for approval
//	removed  (N)             Unix seconds when it was removed: a tombstone
const (
	TableListAttribute    = "list"
	TableEntryAttribute   = "entry"
	TableExpiresAttribute = "expires"
	TableReasonAttribute  = "reason"
	TableByAttribute      = "by"
	TableAddedAttribute   = "added"
	TablePendingAttribute = "pending"
	TableRemovedAttribute = "removed"
)

// TableSpec returns the request that creates a lists table named name,
// billed per request. Time to live is enabled separately, by
// TimeToLiveSpec, once the table is active.
func TableSpec(name string) *dynamodb.CreateTableInput {
	return ddbtable.HashRange(name, TableListAttribute, TableEntryAttribute)
}

// TimeToLiveSpec returns the request that enables time to live on the
// expires attribute of the lists table named name.
func TimeToLiveSpec(name string) *dynamodb.UpdateTimeToLiveInput {
	return &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(TableExpiresAttribute),
			Enabled:       aws.Bool(true),
		},
	}
}

// DynamoDB is the part of the DynamoDB client a TableStore uses, that of
// every table of the project. *dynamodb.Client satisfies it.
type DynamoDB = ddbtable.API

// TableStore reads and writes the lists in a DynamoDB lists table. Writes
// are single-item requests, so concurrent writers need no lock: the last
// write of an entry wins, and removal and approval are conditional on the
// entry being there (and pending). Expired entries stay until DynamoDB's
// time to live deletes them; readers compare expires themselves. A
// TableStore is a Source: a Watcher reads one list with a Query per
// refresh. Every call has a deadline of its own and a throttled call is
// tried again after a backoff (ddbtable.Calls), as the aggregator's
// tables do. It is safe for concurrent use.
type TableStore struct {
	calls *ddbtable.Calls
	now   func() time.Time
}

// NewTableStore returns the store of the lists table named table; now reads
// the clock (default time.Now).
func NewTableStore(db DynamoDB, table string, now func() time.Time) *TableStore {
	if now == nil {
		now = time.Now
	}
	return &TableStore{calls: &ddbtable.Calls{API: db, Table: table}, now: now}
}

// Name returns the table's name.
func (s *TableStore) Name() string { return "dynamodb table " + s.calls.Table }

// Put writes e, replacing any entry (or tombstone) for its target. Added
// defaults to now; times are kept to the second. It refuses an invalid
// entry and an expiry not in the future.
func (s *TableStore) Put(ctx context.Context, e Entry) error {
	if err := prepare(&e, s.now()); err != nil {
		return err
	}
	if _, err := s.calls.Put(ctx, &dynamodb.PutItemInput{Item: item(&e)}); err != nil {
		return fmt.Errorf("put %s on %s: %w", e.Target, e.List, err)
	}
	// Writers kept an address typed with its length (203.0.113.7/32)
	// under that key until NormalizeTarget made it the address. Entries
	// and the edge read that item as the address, so it is replaced too,
	// as a file's line in either spelling is.
	if p, err := netip.ParseAddr(e.Target); err == nil {
		old := netip.PrefixFrom(p, p.BitLen()).String()
		if err := s.calls.Delete(ctx, key(e.List, old)); err != nil {
			return fmt.Errorf("put %s on %s: delete its item %s: %w", e.Target, e.List, old, err)
		}
	}
	return nil
}

// Remove marks the entry of target on list removed by by because of
// reason ("" for none), a tombstone that time to live deletes after
// TombstoneAge: it says who removed the entry and why, not why it was
// added. It returns ErrNotFound when no
// entry for target applies or waits for approval. An item put by hand
// under another spelling of target (2001:DB8::7 for 2001:db8::7, which
// Entries reads as target) is removed when the item of target is not
// there to remove.
func (s *TableStore) Remove(ctx context.Context, list, target, by, reason string) error {
	if _, err := checkText(attrReason, reason, MaxReasonLen); err != nil {
		return err
	}
	return s.update(ctx, list, target, by, "remove %s from %s", ErrNotFound, func(now time.Time) *dynamodb.UpdateItemInput {
		in := &dynamodb.UpdateItemInput{
			UpdateExpression:    aws.String("SET #removed = :now, #by = :by, #expires = :drop REMOVE #pending, #reason"),
			ConditionExpression: aws.String("attribute_exists(#entry) AND attribute_not_exists(#removed) AND (attribute_not_exists(#expires) OR #expires > :now)"),
			ExpressionAttributeNames: map[string]string{"#removed": TableRemovedAttribute, "#by": TableByAttribute,
				"#expires": TableExpiresAttribute, "#pending": TablePendingAttribute, "#entry": TableEntryAttribute, "#reason": TableReasonAttribute},
			ExpressionAttributeValues: map[string]types.AttributeValue{":now": unix(now), ":by": str(by),
				":drop": unix(now.Add(TombstoneAge))},
		}
		if reason != "" { // DynamoDB keeps no empty string in a non-key attribute
			in.UpdateExpression = aws.String("SET #removed = :now, #by = :by, #expires = :drop, #reason = :reason REMOVE #pending")
			in.ExpressionAttributeValues[":reason"] = str(reason)
		}
		return in
	})
}

// Approve makes the pending entry of target on list apply, approved by by;
// like Remove, it approves an item put by hand under another spelling of
// target when the item of target is not pending.
func (s *TableStore) Approve(ctx context.Context, list, target, by string) error {
	return s.update(ctx, list, target, by, "approve %s on %s", ErrNotPending, func(now time.Time) *dynamodb.UpdateItemInput {
		return &dynamodb.UpdateItemInput{
			UpdateExpression:    aws.String("SET #by = :by REMOVE #pending"),
			ConditionExpression: aws.String("#pending = :true AND attribute_not_exists(#removed) AND (attribute_not_exists(#expires) OR #expires > :now)"),
			ExpressionAttributeNames: map[string]string{"#by": TableByAttribute, "#pending": TablePendingAttribute,
				"#removed": TableRemovedAttribute, "#expires": TableExpiresAttribute},
			ExpressionAttributeValues: map[string]types.AttributeValue{":by": str(by), ":true": &types.AttributeValueMemberBOOL{Value: true},
				":now": unix(now)},
		}
	})
}

// update makes the conditional update of target's item on list that
// request returns (for the time now), named by the format what (of t and
// list) in errors, which fail with notFound when its condition does. When
// it does, the items of other spellings of target get it too, each on its
// own condition: it fails only if all do.
func (s *TableStore) update(ctx context.Context, list, target, by, what string, notFound error, request func(now time.Time) *dynamodb.UpdateItemInput) error {
	t, now, err := s.key(list, target, by)
	if err != nil {
		return err
	}
	do := func(k string) error {
		in := request(now)
		in.Key = key(list, k)
		_, err := s.calls.Update(ctx, in)
		return conditional(err, fmt.Sprintf(what, t, list), notFound)
	}
	err = do(t)
	if !errors.Is(err, notFound) {
		return err
	}
	others, qerr := s.spellings(ctx, list, t)
	if qerr != nil {
		return qerr
	}
	for _, k := range others {
		switch e := do(k); {
		case e == nil:
			err = nil
		case !errors.Is(e, notFound):
			return e
		}
	}
	return err
}

// spellings returns the keys of list's items other than t that name
// target t: items put by hand, since every writer here normalizes.
func (s *TableStore) spellings(ctx context.Context, list, t string) ([]string, error) {
	var out []string
	err := s.items(ctx, list, TableEntryAttribute, func(it map[string]types.AttributeValue) error {
		if k, ok := it[TableEntryAttribute].(*types.AttributeValueMemberS); ok && k.Value != t {
			if n, err := NormalizeTarget(k.Value); err == nil && n == t {
				out = append(out, k.Value)
			}
		}
		return nil
	})
	return out, err
}

func (s *TableStore) key(list, target, by string) (string, time.Time, error) {
	if err := checkList(list); err != nil {
		return "", time.Time{}, err
	}
	t, err := checkKey(target, by)
	return t, s.now().UTC().Truncate(time.Second), err
}

func conditional(err error, what string, notFound error) error {
	var cf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return nil
	case errors.As(err, &cf):
		return fmt.Errorf("%s: %w", what, notFound)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Entries returns the entries of list in the table, pending, removed and
// expired ones included, with a paginated strongly consistent Query.
func (s *TableStore) Entries(ctx context.Context, list string) ([]Entry, error) {
	if err := checkList(list); err != nil {
		return nil, err
	}
	var out []Entry
	err := s.items(ctx, list, "", func(it map[string]types.AttributeValue) error {
		e, err := entry(list, it)
		if err != nil {
			return err
		}
		if len(out) >= MaxEntries {
			return fmt.Errorf("more than %d entries", MaxEntries)
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// items calls f with each item of list in the table, of the attributes
// projection names ("" for all), with a paginated strongly consistent
// Query.
func (s *TableStore) items(ctx context.Context, list, projection string, f func(map[string]types.AttributeValue) error) error {
	in := &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("#list = :list"),
		ExpressionAttributeNames:  map[string]string{"#list": TableListAttribute},
		ExpressionAttributeValues: map[string]types.AttributeValue{":list": str(list)},
	}
	if projection != "" {
		in.ProjectionExpression = aws.String("#p")
		in.ExpressionAttributeNames["#p"] = projection
	}
	err := s.calls.Query(ctx, in, func(items []map[string]types.AttributeValue) error {
		for _, it := range items {
			if err := f(it); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read list %s from %s: %w", list, s.calls.Table, err)
	}
	return nil
}

// Read reads list for a Watcher: the table cannot tell whether it changed,
// so every refresh reads it. An item that is not a valid entry fails the
// read, naming its key, and the watcher keeps its last good list.
func (s *TableStore) Read(ctx context.Context, list string, _ bool) ([]Entry, bool, error) {
	es, err := s.Entries(ctx, list)
	return es, false, err
}

func checkList(list string) error {
	for _, n := range Names {
		if n == list {
			return nil
		}
	}
	return fmt.Errorf("list %q: want one of allow, deny, challenge", list)
}

func key(list, target string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{TableListAttribute: str(list), TableEntryAttribute: str(target)}
}

func item(e *Entry) map[string]types.AttributeValue {
	it := key(e.List, e.Target)
	if !e.Added.IsZero() {
		it[TableAddedAttribute] = unix(e.Added)
	}
	if !e.Expires.IsZero() {
		it[TableExpiresAttribute] = unix(e.Expires)
	}
	if e.Reason != "" {
		it[TableReasonAttribute] = str(e.Reason)
	}
	if e.By != "" {
		it[TableByAttribute] = str(e.By)
	}
	if e.Pending {
		it[TablePendingAttribute] = &types.AttributeValueMemberBOOL{Value: true}
	}
	return it
}

// entry decodes an item, checking it as the file format checks a line.
func entry(list string, it map[string]types.AttributeValue) (Entry, error) {
	e := Entry{List: list}
	target, _ := it[TableEntryAttribute].(*types.AttributeValueMemberS)
	if target == nil {
		return e, errors.New("an item without an entry attribute")
	}
	bad := func(attr string, err error) (Entry, error) {
		return e, fmt.Errorf("item %q: %s: %v", target.Value, attr, err)
	}
	t, err := NormalizeTarget(target.Value)
	if err != nil {
		return bad(TableEntryAttribute, err)
	}
	e.Target = t
	for attr, dst := range map[string]*time.Time{TableAddedAttribute: &e.Added, TableExpiresAttribute: &e.Expires, TableRemovedAttribute: &e.Removed} {
		if v, ok := it[attr]; ok {
			n, ok := v.(*types.AttributeValueMemberN)
			if !ok {
				return bad(attr, errors.New("not a number"))
			}
			sec, err := strconv.ParseInt(n.Value, 10, 64)
			if err != nil || sec < 0 || sec > maxUnix {
				return bad(attr, fmt.Errorf("%q: want whole Unix seconds from 0 to %d", n.Value, maxUnix))
			}
			*dst = time.Unix(sec, 0).UTC()
		}
	}
	if !e.Removed.IsZero() {
		e.Expires = time.Time{} // a tombstone's expires is when it is dropped
	}
	for attr, dst := range map[string]*string{TableReasonAttribute: &e.Reason, TableByAttribute: &e.By} {
		if v, ok := it[attr]; ok {
			s, ok := v.(*types.AttributeValueMemberS)
			if !ok {
				return bad(attr, errors.New("not a string"))
			}
			max := MaxReasonLen
			if attr == TableByAttribute {
				max = MaxByLen
			}
			if *dst, err = checkText(attr, s.Value, max); err != nil {
				return bad(attr, err)
			}
		}
	}
	if v, ok := it[TablePendingAttribute]; ok {
		b, ok := v.(*types.AttributeValueMemberBOOL)
		if !ok {
			return bad(TablePendingAttribute, errors.New("not a boolean"))
		}
		e.Pending = b.Value
	}
	return e, nil
}

// maxUnix is the last second of year 9999, the last RFC 3339 can write.
const maxUnix = 253402300799

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func unix(t time.Time) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(t.Unix(), 10)}
}
