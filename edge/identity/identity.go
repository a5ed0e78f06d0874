// Package identity resolves who a client is: the address it is counted
// under, and the user and plan it is authenticated as, if any.
//
// The client address is the TCP peer unless the peer is a trusted proxy; then
// it comes from the forwarding header the proxy set (X-Forwarded-For or
// CloudFront-Viewer-Address). User and plan come from a verified JWT bearer
// token, or from user headers set by a trusted proxy. Headers from untrusted
// peers are never believed: a client that sends X-User-Id itself is counted
// as anonymous, and the decision records that it tried.
//
// Every input is bounded: X-Forwarded-For is read for at most
// [MaxForwardedEntries] entries and [MaxForwardedBytes] bytes from the right,
// user ids and plans are at most [MaxUserLen] bytes (and a user id is
// printable text without white space at either end: [Believes]), bearer tokens at most
// [MaxTokenLen] bytes. Nothing in this package panics on any input.
package identity

import (
	"encoding/binary"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"os"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/internal/clientip"
)

// Bounds on what a client can make the resolver read.
const (
	MaxForwardedEntries = 64      // X-Forwarded-For entries examined, from the right
	MaxForwardedBytes   = 8 << 10 // X-Forwarded-For bytes examined, from the right
	MaxTokenLen         = 8 << 10 // longest bearer token verified
)

// MaxUserLen is the longest user id or plan believed: what readers of the
// decisions believe (decisions.MaxUserIDLen).
const MaxUserLen = decisions.MaxUserIDLen

// Defaults filled in by New for empty configuration fields.
const (
	DefaultClientIPHeader = "x-forwarded-for"
	DefaultUserHeader     = "X-User-Id"
	DefaultPlanHeader     = "X-User-Plan"
	DefaultIPv6Prefix     = config.DefaultIPv6Prefix
	DefaultUserClaim      = "sub"
	DefaultPlanClaim      = "plan"
	DefaultLeeway         = 30 * time.Second
)

// The supported client_ip_header values.
const (
	headerXFF        = "x-forwarded-for"
	headerCloudFront = "cloudfront-viewer-address"
)

// Identity is who a client is. It is a small value, returned by value; its
// strings may share memory with the request headers.
type Identity struct {
	ClientIP netip.Addr // the resolved client address (zero if none could be found)
	// Addr is the address the client is counted under: ClientIP, or for IPv6
	// the first address of its /IPv6Prefix, so that clients rotating
	// addresses inside one /64 share a counter.
	Addr   netip.Addr
	User   string // authenticated user id, "" if anonymous
	Plan   string // plan as presented (header or claim), "" if none
	Source string // how the identity was established: one of the decisions.Source* constants
}

// Resolver resolves identities from requests. It is immutable after New and
// safe for concurrent use. The zero value is not usable; a nil *Resolver
// resolves every request to its TCP peer.
type Resolver struct {
	nat        clientip.NAT64 // the prefixes whose addresses are IPv4 clients
	trusted    []netip.Prefix
	cloudFront bool   // read CloudFront-Viewer-Address instead of X-Forwarded-For
	ipHeader   string // canonical header key of the forwarding header
	userHeader string // canonical header key
	planHeader string // canonical header key
	ipv6Bits   int
	jwt        *verifier // nil when bearer tokens are not configured
}

