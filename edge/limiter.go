// Package edge is the rate limiter that sits in front of an origin: it
// identifies the client, counts the request against its tier's path rule
// and global rule, and decides to allow, challenge or block; every request
// yields exactly one decision, handed to a sink without blocking.
//
// The decision core is Limiter.Begin, which decides, and Limiter.End,
// which records what happened to the response and emits the decision;
// Limiter.Decide does both at once for callers with no response. The
// deployment shapes are thin adapters around them: Middleware for net/http
// (and so the reverse proxy of `ratewarden edge`), and the Lambda handler
// in package edge/lambda.
package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge/challenge"
	"github.com/ratewarden/ratewarden/edge/identity"
	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/lists"
	"github.com/ratewarden/ratewarden/edge/memstore"
	"github.com/ratewarden/ratewarden/internal/canonpath"
)

// Store counts hits per key and rule. Implementations are safe for
// concurrent use; package limittest is their conformance suite.
type Store interface {
	Take(ctx context.Context, key limit.Key, rule limit.Rule, now time.Time, n int64) (limit.Result, error)
}

// inProcess is implemented by stores that cannot block or fail (the memory
// store): the limiter then skips the deadline, the breaker and the latency
// clock reads.
type inProcess interface{ InProcess() bool }

// remoteTaker is implemented by stores that answer some calls without the
// distributed store behind them (syncstore: the over-limit cache, local
// admissions). Only answers that came from the distributed store tell the
// breaker that it is healthy: cached answers come back without error
// whatever its state.
type remoteTaker interface {
	TakeRemote(ctx context.Context, key limit.Key, rule limit.Rule, now time.Time, n int64) (res limit.Result, remote bool, err error)
}

// Sink receives every decision. Emit must not block; it reports false when
// it dropped the decision.
type Sink interface {
	Emit(d decisions.Decision) bool
}

// refSink is implemented by sinks that take a decision by reference and
// do not retain it (decisions.Emitter, decisions.Fanout): the request path
// then copies its decision once, into the queue, rather than twice.
type refSink interface {
	EmitRef(d *decisions.Decision) bool
}

// ListSource yields the current allow, deny or challenge list; the list may
// change between calls (a lists.Watcher refreshes it).
type ListSource interface {
	List() *lists.List
}

// Options are the collaborators of a Limiter. Every field is optional.
type Options struct {
	Store Store      // default: a memory store sized by the configuration
	Sink  Sink       // default: decisions are discarded (still counted)
	Allow ListSource // allow list: limits bypassed
	Deny  ListSource // deny list: 403
	// Challenge list: challenged (302 to the challenge page) whatever the
	// count, unless the request carries a valid challenge token.
	Challenge ListSource
	Keys      *challenge.Keyring
	// Env reads environment variables (JWT keys); default os.Getenv.
	Env func(string) string
	// Log receives a warning for responses that failed (origin timeouts
	// and errors, client timeouts), at most a few a second; default none.
	Log *slog.Logger
	// Clock, if set, is read for the time of each decision (the time the
	// handlers pass to Begin and End, and tokens' issue time) instead of
	// the wall clock: the demo's accelerated story time. What is timed
	// from the decision time follows it (rate windows, token expiry, the
	// store breaker's cool-down); latencies and deadlines stay on the wall
	// clock. Default nil: time.Now, read
	// directly.
	Clock func() time.Time
}

// Limiter decides requests. It is safe for concurrent use.
type Limiter struct {
	cfg             *config.Config
	node            string
	tiers           map[string]*tier
	anonymous       *tier
	authed          *tier    // may be nil
	failClosed      []string // in their match form (canonpath.MatchForm)
	challengePage   string   // challengePagePrefix, "" for none
	pathCase        canonpath.Case
	rejectAmbiguous bool // paths.ambiguous: reject
	fwd             forwarding
	ident           *identity.Resolver
	store           Store
	taker           remoteTaker     // the store, when it says which answers are the distributed store's
	remote          bool            // the store is not in-process: deadlines, breaker, latency
	mem             *memstore.Store // the store, when it is the memory store: called directly
	timeout         time.Duration
	breaker         *breaker
	local           *memstore.Store // fallback counters while the breaker is open
	ownStore        *memstore.Store // the default store, closed by Close
	sink            Sink
	refSink         refSink // sink, when it takes decisions by reference
	allow           ListSource
	deny            ListSource
	challenged      ListSource
	keys            *challenge.Keyring
	ipv6Prefix      int
	tokenRule       *rule // wrong verifier secrets per address; nil without challenges

	metrics  counters
	log      *slog.Logger     // may be nil
	clock    func() time.Time // Options.Clock; nil: the wall clock
	logs     sampler
	ids      *requestIDs
	releases releases // of a remote store only
}

