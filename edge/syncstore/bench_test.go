package syncstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/syncstore"
)

// BenchmarkTake times the three paths of a hit: answered by the over-limit
// cache, admitted locally, and passed through to the store (the memory
// store here, so that the wrapper's own cost shows). "one_key" shares one
// key among the goroutines; "spread" gives each goroutine its own keys.
func BenchmarkTake(b *testing.B) {
	ctx := context.Background()
	now := base.Add(10 * time.Second)
	blocked := edgeRule(limit.FixedWindow, 10, time.Hour)
	far := limit.Rule{Algorithm: limit.FixedWindow, Limit: 1 << 40, Window: time.Hour}

	run := func(b *testing.B, opts syncstore.Options, rule limit.Rule, spread bool, warm int, check func(syncstore.Stats) bool) {
		opts.Store, opts.FlushInterval = newMem(b), -1
		s := newSync(b, opts)
		var next atomic.Int64
		keys := func(g int) []limit.Key {
			ks := make([]limit.Key, 64)
			for i := range ks {
				ks[i] = addrKey("tier:/path", i)
				if spread {
					ks[i] = addrKey("tier:/path", g*len(ks)+i)
				}
			}
			for _, k := range ks {
				for range warm {
					s.Take(ctx, k, rule, now, 1)
				}
			}
			return ks
		}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			ks := keys(int(next.Add(1)))
			i := 0
			for pb.Next() {
				s.Take(ctx, ks[i&63], rule, now, 1)
				i++
			}
		})
		b.StopTimer()
		// Warming the keys takes a few hits down other paths: check once the
		// timed hits outnumber them.
		if st := s.Stats(); b.N >= 100_000 && !check(st) {
			b.Fatalf("the benchmark did not time the path it names: %+v", st)
		}
	}
	cacheHit := func(st syncstore.Stats) bool { return st.CacheHits > st.StoreCalls }
	local := func(st syncstore.Stats) bool { return st.LocalAdmits > st.StoreCalls }
	pass := func(st syncstore.Stats) bool { return st.CacheHits == 0 && st.LocalAdmits == 0 }
	batched := syncstore.Options{MaxError: 0.01, Nodes: 1}

	for _, spread := range []bool{false, true} {
		name := "one_key"
		if spread {
			name = "spread"
		}
		b.Run("cache_hit/"+name, func(b *testing.B) { run(b, syncstore.Options{}, blocked, spread, 25, cacheHit) })
		b.Run("local_admit/"+name, func(b *testing.B) { run(b, batched, far, spread, 1, local) })
		b.Run("pass_through/"+name, func(b *testing.B) { run(b, syncstore.Options{}, far, spread, 0, pass) })
	}
}