// New returns a resolver for cfg, with defaults filled in for empty fields.
// It validates every field; an error names the key path, the value and what
// is allowed. The HS256 key is read from env(cfg.JWT.KeyEnv) (os.Getenv when
// env is nil); the RS256 and ES256 keys from the PEM file
// cfg.JWT.PublicKeyFile. Key material never appears in an error.
func New(cfg config.Identity, env func(string) string) (*Resolver, error) {
	if env == nil {
		env = os.Getenv
	}
	r := &Resolver{}

	nats := make([]netip.Prefix, 0, len(cfg.NAT64Prefixes))
	for i, s := range cfg.NAT64Prefixes {
		p, err := clientip.ParseNAT64Prefix(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("identity.nat64_prefixes[%d]: %q %v; want an IPv6 prefix of 32, 40, 48, 56, 64 or 96 bits (RFC 6052) such as 2001:db8:64::/96 or 2001:db8:122:344::/64", i, s, err)
		}
		if j := clientip.Overlapping(nats, p); j >= 0 {
			return nil, fmt.Errorf("identity.nat64_prefixes[%d]: %q overlaps identity.nat64_prefixes[%d] (%v); want prefixes apart", i, s, j, nats[j])
		}
		nats = append(nats, p)
	}
	r.nat = cfg.NAT64()

	for i, s := range cfg.TrustedProxies {
		p, err := r.nat.ParseEntry(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("identity.trusted_proxies[%d]: %q %v; want an IP address or CIDR such as 10.0.0.0/8", i, s, err)
		}
		r.trusted = append(r.trusted, p)
	}

	h := strings.ToLower(strings.TrimSpace(cfg.ClientIPHeader))
	switch h {
	case "", headerXFF:
		r.ipHeader = textproto.CanonicalMIMEHeaderKey(headerXFF)
	case headerCloudFront:
		r.cloudFront = true
		r.ipHeader = textproto.CanonicalMIMEHeaderKey(headerCloudFront)
	default:
		return nil, fmt.Errorf("identity.client_ip_header: %q is not supported; want %s or %s", cfg.ClientIPHeader, headerXFF, headerCloudFront)
	}

	var err error
	if r.userHeader, err = headerKey("identity.user_header", cfg.UserHeader, DefaultUserHeader); err != nil {
		return nil, err
	}
	if r.planHeader, err = headerKey("identity.plan_header", cfg.PlanHeader, DefaultPlanHeader); err != nil {
		return nil, err
	}
	if r.userHeader == r.planHeader {
		return nil, fmt.Errorf("identity.plan_header: %q is also the user header; want a different header", cfg.PlanHeader)
	}

	switch p := cfg.IPv6Prefix; {
	case p == 0:
		r.ipv6Bits = DefaultIPv6Prefix
	case p < 1 || p > 128:
		return nil, fmt.Errorf("identity.ipv6_prefix: %d is out of range; want 1 to 128 (default %d)", p, DefaultIPv6Prefix)
	default:
		r.ipv6Bits = p
	}

	if cfg.JWT != nil {
		if r.jwt, err = newVerifier(*cfg.JWT, env); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// headerKey validates a header name and returns its canonical key.
func headerKey(path, name, def string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		name = def
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return "", fmt.Errorf("%s: %q is not a valid header name; want letters, digits and -", path, name)
		}
	}
	return textproto.CanonicalMIMEHeaderKey(name), nil
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// Resolve returns the identity of the request whose RemoteAddr is remoteAddr
// and whose headers are h, checking token lifetimes against now.
// It never fails: what cannot be believed is ignored, and Source says why.
// Without a bearer token and a forwarding header it does not allocate.
func (r *Resolver) Resolve(remoteAddr string, h http.Header, now time.Time) Identity {
	peer, _ := parseHostPort(remoteAddr)
	return r.ResolvePeer(peer, h, now)
}

// ParsePeer parses a TCP peer address ("ip:port", "[ip]:port" or "ip") as
// Resolve does; the zero Addr when it is not one. A server that keeps a
// connection's requests together parses its peer once with it and
// resolves each request with ResolvePeer.
func ParsePeer(remoteAddr string) netip.Addr {
	a, _ := parseHostPort(remoteAddr)
	return a
}

// ResolvePeer is Resolve for a peer address already parsed (ParsePeer).
func (r *Resolver) ResolvePeer(peer netip.Addr, h http.Header, now time.Time) Identity {
	var id Identity
	r.ResolvePeerTo(&id, peer, h, now)
	return id
}

// ResolvePeerTo is ResolvePeer writing the identity to *id, for the
// request path: an Identity is a dozen words, and filling the caller's
// copy spares copying it back through each call.
func (r *Resolver) ResolvePeerTo(id *Identity, peer netip.Addr, h http.Header, now time.Time) {
	trusted := r.resolveAddr(id, peer, h)
	if r == nil {
		return
	}
	if r.jwt != nil {
		if tok, ok := bearer(h["Authorization"]); ok {
			user, plan, ok := r.jwt.verify(tok, now)
			if !ok {
				id.Source = decisions.SourceInvalidJWT
				return
			}
			id.User, id.Plan, id.Source = user, plan, decisions.SourceJWT
			return
		}
	}

	users, plans := h[r.userHeader], h[r.planHeader]
	if len(users) == 0 && len(plans) == 0 {
		return
	}
	if !trusted {
		id.Source = decisions.SourceUntrustedHeader
		return
	}
	// A trusted proxy sets each header once; two lines mean a client's
	// header was passed through beside the proxy's, and neither is believed.
	if len(users) != 1 || len(plans) > 1 {
		return
	}
	user := trimOWS(users[0])
	var plan string
	if len(plans) == 1 {
		plan = trimOWS(plans[0])
	}
	if !Believes(user, plan) {
		return
	}
	id.User, id.Plan, id.Source = user, plan, decisions.SourceHeader
}

// Believes reports whether the edge takes user and plan for a client's:
// a user id decisions.CheckUserID accepts (printable, without white space
// at either end, at most MaxUserLen bytes: one the feedback lists can hold
// as it is) and a plan of at most MaxUserLen bytes. A client whose claimed
// identity is not believed is counted by its address.
func Believes(user, plan string) bool {
	return decisions.CheckUserID(user) == nil && len(plan) <= MaxUserLen
}

// ResolveAddr returns the client address of the request, as Resolve does,
// and nothing of a user: for a request whose Authorization header is not a
// user's token, such as the CAPTCHA verifier's at the token endpoint.
func (r *Resolver) ResolveAddr(remoteAddr string, h http.Header) Identity {
	peer, _ := parseHostPort(remoteAddr)
	var id Identity
	r.resolveAddr(&id, peer, h)
	return id
}

// resolveAddr resets *id to the client address alone and reports whether
// the peer is a trusted proxy.
func (r *Resolver) resolveAddr(id *Identity, peer netip.Addr, h http.Header) (trusted bool) {
	// An IPv4 address is its own counting address: the call that says so
	// is left out for the common peer.
	peer = r.ClientAddr(peer)
	// Field by field: a composite literal would be built on the stack and
	// copied, and the copy's wide loads wait for the narrow stores.
	id.ClientIP, id.Addr, id.User, id.Plan, id.Source = peer, peer, "", "", decisions.SourcePeer
	if r == nil {
		return false
	}
	trusted = r.isTrusted(peer)
	if trusted {
		var a netip.Addr
		if r.cloudFront {
			a = r.nat.Of(viewerAddress(h[r.ipHeader]))
		} else {
			a = r.forwardedFor(peer, h[r.ipHeader])
		}
		if a.IsValid() {
			id.ClientIP, id.Source = a, decisions.SourceForwarded
		}
	}
	id.Addr = id.ClientIP
	if !id.ClientIP.Is4() {
		id.Addr = CountingAddr(id.ClientIP, r.ipv6Bits)
	}
	return trusted
}

// ClientAddr returns a as the resolver counts it (clientip.NAT64.Of): an
// address that carries an IPv4 client, IPv4-mapped or in a NAT64 prefix
// (the well-known one, or identity.nat64_prefixes), is that IPv4 address.
// A nil Resolver knows the well-known prefix alone.
func (r *Resolver) ClientAddr(a netip.Addr) netip.Addr {
	if a.Is4() {
		return a // the common peer: inlined, one comparison
	}
	return r.clientAddr6(a)
}

func (r *Resolver) clientAddr6(a netip.Addr) netip.Addr {
	if r == nil {
		return clientip.Of(a)
	}
	return r.nat.Of(a)
}

// Trusts reports whether the peer at remoteAddr ("ip:port") is a trusted
// proxy, whose forwarding and user headers Resolve reads and the edge may
// pass on. A nil Resolver trusts no one.
func (r *Resolver) Trusts(remoteAddr string) bool {
	if r == nil {
		return false
	}
	peer, _ := parseHostPort(remoteAddr)
	return r.isTrusted(r.ClientAddr(peer))
}

// TrustsPeer is Trusts for a peer address already parsed (ParsePeer).
func (r *Resolver) TrustsPeer(peer netip.Addr) bool {
	return r != nil && r.isTrusted(r.ClientAddr(peer))
}

// Headers returns the canonical keys of the request headers ResolvePeer
// reads: the forwarding header, the user and plan headers and, with JWT
// authentication, Authorization. A server whose headers are not an
// http.Header copies these into one.
func (r *Resolver) Headers() []string {
	if r == nil {
		return nil
	}
	keys := []string{r.ipHeader, r.userHeader, r.planHeader}
	if r.jwt != nil {
		keys = append(keys, "Authorization")
	}
	return keys
}

// CountingAddr is the address an anonymous client at a is counted under:
// a itself, or for IPv6 the first address of its /ipv6Bits prefix, so that
// clients rotating addresses inside one allocation share a counter.
func CountingAddr(a netip.Addr, ipv6Bits int) netip.Addr {
	if a.Is6() && ipv6Bits < 128 {
		if p, err := a.Prefix(ipv6Bits); err == nil {
			return p.Addr()
		}
	}
	return a
}

// isTrusted reports whether a is in a trusted prefix; Contains is false
// for the zero Addr.
func (r *Resolver) isTrusted(a netip.Addr) bool {
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedFor walks X-Forwarded-For from the right and returns the first
// address that is not a trusted proxy. If every address is trusted it
// returns the leftmost; an unparsable entry, or reaching the entry or byte
// bound, stops the walk at the last good address. It returns the zero Addr
// when the header gave no address, so the peer stands.
//
// The header lines are walked as if joined with commas, without joining
// them, so that the common case does not allocate. Empty list elements are
// skipped, as RFC 9110 section 5.6.1 asks.
func (r *Resolver) forwardedFor(peer netip.Addr, lines []string) netip.Addr {
	var last netip.Addr
	entries, budget := 0, MaxForwardedBytes
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		for {
			var e string
			more := false
			if j := strings.LastIndexByte(line, ','); j >= 0 {
				e, line, more = line[j+1:], line[:j], true
			} else {
				e = line
			}
			budget -= len(e) + 1
			if budget < 0 {
				return last
			}
			if e = trimOWS(e); e != "" {
				entries++
				if entries > MaxForwardedEntries {
					return last
				}
				a, ok := parseHostPort(e)
				if !ok || a.Zone() != "" {
					return last
				}
				a = r.nat.Of(a)
				if !r.isTrusted(a) {
					return a
				}
				last = a
			}
			if !more {
				break
			}
		}
	}
	return last
}

// viewerAddress parses CloudFront-Viewer-Address: "198.51.100.10:46532" or
// "2001:db8::1:46532"; the text after the last colon is the port. The
// address is as sent: the resolver puts it in its form (ClientAddr). CloudFront
// sets the header once; should there be several lines, the last is the one
// nearest to us.
func viewerAddress(lines []string) netip.Addr {
	if len(lines) == 0 {
		return netip.Addr{}
	}
	v := trimOWS(lines[len(lines)-1])
	if len(v) > 64 {
		return netip.Addr{}
	}
	i := strings.LastIndexByte(v, ':')
	if i < 0 || !validPort(v[i+1:]) {
		return netip.Addr{}
	}
	host := v[:i]
	if len(host) > 2 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	a, err := netip.ParseAddr(host)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}
	}
	return a
}