// New builds a Limiter from a validated configuration.
func New(cfg *config.Config, opts Options) (*Limiter, error) {
	pathCase := cfg.Paths.Case
	tiers, err := compileTiers(cfg, pathCase)
	if err != nil {
		return nil, err
	}
	failClosed := make([]string, len(cfg.FailClosed))
	for i, p := range cfg.FailClosed {
		failClosed[i] = canonpath.MatchForm(p, pathCase)
	}
	env := opts.Env
	if env == nil {
		env = osGetenv
	}
	res, err := identity.New(cfg.Identity, env)
	if err != nil {
		return nil, fmt.Errorf("new limiter: %w", err)
	}
	l := &Limiter{
		cfg: cfg, node: cfg.Edge.Node, tiers: tiers,
		anonymous: tiers[config.TierAnonymous], authed: tiers[config.TierAuthenticated],
		failClosed: failClosed, challengePage: challengePagePrefix(cfg.Challenge.PagePath(), pathCase),
		pathCase: pathCase, rejectAmbiguous: cfg.Paths.Ambiguous != "rewrite",
		fwd: newForwarding(cfg), ident: res, store: opts.Store,
		timeout: cfg.Store.Timeout, sink: opts.Sink, allow: opts.Allow, deny: opts.Deny, challenged: opts.Challenge, keys: opts.Keys,
		ipv6Prefix: cfg.Identity.IPv6Prefix, ids: newRequestIDs(), log: opts.Log, clock: opts.Clock,
	}
	l.refSink, _ = opts.Sink.(refSink)
	if cfg.Challenge.Enabled {
		if l.tokenRule, err = compileTokenRule(cfg); err != nil {
			return nil, err
		}
	}
	if l.store == nil {
		l.ownStore = memstore.New(memstore.Options{MaxKeys: cfg.Store.MaxKeys})
		l.store = l.ownStore
	}
	l.taker, _ = l.store.(remoteTaker)
	l.mem, _ = l.store.(*memstore.Store)
	if ip, ok := l.store.(inProcess); !ok || !ip.InProcess() {
		l.remote = true
		l.breaker = newBreaker(cfg.Store.Breaker.Failures, cfg.Store.Breaker.Cooldown)
		l.local = memstore.New(memstore.Options{MaxKeys: cfg.Store.MaxKeys})
		l.releases.start(maxPendingReleases)
		go l.retryReleases(l.releases.ctx)
	}
	return l, nil
}

// Close stops the goroutine that retries concurrency releases and waits
// for it, then sends the releases still pending to the store one last time
// within ctx (whatever the breaker says: nothing will send them later),
// counts those it could not send as lost, and closes the stores the
// limiter created itself. Releases after Close are still queued but no
// longer sent.
func (l *Limiter) Close(ctx context.Context) error {
	var errs []error
	if l.releases.cancel != nil {
		errs = append(errs, l.closeReleases(ctx))
	}
	if l.ownStore != nil {
		errs = append(errs, l.ownStore.Close(ctx))
	}
	if l.local != nil {
		errs = append(errs, l.local.Close(ctx))
	}
	return errors.Join(errs...)
}

// Request is what the limiter needs to know of a request.
type Request struct {
	RemoteAddr string // the TCP peer, "ip:port"
	// Peer is RemoteAddr parsed (identity.ParsePeer), for callers that
	// parse it once per connection; when it is the zero Addr, RemoteAddr
	// is parsed.
	Peer      netip.Addr
	Method    string      //
	Host      string      //
	Path      string      // as sent, still percent-encoded: its canonical form (package canonpath) is matched against path rules
	URI       string      // path and query, carried to the challenge page
	Header    http.Header // identity, forwarding and token headers
	RequestID string      // may be empty
	// Hits is how many hits the request counts for (Envoy's hits_addend);
	// 0 counts one. Larger values are capped at MaxHits.
	Hits int64
	// Identity, when set, is who the caller already knows the client to be
	// (Envoy's rate limit descriptors): it is used as is, and RemoteAddr
	// and the identity headers are not read.
	Identity *identity.Identity
	// Shadow passes what the limits would refuse (block, challenge, local
	// limit), recorded as shadow_block: a whole deployment's shadow mode,
	// beside the rules' own shadow key. Deny lists and fail_closed paths
	// still refuse.
	Shadow bool
}

// MaxHits bounds Request.Hits: a count far past any limit, small enough
// that no counter overflows however many such requests a window sees.
const MaxHits = 1 << 30

