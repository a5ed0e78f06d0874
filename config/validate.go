package config

import (
	"errors"
	"math"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/internal/canonpath"
	"github.com/ratewarden/ratewarden/internal/clientip"
	"github.com/ratewarden/ratewarden/internal/limitspec"
)

// Range bounds that are not the limit package's.
const (
	// MaxLimit bounds a rule's limit and burst, so that a token bucket's
	// emission interval (window ÷ limit, with a window of at least 1s) is at
	// least a nanosecond and factor × limit fits an int64.
	MaxLimit = 1_000_000_000
	// MaxFactor bounds challenge.factor, for the same reason.
	MaxFactor = 100
	// MaxTokenTTL bounds a challenge token's lifetime: challenge.token_ttl
	// and the --ttl of ratewarden token issue. A token is a bearer
	// credential that cannot be revoked but by rotating the key, so no
	// solved challenge lets a client through for longer than a day.
	MaxTokenTTL = 24 * time.Hour
)

// Validate checks every value against its allowed range, after Defaults.
// Its error is an ErrorList of every problem found, ordered by line, each
// naming the key path, the value and what is allowed, and for a
// configuration read by Parse the file and line. Validate does not modify
// c; it is safe for concurrent use as long as nothing modifies c.
func (c *Config) Validate() error {
	return c.validate().err()
}

func (c *Config) validate() *validator {
	v := &validator{collector: collector{file: c.file}, lines: c.lines}
	v.edge(&c.Edge)
	v.identity(&c.Identity)
	v.store(&c.Store)
	if c.challenging() {
		v.challenge(&c.Challenge)
	}
	v.lists(&c.Lists, c.Challenge.Enabled)
	v.paths(&c.Paths)
	v.forward(&c.Forward, &c.Identity)
	for i, p := range c.FailClosed {
		v.pathPrefix(key("fail_closed", index(i)), p, "is not allowed", "/api/admin/")
	}
	v.decisions(&c.Decisions, c.Edge.DecisionQueue)
	v.rls(&c.RLS)
	v.hostPort(key("authz", "listen"), c.Authz.Listen)
	v.tiers(c.Tiers)
	v.serve(&c.Serve)
	v.foldedPrefixes(c)
	v.exactRules(c)
	v.alerts(&c.Alerts, c.Tiers)
	v.feedback(&c.Feedback)
	v.lambdaEdge(&c.LambdaEdge)
	v.feedbackLists(c)
	return v
}

func (v *validator) lists(l *Lists, challenge bool) {
	if l.Refresh < time.Second {
		v.report(key("lists", "refresh"), fmtDuration(l.Refresh), "is not allowed", "1s or more")
	}
	if l.ChallengeFile != "" && !challenge {
		v.report(key("lists", "challenge_file"), l.ChallengeFile, "needs challenge.enabled: true", "challenge.enabled: true, so challenged clients can pass with a token")
	}
	files := []struct{ key, path string }{{"allow_file", l.AllowFile}, {"deny_file", l.DenyFile}, {"challenge_file", l.ChallengeFile}}
	// A file holds one list: two lists in one file would be one list, and
	// an entry added to the allow list would deny the client too. Paths
	// are compared as the process opens them, relative to its directory.
	seen := map[string]string{}
	for _, f := range files {
		if f.path == "" {
			continue
		}
		p, err := filepath.Abs(f.path)
		if err != nil {
			p = filepath.Clean(f.path)
		}
		if other, dup := seen[p]; dup {
			v.report(key("lists", f.key), f.path, "is also lists."+other, "a file of its own for each list")
			continue
		}
		seen[p] = f.key
	}
	if l.Table == "" {
		return
	}
	if !ValidTableName(l.Table) {
		v.report(key("lists", "table"), l.Table, "is not allowed", "3 to 255 of a-z, A-Z, 0-9, _ . -")
	}
	for _, f := range files {
		if f.path != "" {
			v.report(key("lists", f.key), f.path, "cannot be used with lists.table", "either lists.table or list files")
		}
	}
}

