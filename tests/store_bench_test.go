package tests

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/edge"
	"github.com/ratewarden/ratewarden/edge/dynamostore"
	"github.com/ratewarden/ratewarden/edge/redisstore"
	"github.com/ratewarden/ratewarden/edge/syncstore"
)

// BenchmarkDecideStores makes whole decisions with the seed's tiers over
// each counter store, as `ratewarden edge` builds them (the distributed
// ones behind the over-limit cache): anonymous clients from 100,000
// addresses on /api/search, each well under its limits, so every decision
// counts at the store under two rules. It reports decisions per second and
// the latency a decision adds, p50 and p99.
func BenchmarkDecideStores(b *testing.B) {
	cfg, err := config.Load("../examples/seed.yaml")
	if err != nil {
		b.Fatal(err)
	}
	cfg.Store.Timeout = 5 * time.Second // the stand-ins are slow; count, do not fail open
	stores := []struct {
		name string
		open func(b *testing.B) edge.Store
	}{
		{"memory", func(*testing.B) edge.Store { return nil }},
		{"redis", func(b *testing.B) edge.Store {
			c := redis.NewClient(&redis.Options{Addr: awstest.Endpoint(b, awstest.RedisEnv), ContextTimeoutEnabled: true})
			b.Cleanup(func() { c.Close() })
			s, err := redisstore.New(redisstore.Options{Client: c, Prefix: fmt.Sprintf("bench-%d:", time.Now().UnixNano())})
			if err != nil {
				b.Fatal(err)
			}
			return syncFront(b, s)
		}},
		{"dynamodb", func(b *testing.B) edge.Store {
			dc := dynamodb.NewFromConfig(awstest.Config(b), func(o *dynamodb.Options) {
				o.BaseEndpoint = aws.String(awstest.Endpoint(b, awstest.DynamoDBEnv))
			})
			table := fmt.Sprintf("bench-counters-%d", time.Now().UnixNano())
			awstest.CreateTable(b, dc, dynamostore.TableSpec(table))
			s, err := dynamostore.New(dynamostore.Options{Client: dc, Table: table, ReadAfterConditionFailure: true})
			if err != nil {
				b.Fatal(err)
			}
			return syncFront(b, s)
		}},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			l, err := edge.New(cfg, edge.Options{Store: st.open(b), Env: func(string) string { return "" }})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close(context.Background())
			var (
				mu   sync.Mutex
				lats []time.Duration
				next int
			)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := &edge.Request{Method: "GET", Host: "api.example.com", Path: "/api/search", URI: "/api/search", Header: http.Header{}}
				var v edge.Verdict
				own := make([]time.Duration, 0, 1024)
				for pb.Next() {
					mu.Lock()
					n := next
					next++
					mu.Unlock()
					r.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:4711", n/65536%100, n/256%256, n%256)
					start := time.Now()
					l.Decide(context.Background(), start, r, &v)
					own = append(own, time.Since(start))
				}
				mu.Lock()
				lats = append(lats, own...)
				mu.Unlock()
			})
			slices.Sort(lats)
			if len(lats) > 0 {
				b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "p99-µs")
			}
			b.ReportMetric(float64(len(lats))/b.Elapsed().Seconds(), "decisions/s")
			if st := l.Stats(); st.StoreErrors != 0 {
				b.Fatalf("%d store errors", st.StoreErrors)
			}
		})
	}
}

func syncFront(b *testing.B, s syncstore.Backend) edge.Store {
	ss, err := syncstore.New(syncstore.Options{Store: s})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ss.Close(context.Background()) })
	return ss
}