// Verdict is a decision and what the response needs.
type Verdict struct {
	decisions.Decision
	RetryAfter time.Duration // for refusals
	// Policies are the rules the request was counted against, for the
	// RateLimit-Policy header; Policies[0] decided.
	Policies [2]Policy
	// held are concurrency slots to release when the response ends.
	held [2]held
	uri  string // carried to the challenge page
	// form is how far the request's path was from Decision.Path, its
	// canonical form; pathErr why it has none (outcome Rejected).
	form    canonpath.Form
	pathErr error
}

// Policy is one rule a request was counted against.
type Policy struct {
	Name      string
	Limit     int64
	Window    time.Duration // 0 for concurrency limits
	Remaining int64
	Reset     time.Duration
}

type held struct {
	rule *rule
	key  limit.Key
	fall bool // held on the local fallback store
}

// Severity of a rule's result, worst last. The worst decides a request
// counted under two rules, so a store failure ranks by what it does to the
// request: on a fail-closed path it refuses it whatever the other rule
// says; on another path it passes it, as a shadow rule does, and the
// decision records fail_open, not the allow of the other rule.
const (
	levelOK = iota
	levelShadow
	levelFailOpen
	levelChallenge
	levelBlock
	levelFailClosed
)

type eval struct {
	rule  *rule
	res   limit.Result
	level int
	fall  int8 // 0: store answered; 1: fail open; 2: fail closed; 3: local limit answered
	err   error
	lat   time.Duration
}

// Decide decides r at now into v and hands the decision to the sink at
// once, for callers that have no response to wait for; it is Begin
// followed by the emission End would make, without releasing the
// concurrency slots v holds (Release does). It never blocks longer than
// the store deadline and never fails: store errors become fail-open or
// fail-closed decisions. The verdict is filled in place because it is
// large: a caller deciding many requests reuses one.
func (l *Limiter) Decide(ctx context.Context, now time.Time, r *Request, v *Verdict) {
	l.Begin(ctx, now, r, v)
	l.emit(v)
}

// Begin decides r at now into v, as Decide does, but does not emit the
// decision: the caller serves the response, records what happened on v
// (Status, UpstreamLatency, ResponseError) and calls End exactly once, so
// that the request's one decision says how it ended.
func (l *Limiter) Begin(ctx context.Context, now time.Time, r *Request, v *Verdict) {
	var id identity.Identity
	t := l.start(now, r, v, &id)
	d := &v.Decision
	hits := min(max(r.Hits, 1), MaxHits)

	path, form, plain, err := canonpath.CleanPlain(r.Path)
	d.Path, v.form, v.pathErr = path, form, err
	switch {
	case err != nil:
		d.Path = rejectedPath(r.Path)
		l.finish(v, decisions.Rejected, err.Error())
		return
	case form == canonpath.Ambiguous && l.rejectAmbiguous:
		d.Path = rejectedPath(r.Path)
		l.finish(v, decisions.Rejected, reasonAmbiguous)
		return
	case !id.ClientIP.IsValid() && id.User == "":
		// Nothing to count under. Sharing one counter among every
		// unidentifiable request would refuse them all; this only happens
		// when a deployment passes no peer address (an ALB that removes
		// X-Forwarded-For, an Envoy without remote_address), so the
		// request is one the store cannot count, and the path's failure
		// mode decides it, as a store failure's: refused under a
		// fail_closed prefix, passed elsewhere, the decision saying why.
		if l.isFailClosed(path) {
			l.finish(v, decisions.FailClosed, ReasonNoClientAddress)
			return
		}
		l.finish(v, decisions.FailOpen, ReasonNoClientAddress)
		return
	case l.deny != nil && l.deny.List().ContainsAt(id.ClientIP, id.User, now):
		l.finish(v, decisions.DenyListed, "deny list")
		return
	case l.allow != nil && l.allow.List().ContainsAt(id.ClientIP, id.User, now):
		l.finish(v, decisions.AllowListed, "allow list")
		return
	}
	// A challenge-listed client without a valid token is challenged before
	// anything is counted; with one, it is limited as anyone else. So is
	// one asking for the challenge page itself, which it must reach.
	listed := l.challenged != nil && l.challenged.List().ContainsAt(id.ClientIP, id.User, now) && !l.onChallengePage(path)
	if listed && !l.tokenValid(r, &id, now) {
		l.finish(v, decisions.Challenge, ReasonChallengeListed)
		return
	}

	// Field by field: a composite literal would be built aside and copied
	// with wide loads, which wait for the narrow stores just made.
	var key limit.Key
	key.Addr, key.User = id.Addr, id.User
	var evals [2]eval
	var sc storeCtx
	n := 0
	if pr := t.match(path, plain, l.pathCase); pr != nil {
		l.evaluate(ctx, &sc, now, &key, pr, path, hits, &evals[0])
		n = 1
	}
	if n == 0 || evals[0].level < levelBlock {
		l.evaluate(ctx, &sc, now, &key, t.global, path, hits, &evals[n])
		n++
	}
	sc.done()

	// The worst result decides; among equals, the tightest.
	w := 0
	if n == 2 {
		a, b := &evals[0], &evals[1]
		if b.level > a.level || (b.level == a.level && b.res.Remaining < a.res.Remaining) {
			w = 1
		}
	}
	for i := range n {
		e := &evals[i]
		d.StoreLatency += e.lat
		p := &v.Policies[i]
		p.Name, p.Limit, p.Window, p.Remaining, p.Reset = e.rule.id, e.rule.capacity, window(e.rule), e.res.Remaining, e.res.Reset
		if e.rule.limit.Algorithm == limit.Concurrency && e.acquired() {
			k := key
			k.Rule = e.rule.id
			v.held[i] = held{rule: e.rule, key: k, fall: e.fall == 3}
		}
	}
	if w == 1 {
		v.Policies[0], v.Policies[1] = v.Policies[1], v.Policies[0]
	}
	e := &evals[w]
	d.Rule, d.Algorithm, d.Limit, d.Window = e.rule.id, e.rule.algorithm, e.rule.capacity, window(e.rule)
	d.Count, d.Remaining, d.Reset = e.res.Count, e.res.Remaining, e.res.Reset

	outcome, reason := l.outcome(e, r, &id, now)
	if listed && outcome == decisions.Allow {
		outcome, reason = decisions.TokenPass, ReasonChallengeListedPass
	}
	if outcome == decisions.Challenge && l.onChallengePage(path) {
		// Redirected to the page it is asking for, the client would loop.
		outcome, reason = decisions.Allow, ReasonChallengePage
	}
	if r.Shadow && (outcome == decisions.Block || outcome == decisions.Challenge || outcome == decisions.LocalLimit) {
		outcome, reason = decisions.ShadowBlock, reason+" (shadow mode)"
	}
	if !outcome.Passed() {
		l.release(ctx, now, v)
		v.RetryAfter = e.rule.limit.RetryAfter(e.res)
		if outcome == decisions.FailClosed {
			v.RetryAfter = l.cfg.Store.Breaker.Cooldown
		}
	}
	l.finish(v, outcome, reason)
}

