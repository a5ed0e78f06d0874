package edge

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// BenchmarkMiddleware measures one request through Middleware in front of
// a handler that answers nothing: the decision (memory store, 64 Ki
// clients in turn), the response headers, the hand-off and the decision
// emitted after the response. wall reads the wall clock as every
// deployment does; story_clock reads Options.Clock (the demo's
// accelerated clock), to show what the option costs where it is set and
// that wall pays only its nil check.
func BenchmarkMiddleware(b *testing.B) {
	cfg := seedConfig(b, nil)
	addrs := benchAddrs(1 << 16)
	start := time.Now()
	for _, c := range []struct {
		name  string
		clock func() time.Time
	}{
		{"wall", nil},
		{"story_clock", func() time.Time { return start.Add(time.Since(start) * 10) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			em := decisions.NewEmitter(decisions.Discard, decisions.EmitterOptions{Queue: 1 << 16})
			b.Cleanup(func() { em.Close(context.Background()) })
			l := newLimiter(b, cfg, Options{Sink: em, Clock: c.clock})
			h := l.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r := httptest.NewRequest(http.MethodGet, "/products/7", nil)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r.RemoteAddr = addrs[i&(1<<16-1)]
				i++
				clear(w.Header())
				h.ServeHTTP(w, r)
			}
		})
	}
}