func validPort(s string) bool {
	if len(s) == 0 || len(s) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535
}

// parseHostPort parses "ip", "ip:port" or "[ip]:port". An IPv4 peer,
// with or without its port, is parsed in one pass; other text goes to
// parseHostPortShape.
func parseHostPort(s string) (netip.Addr, bool) {
	if a, n, ok := scanIPv4(s); ok && (n == len(s) || s[n] == ':' && validPort(s[n+1:])) {
		return a, true
	}
	return parseHostPortShape(s)
}

// parseHostPortShape is parseHostPort for any text. It chooses the parser
// by the shape of s, so that well-formed input never builds an error value.
func parseHostPortShape(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	host := s
	switch i := strings.LastIndexByte(s, ':'); {
	case s[0] == '[':
		// "[v6]:port" or "[v6]"
		j := strings.IndexByte(s, ']')
		if j < 0 || (j+1 < len(s) && (s[j+1] != ':' || !validPort(s[j+2:]))) {
			return netip.Addr{}, false
		}
		host = s[1:j]
	case i >= 0 && strings.IndexByte(s[:i], ':') < 0:
		// "v4:port". The port is not needed; it is checked only for its
		// shape, which costs less than converting it.
		if !validPort(s[i+1:]) {
			return netip.Addr{}, false
		}
		host = s[:i]
	}
	if a, ok := parseIPv4(host); ok {
		return a, s[0] != '['
	}
	a, err := netip.ParseAddr(host)
	if err != nil || (host != s && s[0] == '[' && a.Is4()) {
		return netip.Addr{}, false
	}
	return a, true
}