// The reasons of decisions about challenge-listed clients, of a
// request for the challenge page that would have been challenged, and of
// a request with neither a client address nor a user.
const (
	ReasonNoClientAddress     = "no client address"
	ReasonChallengeListed     = "challenge list"
	ReasonChallengeListedPass = "challenge list: valid challenge token"
	ReasonChallengePage       = "over the limit: the challenge page"
)

// start resets v for r and fills in what every decision of r records:
// who the client is (also into *id), the request line and the tier.
func (l *Limiter) start(now time.Time, r *Request, v *Verdict, id *identity.Identity) *tier {
	// The identity first, the verdict's reset after: the identity is read
	// back field-wide (the counter key copies its address), and such a
	// load waits for the stores of what it reads and those before them,
	// which must not be the verdict's 700 bytes.
	if r.Identity != nil {
		*id = *r.Identity
	} else {
		peer := r.Peer
		if !peer.IsValid() {
			peer = identity.ParsePeer(r.RemoteAddr)
		}
		l.ident.ResolvePeerTo(id, peer, r.Header, now)
	}
	*v = Verdict{uri: r.URI}
	d := &v.Decision
	d.Time, d.RequestID, d.Node = now, r.RequestID, l.node
	d.ClientIP, d.UserID, d.Plan, d.IdentitySource = id.ClientIP, id.User, id.Plan, id.Source
	d.Method, d.Host = r.Method, r.Host
	t := l.tierFor(id.User, id.Plan)
	d.Tier = t.name
	return t
}

// Reject records r, which an adapter refused before it could be decided
// (an Envoy call with no domain, say), as Rejected for reason, without
// counting it, and emits the decision: every call is an event.
func (l *Limiter) Reject(now time.Time, r *Request, v *Verdict, reason string) {
	var id identity.Identity
	l.start(now, r, v, &id)
	v.Path = rejectedPath(r.Path)
	l.finish(v, decisions.Rejected, reason)
	l.emit(v)
}

const reasonAmbiguous = "ambiguous path: dot segments, repeated slashes or backslashes"

// maxRejectedPath bounds the path a Rejected decision records, as sent.
const maxRejectedPath = 256

func rejectedPath(p string) string {
	if len(p) > maxRejectedPath {
		return p[:maxRejectedPath]
	}
	return p
}

func window(r *rule) time.Duration {
	if r.limit.Algorithm == limit.Concurrency {
		return 0
	}
	return r.limit.Window
}