// exactRules checks that store.sync.exact names rules the tiers have, so
// that a typo does not quietly leave a rule batched.
func (v *validator) exactRules(c *Config) {
	if len(c.Store.Sync.Exact) == 0 {
		return
	}
	tiers := c.ResolvedTiers()
	for i, id := range c.Store.Sync.Exact {
		tier, rule, _ := strings.Cut(id, ":")
		t := tiers[tier]
		ok := t != nil && (rule == "global" && t.Global != nil || t.Paths[rule] != nil)
		if !ok {
			v.report(key("store", "sync", "exact", index(i)), id, "names no rule", "tier:global or tier:/path/prefix of a configured tier, such as anonymous:/api/reports")
		}
	}
}

func (v *validator) rls(r *RLS) {
	v.hostPort(key("rls", "listen"), r.Listen)
	for i, d := range r.Domains {
		if d == "" {
			v.report(key("rls", "domains", index(i)), d, "is empty", "a domain such as edge")
		}
	}
	seen := map[string]string{}
	for _, k := range []struct{ name, got string }{{"address_key", r.AddressKey}, {"user_key", r.UserKey},
		{"plan_key", r.PlanKey}, {"path_key", r.PathKey}, {"method_key", r.MethodKey}, {"token_key", r.TokenKey}} {
		if other, dup := seen[k.got]; dup {
			v.report(key("rls", k.name), k.got, "is also rls."+other, "a descriptor key no other rls key names")
		}
		seen[k.got] = k.name
	}
	for i, d := range r.Descriptors {
		at := func(f string) []string { return key("rls", "descriptors", index(i), f) }
		v.required(at("key"), d.Key, "the descriptor entry key, such as header_match")
		v.required(at("value"), d.Value, "the descriptor entry value, such as reports")
		v.pathPrefix(at("path"), d.Path, "is not allowed", "/api/reports")
	}
	v.oneOf(key("rls", "fail_closed"), r.FailClosed, RLSFailClosed)
	v.header(key("rls", "decision_header"), r.DecisionHeader)
	v.intRange(key("rls", "max_descriptors"), int64(r.MaxDescriptors), 1, 4096)
	v.intRange(key("rls", "max_entries"), int64(r.MaxEntries), 1, 1024)
	v.intRange(key("rls", "max_concurrent"), int64(r.MaxConcurrent), 1, 1<<20)
}

func (v *validator) decisions(d *Decisions, queue int) {
	v.durationRange(key("decisions", "sync_interval"), d.SyncInterval, time.Millisecond, 10*time.Second)
	v.intRange(key("decisions", "segment_bytes"), d.SegmentBytes, 1<<20, 4<<30)
	v.durationRange(key("decisions", "segment_age"), d.SegmentAge, time.Minute, 7*24*time.Hour)
	v.durationRange(key("decisions", "retain_age"), d.RetainAge, time.Hour, 10*365*24*time.Hour)
	v.intRange(key("decisions", "retain_bytes"), d.RetainBytes, 16<<20, math.MaxInt64)
	v.durationRange(key("decisions", "linger"), d.Linger, time.Millisecond, time.Minute)
	v.batch(key("decisions", "batch"), d.Batch, queue)
	v.oneOf(key("decisions", "privacy", "addresses"), d.Privacy.Addresses, []string{"keep", "truncate", "hmac"})
	v.oneOf(key("decisions", "privacy", "users"), d.Privacy.Users, []string{"keep", "hmac"})
	k := &d.Kinesis
	v.intRange(key("decisions", "kinesis", "partitions"), int64(k.Partitions), 1, 500)
	v.durationRange(key("decisions", "kinesis", "retry"), k.Retry, 100*time.Millisecond, 10*time.Minute)
	v.durationRange(key("decisions", "kinesis", "linger"), k.Linger, time.Millisecond, time.Minute)
	v.batch(key("decisions", "kinesis", "batch"), k.Batch, queue)
	if k.Stream != "" && !ValidStreamName(k.Stream) {
		v.report(key("decisions", "kinesis", "stream"), k.Stream, "is not allowed", "1 to 128 of a-z, A-Z, 0-9, _ . -")
	}
	if k.Stream != "" && k.SpillDir == "" {
		v.report(key("decisions", "kinesis", "spill_dir"), k.SpillDir, "is not allowed", "a directory for batches the stream cannot take")
	}
}