// parseIPv4 parses a dotted-quad IPv4 address as netip.ParseAddr does
// (four decimal fields of at most 255, no leading zeros), in one pass: the
// peer address of every request goes through it. ok is false for anything
// else, including forms netip accepts that are not IPv4, which the caller
// then hands to netip.ParseAddr.
func parseIPv4(s string) (a netip.Addr, ok bool) {
	a, n, ok := scanIPv4(s)
	return a, ok && n == len(s)
}

// scanIPv4 parses the dotted quad at the start of s, up to its end or to a
// colon, and returns the index where it stopped; ok is false when the text
// before that is not a dotted quad.
func scanIPv4(s string) (a netip.Addr, n int, ok bool) {
	// The fields are gathered in one register and stored at once: netip
	// reads the four bytes with one load, which would wait for four
	// one-byte stores.
	var ip uint32
	field, val, digits := 0, 0, 0
	for ; n < len(s) && s[n] != ':'; n++ {
		c := s[n]
		switch {
		case c >= '0' && c <= '9':
			if digits == 1 && val == 0 {
				return a, n, false // leading zero
			}
			val = val*10 + int(c-'0')
			digits++
			if val > 255 {
				return a, n, false
			}
		case c == '.' && digits > 0 && field < 3:
			ip = ip<<8 | uint32(val)
			field, val, digits = field+1, 0, 0
		default:
			return a, n, false
		}
	}
	if field != 3 || digits == 0 {
		return a, n, false
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], ip<<8|uint32(val))
	return netip.AddrFrom4(b), n, true
}

// bearer returns the token of an "Authorization: Bearer <token>" header.
// ok is false when there is no bearer credential at all; a bearer scheme
// with an empty token is returned as ok with an empty token, which fails
// verification.
func bearer(lines []string) (tok string, ok bool) {
	if len(lines) == 0 {
		return "", false
	}
	v := trimOWS(lines[0])
	const scheme = "bearer"
	if len(v) < len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return "", false
	}
	rest := v[len(scheme):]
	if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
		return "", false // another scheme, such as "Bearerish"
	}
	return trimOWS(rest), true
}

// trimOWS trims HTTP optional whitespace: spaces and tabs.
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