// outcome turns the deciding evaluation into an outcome and a reason.
func (l *Limiter) outcome(e *eval, r *Request, id *identity.Identity, now time.Time) (decisions.Outcome, string) {
	switch e.fall {
	case 1:
		return decisions.FailOpen, storeReason(e.err, "fails open")
	case 2:
		return decisions.FailClosed, storeReason(e.err, "fails closed")
	case 3:
		if e.level >= levelChallenge {
			return decisions.LocalLimit, "store unavailable: over the local limit"
		}
		return decisions.FailOpen, "store unavailable: within the local limit"
	}
	switch e.level {
	case levelShadow:
		return decisions.ShadowBlock, "over the limit (shadow rule)"
	case levelChallenge:
		if l.tokenValid(r, id, now) {
			return decisions.TokenPass, "over the limit: valid challenge token"
		}
		return decisions.Challenge, "over the limit"
	case levelBlock:
		if e.rule.challenge {
			return decisions.Block, "over the challenge ceiling"
		}
		return decisions.Block, "over the limit"
	}
	return decisions.Allow, "within the limit"
}

func storeReason(err error, mode string) string {
	switch {
	case err == nil:
		return "store unavailable (breaker open): path " + mode
	case errors.Is(err, context.DeadlineExceeded):
		return "store timeout: path " + mode
	}
	return "store error: path " + mode
}

// acquired reports whether the evaluation took a slot (of a concurrency
// rule) that must be given back.
func (e *eval) acquired() bool {
	return (e.fall == 0 && e.res.Count <= e.rule.capacity) || (e.fall == 3 && e.rule.local.Allowed(e.res))
}

// storeCtx is one decision's deadline for the store: its store calls
// share it, so a decision waits at most one store timeout, and once one
// call fails the others do not wait again.
type storeCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
	err    error // the failure of an earlier call
}

func (sc *storeCtx) done() {
	if sc.cancel != nil {
		sc.cancel()
	}
}

// evaluate counts hits of key under ru and grades the result into e; it
// sets key.Rule to ru's id. The key is passed by reference: a copy of the
// key the caller has just written would wait for its stores.
func (l *Limiter) evaluate(ctx context.Context, sc *storeCtx, now time.Time, key *limit.Key, ru *rule, path string, hits int64, e *eval) {
	key.Rule = ru.id
	e.rule = ru
	if ru.limit.Algorithm == limit.Concurrency {
		// A request holds one slot, whatever it counts for: Release gives
		// back one.
		hits = 1
	}
	if !l.remote {
		if l.mem != nil {
			e.res, _ = l.mem.TakeRef(key, &ru.limit, now, hits)
		} else {
			e.res, _ = l.store.Take(ctx, *key, ru.limit, now, hits)
		}
		e.level = ru.grade(e.res)
		return
	}
	ns := now.UnixNano()
	var ok, probe bool
	if sc.err == nil {
		ok, probe = l.breaker.allow(ns)
	}
	if ok {
		if sc.ctx == nil {
			sc.ctx, sc.cancel = context.WithTimeout(ctx, l.timeout)
		}
		start := time.Now()
		remote := true
		if l.taker != nil {
			e.res, remote, e.err = l.taker.TakeRemote(sc.ctx, *key, ru.limit, now, hits)
		} else {
			e.res, e.err = l.store.Take(sc.ctx, *key, ru.limit, now, hits)
		}
		e.lat = time.Since(start)
		l.metrics.storeLatency(e.lat)
		if e.err == nil {
			switch {
			case remote:
				l.breaker.success()
				l.releases.kick()
			case probe:
				// Answered without the store: the probe found nothing out.
				l.breaker.abandon(ns)
			}
			e.level = ru.grade(e.res)
			return
		}
		sc.err = e.err
		if ctx.Err() != nil {
			// The caller went away: that says nothing of the store.
			if probe {
				l.breaker.abandon(ns)
			}
		} else {
			l.metrics.storeErrors.Add(1)
			l.breaker.failure(ns)
		}
	}
	if sc.err != nil {
		// This call or an earlier one of the decision failed: fail open or
		// closed without waiting on the store again.
		e.err = sc.err
		e.level, e.fall = levelFailOpen, 1
		if l.isFailClosed(path) {
			e.level, e.fall = levelFailClosed, 2
		}
		return
	}
	if l.isFailClosed(path) {
		e.level, e.fall = levelFailClosed, 2
		return
	}
	// Breaker open: enforce the local share of the limit.
	e.fall = 3
	e.res, _ = l.local.Take(ctx, *key, ru.local, now, hits)
	if ru.local.Allowed(e.res) {
		e.level = levelOK
	} else {
		e.level = levelBlock
	}
}

