package kinesis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratewarden/ratewarden/decisions/stream"
	"github.com/ratewarden/ratewarden/internal/ddbtable"
)

// The lease table holds one item per consumer group, stream and shard: who
// holds the shard, a counter bumped at every renewal and change of hands,
// the shard's parents, and the checkpoint. Workers tell a live holder from
// a dead one by watching the counter move, as the Kinesis Client Library
// does, so their clocks need not agree.
//
//	group    (S, hash key)   "<consumer group>/<stream>"
//	shard    (S, range key)  the shard id
//	owner    (S)             the holding worker; absent when free
//	counter  (N)             bumped by every renewal, take, release and checkpoint
//	parents  (SS)            parent and adjacent parent shard ids, if any
//	seq      (S)             checkpoint: sequence number of the record the
//	                         consumer is in, "" for none yet, or ShardEnd
//	sub      (N)             events of record seq already handled
const (
	attrGroup   = "group"
	attrShard   = "shard"
	attrOwner   = "owner"
	attrCounter = "counter"
	attrParents = "parents"
	attrSeq     = "seq"
	attrSub     = "sub"
)

// ShardEnd is the checkpoint of a shard read to its end: it is closed
// (split or merged) and its children may be read.
const ShardEnd = "SHARD_END"

// LeaseTableSpec returns the CreateTable input of a lease and checkpoint
// table named name: the key schema above, billed per request.
func LeaseTableSpec(name string) *dynamodb.CreateTableInput {
	return ddbtable.HashRange(name, attrGroup, attrShard)
}

// DynamoAPI is the part of the DynamoDB client the lease table needs.
// *dynamodb.Client satisfies it.
type DynamoAPI interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

var _ DynamoAPI = (*dynamodb.Client)(nil)

// errLeaseLost is returned by a conditional write on a lease the worker
// no longer holds, or whose counter moved under it.
var errLeaseLost = errors.New("lease lost")

// lease is one item of the table.
type lease struct {
	shard   string
	owner   string
	counter int64
	parents []string
	seq     string
	sub     int64
}

// leases reads and writes one group's leases of one stream.
type leases struct {
	api   DynamoAPI
	table string
	group string // "<consumer group>/<stream>"
}

func (l *leases) key(shard string) map[string]ddb.AttributeValue {
	return map[string]ddb.AttributeValue{
		attrGroup: &ddb.AttributeValueMemberS{Value: l.group},
		attrShard: &ddb.AttributeValueMemberS{Value: shard},
	}
}

func num(v int64) *ddb.AttributeValueMemberN {
	return &ddb.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// create adds a free lease for shard unless one exists.
func (l *leases) create(ctx context.Context, shard string, parents []string) error {
	item := l.key(shard)
	item[attrCounter] = num(0)
	item[attrSeq] = &ddb.AttributeValueMemberS{Value: ""}
	item[attrSub] = num(0)
	if len(parents) > 0 {
		item[attrParents] = &ddb.AttributeValueMemberSS{Value: parents}
	}
	_, err := l.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(l.table), Item: item,
		ConditionExpression:      aws.String("attribute_not_exists(#s)"),
		ExpressionAttributeNames: map[string]string{"#s": attrShard},
	})
	if isConditionFailed(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create lease %s: %w", shard, err)
	}
	return nil
}

