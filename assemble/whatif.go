package assemble

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/ratewarden/ratewarden/aggregator/report"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/edge"
	"github.com/ratewarden/ratewarden/edge/challenge"
	"github.com/ratewarden/ratewarden/edge/identity"
)

// WhatIfOptions configure WhatIf.
type WhatIfOptions struct {
	Config       *config.Config // the candidate, loaded and validated
	DecisionsDir string         // the decision log to replay
	From, To     time.Time      // the events replayed: [From, To)
	Top          int            // identities listed at most; 0: every one
	Title        string         // default "What-if"
	Source       string         // what was read, for the header
	// Progress, if set, is called every few thousand events with the log's
	// payload bytes read.
	Progress func(read uint64)
	// Reorder is how far out of decision-time order the log may hold
	// requests: the edge writes a decision when its response ends, so a
	// slow response's decision follows quicker ones decided after it. The
	// replay decides in decision-time order within this horizon; default
	// 30 s. A request later than that is replayed when read, and counted.
	Reorder time.Duration
}

// replayPeer is the peer every replayed request comes from: the replay's
// limiter trusts it, so the forwarding and user headers it sets carry the
// logged identity through the limiter's own resolver.
const replayPeer = "127.0.0.1:1"

// WhatIfIdentity says how a replay resolves identities; it is printed in
// every what-if.
const WhatIfIdentity = "Identities are replayed as logged: the client address, user id and plan the edge resolved then (after any privacy treatment the log records) reach the candidate's limiter through its own resolver; the tier is recomputed from the candidate's tiers, the IPv6 prefix a client is counted under from its identity.ipv6_prefix."

// whatIfNotes are the rest of a replay's conditions.
var whatIfNotes = []string{
	"The counters are filled first by the requests logged in the warm-up before the range (as long as the candidate's rules remember: a window, two for a sliding window, a token bucket's time to fill), decided and not reported; they live in memory; time is each event's own. Store failures are not replayed: the candidate's store never fails, so requests logged fail_open, fail_closed or local_limit are decided on their counts.",
	"Requests the allow, deny or challenge list decided (allow_listed, deny_listed, challenge by the challenge list) are kept as logged and not counted against limits, as the edge does not count them: the lists of the time are what the log records.",
	"A request logged token_pass carried a valid challenge token, and carries one in the replay; no other request does. A concurrency slot is held for the request's logged upstream latency. Requests are replayed in decision-time order (the log holds them as their responses ended).",
}

