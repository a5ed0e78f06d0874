package edge

import (
	"context"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"strings"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/internal/canonpath"
)

// forwarding is what the edge changes in a passed request before the
// origin sees it: the configuration's forward section, compiled.
type forwarding struct {
	strip          []string // canonical header keys removed from untrusted peers
	user, plan     string   // identity.user_header and plan_header, canonical
	setUser        bool     // forward.user
	tier, decision string   // forward.tier_header and decision_header, canonical; "" for none
	aliased        []string // canonical keys whose "_" spellings are removed from every request (IsHeaderAlias)
	own            []string // canonical keys the edge sets for the origin (unlistOwn)
	underscored    bool     // one of aliased has "_" in it: its "-" spelling is an alias too
}

// alwaysStripped are removed from untrusted peers whatever the
// configuration says: the forwarding headers the edge itself sets, beside
// every client address header identity.client_ip_header may name.
var alwaysStripped = []string{"Forwarded", "X-Forwarded-Host", "X-Forwarded-Proto"}

func newForwarding(cfg *config.Config) forwarding {
	key := textproto.CanonicalMIMEHeaderKey
	f := forwarding{
		user: key(cfg.Identity.UserHeader), plan: key(cfg.Identity.PlanHeader),
		setUser: cfg.Forward.User == nil || *cfg.Forward.User,
	}
	if cfg.Forward.TierHeader != "" {
		f.tier = key(cfg.Forward.TierHeader)
	}
	if cfg.Forward.DecisionHeader != "" {
		f.decision = key(cfg.Forward.DecisionHeader)
	}
	f.strip = append(f.strip, f.user, f.plan)
	for _, h := range config.ClientIPHeaders {
		f.strip = append(f.strip, key(h))
	}
	f.strip = append(f.strip, alwaysStripped...)
	for _, h := range cfg.Forward.StripHeaders {
		f.strip = append(f.strip, key(h))
	}
	var decided []string // the tier and decision headers, when configured
	for _, k := range []string{f.tier, f.decision} {
		if k != "" {
			decided = append(decided, k)
		}
	}
	// What an untrusted peer's request loses (the client address headers,
	// X-Forwarded-For among them), and what the edge sets.
	f.aliased = append(append(f.aliased, f.strip...), decided...)
	for _, k := range f.aliased {
		f.underscored = f.underscored || strings.IndexByte(k, '_') >= 0
	}
	f.own = append(f.own, key(cfg.Edge.RequestIDHeader))
	if f.setUser {
		f.own = append(f.own, f.user, f.plan)
	}
	f.own = append(f.own, decided...)
	return f
}

// unlistOwn removes from h's Connection header the names of the headers
// the edge sets for the origin (f.own): a client's Connection names fields
// of its own hop, which the edge's are not, and the reverse proxy removes
// what Connection names after forward has set them.
func (f *forwarding) unlistOwn(h http.Header) {
	conn := h["Connection"]
	if !f.namesOwn(conn) {
		return
	}
	var kept []string
	for _, line := range conn {
		for tok := range strings.SplitSeq(line, ",") {
			if tok = textproto.TrimString(tok); tok != "" && !f.isOwn(tok) {
				kept = append(kept, tok)
			}
		}
	}
	if len(kept) == 0 {
		delete(h, "Connection")
		return
	}
	h["Connection"] = []string{strings.Join(kept, ", ")}
}

// namesOwn reports whether the Connection header lines conn name one of
// the headers the edge sets; it does not allocate.
func (f *forwarding) namesOwn(conn []string) bool {
	for _, line := range conn {
		for tok := range strings.SplitSeq(line, ",") {
			if f.isOwn(textproto.TrimString(tok)) {
				return true
			}
		}
	}
	return false
}

