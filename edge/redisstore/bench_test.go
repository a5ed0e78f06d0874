package redisstore_test

import (
	"context"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/redisstore"
)

// benchRules never refuse, so that every hit is written.
var benchRules = []limit.Rule{
	{Algorithm: limit.FixedWindow, Limit: 1 << 40, Window: time.Minute},
	{Algorithm: limit.SlidingWindow, Limit: 1 << 40, Window: time.Minute},
	{Algorithm: limit.TokenBucket, Limit: 1_000_000_000, Window: time.Second, Burst: 1 << 40},
	{Algorithm: limit.Concurrency, Limit: 1 << 40},
}

// benchKey is the i-th distinct IPv4 key under one rule id.
func benchKey(i int) limit.Key {
	return limit.Key{Rule: "anonymous./api", Addr: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})}
}

// benchN alternates acquire and release for the concurrency algorithm.
func benchN(r limit.Rule, i int) int64 {
	if r.Algorithm == limit.Concurrency && i%2 == 1 {
		return -1
	}
	return 1
}

// BenchmarkTake times one Take, a round trip to the redis-server of
// tests/run, per algorithm: one goroutine on one key (with the latency's
// p50 and p99), and RunParallel over 10,000 keys.
func BenchmarkTake(b *testing.B) {
	c := newClient(b)
	ctx := context.Background()
	clocks := []redisstore.Clock{redisstore.ServerTime, redisstore.CallerTime}
	for _, clock := range clocks {
		for _, r := range benchRules {
			name := r.Algorithm.String() + "/" + clock.String()
			b.Run(name+"/serial", func(b *testing.B) {
				s := newStore(b, c, clock)
				k := benchKey(1)
				lat := make([]time.Duration, 0, 1<<20)
				before := s.Stats()
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					start := time.Now()
					if _, err := s.Take(ctx, k, r, start, benchN(r, i)); err != nil {
						b.Fatal(err)
					}
					if len(lat) < cap(lat) {
						lat = append(lat, time.Since(start))
					}
					i++
				}
				reportStats(b, before, s.Stats())
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			})
			b.Run(name+"/parallel", func(b *testing.B) {
				s := newStore(b, c, clock)
				keys := make([]limit.Key, 10_000)
				for i := range keys {
					keys[i] = benchKey(i)
				}
				var next atomic.Int64
				before := s.Stats()
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					// Each goroutine its own run of keys, so that acquire
					// and release pair up on one key.
					i := int(next.Add(1)) * 1000
					for pb.Next() {
						if _, err := s.Take(ctx, keys[i/2%len(keys)], r, time.Now(), benchN(r, i)); err != nil {
							b.Error(err)
							return
						}
						i++
					}
				})
				reportStats(b, before, s.Stats())
			})
		}
	}
}

// reportStats reports the round trips per Take.
func reportStats(b *testing.B, before, after redisstore.Stats) {
	b.Helper()
	if takes := after.Takes - before.Takes; takes > 0 {
		b.ReportMetric(float64(after.Calls-before.Calls)/float64(takes), "roundtrips/op")
	}
}
