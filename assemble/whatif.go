package assemble

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
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
	"Counters start empty at the start of the range and live in memory; time is each event's own. Store failures are not replayed: the candidate's store never fails, so requests logged fail_open, fail_closed or local_limit are decided on their counts.",
	"Requests logged allow_listed or deny_listed are kept as logged and not counted against limits, as the edge does not count them: the lists of the time are what the log records.",
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
	rd, err := decisionlog.Open(o.DecisionsDir, decisionlog.Filter{Since: o.From, Until: o.To})
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
		horizon = 30 * time.Second
	}
	var v edge.Verdict
	// pending orders by decision time, then by place in the log.
	pending := &minHeap[queued]{less: func(a, b queued) bool {
		if c := a.d.Time.Compare(b.d.Time); c != 0 {
			return c < 0
		}
		return a.seq < b.seq
	}}
	var latest, done time.Time // the latest time read, and replayed
	replay := func(d *decisions.Decision) {
		if d.Time.After(done) {
			done = d.Time
		}
		r.decide(ctx, d, &v)
		tally.Add(clientOf(d), d, &v.Decision)
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
		if d.Kind != decisions.KindDecision {
			out.Skipped++
			continue
		}
		if d.Outcome == decisions.AllowListed || d.Outcome == decisions.DenyListed {
			out.Kept++
			continue
		}
		if d.Time.After(latest) {
			latest = d.Time
		}
		if d.Time.Before(done) {
			out.OutOfOrder++ // later than the horizon: its turn has passed
		}
		heap.Push(pending, queued{d: d, seq: n})
		for pending.Len() > 0 && latest.Sub(pending.items[0].d.Time) > horizon {
			q := heap.Pop(pending).(queued)
			replay(&q.d)
		}
	}
	for pending.Len() > 0 {
		q := heap.Pop(pending).(queued)
		replay(&q.d)
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

// queued is a logged request waiting for its turn in decision-time order;
// seq, its place in the log, orders the requests of one instant.
type queued struct {
	d   decisions.Decision
	seq uint64
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
		heap.Push(r.held, release{at: d.Time.Add(d.UpstreamLatency), v: held})
	}
}

// releaseUntil gives back the slots of the requests that ended at or
// before t (every one with all).
func (r *replayer) releaseUntil(ctx context.Context, t time.Time, all bool) {
	for r.held.Len() > 0 && (all || !r.held.items[0].at.After(t)) {
		rel := heap.Pop(r.held).(release)
		r.lim.Release(ctx, rel.at, rel.v)
	}
}

type release struct {
	at time.Time
	v  *edge.Verdict
}

// minHeap is a container/heap of T ordered by less.
type minHeap[T any] struct {
	items []T
	less  func(a, b T) bool
}

func (h *minHeap[T]) Len() int           { return len(h.items) }
func (h *minHeap[T]) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }
func (h *minHeap[T]) Swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *minHeap[T]) Push(x any)         { h.items = append(h.items, x.(T)) }
func (h *minHeap[T]) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}
