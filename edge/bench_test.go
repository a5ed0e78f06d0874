package edge

import (
	"context"
	"hash/maphash"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge/identity"
	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/memstore"
)

const benchKeys = 1 << 20 // "1M_keys"

func benchAddrs(n int) []string {
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + ":4711"
	}
	return addrs
}

// BenchmarkDecide measures one decision with the memory store: identity,
// tier and longest-prefix match, two counter updates (path rule and global
// rule), grading, and the hand-off to the decision emitter (at once with
// Decide, or after the response with Begin and End). The peer
// sub-benchmarks do the same two counter updates with golang.org/x/time/rate
// limiters in a sharded map (and no decision at all).
func BenchmarkDecide(b *testing.B) {
	// 1 M clients count against two rules each: room for 4 M counters, so
	// the benchmark measures lookups, not the eviction policy.
	cfg := seedConfig(b, func(c *config.Config) { c.Store.MaxKeys = 4 << 20 })
	addrs := benchAddrs(benchKeys)
	newL := func(b *testing.B) (*Limiter, *decisions.Emitter) {
		// A queue deep enough that a decision every few hundred ns is not
		// dropped while the writer waits for a core (the production
		// default, 4,096, drops here, which would flatter the figure); the
		// hot key reports the decisions dropped, which must stay 0.
		em := decisions.NewEmitter(decisions.Discard, decisions.EmitterOptions{Queue: 1 << 16})
		b.Cleanup(func() { em.Close(context.Background()) })
		return newLimiter(b, cfg, Options{Sink: em}), em
	}
	ctx := context.Background()
	hotKey := func(b *testing.B, decide func(l *Limiter, now time.Time, r *Request, v *Verdict)) {
		l, em := newL(b)
		r := req("203.0.113.7:4711", "/api/search")
		var v Verdict
		b.ReportAllocs()
		now := t0
		defer func() { b.ReportMetric(float64(em.Stats().Dropped), "dropped") }()
		defer reportCPU(b)()
		for b.Loop() {
			now = now.Add(time.Microsecond)
			decide(l, now, r, &v)
		}
	}
	b.Run("hot_key", func(b *testing.B) {
		hotKey(b, func(l *Limiter, now time.Time, r *Request, v *Verdict) { l.Decide(ctx, now, r, v) })
	})
	// The same client on one kept-alive connection whose peer address
	// the server parsed once (Request.Peer), as the middleware does.
	b.Run("hot_key_conn", func(b *testing.B) {
		hotKey(b, func(l *Limiter, now time.Time, r *Request, v *Verdict) {
			if !r.Peer.IsValid() {
				r.Peer = identity.ParsePeer(r.RemoteAddr)
			}
			l.Decide(ctx, now, r, v)
		})
	})
	// What Middleware does: decide, then record the response and emit.
	b.Run("hot_key_begin_end", func(b *testing.B) {
		hotKey(b, func(l *Limiter, now time.Time, r *Request, v *Verdict) {
			l.Begin(ctx, now, r, v)
			v.Status, v.UpstreamLatency = 200, 3*time.Millisecond
			l.End(ctx, now, v)
		})
	})
	b.Run("1M_keys", func(b *testing.B) {
		l, _ := newL(b)
		r := req("", "/api/search")
		var v Verdict
		for _, a := range addrs {
			r.RemoteAddr = a
			l.Decide(ctx, t0, r, &v)
		}
		b.ReportAllocs()
		now, i := t0, 0
		for b.Loop() {
			now = now.Add(time.Microsecond)
			r.RemoteAddr = addrs[i&(benchKeys-1)]
			i++
			l.Decide(ctx, now, r, &v)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		l, _ := newL(b)
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			g := int(next.Add(1))
			r := req("", "/api/search")
			var v Verdict
			i := g * 7919
			now := t0
			for pb.Next() {
				now = now.Add(time.Microsecond)
				r.RemoteAddr = addrs[i&(benchKeys-1)]
				i++
				l.Decide(ctx, now, r, &v)
			}
		})
	})
}