func (f *forwarding) isOwn(name string) bool {
	for _, k := range f.own {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// IsHeaderAlias reports whether a request header named name is another
// spelling, with "_" for "-", of a header the edge removes or sets
// (X_User_Id for X-User-Id): an origin that reads headers as CGI
// variables (WSGI, Rack, PHP) reads the two as one HTTP_X_USER_ID, so
// such a header is removed from every peer's request, trusted or not.
// A name without "_" is an alias only of a header configured with one
// (identity.user_header: X_User_Id): AliasesWithoutUnderscore.
func (l *Limiter) IsHeaderAlias(name string) bool {
	if !l.fwd.underscored && strings.IndexByte(name, '_') < 0 {
		return false
	}
	for _, k := range l.fwd.aliased {
		if len(k) == len(name) && !strings.EqualFold(k, name) && sameAsCGI(k, name) {
			return true
		}
	}
	return false
}

// AliasesWithoutUnderscore reports whether a header name without "_" may
// be an alias (IsHeaderAlias): a header the edge removes or sets is
// configured with "_" in its name.
func (l *Limiter) AliasesWithoutUnderscore() bool { return l.fwd.underscored }

// sameAsCGI reports whether a and b, of one length, name one CGI
// variable: equal but for letter case and "_" read as "-".
func sameAsCGI(a, b string) bool {
	for i := 0; i < len(a); i++ {
		if cgiByte(a[i]) != cgiByte(b[i]) {
			return false
		}
	}
	return true
}

func cgiByte(c byte) byte {
	switch {
	case c == '_':
		return '-'
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	}
	return c
}

// forward makes r, which v passed, what the origin is to see: its path
// canonical and its headers as ForwardHeaders makes them. It edits r and
// returns it.
func (l *Limiter) forward(r *http.Request, v *Verdict) *http.Request {
	// Decide refused what was ambiguous unless paths.ambiguous is rewrite;
	// a path that differed only in encoding is forwarded canonical too.
	if v.form != canonpath.Canonical {
		if p, err := url.PathUnescape(v.Path); err == nil {
			r.URL.Path, r.URL.RawPath = p, v.Path
		}
	}
	for k := range r.Header {
		if l.IsHeaderAlias(k) {
			delete(r.Header, k)
		}
	}
	l.fwd.unlistOwn(r.Header)
	l.ForwardHeaders(canonicalHeader(r.Header), l.ident.Trusts(r.RemoteAddr), v)
	return r
}

// withExchange returns r with x in its context, for the reverse proxy,
// which writes the client address the edge resolved into X-Forwarded-For
// and Forwarded, and notes in x a response body that the origin stalled
// (upstream_read_timeout).
func withExchange(r *http.Request, x *exchange) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), exchangeKey{}, x))
}

// HeaderEditor is what ForwardHeaders changes in a request's headers:
// http.Header and fasthttp's *RequestHeader have these methods. Keys are
// canonical.
type HeaderEditor interface {
	Del(key string)
	Set(key, value string)
}

// ForwardHeaders makes the headers h of a request that v passed what the
// origin is to see, as Middleware does: when the peer is not trusted, the
// headers it claims about itself removed (forward.strip_headers, every
// client address header, Forwarded, X-Forwarded-Host and -Proto, the user
// and plan headers); the user and plan the edge resolved set
// (forward.user); and forward.tier_header and decision_header set. The
// client address is the proxy's to write (X-Forwarded-For, Forwarded).
func (l *Limiter) ForwardHeaders(h HeaderEditor, trusted bool, v *Verdict) {
	f := &l.fwd
	if !trusted {
		for _, k := range f.strip {
			h.Del(k)
		}
	}
	if f.setUser {
		h.Del(f.user)
		h.Del(f.plan)
		if v.UserID != "" {
			h.Set(f.user, v.UserID)
			if v.Plan != "" {
				h.Set(f.plan, v.Plan)
			}
		}
	}
	if f.tier != "" {
		h.Set(f.tier, v.Tier)
	}
	if f.decision != "" {
		h.Set(f.decision, v.Outcome.String())
	}
}

// TrustsPeer reports whether the peer at a is a trusted proxy, whose
// forwarding and user headers are believed and passed on.
func (l *Limiter) TrustsPeer(a netip.Addr) bool { return l.ident.TrustsPeer(a) }

// ForwardPath returns the path to forward for v, still percent-encoded,
// and true when it is not the path as sent: the canonical form of a path
// that differed from it only in encoding, or of an ambiguous one under
// paths.ambiguous: rewrite.
func (v *Verdict) ForwardPath() (string, bool) {
	return v.Path, v.form != canonpath.Canonical
}

// canonicalHeader is an http.Header whose keys are known to be canonical:
// ForwardHeaders edits it without canonicalizing them again.
type canonicalHeader http.Header

func (h canonicalHeader) Del(key string)        { delete(h, key) }
func (h canonicalHeader) Set(key, value string) { h[key] = []string{value} }

// exchangeKey is the context key of a forwarded request's *exchange, for
// the reverse proxy: the client address the edge resolved is its
// verdict's ClientIP.
type exchangeKey struct{}

// requestPath returns the path of u, a request's URL, as the client sent
// it, still percent-encoded: net/http keeps that in RawPath whenever it
// differs from the encoding of the decoded Path (a backslash, %2e, %2F,
// lower-case hex...), and http.StripPrefix keeps both in step.
func requestPath(u *url.URL) string {
	if u.RawPath != "" {
		return u.RawPath
	}
	return u.EscapedPath()
}

// AppendForwarded appends the RFC 7239 Forwarded element for a client at
// a, reaching the edge as host over proto: the value of the Forwarded
// header the reverse proxy sends the origin.
func AppendForwarded(b []byte, a netip.Addr, host, proto string) []byte {
	b = append(b, "for="...)
	if a.Is6() {
		b = append(b, `"[`...)
		b = a.AppendTo(b)
		b = append(b, `]"`...)
	} else {
		b = a.AppendTo(b)
	}
	if host != "" {
		b = append(b, ";host="...)
		b = appendQuoted(b, host)
	}
	b = append(b, ";proto="...)
	return append(b, proto...)
}
