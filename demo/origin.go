// Package demo is what `ratewarden demo` puts around the edge: a sample
// origin (a small shop API with a login) and simulated traffic — users
// across the tiers, the seed story's scraper at 800 requests a second, a
// credential-stuffing burst from a /24 — and a sink that prints a line per
// aggregated window.
package demo

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Origin is the sample origin: /products/<id>, /api/search, /api/reports,
// /api/export and POST /api/login (the password of every user is
// "correct horse"). It counts what reaches it per second, so the demo can
// show it stays within what it was built for. It is safe for concurrent
// use; the zero value is not usable: use NewOrigin.
type Origin struct {
	now      func() time.Time
	requests atomic.Uint64
	logins   atomic.Uint64
	failed   atomic.Uint64

	mu     sync.Mutex
	second int64  // the current second, Unix
	inSec  uint64 // requests in it
	peak   uint64 // most requests in one second
}

// NewOrigin returns an origin reading the clock now.
func NewOrigin(now func() time.Time) *Origin { return &Origin{now: now} }

// Password is every demo user's password.
const Password = "correct horse"

// ServeHTTP answers as a small shop API would.
func (o *Origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.count()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/api/login" && r.Method == http.MethodPost:
		o.logins.Add(1)
		if err := r.ParseForm(); err != nil || r.PostForm.Get("password") != Password {
			o.failed.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintln(w, `{"error":"invalid credentials"}`)
			return
		}
		fmt.Fprintln(w, `{"session":"demo"}`)
	case strings.HasPrefix(r.URL.Path, "/products/"), strings.HasPrefix(r.URL.Path, "/api/"):
		fmt.Fprintf(w, "{\"path\":%q,\"items\":[1,2,3]}\n", r.URL.Path)
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintln(w, `{"error":"not found"}`)
	}
}

func (o *Origin) count() {
	o.requests.Add(1)
	sec := o.now().Unix()
	o.mu.Lock()
	defer o.mu.Unlock()
	if sec != o.second {
		o.second, o.inSec = sec, 0
	}
	o.inSec++
	o.peak = max(o.peak, o.inSec)
}

// OriginStats are what reached the origin.
type OriginStats struct {
	Requests     uint64 // every request
	Logins       uint64 // login attempts
	FailedLogins uint64 // of which with a wrong password
	PeakPerSec   uint64 // most requests in one second
}

// Stats returns what reached the origin so far.
func (o *Origin) Stats() OriginStats {
	o.mu.Lock()
	peak := o.peak
	o.mu.Unlock()
	return OriginStats{Requests: o.requests.Load(), Logins: o.logins.Load(), FailedLogins: o.failed.Load(), PeakPerSec: peak}
}
