// Package decisiontest provides a realistic, deterministic stream of
// decision events and helpers to compare them, for the tests and
// benchmarks of the decision log, its codecs and its sinks.
//
// The stream models a day at a mid-sized API behind three edge nodes with
// the seed's tiers: client addresses and users drawn from Zipf
// distributions (a few scrapers make much of the traffic and most of the
// refusals), a few dozen paths, the reasons the edge really writes, store
// latencies of a remote counter store, and rare feedback and drop events.
// The same seed and start always give the same events, so sizes and
// benchmark figures can be compared between runs and between codecs.
// Events are as the edge decides them, before any privacy treatment
// (Privacy is empty).
//
// Events hold no monotonic clock reading, so == compares them exactly;
// use Equal to compare events that went through a codec, which may change
// a time's location but not its instant.
package decisiontest

import (
	"math/rand/v2"
	"net/netip"
	"strconv"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// Shape of the population. The numbers matter only for realism: they set
// how many distinct values a batch holds.
const (
	numAddrs    = 100_000 // distinct client addresses
	numUsers    = 20_000  // distinct authenticated users
	numProducts = 500     // distinct /products/<id> paths
	numAbusers  = 16      // the busiest anonymous addresses scrape and get refused
)

// Generator produces a stream of realistic decision events. Times increase
// from the start by a few hundred microseconds per event, with jitter, at
// nanosecond precision as time.Now gives them, in start's location (without
// a monotonic reading). It is not safe for concurrent use; the zero value is
// not usable: call NewGenerator.
type Generator struct {
	r        *rand.Rand
	addrs    *rand.Zipf
	users    *rand.Zipf
	paths    *rand.Zipf
	products *rand.Zipf
	seed     uint64
	now      time.Time
	nodes    [3]node
	buf      []byte
}

type node struct {
	name   string
	prefix string // request-id prefix: 12 hex digits, then '-'
	next   uint64 // request-id counter, written in base 36
}

// NewGenerator returns a generator whose stream depends only on seed and
// start.
func NewGenerator(seed uint64, start time.Time) *Generator {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	g := &Generator{
		r:        r,
		addrs:    rand.NewZipf(r, 1.1, 10, numAddrs-1),
		users:    rand.NewZipf(r, 1.2, 5, numUsers-1),
		paths:    rand.NewZipf(r, 1.4, 2, uint64(len(paths)-1)),
		products: rand.NewZipf(r, 1.1, 5, numProducts-1),
		seed:     seed,
		now:      start.Round(0),
	}
	for i, name := range []string{"edge-fra-1", "edge-iad-1", "edge-sin-1"} {
		h := mix(seed, uint64(i)+0xed9e)
		g.nodes[i] = node{
			name:   name,
			prefix: hex12(h) + "-",
			next:   h>>40 + 36*36*36, // four or more base-36 digits from the start
		}
	}
	return g
}

// Batch returns the next n events.
func (g *Generator) Batch(n int) []decisions.Decision {
	ds := make([]decisions.Decision, n)
	for i := range ds {
		ds[i] = g.Next()
	}
	return ds
}

// Next returns the next event: a decision, or about once in a thousand a
// feedback action, or more rarely an emitter's drop report.
func (g *Generator) Next() decisions.Decision {
	// 100 µs plus an exponential jitter of mean 250 µs: about 2,900
	// events per second across the three nodes.
	g.now = g.now.Add(100*time.Microsecond + time.Duration(g.r.ExpFloat64()*250_000))
	switch p := g.r.IntN(100_000); {
	case p < 100:
		return g.feedback()
	case p < 105:
		return decisions.Decision{
			Kind: decisions.KindDrops, Time: g.now, Node: g.nodes[g.r.IntN(len(g.nodes))].name,
			Reason: "decision queue full", Dropped: 1 + g.r.Uint64N(2000),
		}
	}
	d := g.decision()
	respond(&d)
	return d
}

// respond fills in what happened after the decision, from what is already
// drawn (so the random stream, and every figure measured on it, stays as
// it was): the edge's own answer to a refusal; for passed requests the
// origin's 200 after a latency derived from the request id, with about
// one in 250 failing (an upstream timeout or an unreachable origin).
func respond(d *decisions.Decision) {
	switch d.Outcome {
	case decisions.Block, decisions.LocalLimit:
		d.Status = 429
		return
	case decisions.Challenge:
		d.Status = 302
		return
	case decisions.DenyListed:
		d.Status = 403
		return
	case decisions.FailClosed:
		d.Status = 503
		return
	case decisions.Rejected:
		d.Status = 400
		return
	}
	h := mix(uint64(len(d.RequestID)), uint64(d.Time.UnixNano()))
	d.Status, d.UpstreamLatency = 200, 2*time.Millisecond+time.Duration(h%40_000_000)
	switch h % 500 {
	case 0:
		d.Status, d.UpstreamLatency, d.ResponseError = 504, 30*time.Second, decisions.UpstreamTimeout
	case 1:
		d.Status, d.UpstreamLatency, d.ResponseError = 502, time.Duration(h%2_000_000), decisions.UpstreamUnreachable
	}
}

// A rule as the edge compiles it from the seed configuration.
type rule struct {
	id        string
	algorithm string
	limit     int64
	window    time.Duration
	challenge bool // over the limit: challenge first, block over twice the limit
	shadow    bool // never refuses: records shadow_block
}

type tier struct {
	name   string
	global rule
	paths  []prefixRule // longest prefix first
}

type prefixRule struct {
	prefix string
	rule   rule
}

func makeTier(name string, global rule, paths ...prefixRule) tier {
	global.id = name + ":global"
	for i := range paths {
		paths[i].rule.id = name + ":" + paths[i].prefix
	}
	return tier{name: name, global: global, paths: paths}
}

func fixed(limit int64) rule {
	return rule{algorithm: "fixed_window", limit: limit, window: time.Minute, challenge: true}
}

func sliding(limit int64) rule {
	return rule{algorithm: "sliding_window", limit: limit, window: time.Minute, challenge: true}
}

func bucket(limit int64) rule {
	return rule{algorithm: "token_bucket", limit: limit, window: time.Minute, challenge: true}
}

func inFlight(limit int64) rule {
	return rule{algorithm: "concurrency", limit: limit}
}

func authedPaths() []prefixRule {
	return []prefixRule{
		{"/api/reports", fixed(30)},
		{"/api/export", inFlight(5)},
		{"/api/search", sliding(120)},
	}
}

// The seed's tiers, with a few algorithms other than fixed windows so that
// every algorithm appears.
var (
	anonymous = makeTier("anonymous", fixed(60),
		prefixRule{"/api/reports", fixed(5)},
		prefixRule{"/api/export", inFlight(2)},
		prefixRule{"/api/search", sliding(30)},
		prefixRule{"/products", rule{algorithm: "fixed_window", limit: 120, window: time.Minute, shadow: true}},
	)
	authenticated = makeTier("authenticated", fixed(300), authedPaths()...)
	free          = makeTier("free", fixed(100), authedPaths()...)
	pro           = makeTier("pro", bucket(1000), authedPaths()...)
)

// paths in order of popularity; "/products/" is followed by an id.
var paths = []string{
	"/api/search", "/products/", "/", "/api/products", "/static/app.js",
	"/api/reports", "/api/cart", "/static/app.css", "/login", "/api/users/me",
	"/favicon.ico", "/api/search/suggest", "/api/orders", "/pricing", "/api/reports/daily",
	"/api/export", "/health", "/docs", "/api/reports/monthly", "/api/export/csv",
	"/api/billing/invoices", "/api/admin/users", "/captcha", "/api/auth/token", "/robots.txt",
	"/api/notifications", "/api/billing/subscription", "/sitemap.xml", "/api/admin/audit", "/api/graphql",
}

// productPaths are built once: the edge's paths share the request's
// memory, and allocating them per event would only slow the generator.
var productPaths = func() []string {
	ps := make([]string, numProducts)
	for i := range ps {
		ps[i] = "/products/" + strconv.Itoa(1000+i*7)
	}
	return ps
}()

func (t *tier) match(path string) *rule {
	for i := range t.paths {
		p := t.paths[i].prefix
		if len(path) >= len(p) && path[:len(p)] == p {
			return &t.paths[i].rule
		}
	}
	return &t.global
}

func isFailClosed(path string) bool {
	for _, p := range []string{"/api/admin/", "/api/billing/"} {
		if len(path) >= len(p) && path[:len(p)] == p {
			return true
		}
	}
	return false
}

// Special clients, by rank in their Zipf distribution.
const (
	denyRankA    = 3 // two scrapers on the deny list
	denyRankB    = 7
	monitorRank  = 40 // an uptime monitor on the allow list
	partnerRank  = 1  // a partner user on the allow list
	rareOutcomes = 1000
)

func (g *Generator) decision() decisions.Decision {
	n := &g.nodes[g.r.IntN(len(g.nodes))]
	d := decisions.Decision{Time: g.now, Node: n.name}
	g.buf = append(g.buf[:0], n.prefix...)
	g.buf = strconv.AppendUint(g.buf, n.next, 36)
	n.next++
	d.RequestID = string(g.buf)

	// Identity and tier.
	t := &anonymous
	var addrRank, userRank uint64
	if g.r.IntN(100) < 35 {
		userRank = g.users.Uint64()
		d.UserID = userID(g.seed, userRank)
		addrRank = mix(g.seed, userRank^0x05e7) % numAddrs // a user's usual address
		switch h := mix(g.seed, userRank) % 100; {
		case h < 55:
			d.Plan, t = "free", &free
		case h < 85:
			d.Plan, t = "pro", &pro
		default:
			t = &authenticated
		}
		d.IdentitySource = decisions.SourceJWT
		if g.r.IntN(4) == 0 {
			d.IdentitySource = decisions.SourceHeader
		}
	} else {
		addrRank = g.addrs.Uint64()
		switch p := g.r.IntN(1000); {
		case p < 800:
			d.IdentitySource = decisions.SourceForwarded
		case p < 980:
			d.IdentitySource = decisions.SourcePeer
		case p < 995:
			d.IdentitySource = decisions.SourceUntrustedHeader
		default:
			d.IdentitySource = decisions.SourceInvalidJWT
		}
	}
	d.Tier = t.name
	d.ClientIP = addrFor(g.seed, addrRank)

	// Request.
	abuser := d.UserID == "" && addrRank < numAbusers
	switch {
	case addrRank == monitorRank && d.UserID == "":
		d.Path = "/health"
	case abuser && g.r.IntN(2) == 0:
		d.Path = productPaths[g.r.IntN(numProducts)] // scrapers walk the catalogue
	default:
		d.Path = paths[g.paths.Uint64()]
		if d.Path == "/products/" {
			d.Path = productPaths[g.products.Uint64()]
		}
	}
	d.Host = "www.example.com"
	if len(d.Path) >= 5 && d.Path[:5] == "/api/" {
		d.Host = "api.example.com"
	}
	switch p := g.r.IntN(100); {
	case p < 86:
		d.Method = "GET"
	case p < 95:
		d.Method = "POST"
	case p < 97:
		d.Method = "HEAD"
	case p < 98:
		d.Method = "PUT"
	case p < 99:
		d.Method = "DELETE"
	default:
		d.Method = "OPTIONS"
	}

	// Scrapers probe for spellings of a path that the edge and the origin
	// might read differently; the edge refuses them before anything else.
	// (Tied to a draw already made, so the rest of the trace stays as it
	// was.)
	if abuser && d.Method == "DELETE" {
		d.Path = "/api//admin/users"
		d.Outcome, d.Reason = decisions.Rejected, "ambiguous path: dot segments, repeated slashes or backslashes"
		return d
	}

	// Lists, decided before any rule.
	switch {
	case d.UserID == "" && (addrRank == denyRankA || addrRank == denyRankB):
		d.Outcome, d.Reason = decisions.DenyListed, "deny list"
		return d
	case (d.UserID == "" && addrRank == monitorRank) || (d.UserID != "" && userRank == partnerRank):
		d.Outcome, d.Reason = decisions.AllowListed, "allow list"
		return d
	}

	ru := t.match(d.Path)
	d.Rule, d.Algorithm, d.Limit = ru.id, ru.algorithm, ru.limit
	d.Window = ru.window
	g.grade(&d, ru, abuser)
	return d
}

// grade picks an outcome, and the count, remaining, reset, latency and
// reason that go with it.
func (g *Generator) grade(d *decisions.Decision, ru *rule, abuser bool) {
	lim := ru.limit
	d.StoreLatency = 400*time.Microsecond + time.Duration(g.r.ExpFloat64()*800_000)
	d.Reset = g.reset(ru)

	// Store failures: a timeout or an error fails open (or closed on
	// admin and billing paths); with the breaker open, the local limit
	// decides.
	if g.r.IntN(rareOutcomes) < 2 {
		mode := "fails open"
		d.Outcome = decisions.FailOpen
		if isFailClosed(d.Path) {
			mode, d.Outcome = "fails closed", decisions.FailClosed
		}
		d.Count, d.Remaining, d.Reset = 0, 0, 0
		if g.r.IntN(2) == 0 {
			d.StoreLatency = 50*time.Millisecond + time.Duration(g.r.IntN(200_000))
			d.Reason = "store timeout: path " + mode
		} else {
			d.Reason = "store error: path " + mode
		}
		return
	}
	if g.r.IntN(rareOutcomes) < 1 {
		d.StoreLatency = 0
		d.Count = 1 + g.r.Int64N(lim/3+2)
		local := max(lim/3, 1) // three edge nodes share the limit
		if d.Count > local {
			d.Outcome, d.Reason, d.Remaining = decisions.LocalLimit, "store unavailable: over the local limit", 0
		} else {
			d.Outcome, d.Reason, d.Remaining = decisions.FailOpen, "store unavailable: within the local limit", local-d.Count
		}
		return
	}

	over := g.r.IntN(1000) < 8 // 0.8 % of ordinary clients go over
	if abuser {
		over = g.r.IntN(100) < 60
	}
	if !over {
		d.Count = 1 + g.r.Int64N(lim)
		d.Remaining = lim - d.Count
		d.Outcome, d.Reason = decisions.Allow, "within the limit"
		return
	}
	d.Remaining = 0
	switch {
	case ru.shadow:
		d.Count = lim + 1 + g.r.Int64N(lim)
		d.Outcome, d.Reason = decisions.ShadowBlock, "over the limit (shadow rule)"
	case !ru.challenge:
		d.Count = lim + 1
		d.Outcome, d.Reason = decisions.Block, "over the limit"
	case g.r.IntN(100) < 45:
		d.Count = lim + 1 + g.r.Int64N(lim)
		d.Outcome, d.Reason = decisions.Challenge, "over the limit"
		if g.r.IntN(10) == 0 {
			d.Outcome, d.Reason = decisions.TokenPass, "over the limit: valid challenge token"
		}
	default:
		d.Count = 2*lim + 1 + g.r.Int64N(3*lim)
		d.Outcome, d.Reason = decisions.Block, "over the challenge ceiling"
	}
}

// reset is the time until the rule's window resets (windows are aligned to
// the epoch, as the edge aligns them) or its bucket refills one token.
func (g *Generator) reset(ru *rule) time.Duration {
	switch ru.algorithm {
	case "concurrency":
		return 0
	case "token_bucket":
		return time.Duration(g.r.Int64N(int64(ru.window) / ru.limit))
	}
	w := int64(ru.window)
	return time.Duration(w - g.now.UnixNano()%w)
}

func (g *Generator) feedback() decisions.Decision {
	d := decisions.Decision{Kind: decisions.KindFeedback, Time: g.now, Node: "aggregator-1", Action: "add"}
	switch p := g.r.IntN(10); {
	case p < 6:
		d.List = "challenge"
	case p < 9:
		d.List = "deny"
	default:
		d.List = "allow"
	}
	rank := g.addrs.Uint64() % 64
	switch p := g.r.IntN(10); {
	case p < 6:
		d.Target = addrFor(g.seed, rank).String()
	case p < 8:
		a := addrFor(g.seed, rank)
		bits := 24
		if a.Is6() {
			bits = 48
		}
		d.Target = netip.PrefixFrom(a, bits).Masked().String()
	default:
		d.Target = "user:" + userID(g.seed, g.users.Uint64())
	}
	switch p := g.r.IntN(20); {
	case p < 3:
		d.Action, d.Reason = "remove", "expired"
	case p < 5:
		d.Reason = "manual"
		d.Node = "operator"
	case p < 8:
		d.Reason = "credential stuffing alert"
	default:
		d.Reason = "scraper alert"
	}
	if d.Action == "add" {
		d.TTL = []time.Duration{15 * time.Minute, 30 * time.Minute, time.Hour, 24 * time.Hour}[g.r.IntN(4)]
	}
	return d
}

// mix is SplitMix64's finaliser: a fixed, well-spread map from (seed, i)
// to 64 bits, so that ranks map to the same addresses and users whatever
// the order of draws.
func mix(seed, i uint64) uint64 {
	z := seed + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// ipv6Prefixes are /32s of a few large providers; one client in ten has
// an IPv6 address in one of them.
var ipv6Prefixes = [...][4]byte{{0x2a, 0x02, 0x81, 0x08}, {0x24, 0x09, 0x40, 0x40}, {0x26, 0x00, 0x38, 0x0c}, {0x2a, 0x01, 0x0e, 0x0a}}

func addrFor(seed, rank uint64) netip.Addr {
	h := mix(seed, rank^0xadd7)
	if h%10 == 3 {
		var a [16]byte
		copy(a[:4], ipv6Prefixes[h>>8%uint64(len(ipv6Prefixes))][:])
		h2 := mix(seed, rank^0x1f6)
		for i := 4; i < 12; i++ {
			a[i] = byte(h2 >> (8 * (i - 4)))
		}
		// Most IPv6 clients use random interface identifiers.
		h3 := mix(seed, rank^0x1f7)
		for i := 12; i < 16; i++ {
			a[i] = byte(h3 >> (8 * (i - 12)))
		}
		return netip.AddrFrom16(a)
	}
	first := byte(1 + (h>>8)%222) // 1–222, avoiding 10 and 127
	if first == 10 || first == 127 {
		first++
	}
	return netip.AddrFrom4([4]byte{first, byte(h >> 16), byte(h >> 24), byte(h >> 32)})
}

func userID(seed, rank uint64) string {
	var b [2 + 13]byte
	out := append(b[:0], "u_"...)
	out = strconv.AppendUint(out, mix(seed, rank^0x05e2)>>24, 36)
	return string(out)
}

func hex12(h uint64) string {
	const digits = "0123456789abcdef"
	var b [12]byte
	for i := range b {
		b[i] = digits[h>>(4*i)&0xf]
	}
	return string(b[:])
}
