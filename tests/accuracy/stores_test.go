package accuracy_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/edge/dynamostore"
	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/memstore"
	"github.com/ratewarden/ratewarden/edge/redisstore"
	"github.com/ratewarden/ratewarden/tests/accuracy"
)

// connector returns, for one replay, the function that connects each node
// to the shared store.
type connector func(t *testing.T) func(node int) (accuracy.Backend, error)

// memory gives each replay a fresh memory store standing in for the
// distributed store: every node's client is the same store.
func memory(t *testing.T) func(int) (accuracy.Backend, error) {
	m := memstore.New(memstore.Options{SweepEvery: -1})
	t.Cleanup(func() { m.Close(context.Background()) })
	return func(int) (accuracy.Backend, error) { return m, nil }
}

// dynamo returns a connector to a fresh dynalite table, deleted when the
// test ends; each node has its own SDK client and store.
func dynamo(t *testing.T) connector {
	t.Helper()
	ep := awstest.Endpoint(t, awstest.DynamoDBEnv)
	cfg := awstest.Config(t)
	client := func() *dynamodb.Client {
		return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(ep) })
	}
	table := fmt.Sprintf("accuracy-%016x", rand.Uint64())
	awstest.CreateTable(t, client(), dynamostore.TableSpec(table))
	return func(*testing.T) func(int) (accuracy.Backend, error) {
		return func(int) (accuracy.Backend, error) {
			// dynalite ignores ReturnValuesOnConditionCheckFailure.
			return dynamostore.New(dynamostore.Options{Client: client(), Table: table, ReadAfterConditionFailure: true})
		}
	}
}

// redisNode is one node's Redis store and the client it owns.
type redisNode struct {
	*redisstore.Store
	client *redis.Client
}

func (n redisNode) Close(context.Context) error { return n.client.Close() }

// redisConn returns a connector to the redis-server of tests/run under a
// fresh key prefix, whose keys are deleted when the test ends; each node
// has its own client and store, and counts by the caller's clock, so that
// the nodes' skew reaches the store as it does DynamoDB's. Simulated time
// may run slower than the wall clock the server expires keys by, so keys
// are kept an hour past their Expires (which never changes a result).
func redisConn(t *testing.T) connector {
	t.Helper()
	addr := awstest.Endpoint(t, awstest.RedisEnv)
	prefix := fmt.Sprintf("accuracy-%016x:", rand.Uint64())
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("scan %s*: %v", prefix, err)
		}
		for len(keys) > 0 {
			k := keys[:min(len(keys), 1000)]
			keys = keys[len(k):]
			if err := c.Unlink(ctx, k...).Err(); err != nil {
				t.Errorf("unlink: %v", err)
			}
		}
	})
	return func(*testing.T) func(int) (accuracy.Backend, error) {
		return func(int) (accuracy.Backend, error) {
			c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			s, err := redisstore.New(redisstore.Options{Client: c, Prefix: prefix, Clock: redisstore.CallerTime, ClockSkew: redisstore.MaxClockSkew})
			if err != nil {
				c.Close()
				return nil, err
			}
			return redisNode{s, c}, nil
		}
	}
}

// TestServerClock replays a network trace on Redis counting by a clock of
// its own, as under store.redis.clock server, with the server's clock 2 s
// ahead of the edges' or behind them: the over-limit cache keeps the
// store's clock, so it changes no decision of the fixed window and the
// token bucket, whose cached answers are the store's field for field (as
// checkCacheIdentical requires with one clock).
func TestServerClock(t *testing.T) {
	// netShortTrace with the scraper across a window's end, true or the
	// server's.
	c := netShortTrace
	c.Name, c.Duration, c.ScraperFrom, c.ScraperUntil = "server-clock", 25*time.Second, 14*time.Second, 23*time.Second
	tr, oracle := generate(t, c)
	conn := redisConn(t)
	for _, skew := range []time.Duration{2 * time.Second, -2 * time.Second} {
		for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.TokenBucket} {
			t.Run(fmt.Sprintf("%v_%v", skew, alg), func(t *testing.T) {
				var decided [2][]bool
				var cacheHits uint64
				for i, mode := range []accuracy.Mode{accuracy.Exact, accuracy.Cache} {
					s := accuracy.Setup{
						Store: "redis", Algorithm: alg, Mode: mode, Timeout: 10 * time.Second,
						ServerClock: true, ServerSkew: skew,
						Rule:    fmt.Sprintf("server-clock/%v/%s/%s", skew, alg, mode),
						Connect: conn(t),
					}
					r, err := accuracy.Replay(context.Background(), tr, oracle, s)
					if err != nil {
						t.Fatalf("%s: %v", s.Rule, err)
					}
					decided[i] = r.Decisions
					cacheHits += r.Sync.CacheHits
				}
				if i, n := diff(decided[0], decided[1]); n > 0 {
					t.Errorf("cache mode decides %d requests otherwise than exact mode, the first at %d (%v)", n, i, tr.Requests[i])
				}
				if cacheHits == 0 {
					t.Errorf("the cache answered nothing: the replay tests nothing")
				}
			})
		}
	}
}