// grade maps a store result to a severity.
func (r *rule) grade(res limit.Result) int {
	var level int
	switch {
	case res.Count <= r.capacity:
		return levelOK
	case r.challenge && res.Count <= r.ceiling:
		level = levelChallenge
	default:
		level = levelBlock
	}
	if r.shadow {
		return levelShadow
	}
	return level
}

// onChallengePage reports whether the canonical path is the challenge
// page's, or below it (challengePagePrefix): a request for it is never
// challenged, as a client redirected there would be redirected again,
// for ever. It is counted, and blocked over the ceiling, as any other.
func (l *Limiter) onChallengePage(path string) bool {
	return l.challengePage != "" && canonpath.HasPrefix(path, l.challengePage, l.pathCase)
}

// challengePagePrefix returns, in match form, the prefix of the requests
// that are for the challenge page, whose path is pagePath
// (config.Challenge.PagePath): that path and the paths below it, for its
// assets. A page given as a URL is taken by its path, whatever its host
// (rules apply to every host alike), unless that is the root: a page at
// the root of a host is taken to be served by another. "" for none.
func challengePagePrefix(pagePath string, c canonpath.Case) string {
	p, _, err := canonpath.Clean(pagePath)
	if err != nil || p == "/" {
		return ""
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return canonpath.MatchForm(p, c)
}

func (l *Limiter) isFailClosed(path string) bool {
	for _, p := range l.failClosed {
		if canonpath.HasPrefix(path, p, l.pathCase) {
			return true
		}
	}
	return false
}

// tierFor picks the tier: a configured plan tier, else authenticated, else
// anonymous.
func (l *Limiter) tierFor(user, plan string) *tier {
	if user == "" {
		return l.anonymous
	}
	if plan != "" && plan != config.TierAnonymous {
		if t := l.tiers[plan]; t != nil {
			return t
		}
	}
	if l.authed != nil {
		return l.authed
	}
	return l.anonymous
}

// tokenValid reports whether r carries a valid challenge token for id.
func (l *Limiter) tokenValid(r *Request, id *identity.Identity, now time.Time) bool {
	if l.keys == nil {
		return false
	}
	tok := r.Header.Get(l.cfg.Challenge.Header)
	if tok == "" {
		tok = cookieValue(r.Header, l.cfg.Challenge.Cookie)
	}
	if tok == "" {
		return false
	}
	_, err := l.keys.Verify(tok, challenge.Subject(id.Addr, id.User), now)
	if err != nil {
		l.metrics.tokenRejected.Add(1)
		return false
	}
	return true
}

func cookieValue(h http.Header, name string) string {
	if len(h["Cookie"]) == 0 {
		return ""
	}
	for _, c := range (&http.Request{Header: h}).Cookies() {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

// finish sets the verdict's outcome and reason. A reason longer than
// readers believe (decisions.MaxNameLen: an adapter's words about a
// client's input, such as an Envoy domain quoted) is cut to it, on a
// character boundary: a longer one would make every reader refuse the
// whole record that holds it, the other clients' decisions with it.
func (l *Limiter) finish(v *Verdict, o decisions.Outcome, reason string) {
	v.Outcome, v.Reason = o, decisions.Cut(reason, decisions.MaxNameLen)
	l.metrics.outcomes[o].Add(1)
}

func (l *Limiter) emit(v *Verdict) {
	var ok bool
	switch {
	case l.refSink != nil:
		ok = l.refSink.EmitRef(&v.Decision)
	case l.sink != nil:
		ok = l.sink.Emit(v.Decision)
	default:
		return
	}
	if !ok {
		l.metrics.dropped.Add(1)
	}
}

// End is called when the response to a request decided by Begin has
// ended (or the client went away): it returns the concurrency slots v
// holds, counts and logs a failed response, and emits the decision with
// the response fields the caller set on v.
func (l *Limiter) End(ctx context.Context, now time.Time, v *Verdict) {
	l.release(ctx, now, v)
	if v.ResponseError != "" {
		l.metrics.responseError(v.ResponseError)
		l.logFailure(now, v)
	}
	l.emit(v)
}

// logFailure logs a failed response, at most maxFailureLogs a second: an
// origin outage under load must not flood the log. The next line logged
// says how many were left out.
func (l *Limiter) logFailure(now time.Time, v *Verdict) {
	if l.log == nil {
		return
	}
	ok, skipped := l.logs.allow(now)
	if !ok {
		return
	}
	l.log.Warn("response failed", "error", v.ResponseError, "status", v.Status,
		"upstream_latency", v.UpstreamLatency, "request_id", v.RequestID, "tier", v.Tier, "rule", v.Rule,
		"method", v.Method, "path", v.Path, "not_logged", skipped)
}

// maxFailureLogs bounds the failed responses logged a second.
const maxFailureLogs = 10

// sampler lets through at most maxFailureLogs a second and counts the
// rest. It is safe for concurrent use; its zero value is ready.
type sampler struct {
	sec     atomic.Int64
	n       atomic.Int64
	skipped atomic.Uint64
}

// allow reports whether a line may be logged at now, and how many were
// left out since the last one allowed.
func (s *sampler) allow(now time.Time) (bool, uint64) {
	sec := now.Unix()
	if old := s.sec.Load(); old != sec && s.sec.CompareAndSwap(old, sec) {
		s.n.Store(0)
	}
	if s.n.Add(1) > maxFailureLogs {
		s.skipped.Add(1)
		return false, 0
	}
	return true, s.skipped.Swap(0)
}

// Release returns the concurrency slots v holds. Call it when the response
// ends; it is a no-op for verdicts that hold none.
func (l *Limiter) Release(ctx context.Context, now time.Time, v *Verdict) {
	l.release(ctx, now, v)
}

func (l *Limiter) release(ctx context.Context, now time.Time, v *Verdict) {
	for i := range v.held {
		h := &v.held[i]
		if h.rule == nil {
			continue
		}
		if h.fall {
			l.local.Take(ctx, h.key, h.rule.local, now, -1)
		} else if l.remote {
			l.releaseRemote(ctx, now, h)
		} else {
			l.store.Take(ctx, h.key, h.rule.limit, now, -1)
		}
		h.rule = nil
	}
}

// releaseRemote gives a slot back to the remote store, or queues it for
// the retry goroutine: concurrency counts never expire, so a release the
// store never got would count the slot as in flight for good.
func (l *Limiter) releaseRemote(ctx context.Context, now time.Time, h *held) {
	p := pendingRelease{rule: h.rule, key: h.key, now: now}
	if !l.breaker.closed() {
		// The store is down, or a probe is finding out whether it is back:
		// do not wait a deadline for it, nor take the probe.
		l.releases.push(p)
		return
	}
	// A client that hung up still gives its slot back, so the caller's
	// cancellation cannot be what fails this call: any failure is the
	// store's, and the slot waits for it.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timeout)
	_, err := l.store.Take(cctx, h.key, h.rule.limit, now, -1)
	cancel()
	if err != nil {
		l.metrics.storeErrors.Add(1)
		l.releases.push(p)
		return
	}
	l.releases.kick()
}

// maxPendingReleases bounds the releases kept for a store that could not
// take them (about 100 bytes each); beyond it a release is dropped and
// counted lost.
const maxPendingReleases = 1 << 16

// maxReleaseAttempts bounds the retries of one release, so that a release
// the store keeps refusing does not hold up those behind it for good.
// Retries follow a successful store call, so an outage spends none.
const maxReleaseAttempts = 8

// pendingRelease is a concurrency slot the store has not taken back.
type pendingRelease struct {
	rule     *rule
	key      limit.Key
	now      time.Time // of the release
	attempts int       // retries that failed
}

// releases are the concurrency releases a remote store did not take, in
// the order they were made, and the goroutine of the Limiter that sends
// them once the store answers again. It is safe for concurrent use; its
// zero value holds nothing and start makes it usable.
type releases struct {
	mu    sync.Mutex
	ring  []pendingRelease // n items from head, wrapping; grown up to max
	head  int
	n     int
	max   int
	wakeC chan struct{} // buffered: a retry is wanted

	pending atomic.Int64 // n, read without the lock on the request path
	retried atomic.Uint64
	lost    atomic.Uint64

	ctx    context.Context // of the retry goroutine, cancelled by Close
	cancel context.CancelFunc
	done   chan struct{} // closed when the retry goroutine returns
}

func (q *releases) start(bound int) {
	q.max = bound
	q.wakeC = make(chan struct{}, 1)
	q.done = make(chan struct{})
	q.ctx, q.cancel = context.WithCancel(context.Background())
}

// kick wakes the retry goroutine if releases are pending. It is called
// after every successful store call: one atomic load when none are.
func (q *releases) kick() {
	if q.pending.Load() == 0 {
		return
	}
	select {
	case q.wakeC <- struct{}{}:
	default:
	}
}

// push queues p, or drops and counts it when the queue is full: the newest
// is dropped, so that the order of the others holds.
func (q *releases) push(p pendingRelease) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n >= q.max {
		q.lost.Add(1)
		return
	}
	if q.n == len(q.ring) {
		ring := make([]pendingRelease, min(max(2*len(q.ring), 16), q.max))
		for i := range q.n {
			ring[i] = q.ring[(q.head+i)%len(q.ring)]
		}
		q.ring, q.head = ring, 0
	}
	q.ring[(q.head+q.n)%len(q.ring)] = p
	q.n++
	q.pending.Store(int64(q.n))
}

// front returns the oldest pending release. Only one goroutine at a time
// takes from the queue (the retry goroutine, then Close), so it is still
// the oldest when that goroutine calls pop or failed.
func (q *releases) front() (pendingRelease, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return pendingRelease{}, false
	}
	return q.ring[q.head], true
}

// pop removes the oldest pending release.
func (q *releases) pop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ring[q.head] = pendingRelease{}
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	if q.n == 0 {
		// A large queue is not kept once the store has caught up.
		q.head = 0
		if len(q.ring) > 64 {
			q.ring = nil
		}
	}
	q.pending.Store(int64(q.n))
}

