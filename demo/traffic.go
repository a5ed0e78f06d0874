package demo

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/internal/limitheaders"
)

// The actors of the story.
const (
	ActorUsers    = "users"    // anonymous visitors and signed-in users of every plan
	ActorScraper  = "scraper"  // one address, 800 requests a second, from ScraperStart
	ActorStuffing = "stuffing" // a /24 trying leaked passwords on /api/login, from StuffingStart
)

// The story's schedule, at speed 1.
const (
	ScraperAddr   = "203.0.113.7"
	ScraperRate   = 800 // requests a second
	ScraperStart  = 10 * time.Second
	ScraperLength = 30 * time.Second

	StuffingNet    = "198.51.100." // .0 to .255
	StuffingRate   = 100
	StuffingStart  = 25 * time.Second
	StuffingLength = 15 * time.Second
)

// Traffic sends the story's requests to an edge. Set Target; the rest
// has defaults. Run may be called once.
type Traffic struct {
	Target string       // the edge's base URL, such as http://127.0.0.1:8080
	Client *http.Client // default: keep-alive, redirects not followed
	// InFlight bounds the requests waiting for answers; a request that
	// would pass it is not sent, and counted. Default 256.
	InFlight int

	stats sync.Map     // actor → *ActorStats
	mark  atomic.Int64 // Unix nanoseconds; 0: no mark
	now   func() time.Time
}

// Mark counts, from at on, the list's 302s of requests sent at or after
// at apart (ActorStats.ChallengedSinceMark): the demo marks when the
// challenge list has been read with the scraper on it. The first mark
// holds.
func (t *Traffic) Mark(at time.Time) { t.mark.CompareAndSwap(0, at.UnixNano()) }

// ActorStats count one actor's requests by what the edge answered.
type ActorStats struct {
	Sent       atomic.Uint64
	OK         atomic.Uint64 // 2xx from the origin
	Challenged atomic.Uint64 // 302 to the challenge page
	Blocked    atomic.Uint64 // 429
	Refused    atomic.Uint64 // 401 from the origin (a wrong password)
	Other      atomic.Uint64 // any other status
	Errors     atomic.Uint64 // no answer
	Skipped    atomic.Uint64 // not sent: too many in flight
	// ChallengedSinceMark counts the 302s of a list answered to requests
	// sent at or after the traffic's mark (Traffic.Mark): those without
	// rate-limit headers, which the edge sets on an answer that counted
	// against a limit, its own challenges included.
	ChallengedSinceMark atomic.Uint64

	// When each was first seen, Unix nanoseconds (0: not yet): the first
	// request sent, the first 302, 429, and 302 since the mark.
	firstSent, firstChallenged, firstBlocked, firstSinceMark atomic.Int64
}

// Firsts are when an actor's first request was sent and when it was
// first challenged, blocked, and challenged since the mark; zero when it
// was not.
type Firsts struct {
	Sent, Challenged, Blocked, ChallengedSinceMark time.Time
}

// Firsts returns when each first happened.
func (s *ActorStats) Firsts() Firsts {
	t := func(a *atomic.Int64) time.Time {
		if n := a.Load(); n != 0 {
			return time.Unix(0, n)
		}
		return time.Time{}
	}
	return Firsts{t(&s.firstSent), t(&s.firstChallenged), t(&s.firstBlocked), t(&s.firstSinceMark)}
}

// first sets a to at unless it is set.
func first(a *atomic.Int64, at time.Time) { a.CompareAndSwap(0, at.UnixNano()) }

func (s *ActorStats) String() string {
	return fmt.Sprintf("sent %d: ok %d, challenged %d, blocked %d, 401 %d, other %d, errors %d (not sent %d)",
		s.Sent.Load(), s.OK.Load(), s.Challenged.Load(), s.Blocked.Load(), s.Refused.Load(), s.Other.Load(), s.Errors.Load(), s.Skipped.Load())
}

// Stats returns the counts of actor.
func (t *Traffic) Stats(actor string) *ActorStats {
	v, _ := t.stats.LoadOrStore(actor, new(ActorStats))
	return v.(*ActorStats)
}

// request is one request of the story.
type request struct {
	method, path string
	addr         string // the client address, in X-Forwarded-For
	user, plan   string
	form         url.Values
}

