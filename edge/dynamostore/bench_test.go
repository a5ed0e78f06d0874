package dynamostore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratewarden/ratewarden/edge/dynamostore"
	"github.com/ratewarden/ratewarden/edge/limit"
)

// latencies records the time each Take took, up to a bound, without
// allocating inside the benchmark loop.
type latencies []time.Duration

func newLatencies() latencies { return make(latencies, 0, 1<<16) }

func (l *latencies) add(d time.Duration) {
	if len(*l) < cap(*l) {
		*l = append(*l, d)
	}
}

// report adds the 50th and 99th percentiles, and the requests a Take sent,
// to the benchmark's metrics.
func (l latencies) report(b *testing.B, before, after dynamostore.Stats) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	b.ReportMetric(float64(l[len(l)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(l[len(l)*99/100].Microseconds()), "p99-µs")
	d := diff(after, before)
	if d.Takes > 0 {
		b.ReportMetric(float64(d.Updates)/float64(d.Takes), "updates/take")
		b.ReportMetric(float64(d.Reads)/float64(d.Takes), "reads/take")
	}
}

// BenchmarkTake times one Take on a hot key against dynalite, per
// algorithm, in the service's all-old mode. The rules never refuse, so
// every hit is recorded.
func BenchmarkTake(b *testing.B) {
	table := newTable(b)
	prefix := fmt.Sprintf("bench-%016x/", rand.Uint64())
	const big = 1 << 40
	cases := []struct {
		name string
		rule limit.Rule
		step time.Duration // how far now moves per hit
		n    func(i int) int64
	}{
		{"fixed_window", limit.Rule{Algorithm: limit.FixedWindow, Limit: big, Window: time.Hour, MaxCount: big}, time.Microsecond, one},
		{"sliding_window", limit.Rule{Algorithm: limit.SlidingWindow, Limit: big, Window: time.Hour, MaxCount: big}, time.Microsecond, one},
		// An interval of 1 ms: hits 1 µs apart find the bucket busy, 2 ms
		// apart idle.
		{"token_bucket_busy", limit.Rule{Algorithm: limit.TokenBucket, Limit: 3_600_000, Window: time.Hour, MaxCount: big}, time.Microsecond, one},
		{"token_bucket_idle", limit.Rule{Algorithm: limit.TokenBucket, Limit: 3_600_000, Window: time.Hour, MaxCount: big}, 2 * time.Millisecond, one},
		// Acquire and release in turn.
		{"concurrency", limit.Rule{Algorithm: limit.Concurrency, Limit: big}, 0, func(i int) int64 { return int64(1 - 2*(i&1)) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s := newStore(b, table, modes[0].opts(b))
			k := limit.Key{Rule: prefix + c.name, User: "bench"}
			ctx := context.Background()
			now := base.Add(time.Minute)
			if _, err := s.Take(ctx, k, c.rule, now, 1); err != nil {
				b.Fatal(err)
			}
			lat := newLatencies()
			before := s.Stats()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				now = now.Add(c.step)
				start := time.Now()
				if _, err := s.Take(ctx, k, c.rule, now, c.n(i)); err != nil {
					b.Fatal(err)
				}
				lat.add(time.Since(start))
				i++
			}
			lat.report(b, before, s.Stats())
		})
	}
}

func one(int) int64 { return 1 }

// stub answers every UpdateItem with the same attributes, so that a
// benchmark times the store's own work.
type stub struct{ out dynamodb.UpdateItemOutput }

func (s *stub) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return &s.out, nil
}

func (s *stub) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return &dynamodb.GetItemOutput{}, nil
}

// BenchmarkTakeOverhead times what a Take costs besides the request: the
// key, the expressions and the arithmetic.
func BenchmarkTakeOverhead(b *testing.B) {
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	cases := []struct {
		name  string
		rule  limit.Rule
		attrs map[string]types.AttributeValue
	}{
		{"fixed_window", limit.Rule{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Minute}, map[string]types.AttributeValue{"c": n("5")}},
		{"sliding_window", limit.Rule{Algorithm: limit.SlidingWindow, Limit: 10, Window: time.Minute},
			map[string]types.AttributeValue{"w": n(fmt.Sprint(base.Add(time.Minute).UnixNano() / int64(time.Minute))), "p": n("3"), "c": n("5")}},
		{"token_bucket", limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Window: time.Minute}, map[string]types.AttributeValue{"t": n("0")}},
		{"concurrency", limit.Rule{Algorithm: limit.Concurrency, Limit: 10}, map[string]types.AttributeValue{"c": n("5")}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s, err := dynamostore.New(dynamostore.Options{Client: &stub{out: dynamodb.UpdateItemOutput{Attributes: c.attrs}}, Table: "t"})
			if err != nil {
				b.Fatal(err)
			}
			k := limit.Key{Rule: "anonymous:/api/search", Addr: netip.MustParseAddr("203.0.113.7")}
			now := base.Add(time.Minute)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Take(ctx, k, c.rule, now, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