// failed records a failed retry of the oldest pending release and drops it
// (counted lost) once it has used its attempts.
func (q *releases) failed() {
	q.mu.Lock()
	p := &q.ring[q.head]
	p.attempts++
	drop := p.attempts >= maxReleaseAttempts
	q.mu.Unlock()
	if drop {
		q.pop()
		q.lost.Add(1)
	}
}

// drop empties the queue, counting every release lost, and reports how
// many there were.
func (q *releases) drop() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.n
	q.ring, q.head, q.n = nil, 0, 0
	q.pending.Store(0)
	q.lost.Add(uint64(n))
	return n
}

// retryReleases is the retry goroutine: woken after a successful store
// call while releases are pending, it sends them until one fails.
func (l *Limiter) retryReleases(ctx context.Context) {
	defer close(l.releases.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.releases.wakeC:
		}
		l.flushReleases(ctx, false)
	}
}

// flushReleases sends the pending releases oldest first, each under the
// store deadline, until none is left, one fails (it and those after it
// stay queued, in order), ctx is done or, unless final, the breaker is not
// closed.
func (l *Limiter) flushReleases(ctx context.Context, final bool) error {
	q := &l.releases
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !final && !l.breaker.closed() {
			return nil
		}
		p, ok := q.front()
		if !ok {
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, l.timeout)
		_, err := l.store.Take(cctx, p.key, p.rule.limit, p.now, -1)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				// Stopped, not failed: the release keeps its attempts.
				return ctx.Err()
			}
			l.metrics.storeErrors.Add(1)
			q.failed()
			return fmt.Errorf("release %s: %w", p.key.Rule, err)
		}
		q.pop()
		q.retried.Add(1)
	}
}

