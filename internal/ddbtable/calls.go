package ddbtable

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratewarden/ratewarden/internal/awserr"
	"github.com/ratewarden/ratewarden/internal/backoff"
)

// API is the part of the DynamoDB client the project's tables use.
// *dynamodb.Client satisfies it.
type API interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// ChunkBytes is the most data bytes one item holds, well within
// DynamoDB's 400 KB item limit with the keys and attribute names.
const ChunkBytes = 350 << 10

// Calls makes the calls of one table. Each call is bounded by Timeout and
// is not cut short when the caller's context ends, so that a worker that
// stops mid-write finishes the call it is in rather than abandon a request
// half sent. A throttled call (awserr.IsThrottle), once the SDK's own
// retries are spent, is tried again up to Retries times after a full-jitter
// backoff; the wait ends with the caller's context. The zero values of the
// tuning fields take the defaults; API and Table are required. Calls is
// safe for concurrent use.
type Calls struct {
	API   API
	Table string
	// Timeout bounds each call; default 10s.
	Timeout time.Duration
	// Retries is how many times a throttled call is tried again; default 5.
	Retries int
	// BaseDelay and MaxDelay bound the backoff; default 100ms and 5s.
	BaseDelay, MaxDelay time.Duration
	// Jitter draws the backoff (backoff.FullJitter); default
	// backoff.Uniform.
	Jitter func(n int64) int64
}

// do runs call with the bounded context of one attempt, again after a
// backoff while it is throttled.
func (c *Calls) do(ctx context.Context, call func(context.Context) error) error {
	d, retries, base, most, jitter := c.Timeout, c.Retries, c.BaseDelay, c.MaxDelay, c.Jitter
	if d <= 0 {
		d = 10 * time.Second
	}
	if retries <= 0 {
		retries = 5
	}
	if base <= 0 {
		base = 100 * time.Millisecond
	}
	if most <= 0 {
		most = 5 * time.Second
	}
	if jitter == nil {
		jitter = backoff.Uniform
	}
	for attempt := 0; ; attempt++ {
		cc, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
		err := call(cc)
		cancel()
		if err == nil || !awserr.IsThrottle(err) || attempt == retries {
			return err
		}
		if serr := backoff.Sleep(ctx, backoff.FullJitter(base, most, attempt+1, jitter)); serr != nil {
			return err
		}
	}
}

// call runs op(in) as one call of c (do) and returns its output.
func call[I, O any](ctx context.Context, c *Calls, op func(context.Context, I, ...func(*dynamodb.Options)) (O, error), in I) (O, error) {
	var out O
	err := c.do(ctx, func(ctx context.Context) error {
		var err error
		out, err = op(ctx, in)
		return err
	})
	return out, err
}

// Get returns the item of key, read consistently, or nil if there is none:
// only the attributes names when some are given.
func (c *Calls) Get(ctx context.Context, key map[string]types.AttributeValue, names ...string) (map[string]types.AttributeValue, error) {
	in := &dynamodb.GetItemInput{TableName: aws.String(c.Table), Key: key, ConsistentRead: aws.Bool(true)}
	if len(names) > 0 {
		in.ExpressionAttributeNames = map[string]string{}
		refs := make([]string, len(names))
		for i, n := range names {
			refs[i] = "#a" + strconv.Itoa(i)
			in.ExpressionAttributeNames[refs[i]] = n
		}
		in.ProjectionExpression = aws.String(strings.Join(refs, ", "))
	}
	out, err := call(ctx, c, c.API.GetItem, in)
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

// Put writes in, whose TableName it fills in.
func (c *Calls) Put(ctx context.Context, in *dynamodb.PutItemInput) (*dynamodb.PutItemOutput, error) {
	in.TableName = aws.String(c.Table)
	return call(ctx, c, c.API.PutItem, in)
}

// Delete deletes the item of key.
func (c *Calls) Delete(ctx context.Context, key map[string]types.AttributeValue) error {
	_, err := call(ctx, c, c.API.DeleteItem, &dynamodb.DeleteItemInput{TableName: aws.String(c.Table), Key: key})
	return err
}

// Update runs in, whose TableName it fills in.
func (c *Calls) Update(ctx context.Context, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
	in.TableName = aws.String(c.Table)
	return call(ctx, c, c.API.UpdateItem, in)
}

// Query runs in, whose TableName it fills in, and calls fn with the items
// of every page in turn, read consistently, until fn returns an error,
// which it returns. Like every call, it finishes when ctx ends: a caller
// that reads many keys checks ctx between them.
func (c *Calls) Query(ctx context.Context, in *dynamodb.QueryInput, fn func([]map[string]types.AttributeValue) error) error {
	in.TableName = aws.String(c.Table)
	in.ConsistentRead = aws.Bool(true)
	for {
		out, err := call(ctx, c, c.API.Query, in)
		if err != nil {
			return err
		}
		if err := fn(out.Items); err != nil {
			return err
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// PutChunks stores the bytes b of a head item that is written after: when
// b fits in one item it returns b whole, for the head to hold, and 0;
// otherwise it writes b in pieces of ChunkBytes, piece i as the item
// chunkKey(i) with b's piece in the binary attribute data, and returns nil
// and the number of pieces. The caller writes the head last, naming the
// count, so that a reader never finds a head whose chunks are missing.
func (c *Calls) PutChunks(ctx context.Context, b []byte, data string, chunkKey func(i int64) map[string]types.AttributeValue) ([]byte, int64, error) {
	if len(b) <= ChunkBytes {
		return b, 0, nil
	}
	var n int64
	for ; len(b) > 0; n++ {
		k := min(len(b), ChunkBytes)
		it := chunkKey(n)
		it[data] = &types.AttributeValueMemberB{Value: b[:k]}
		if _, err := c.Put(ctx, &dynamodb.PutItemInput{Item: it}); err != nil {
			return nil, 0, err
		}
		b = b[k:]
	}
	return nil, n, nil
}

// Num returns the number attribute name of it, or 0 if it has none.
func Num(it map[string]types.AttributeValue, name string) int64 {
	v, _ := it[name].(*types.AttributeValueMemberN)
	if v == nil {
		return 0
	}
	n, _ := strconv.ParseInt(v.Value, 10, 64)
	return n
}

// Bytes returns the binary attribute name of it, or nil if it has none.
func Bytes(it map[string]types.AttributeValue, name string) []byte {
	v, _ := it[name].(*types.AttributeValueMemberB)
	if v == nil {
		return nil
	}
	return v.Value
}

// Str returns the string attribute name of it, or "" if it has none.
func Str(it map[string]types.AttributeValue, name string) string {
	v, _ := it[name].(*types.AttributeValueMemberS)
	if v == nil {
		return ""
	}
	return v.Value
}
