package memstore_test

import (
	"context"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/memstore"
)

const million = 1_000_000

// benchRule never refuses, so every hit is recorded.
var benchRule = limit.Rule{Algorithm: limit.FixedWindow, Limit: 1 << 40, Window: time.Minute}

// benchKey is the i-th distinct IPv4 key under one rule id.
func benchKey(i int) limit.Key {
	return limit.Key{Rule: "anonymous./api", Addr: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})}
}

// benchStore has room for every key the benchmarks take, so that they time
// existing keys, not evictions.
func benchStore() *memstore.Store {
	return memstore.New(memstore.Options{MaxKeys: 2 * million, SweepEvery: -1})
}

func BenchmarkTake(b *testing.B) {
	ctx := context.Background()
	now := base.Add(10 * time.Second)

	b.Run("hot_key", func(b *testing.B) {
		s := benchStore()
		k := benchKey(1)
		b.ReportAllocs()
		for b.Loop() {
			s.Take(ctx, k, benchRule, now, 1)
		}
	})

	b.Run("1M_keys", func(b *testing.B) {
		s := benchStore()
		keys := make([]limit.Key, million)
		for i := range keys {
			keys[i] = benchKey(i)
			s.Take(ctx, keys[i], benchRule, now, 1)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			s.Take(ctx, keys[i], benchRule, now, 1)
			if i++; i == len(keys) {
				i = 0
			}
		}
	})

	// Each goroutine cycles over its own 4096 keys and every eighth hit
	// goes to one key that all of them share.
	b.Run("parallel", func(b *testing.B) {
		const perG = 4096
		s := benchStore()
		hot := limit.Key{Rule: "anonymous./api", User: "hot"}
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			g := int(next.Add(1))
			keys := make([]limit.Key, perG)
			for i := range keys {
				keys[i] = benchKey(g*perG + i)
			}
			i := 0
			for pb.Next() {
				k := &keys[i%perG]
				if i%8 == 7 {
					k = &hot
				}
				s.Take(ctx, *k, benchRule, now, 1)
				i++
			}
		})
	})
}

// BenchmarkBytesPerKey reports the heap a store holds per live key, with a
// million keys.
func BenchmarkBytesPerKey(b *testing.B) {
	ctx := context.Background()
	now := base.Add(10 * time.Second)
	var perKey float64
	for range b.N {
		b.StopTimer()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()

		s := benchStore()
		for i := range million {
			s.Take(ctx, benchKey(i), benchRule, now, 1)
		}

		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if keys := s.Stats().Keys; keys != million {
			b.Fatalf("%d keys live, want %d", keys, million)
		}
		runtime.KeepAlive(s)
		perKey = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / million
		b.StartTimer()
	}
	b.ReportMetric(perKey, "B/key")
}