func (v *validator) serve(s *Serve) {
	if w := s.Window; w < time.Second || w > time.Hour || time.Hour%w != 0 {
		v.report(key("serve", "window"), fmtDuration(w), "is not allowed", "1s to 1h, dividing an hour (1s, 10s, 1m, 5m, ...)")
	}
	if s.Window > 0 {
		v.durationRange(key("serve", "lateness"), s.Lateness, 0, 10*s.Window)
	}
	v.intRange(key("serve", "top_k"), int64(s.TopK), 1, 100_000)
	if s.Dashboard.Listen != "" {
		v.hostPort(key("serve", "dashboard", "listen"), s.Dashboard.Listen)
	}
	v.durationRange(key("serve", "dashboard", "retain"), s.Dashboard.Retain, time.Minute, 7*24*time.Hour)
	if s.Dashboard.TokenEnv != "" && !validEnvName(s.Dashboard.TokenEnv) {
		v.report(key("serve", "dashboard", "token_env"), s.Dashboard.TokenEnv, "is not allowed", "an environment variable name such as RATEWARDEN_DASHBOARD_TOKEN")
	}
}

// validEnvName reports whether s is a portable environment variable name.
func validEnvName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || c == '_' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return s != ""
}

// batch checks a sink's batch size: a batch is taken from the sink's
// queue, so it cannot be larger (a queue out of range is reported on its
// own key).
func (v *validator) batch(segs []string, got, queue int) {
	if queue >= 1 && got > queue && got <= 65536 {
		v.report(segs, strconv.Itoa(got), "is more than edge.decision_queue", "at most "+strconv.Itoa(queue))
		return
	}
	v.intRange(segs, int64(got), 1, 65536)
}

// ValidStreamName reports whether s is a name Kinesis takes for a stream:
// 1 to 128 of a-z, A-Z, 0-9, _ . -.
func ValidStreamName(s string) bool { return len(s) >= 1 && len(s) <= 128 && validName(s) }

// validName reports whether s holds only the characters AWS allows in
// stream and table names.
func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// challenging reports whether any rule may challenge, so that the challenge
// settings matter.
func (c *Config) challenging() bool {
	if c.Challenge.Enabled {
		return true
	}
	for _, t := range c.Tiers {
		if t == nil {
			continue
		}
		if t.Global != nil && t.Global.Challenge != nil && *t.Global.Challenge {
			return true
		}
		for _, r := range t.Paths {
			if r != nil && r.Challenge != nil && *r.Challenge {
				return true
			}
		}
	}
	return false
}

type validator struct {
	collector
	lines map[string]int
}

// key builds a key path from its segments; index segments ("[2]") join
// without a dot.
func key(segs ...string) []string { return segs }

func index(i int) string { return "[" + strconv.Itoa(i) + "]" }