// closeReleases stops the retry goroutine, flushes what is pending one
// last time and counts the rest lost.
func (l *Limiter) closeReleases(ctx context.Context) error {
	q := &l.releases
	q.cancel()
	select {
	case <-q.done:
	case <-ctx.Done():
		// The goroutine still owns the queue: leave it be.
		return fmt.Errorf("close limiter: stop the release retries: %w", ctx.Err())
	}
	err := l.flushReleases(ctx, true)
	if n := q.drop(); n > 0 {
		return errors.Join(fmt.Errorf("close limiter: %d concurrency releases not returned to the store", n), err)
	}
	return nil
}

// Holds reports whether v holds concurrency slots that Release must return.
func (v *Verdict) Holds() bool { return v.held[0].rule != nil || v.held[1].rule != nil }

// SubjectFor returns the challenge-token subject of a client address or
// user, counting IPv6 addresses by their configured prefix as Decide does.
func (l *Limiter) SubjectFor(ip netip.Addr, user string) string {
	return challenge.Subject(identity.CountingAddr(l.ident.ClientAddr(ip), l.ipv6Prefix), user)
}

// Identify returns the identity of a client the caller has already
// identified (Envoy's rate limit descriptors, which Envoy, a trusted proxy,
// states): ip counted as Begin counts addresses, user and plan as given
// when identity.Believes them, and otherwise none. Its Source says the
// address was forwarded by a trusted proxy, or, with a user, that the user
// was.
func (l *Limiter) Identify(ip netip.Addr, user, plan string) identity.Identity {
	ip = l.ident.ClientAddr(ip)
	id := identity.Identity{ClientIP: ip, Addr: identity.CountingAddr(ip, l.ipv6Prefix), Source: decisions.SourceForwarded}
	if identity.Believes(user, plan) {
		id.User, id.Plan, id.Source = user, plan, decisions.SourceHeader
	}
	return id
}

// Trusts reports whether the peer at remoteAddr is a trusted proxy
// (identity.trusted_proxies), whose forwarding and user headers the
// limiter believes.
func (l *Limiter) Trusts(remoteAddr string) bool { return l.ident.Trusts(remoteAddr) }

// Config returns the configuration the limiter was built from; callers
// must not change it.
func (l *Limiter) Config() *config.Config { return l.cfg }

func osGetenv(k string) string { return os.Getenv(k) }