// reportCPU reports the CPU time the process used per operation, user and
// system, every goroutine's and the GC's included (cpu-ns/op), when the
// function it returns is called after the loop. On a shared machine it
// moves less with the load than ns/op, which is wall time.
func reportCPU(b *testing.B) func() {
	start := processCPU()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peer is the comparison: per-key x/time/rate limiters in a sharded map,
// one for the path rule and one for the global rule, as a hand-written
// limiter would keep them.
type peer struct {
	seed   maphash.Seed
	shards [64]struct {
		sync.Mutex
		m map[peerKey]*rate.Limiter
	}
}

type peerKey struct{ rule, ip string }

func newPeer() *peer {
	p := &peer{seed: maphash.MakeSeed()}
	for i := range p.shards {
		p.shards[i].m = make(map[peerKey]*rate.Limiter)
	}
	return p
}

func (p *peer) allow(now time.Time, rule string, limit rate.Limit, burst int, ip string) bool {
	s := &p.shards[maphash.String(p.seed, ip)&63]
	k := peerKey{rule, ip}
	s.Lock()
	lim := s.m[k]
	if lim == nil {
		lim = rate.NewLimiter(limit, burst)
		s.m[peerKey{rule, string([]byte(ip))}] = lim
	}
	s.Unlock()
	return lim.AllowN(now, 1)
}

func (p *peer) decide(now time.Time, remoteAddr string) bool {
	ip, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return false
	}
	// /api/search: 30/min; global: 60/min.
	if !p.allow(now, "/api/search", rate.Every(2*time.Second), 30, ip) {
		return false
	}
	return p.allow(now, "global", rate.Every(time.Second), 60, ip)
}

func BenchmarkDecidePeerXTimeRate(b *testing.B) {
	addrs := benchAddrs(benchKeys)
	b.Run("hot_key", func(b *testing.B) {
		p := newPeer()
		b.ReportAllocs()
		now := t0
		defer reportCPU(b)()
		for b.Loop() {
			now = now.Add(time.Microsecond)
			p.decide(now, "203.0.113.7:4711")
		}
	})
	b.Run("1M_keys", func(b *testing.B) {
		p := newPeer()
		for _, a := range addrs {
			p.decide(t0, a)
		}
		b.ReportAllocs()
		now, i := t0, 0
		for b.Loop() {
			now = now.Add(time.Microsecond)
			p.decide(now, addrs[i&(benchKeys-1)])
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		p := newPeer()
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(1)) * 7919
			now := t0
			for pb.Next() {
				now = now.Add(time.Microsecond)
				p.decide(now, addrs[i&(benchKeys-1)])
				i++
			}
		})
	})
}

// BenchmarkCounters isolates the counting core: the two counter updates of
// a decision (path rule and global rule) on the memory store, against the
// same two updates on x/time/rate limiters in a sharded map. No identity
// resolution, no matching, no decision event.
func BenchmarkCounters(b *testing.B) {
	addrs := benchAddrs(benchKeys)
	ips := make([]netip.Addr, len(addrs))
	hosts := make([]string, len(addrs))
	for i, a := range addrs {
		h, _, _ := net.SplitHostPort(a)
		hosts[i], ips[i] = h, netip.MustParseAddr(h)
	}
	path := limit.Rule{Algorithm: limit.TokenBucket, Limit: 30, Window: time.Minute}
	global := limit.Rule{Algorithm: limit.TokenBucket, Limit: 60, Window: time.Minute}
	ctx := context.Background()
	ours := func(b *testing.B, n int) {
		s := memstore.New(memstore.Options{MaxKeys: 4 << 20, SweepEvery: -1})
		defer s.Close(ctx)
		take := func(now time.Time, i int) {
			s.Take(ctx, limit.Key{Rule: "anonymous:/api/search", Addr: ips[i]}, path, now, 1)
			s.Take(ctx, limit.Key{Rule: "anonymous:global", Addr: ips[i]}, global, now, 1)
		}
		for i := range n {
			take(t0, i)
		}
		b.ReportAllocs()
		now, i := t0, 0
		for b.Loop() {
			now = now.Add(time.Second) // stay within the limits: both updates happen
			take(now, i%n)
			i++
		}
	}
	peerRun := func(b *testing.B, n int) {
		p := newPeer()
		take := func(now time.Time, i int) {
			p.allow(now, "/api/search", rate.Every(2*time.Second), 30, hosts[i])
			p.allow(now, "global", rate.Every(time.Second), 60, hosts[i])
		}
		for i := range n {
			take(t0, i)
		}
		b.ReportAllocs()
		now, i := t0, 0
		for b.Loop() {
			now = now.Add(time.Second)
			take(now, i%n)
			i++
		}
	}
	b.Run("ratewarden/hot_key", func(b *testing.B) { ours(b, 1) })
	b.Run("x_time_rate/hot_key", func(b *testing.B) { peerRun(b, 1) })
	b.Run("ratewarden/1M_keys", func(b *testing.B) { ours(b, benchKeys) })
	b.Run("x_time_rate/1M_keys", func(b *testing.B) { peerRun(b, benchKeys) })
}