// list returns every lease of the group, read consistently.
func (l *leases) list(ctx context.Context) ([]lease, error) {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(l.table),
		ConsistentRead:            aws.Bool(true),
		KeyConditionExpression:    aws.String("#g = :g"),
		ExpressionAttributeNames:  map[string]string{"#g": attrGroup},
		ExpressionAttributeValues: map[string]ddb.AttributeValue{":g": &ddb.AttributeValueMemberS{Value: l.group}},
	}
	var out []lease
	for {
		page, err := l.api.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list leases in %s: %w", l.table, err)
		}
		for _, it := range page.Items {
			le, err := parseLease(it)
			if err != nil {
				return nil, fmt.Errorf("list leases: %w", err)
			}
			out = append(out, le)
		}
		if len(page.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

func parseLease(it map[string]ddb.AttributeValue) (lease, error) {
	var le lease
	str := func(name string) string {
		if v, ok := it[name].(*ddb.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	integer := func(name string) (int64, error) {
		v, ok := it[name].(*ddb.AttributeValueMemberN)
		if !ok {
			return 0, nil
		}
		return strconv.ParseInt(v.Value, 10, 64)
	}
	le.shard, le.owner, le.seq = str(attrShard), str(attrOwner), str(attrSeq)
	if le.shard == "" {
		return le, errors.New("item without a shard id")
	}
	var err error
	if le.counter, err = integer(attrCounter); err != nil {
		return le, fmt.Errorf("shard %s: counter: %w", le.shard, err)
	}
	if le.sub, err = integer(attrSub); err != nil {
		return le, fmt.Errorf("shard %s: sub: %w", le.shard, err)
	}
	if v, ok := it[attrParents].(*ddb.AttributeValueMemberSS); ok {
		le.parents = v.Value
	}
	return le, nil
}

// update makes one conditional write and maps a failed condition to
// errLeaseLost.
func (l *leases) update(ctx context.Context, op, shard, update, cond string, names map[string]string, values map[string]ddb.AttributeValue) error {
	_, err := l.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(l.table), Key: l.key(shard),
		UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	})
	if isConditionFailed(err) {
		return fmt.Errorf("%s %s: %w", op, shard, errLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, shard, err)
	}
	return nil
}

var ownerNames = map[string]string{"#o": attrOwner, "#c": attrCounter}

// renew bumps the counter of a lease held by worker.
func (l *leases) renew(ctx context.Context, shard, worker string) error {
	return l.update(ctx, "renew lease", shard, "ADD #c :one", "#o = :me", ownerNames,
		map[string]ddb.AttributeValue{":one": num(1), ":me": &ddb.AttributeValueMemberS{Value: worker}})
}

// take gives the lease to worker if its counter is still seen.
func (l *leases) take(ctx context.Context, shard, worker string, seen int64) error {
	return l.update(ctx, "take lease", shard, "SET #o = :me ADD #c :one", "#c = :seen", ownerNames,
		map[string]ddb.AttributeValue{":one": num(1), ":me": &ddb.AttributeValueMemberS{Value: worker}, ":seen": num(seen)})
}

// release frees a lease worker holds.
func (l *leases) release(ctx context.Context, shard, worker string) error {
	return l.update(ctx, "release lease", shard, "REMOVE #o ADD #c :one", "#o = :me", ownerNames,
		map[string]ddb.AttributeValue{":one": num(1), ":me": &ddb.AttributeValueMemberS{Value: worker}})
}

// checkpoint records a position in a shard worker holds, and bumps the
// counter: a take conditioned on the counter it listed then fails, so a
// worker that takes a shard starts from its latest checkpoint, never from
// one listed before the holder moved it.
func (l *leases) checkpoint(ctx context.Context, shard, worker string, p stream.Position) error {
	return l.update(ctx, "checkpoint", shard, "SET #q = :q, #n = :n ADD #c :one", "#o = :me",
		map[string]string{"#o": attrOwner, "#q": attrSeq, "#n": attrSub, "#c": attrCounter},
		map[string]ddb.AttributeValue{":q": &ddb.AttributeValueMemberS{Value: p.Seq}, ":n": num(p.Sub),
			":one": num(1), ":me": &ddb.AttributeValueMemberS{Value: worker}})
}

// remove deletes the lease of a shard read to its end.
func (l *leases) remove(ctx context.Context, shard string) error {
	_, err := l.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(l.table), Key: l.key(shard),
		ConditionExpression:       aws.String("#q = :end"),
		ExpressionAttributeNames:  map[string]string{"#q": attrSeq},
		ExpressionAttributeValues: map[string]ddb.AttributeValue{":end": &ddb.AttributeValueMemberS{Value: ShardEnd}},
	})
	if err != nil && !isConditionFailed(err) {
		return fmt.Errorf("remove lease %s: %w", shard, err)
	}
	return err
}

func isConditionFailed(err error) bool {
	var cf *ddb.ConditionalCheckFailedException
	return errors.As(err, &cf)
}