// Run sends the story's traffic for d (or until ctx is done), reading the
// story's clock through now: the phases start and end, and the rates are
// per second, in now's time. With the wall clock that is the story as
// told; with an accelerated clock (Story) the story plays out faster
// at the same rates per story second, so speed times as many requests a
// wall second (as many as the machine can send: what the in-flight bound
// refuses is counted as not sent); while the clock waits, nothing is
// sent.
func (t *Traffic) Run(ctx context.Context, d time.Duration, now func() time.Time) {
	if t.Client == nil {
		t.Client = &http.Client{Timeout: 10 * time.Second,
			Transport:     &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if t.InFlight <= 0 {
		t.InFlight = 256
	}
	t.now = now
	// Requests still in flight when the story ends are cancelled.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, t.InFlight)
	var wg, phases sync.WaitGroup
	start := now()
	// phase sends rate requests a story second made by next, from
	// start+at for length (0: to the end), in ticks of 10 ms of wall time.
	phase := func(actor string, rate int, at, length time.Duration, next func(i int) request) {
		defer phases.Done()
		end := d
		if length > 0 {
			end = min(d, at+length)
		}
		if at >= end { // the story ends before the phase would start
			return
		}
		st := t.Stats(actor)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		i, owed, last := 0, 0.0, at
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			el := min(now().Sub(start), end)
			if el < at {
				continue
			}
			owed += float64(rate) * (el - last).Seconds()
			last = el
			for ; owed >= 1; owed-- {
				r := next(i)
				i++
				select {
				case sem <- struct{}{}:
				default:
					st.Skipped.Add(1)
					continue
				}
				st.Sent.Add(1)
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done() }()
					t.send(ctx, st, r)
				}()
			}
			if el >= end {
				return
			}
		}
	}
	plans := []string{"", "free", "pro", "enterprise"}
	phases.Add(3)
	go phase(ActorUsers, 30, 0, 0, func(i int) request {
		n := i % 40
		if n < 20 { // anonymous visitors browse, and now and then sign in
			addr := "192.0.2." + strconv.Itoa(n+1)
			if (i/40+n)%10 == 9 { // each visitor every tenth turn, two a turn
				return request{method: "POST", path: "/api/login", addr: addr,
					form: url.Values{"user": {"visitor-" + strconv.Itoa(n)}, "password": {Password}}}
			}
			return request{method: "GET", path: "/products/" + strconv.Itoa(i%500), addr: addr}
		}
		// Each user turns through the paths, within every limit of its tier.
		path := []string{"/api/search?q=lamp", "/products/" + strconv.Itoa(i%500), "/api/reports", "/api/export"}[i/40%4]
		return request{method: "GET", path: path, addr: "10.1.0." + strconv.Itoa(n), user: "user-" + strconv.Itoa(n), plan: plans[n%4]}
	})
	go phase(ActorScraper, ScraperRate, ScraperStart, ScraperLength, func(i int) request {
		if i%2 == 0 {
			return request{method: "GET", path: "/products/" + strconv.Itoa(i%5000), addr: ScraperAddr}
		}
		return request{method: "GET", path: "/api/search?q=" + strconv.Itoa(i), addr: ScraperAddr}
	})
	go phase(ActorStuffing, StuffingRate, StuffingStart, StuffingLength, func(i int) request {
		return request{method: "POST", path: "/api/login", addr: StuffingNet + strconv.Itoa(i%256),
			form: url.Values{"user": {"victim-" + strconv.Itoa(i)}, "password": {"hunter" + strconv.Itoa(i%7)}}}
	})
	phases.Wait()
	cancel()
	wg.Wait()
}

func (t *Traffic) send(ctx context.Context, st *ActorStats, r request) {
	var body io.Reader
	if r.form != nil {
		body = strings.NewReader(r.form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, r.method, t.Target+r.path, body)
	if err != nil {
		st.Errors.Add(1)
		return
	}
	req.Header.Set("X-Forwarded-For", r.addr)
	sent := t.now()
	first(&st.firstSent, sent)
	if r.form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if r.user != "" {
		req.Header.Set("X-User-Id", r.user)
		req.Header.Set("X-User-Plan", r.plan)
	}
	resp, err := t.Client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			st.Errors.Add(1)
		}
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		st.OK.Add(1)
	case c == http.StatusFound:
		st.Challenged.Add(1)
		at := t.now()
		first(&st.firstChallenged, at)
		// The edge sets its rate-limit headers on an answer that counted
		// against a limit, and not on a list's.
		if m := t.mark.Load(); m != 0 && sent.UnixNano() >= m && resp.Header.Get(limitheaders.Limit) == "" {
			st.ChallengedSinceMark.Add(1)
			first(&st.firstSinceMark, at)
		}
	case c == http.StatusTooManyRequests:
		st.Blocked.Add(1)
		first(&st.firstBlocked, t.now())
	case c == http.StatusUnauthorized:
		st.Refused.Add(1)
	default:
		st.Other.Add(1)
	}
}
