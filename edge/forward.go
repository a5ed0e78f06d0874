package edge

import (
	"context"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/edge/canonpath"
)

// forwarding is what the edge changes in a passed request before the
// origin sees it: the configuration's forward section, compiled.
type forwarding struct {
	strip          []string // canonical header keys removed from untrusted peers
	user, plan     string   // identity.user_header and plan_header, canonical
	setUser        bool     // forward.user
	tier, decision string   // forward.tier_header and decision_header, canonical; "" for none
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
	return f
}

// forward makes r, which v passed, what the origin is to see: its path
// canonical, the headers of an untrusted peer that the edge did not
// believe removed, and the identity the edge resolved set. The client
// address travels in r's context to the reverse proxy, which writes it
// into X-Forwarded-For and Forwarded.
func (l *Limiter) forward(r *http.Request, v *Verdict) *http.Request {
	f := &l.fwd
	// Decide refused what was ambiguous unless paths.ambiguous is rewrite;
	// a path that differed only in encoding is forwarded canonical too.
	if v.form != canonpath.Canonical {
		if p, err := url.PathUnescape(v.Path); err == nil {
			r.URL.Path, r.URL.RawPath = p, v.Path
		}
	}
	h := r.Header
	if !l.ident.Trusts(r.RemoteAddr) {
		for _, k := range f.strip {
			delete(h, k)
		}
	}
	if f.setUser {
		delete(h, f.user)
		delete(h, f.plan)
		if v.UserID != "" {
			h[f.user] = []string{v.UserID}
			if v.Plan != "" {
				h[f.plan] = []string{v.Plan}
			}
		}
	}
	if f.tier != "" {
		h[f.tier] = []string{v.Tier}
	}
	if f.decision != "" {
		h[f.decision] = []string{v.Outcome.String()}
	}
	if !v.ClientIP.IsValid() {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), clientAddrKey{}, v.ClientIP))
}

// clientAddrKey is the context key of the client address the edge
// resolved, a netip.Addr, for the reverse proxy.
type clientAddrKey struct{}

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

// appendForwarded appends the RFC 7239 Forwarded element for a client at
// a, reaching the edge as host over proto.
func appendForwarded(b []byte, a netip.Addr, host, proto string) []byte {
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