func joinSegs(segs []string) string {
	var b strings.Builder
	for i, s := range segs {
		if i > 0 && !strings.HasPrefix(s, "[") {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

// line is the line of the longest prefix of the key path that was written
// in the file: a missing or defaulted key is reported where its parent is.
// Segments, not dots, are trimmed, since path prefixes may contain dots.
func (v *validator) line(segs []string) int {
	for n := len(segs); n > 0; n-- {
		if l, ok := v.lines[joinSegs(segs[:n])]; ok {
			return l
		}
	}
	return 0
}

func (v *validator) report(segs []string, value, problem, allowed string) {
	v.add(&Error{Line: v.line(segs), Key: joinSegs(segs), Value: quoted(value), Problem: problem, Allowed: allowed})
}

func (v *validator) intRange(segs []string, got, lo, hi int64) {
	if got >= lo && got <= hi {
		return
	}
	allowed := strconv.FormatInt(lo, 10) + " or more"
	if hi < math.MaxInt64 {
		allowed = strconv.FormatInt(lo, 10) + " to " + strconv.FormatInt(hi, 10)
	}
	v.report(segs, strconv.FormatInt(got, 10), "is not allowed", allowed)
}

func (v *validator) durationRange(segs []string, got, lo, hi time.Duration) {
	if got >= lo && got <= hi {
		return
	}
	allowed := fmtDuration(lo) + " or more"
	if hi < math.MaxInt64 {
		allowed = fmtDuration(lo) + " to " + fmtDuration(hi)
	}
	v.report(segs, fmtDuration(got), "is not allowed", allowed)
}

func (v *validator) oneOf(segs []string, got string, allowed []string) {
	if !slices.Contains(allowed, got) {
		v.report(segs, got, "is not allowed", "one of "+strings.Join(allowed, ", "))
	}
}

// oneOfFold is oneOf ignoring case, for values the edge reads without case.
func (v *validator) oneOfFold(segs []string, got string, allowed []string) {
	if !slices.ContainsFunc(allowed, func(a string) bool { return strings.EqualFold(a, got) }) {
		v.report(segs, got, "is not allowed", "one of "+strings.Join(allowed, ", "))
	}
}

func (v *validator) hostPort(segs []string, got string) {
	if !validHostPort(got, 0) {
		v.report(segs, got, "is not allowed", listenAllowed)
	}
}

// listenAllowed is what a listen address may be.
const listenAllowed = "host:port with a port from 0 to 65535, such as 127.0.0.1:8080 or :8080"

// CheckListen checks a listen address given outside the configuration (a
// flag) as the configuration's are checked; the error says what is
// allowed.
func CheckListen(addr string) error {
	if !validHostPort(addr, 0) {
		return errors.New("want " + listenAllowed)
	}
	return nil
}

// validHostPort reports whether addr is host:port with a port number from
// lo to 65535 (or none, when lo is 0: a listener's any port). A name for
// the port is refused: whether net.Listen knows it depends on the
// machine's services file, not on the configuration.
func validHostPort(addr string, lo uint64) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if port == "" {
		return lo == 0
	}
	n, err := strconv.ParseUint(port, 10, 16)
	return err == nil && n >= lo
}

func (v *validator) header(segs []string, got string) {
	if !isToken(got) {
		v.report(segs, got, "is not allowed", "an HTTP header name such as X-User-Id")
	}
}

func (v *validator) required(segs []string, got, why string) {
	if got == "" {
		v.report(segs, "", "is missing", why)
	}
}

func (v *validator) edge(e *Edge) {
	v.hostPort(key("edge", "listen"), e.Listen)
	if e.AdminListen != "" {
		v.hostPort(key("edge", "admin_listen"), e.AdminListen)
	}
	if e.Upstream != "" {
		u, err := url.Parse(e.Upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.report(key("edge", "upstream"), e.Upstream, "is not allowed", "an absolute http or https URL such as http://127.0.0.1:3000")
		}
	}
	v.required(key("edge", "node"), e.Node, "a node name")
	if len(e.Node) > decisions.MaxNameLen {
		v.report(key("edge", "node"), e.Node, "is too long", "a node name of at most "+strconv.Itoa(decisions.MaxNameLen)+" bytes (readers of the decisions refuse longer)")
	}
	v.intRange(key("edge", "decision_queue"), int64(e.DecisionQueue), 1, math.MaxInt64)
	v.header(key("edge", "request_id_header"), e.RequestIDHeader)
	v.durationRange(key("edge", "shutdown_grace"), e.ShutdownGrace, 0, math.MaxInt64)
	v.oneOf(key("edge", "server"), e.Server, EdgeServers)
	c := &e.Client
	v.durationRange(key("edge", "client", "header_timeout"), c.HeaderTimeout, 10*time.Millisecond, 10*time.Minute)
	v.durationRange(key("edge", "client", "body_timeout"), c.BodyTimeout, 10*time.Millisecond, time.Hour)
	v.durationRange(key("edge", "client", "idle_timeout"), c.IdleTimeout, 10*time.Millisecond, 24*time.Hour)
	v.durationRange(key("edge", "client", "send_timeout"), c.SendTimeout, 10*time.Millisecond, time.Hour)
	v.intRange(key("edge", "client", "max_body_bytes"), c.MaxBodyBytes, 0, 1<<40)
	const maxConns = 10_000_000
	v.intRange(key("edge", "client", "max_connections"), int64(c.MaxConnections), 1, maxConns)
	// The per-address cap is at most max_connections, or when that is out
	// of range (and reported), at most what it may be.
	capHi := c.MaxConnections
	if capHi < 1 || capHi > maxConns {
		capHi = maxConns
	}
	if n := c.MaxConnectionsPerAddress; n < 1 || n > capHi {
		v.report(key("edge", "client", "max_connections_per_address"), strconv.Itoa(n), "is not allowed", "1 to "+strconv.Itoa(capHi)+" (edge.client.max_connections; that is no cap per address)")
	}
	v.durationRange(key("edge", "origin", "connect_timeout"), e.Origin.ConnectTimeout, 10*time.Millisecond, 5*time.Minute)
	v.durationRange(key("edge", "origin", "response_header_timeout"), e.Origin.ResponseHeaderTimeout, 10*time.Millisecond, time.Hour)
	v.durationRange(key("edge", "origin", "read_timeout"), e.Origin.ReadTimeout, 10*time.Millisecond, time.Hour)
}

func (v *validator) identity(id *Identity) {
	nats := make([]netip.Prefix, len(id.NAT64Prefixes))
	for i, s := range id.NAT64Prefixes {
		p, err := clientip.ParseNAT64Prefix(s)
		if err != nil {
			v.report(key("identity", "nat64_prefixes", index(i)), s, err.Error(), "an IPv6 prefix of 32, 40, 48, 56, 64 or 96 bits (RFC 6052) such as 2001:db8:64::/96 or 2001:db8:122:344::/64, that holds none of ::1, ::ffff:0:0/96 and 64:ff9b::/96 (the well-known prefix, which needs no entry)")
			continue
		}
		nats[i] = p
		if j := clientip.Overlapping(nats[:i], p); j >= 0 {
			v.report(key("identity", "nat64_prefixes", index(i)), s, "overlaps identity.nat64_prefixes"+index(j)+" ("+nats[j].String()+")",
				"prefixes apart: an address in both would carry a different IPv4 address in each")
		}
		// The translator's prefix is the masked one: host bits
		// (2001:db8:64::7/96) are most likely a typo, as in
		// trusted_proxies.
		if w, err := netip.ParsePrefix(s); err == nil && w != w.Masked() {
			v.report(key("identity", "nat64_prefixes", index(i)), s, "has host bits set", p.String()+" for the prefix")
		}
	}
	nat := id.NAT64()
	for i, s := range id.TrustedProxies {
		if _, ok := parseProxy(nat, s); ok {
			// The edge trusts a prefix's every address: one written with
			// host bits (10.0.3.7/8) is most likely the address meant.
			if p, err := netip.ParsePrefix(s); err == nil && p != p.Masked() {
				v.report(key("identity", "trusted_proxies", index(i)), s, "has host bits set",
					p.Masked().String()+" for the prefix, or "+p.Addr().String()+" for the one address")
			}
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			if h, ok := nat.HeldBy(p); ok {
				v.report(key("identity", "trusted_proxies", index(i)), s, "holds identity.nat64_prefixes "+h.String()+", whose addresses are IPv4 clients, and IPv6 addresses around it",
					"the addresses or prefixes of your proxies, leaving "+h.String()+" out; a proxy behind that translator by its IPv4 address or prefix, or by one written inside "+h.String())
				continue
			}
		}
		v.report(key("identity", "trusted_proxies", index(i)), s, "is not allowed", "an address or CIDR prefix such as 10.0.0.0/8 or ::1, without a zone; an IPv4-mapped or NAT64 (64:ff9b::/96) prefix needs at least 96 bits")
	}
	// Header names are case-insensitive, so these values are too.
	v.oneOfFold(key("identity", "client_ip_header"), id.ClientIPHeader, ClientIPHeaders)
	v.header(key("identity", "user_header"), id.UserHeader)
	v.header(key("identity", "plan_header"), id.PlanHeader)
	if id.PlanHeader != "" && strings.EqualFold(id.PlanHeader, id.UserHeader) {
		v.report(key("identity", "plan_header"), id.PlanHeader, "is also the user header", "a different header")
	}
	v.intRange(key("identity", "ipv6_prefix"), int64(id.IPv6Prefix), 1, 128)
	j := id.JWT
	if j == nil {
		return
	}
	v.oneOfFold(key("identity", "jwt", "algorithm"), j.Algorithm, JWTAlgorithms)
	switch alg := strings.ToUpper(j.Algorithm); alg {
	case "HS256":
		v.required(key("identity", "jwt", "key_env"), j.KeyEnv, "the environment variable holding the HS256 shared key")
	case "RS256", "ES256":
		v.required(key("identity", "jwt", "public_key_file"), j.PublicKeyFile, "the PEM file holding the "+j.Algorithm+" public key")
	}
	v.required(key("identity", "jwt", "user_claim"), j.UserClaim, "the claim holding the user id, such as sub")
	v.required(key("identity", "jwt", "plan_claim"), j.PlanClaim, "the claim holding the plan, such as plan")
	if j.PlanClaim != "" && j.PlanClaim == j.UserClaim {
		v.report(key("identity", "jwt", "plan_claim"), j.PlanClaim, "is also the user claim", "a different claim")
	}
	if j.Leeway != nil {
		v.durationRange(key("identity", "jwt", "leeway"), *j.Leeway, 0, math.MaxInt64)
	}
}

func (v *validator) store(s *Store) {
	v.oneOf(key("store", "type"), s.Type, StoreTypes)
	v.durationRange(key("store", "timeout"), s.Timeout, time.Millisecond, 10*time.Second)
	v.intRange(key("store", "max_keys"), int64(s.MaxKeys), 1000, math.MaxInt64)
	v.intRange(key("store", "edge_nodes"), int64(s.EdgeNodes), 1, math.MaxInt64)
	v.intRange(key("store", "breaker", "failures"), int64(s.Breaker.Failures), 1, math.MaxInt64)
	v.durationRange(key("store", "breaker", "cooldown"), s.Breaker.Cooldown, 100*time.Millisecond, math.MaxInt64)
	switch s.Type {
	case "dynamodb":
		if !ValidTableName(s.DynamoDB.Table) {
			v.report(key("store", "dynamodb", "table"), s.DynamoDB.Table, "is not allowed", "3 to 255 of a-z, A-Z, 0-9, _ . -")
		}
		if ep := s.DynamoDB.Endpoint; ep != "" && !isHTTPURL(ep) {
			v.report(key("store", "dynamodb", "endpoint"), ep, "is not allowed", "an http or https URL, or empty for the SDK's")
		}
		v.durationRange(key("store", "dynamodb", "concurrency_lease"), s.DynamoDB.ConcurrencyLease, time.Minute, 24*time.Hour)
	case "redis":
		for i, a := range s.Redis.Addrs {
			if !validHostPort(a, 1) {
				v.report(key("store", "redis", "addrs", index(i)), a, "is not allowed", "host:port with a port from 1 to 65535")
			}
		}
		v.intRange(key("store", "redis", "db"), int64(s.Redis.DB), 0, 15)
		v.intRange(key("store", "redis", "pool_size"), int64(s.Redis.PoolSize), 0, 10000)
	}
	if f := s.Sync.MaxError; math.IsNaN(f) || f < 0 || f > 0.5 {
		v.report(key("store", "sync", "max_error"), strconv.FormatFloat(f, 'g', -1, 64), "is not allowed", "a share from 0 (exact) to 0.5, such as 0.01")
	}
	v.durationRange(key("store", "sync", "flush_interval"), s.Sync.FlushInterval, 10*time.Millisecond, time.Hour)
	v.intRange(key("store", "sync", "max_keys"), int64(s.Sync.MaxKeys), 1000, math.MaxInt64)
}

// ValidTableName reports whether s is a name DynamoDB takes for a table:
// 3 to 255 of a-z, A-Z, 0-9, _ . -.
func ValidTableName(s string) bool { return len(s) >= 3 && len(s) <= 255 && validName(s) }

func (v *validator) challenge(ch *Challenge) {
	if f := ch.Factor; math.IsNaN(f) || f < 1 || f > MaxFactor {
		v.report(key("challenge", "factor"), strconv.FormatFloat(f, 'g', -1, 64), "is not allowed", "a number from 1 to "+strconv.Itoa(MaxFactor))
	}
	switch p := ch.PagePath(); {
	case !strings.HasPrefix(ch.Page, "/"):
		if !isHTTPURL(ch.Page) {
			v.report(key("challenge", "page"), ch.Page, "is not allowed", "a path starting with / or an absolute http or https URL")
		}
	case p == "/":
		// Requests for the page and below it are never challenged.
		v.report(key("challenge", "page"), ch.Page, "is not allowed", "a path of its own, such as /captcha: requests for the page, and for paths below it, pass over the limit")
	default:
		v.pathPrefix(key("challenge", "page"), p, "is not allowed", "/captcha")
	}
	v.required(key("challenge", "param"), ch.Param, "a query parameter name such as redirect")
	v.durationRange(key("challenge", "token_ttl"), ch.TokenTTL, time.Minute, MaxTokenTTL)
	if !isToken(ch.Cookie) {
		v.report(key("challenge", "cookie"), ch.Cookie, "is not allowed", "a cookie name such as rw_challenge")
	}
	v.header(key("challenge", "header"), ch.Header)
	v.required(key("challenge", "keys_env"), ch.KeysEnv, "the environment variable holding the token keys")
	v.required(key("challenge", "verifier_secret_env"), ch.VerifierSecretEnv, "the environment variable holding the verifier secret")
	if !strings.HasPrefix(ch.Endpoint, "/") {
		v.report(key("challenge", "endpoint"), ch.Endpoint, "is not allowed", "a path starting with /")
	}
	v.intRange(key("challenge", "endpoint_failures", "limit"), ch.EndpointFailures.Limit, 1, MaxLimit)
	v.durationRange(key("challenge", "endpoint_failures", "window"), ch.EndpointFailures.Window, limitspec.MinWindow, limitspec.MaxWindow)
}

func (v *validator) tiers(tiers map[string]*Tier) {
	names := sortedKeys(tiers)
	if _, ok := tiers[TierAnonymous]; !ok {
		v.report(key("tiers", TierAnonymous), "", "is missing",
			"a tier named anonymous with a global rule; it limits every client that is not authenticated")
	}
	for _, name := range names {
		t := tiers[name]
		if t == nil {
			t = &Tier{}
		}
		if !isTierName(name) || len(name) > decisions.MaxNameLen {
			v.report(key("tiers", name), name, "is not allowed as a tier name", "letters, digits, _ and -, at most "+strconv.Itoa(decisions.MaxNameLen)+" bytes")
		}
		global := t.Global
		if parent := v.extends(tiers, name, t); global == nil && parent != nil {
			global = parent.Global
		}
		if global == nil {
			v.report(key("tiers", name, "global"), "", "is missing",
				"a global rule such as {limit: 60, window: 1m}, or extends naming a tier that has one")
		}
		if t.Global != nil {
			v.rule(key("tiers", name, "global"), t.Global)
		}
		for _, prefix := range sortedKeys(t.Paths) {
			segs := key("tiers", name, "paths", prefix)
			v.pathPrefix(segs, prefix, "is not allowed as a path prefix", "/api/reports")
			v.rule(segs, t.Paths[prefix])
		}
	}
}

// pathPrefix checks a path prefix: rules match canonical paths (package
// canonpath), so a prefix spelled otherwise would never match.
func (v *validator) pathPrefix(segs []string, prefix, problem, example string) {
	c, _, err := canonpath.Clean(prefix)
	switch {
	case strings.HasPrefix(prefix, "/") && strings.ContainsAny(prefix, "?#"):
		v.report(segs, prefix, problem, prefix[:strings.IndexAny(prefix, "?#")]+": rules match the path alone, without its query (?…) or fragment (#…)")
	case errors.Is(err, canonpath.ErrNotAbsolute):
		v.report(segs, prefix, problem, "a path prefix starting with /, such as "+example)
	case err != nil:
		v.report(segs, prefix, problem+": "+strings.TrimPrefix(err.Error(), "path "), "a path prefix such as "+example)
	case c != prefix:
		v.report(segs, prefix, "is not a canonical path", c+": no dot segments, repeated slashes, backslashes or encoded unreserved characters")
	case strings.Contains(prefix, ";"):
		v.report(segs, prefix, "is not allowed as a path prefix", "a prefix without ; (segment parameters are ignored when matching)")
	case strings.Contains(prefix, "*"):
		// A glob written as a prefix would match only paths that hold a
		// literal *: a rule that never fires where it was meant to.
		v.report(segs, prefix, problem, "a prefix without *: rules match by prefix, not by pattern, and "+prefix[:strings.IndexByte(prefix, '*')]+" covers every path under it (a literal * is written %2A)")
	}
}

// foldedPrefixes checks that no two path prefixes of a tier are one when
// matched (case ignored, escaped delimiters read as the delimiter): they
// would count the same requests twice over.
func (v *validator) foldedPrefixes(c *Config) {
	for _, name := range sortedKeys(c.Tiers) {
		t := c.Tiers[name]
		if t == nil {
			continue
		}
		seen := map[string]string{}
		for _, prefix := range sortedKeys(t.Paths) {
			f := canonpath.MatchForm(prefix, c.Paths.Case)
			switch other, ok := seen[f]; {
			case !ok:
			case canonpath.MatchForm(prefix, canonpath.Sensitive) == canonpath.MatchForm(other, canonpath.Sensitive):
				v.report(key("tiers", name, "paths", prefix), prefix, "is "+other+" when matched: an escaped delimiter (%2A, %3A...) matches as the delimiter (*, :...)", "one of the two")
			default:
				v.report(key("tiers", name, "paths", prefix), prefix, "is "+other+" when paths.case is insensitive", "one of the two, or paths.case: sensitive")
			}
			seen[f] = prefix
		}
	}
}

func (v *validator) paths(p *Paths) {
	v.oneOf(key("paths", "ambiguous"), p.Ambiguous, AmbiguousPaths)
}

func (v *validator) forward(f *Forward, id *Identity) {
	for i, h := range f.StripHeaders {
		v.header(key("forward", "strip_headers", index(i)), h)
	}
	for _, h := range []struct{ name, got, example string }{
		{"tier_header", f.TierHeader, "X-Ratewarden-Tier"},
		{"decision_header", f.DecisionHeader, "X-Ratewarden-Decision"},
	} {
		if h.got == "" {
			continue
		}
		segs := key("forward", h.name)
		v.header(segs, h.got)
		for _, other := range []string{id.UserHeader, id.PlanHeader, id.ClientIPHeader} {
			if strings.EqualFold(h.got, other) {
				v.report(segs, h.got, "is an identity header", "a header of its own, such as "+h.example)
			}
		}
	}
	if f.TierHeader != "" && strings.EqualFold(f.TierHeader, f.DecisionHeader) {
		v.report(key("forward", "decision_header"), f.DecisionHeader, "is also the tier header", "a different header")
	}
}

// extends checks t.Extends and returns the parent tier when it is a valid
// one: another tier, which itself extends nothing.
func (v *validator) extends(tiers map[string]*Tier, name string, t *Tier) *Tier {
	if t.Extends == "" {
		return nil
	}
	segs := key("tiers", name, "extends")
	parent, ok := tiers[t.Extends]
	switch {
	case t.Extends == name:
		v.report(segs, t.Extends, "is the tier itself", "the name of another tier")
		return nil
	case !ok:
		v.report(segs, t.Extends, "is not a tier", "one of "+strings.Join(slices.DeleteFunc(sortedKeys(tiers), func(s string) bool { return s == name }), ", "))
		return nil
	case parent == nil:
		return &Tier{}
	case parent.Extends == name:
		v.report(segs, t.Extends, "is not allowed: "+name+" extends "+t.Extends+", which extends "+name, "extends in one direction only")
		return nil
	case parent.Extends != "":
		v.report(segs, t.Extends, "is not allowed: it extends "+parent.Extends+" and extends is one level only", "a tier that extends nothing")
		return nil
	}
	return parent
}

func (v *validator) rule(segs []string, r *Rule) {
	if r == nil {
		v.report(segs, "", "is missing", "a rule such as {limit: 60, window: 1m}")
		return
	}
	at := func(k string) []string { return append(slices.Clip(segs), k) }
	if _, written := v.lines[joinSegs(at("limit"))]; r.Limit == 0 && !written {
		v.report(at("limit"), "", "is missing", "1 to "+strconv.Itoa(MaxLimit)+" hits per window")
	} else {
		v.intRange(at("limit"), r.Limit, 1, MaxLimit)
	}
	algo, ok := limitspec.ParseAlgorithm(r.Algorithm)
	if !ok {
		v.oneOf(at("algorithm"), r.Algorithm, limitspec.Algorithms)
	}
	if algo != limitspec.Concurrency {
		v.durationRange(at("window"), r.Window, limitspec.MinWindow, limitspec.MaxWindow)
	}
	v.intRange(at("burst"), r.Burst, 0, MaxLimit)
}

// parseProxy parses a trusted_proxies entry: a CIDR prefix or a single
// address, without a zone. Entries that carry IPv4 addresses (IPv4-mapped,
// in nat's prefixes) are IPv4, because the edge compares peers so
// (internal/clientip).
func parseProxy(nat clientip.NAT64, s string) (netip.Prefix, bool) {
	p, err := nat.ParseEntry(s)
	return p, err == nil
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// isToken reports whether s is an RFC 9110 token, as header and cookie
// names must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// isTierName reports whether s can name a tier: tier names appear in key
// paths, metric dimensions and plan values, so they hold no dots or spaces.
func isTierName(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// fmtDuration writes a duration the way a configuration does: 1m, not 1m0s.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