// WhatIf replays the requests the decision log holds between o.From and
// o.To through a limiter built from the candidate configuration, with a
// memory store and each event's time as the clock, and reports which
// identities and how many requests would change class (allowed, refused,
// challenged), by rule.
func WhatIf(ctx context.Context, o WhatIfOptions) (*report.WhatIf, error) {
	if o.Config == nil || o.DecisionsDir == "" {
		return nil, errors.New("whatif: a candidate configuration and a decision log are required")
	}
	if !o.From.Before(o.To) {
		return nil, fmt.Errorf("whatif: --from %s is not before --to %s", o.From.UTC().Format(time.RFC3339), o.To.UTC().Format(time.RFC3339))
	}
	cfg := *o.Config
	cfg.Store.Type = "memory"
	cfg.Identity = config.Identity{
		TrustedProxies: []string{"127.0.0.1/32"},
		ClientIPHeader: identity.DefaultClientIPHeader,
		UserHeader:     identity.DefaultUserHeader,
		PlanHeader:     identity.DefaultPlanHeader,
		IPv6Prefix:     o.Config.Identity.IPv6Prefix,
	}
	// Tokens are minted for the replay only, with a key that never leaves
	// it.
	keys, err := challenge.ParseKeys("replay:" + "cmVwbGF5LW9ubHkta2V5LW5vdC1hLXNlY3JldC0wMTIzNDU2Nzg5")
	if err != nil {
		return nil, err
	}
	lim, err := edge.New(&cfg, edge.Options{Keys: keys, Env: func(string) string { return "" }})
	if err != nil {
		return nil, fmt.Errorf("whatif: candidate: %w", err)
	}
	defer lim.Close(context.WithoutCancel(ctx))
	// Read from the warm-up on: a range that starts inside a window
	// would otherwise start the candidate's counters empty, and report the
	// requests the window's earlier ones refused as changed to allowed,
	// even for the configuration the edge ran.
	rd, err := decisionlog.Open(o.DecisionsDir, decisionlog.Filter{Since: o.From.Add(-warmUp(&cfg)), Until: o.To})
	if err != nil {
		return nil, fmt.Errorf("whatif: %w", err)
	}
	defer rd.Close()

	out := &report.WhatIf{Title: cmp.Or(o.Title, "What-if"), Source: o.Source, Config: o.Config.File(), From: o.From.UTC(), To: o.To.UTC(), Identity: WhatIfIdentity, Notes: whatIfNotes}
	var tally report.WhatIfTally
	r := &replayer{held: &minHeap[release]{less: func(a, b release) bool { return a.at.Before(b.at) }}, lim: lim, keys: keys, ttl: cfg.Challenge.TokenTTL, header: cfg.Challenge.Header, prefix: cfg.Identity.IPv6Prefix}
	if r.prefix == 0 {
		r.prefix = identity.DefaultIPv6Prefix
	}
	horizon := o.Reorder
	if horizon <= 0 {
		horizon = reorderDefault
	}
	var v edge.Verdict
	// pending orders by decision time, then by place in the log; the
	// requests wait in slab (free slots in free), so that the heap moves
	// small values.
	pending := &minHeap[queued]{less: func(a, b queued) bool {
		return a.at < b.at || a.at == b.at && a.seq < b.seq
	}}
	var slab []decisions.Decision
	var free []int32
	var latest, done time.Time // the latest time read, and replayed
	replay := func(d *decisions.Decision) {
		if d.Time.After(done) {
			done = d.Time
		}
		r.decide(ctx, d, &v)
		if !d.Time.Before(o.From) {
			tally.Add(clientOf(d), d, &v.Decision)
		}
	}
	take := func(q queued) {
		replay(&slab[q.slot])
		slab[q.slot] = decisions.Decision{}
		free = append(free, q.slot)
	}
	for n := uint64(0); ; n++ {
		d, _, err := rd.Next(ctx, false)
		if decisionlog.IsEnd(err) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("whatif: %w", err)
		}
		if o.Progress != nil && n%4096 == 4095 {
			o.Progress(rd.Stats().Bytes)
		}
		inRange := !d.Time.Before(o.From) // not the warm-up's
		if d.Kind != decisions.KindDecision {
			out.Skipped += count(inRange)
			continue
		}
		if listDecided(&d) {
			out.Kept += count(inRange)
			continue
		}
		if d.Time.After(latest) {
			latest = d.Time
		}
		if d.Time.Before(done) {
			out.OutOfOrder += count(inRange) // later than the horizon: its turn has passed
		}
		var slot int32
		if k := len(free); k > 0 {
			slot, free = free[k-1], free[:k-1]
			slab[slot] = d
		} else {
			slot = int32(len(slab))
			slab = append(slab, d)
		}
		pending.push(queued{at: d.Time.UnixNano(), seq: n, slot: slot})
		for due := latest.Add(-horizon).UnixNano(); pending.Len() > 0 && pending.items[0].at < due; {
			take(pending.pop())
		}
	}
	for pending.Len() > 0 {
		take(pending.pop())
	}
	r.releaseUntil(ctx, time.Time{}, true)
	if o.Progress != nil {
		o.Progress(rd.Stats().Bytes)
	}
	for _, e := range rd.Problems() {
		out.Problems = append(out.Problems, report.Problem{Source: o.DecisionsDir, Error: e.Error()})
	}
	tally.Fill(out, o.Top)
	return out, nil
}

