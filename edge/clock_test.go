package edge

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestMiddlewareClock: with Options.Clock the middleware stamps its
// decisions with the clock's time, which the limits count in, while the
// upstream latency stays a wall-clock duration. Without it, decisions are
// stamped with the wall clock.
func TestMiddlewareClock(t *testing.T) {
	story := time.Date(2031, 5, 4, 12, 0, 0, 0, time.UTC) // a clock that stands still
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		w.Write([]byte("ok"))
	})
	cfg := seedConfig(t, nil)
	for _, c := range []struct {
		name  string
		clock func() time.Time
	}{{"clock", func() time.Time { return story }}, {"wall", nil}} {
		t.Run(c.name, func(t *testing.T) {
			sink := &recordSink{}
			h := newLimiter(t, cfg, Options{Sink: sink, Clock: c.clock}).Middleware(origin)
			before := time.Now()
			r := httptest.NewRequest(http.MethodGet, "/products/7", nil)
			r.RemoteAddr = "203.0.113.9:4711"
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			after := time.Now()
			d := sink.waitFor(t, 1)[0]
			if w.Code != http.StatusOK {
				t.Fatalf("status %d", w.Code)
			}
			if c.clock != nil && !d.Time.Equal(story) {
				t.Errorf("decided at %v, want the clock's %v", d.Time, story)
			}
			if c.clock == nil && (d.Time.Before(before) || d.Time.After(after)) {
				t.Errorf("decided at %v, want between %v and %v", d.Time, before, after)
			}
			if d.UpstreamLatency < 20*time.Millisecond || d.UpstreamLatency > after.Sub(before) {
				t.Errorf("upstream latency %v, want the wall time the origin took (20 ms to %v)", d.UpstreamLatency, after.Sub(before))
			}
		})
	}
}