// count is 1 for true.
func count(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// warmUp is how long before a range the replay reads to fill the
// candidate's counters: the longest any of its rules remembers. A fixed
// window's count starts at its window's start; a sliding window's also
// weighs the previous window's; a token bucket's level is what the
// requests of the time it takes to fill from empty left; a concurrency
// rule's slots are held by requests decided within the reorder horizon,
// 30 s by default, about as long as a response lasts. It reads at most
// maxWarmUp, whatever a token bucket's burst.
func warmUp(cfg *config.Config) time.Duration {
	w := reorderDefault
	for _, t := range cfg.Tiers {
		for _, r := range append(slices.Collect(maps.Values(t.Paths)), t.Global) {
			if r == nil {
				continue
			}
			switch r.Algorithm {
			case "concurrency":
			case "sliding_window":
				w = max(w, 2*r.Window)
			case "token_bucket":
				fill := r.Window
				if r.Limit > 0 && r.Burst > r.Limit {
					fill = time.Duration(float64(r.Window) * float64(r.Burst) / float64(r.Limit))
				}
				w = max(w, fill)
			default:
				w = max(w, r.Window)
			}
		}
	}
	return min(w, maxWarmUp)
}

const (
	reorderDefault = 30 * time.Second // WhatIfOptions.Reorder's default
	maxWarmUp      = 48 * time.Hour   // two of the longest windows
)

// queued is a logged request waiting in slot for its turn in decision-time
// order (at, Unix nanoseconds); seq, its place in the log, orders the
// requests of one instant.
type queued struct {
	at   int64
	seq  uint64
	slot int32
}

// listDecided reports whether a list decided d before any rule counted it:
// the allow and deny lists, and the challenge list for a client without a
// token.
func listDecided(d *decisions.Decision) bool {
	return d.Outcome == decisions.AllowListed || d.Outcome == decisions.DenyListed ||
		d.Outcome == decisions.Challenge && d.Reason == edge.ReasonChallengeListed
}

// clientOf names d's client as reports do: user:<id>, or the address.
func clientOf(d *decisions.Decision) string {
	if d.UserID != "" {
		return "user:" + d.UserID
	}
	return d.ClientIP.String()
}

// replayer feeds logged requests to the candidate's limiter. It is not
// safe for concurrent use.
type replayer struct {
	lim    *edge.Limiter
	keys   *challenge.Keyring
	ttl    time.Duration
	header string
	prefix int
	held   *minHeap[release] // by end time
	req    edge.Request
	h      http.Header
}

// decide decides the logged request d at its own time into v, after
// giving back the concurrency slots of the requests that had ended by then.
func (r *replayer) decide(ctx context.Context, d *decisions.Decision, v *edge.Verdict) {
	r.releaseUntil(ctx, d.Time, false)
	if r.h == nil {
		r.h = http.Header{}
	}
	clear(r.h)
	if d.ClientIP.IsValid() {
		r.h.Set("X-Forwarded-For", d.ClientIP.String())
	}
	if d.UserID != "" {
		r.h.Set(identity.DefaultUserHeader, d.UserID)
		if d.Plan != "" {
			r.h.Set(identity.DefaultPlanHeader, d.Plan)
		}
	}
	if d.Outcome == decisions.TokenPass {
		addr := netip.Addr{}
		if d.UserID == "" {
			addr = identity.CountingAddr(d.ClientIP, r.prefix)
		}
		r.h.Set(r.header, r.keys.Issue(challenge.Subject(addr, d.UserID), d.Time, r.ttl))
	}
	r.req = edge.Request{RemoteAddr: replayPeer, Method: d.Method, Host: d.Host, Path: d.Path, URI: d.Path, Header: r.h, RequestID: d.RequestID}
	r.lim.Begin(ctx, d.Time, &r.req, v)
	if v.Holds() {
		held := new(edge.Verdict)
		*held = *v
		r.held.push(release{at: d.Time.Add(d.UpstreamLatency), v: held})
	}
}

// releaseUntil gives back the slots of the requests that ended at or
// before t (every one with all).
func (r *replayer) releaseUntil(ctx context.Context, t time.Time, all bool) {
	for r.held.Len() > 0 && (all || !r.held.items[0].at.After(t)) {
		rel := r.held.pop()
		r.lim.Release(ctx, rel.at, rel.v)
	}
}

type release struct {
	at time.Time
	v  *edge.Verdict
}

// minHeap is a binary heap of T ordered by less, without container/heap's
// interface conversions (an allocation per request otherwise).
type minHeap[T any] struct {
	items []T
	less  func(a, b T) bool
}

func (h *minHeap[T]) Len() int { return len(h.items) }

func (h *minHeap[T]) push(x T) {
	h.items = append(h.items, x)
	for i := len(h.items) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(h.items[i], h.items[p]) {
			break
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
}

func (h *minHeap[T]) pop() T {
	n := len(h.items) - 1
	h.items[0], h.items[n] = h.items[n], h.items[0]
	x := h.items[n]
	var zero T
	h.items[n] = zero
	h.items = h.items[:n]
	for i := 0; ; {
		m, l, r := i, 2*i+1, 2*i+2
		if l < n && h.less(h.items[l], h.items[m]) {
			m = l
		}
		if r < n && h.less(h.items[r], h.items[m]) {
			m = r
		}
		if m == i {
			return x
		}
		h.items[i], h.items[m] = h.items[m], h.items[i]
		i = m
	}
}
