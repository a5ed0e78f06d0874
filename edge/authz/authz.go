// Package authz is the decision endpoint of nginx's auth_request: nginx
// keeps proxying, and before each request asks the endpoint, in a
// subrequest without a body, whether the request may pass. Every call is
// one decision, emitted as at the edge.
//
// The request decided is the one the subrequest describes: its URI
// (X-Original-URI, path and query as the client sent them), its method
// (X-Original-Method) and its client (X-Real-IP). These headers are
// believed only from a trusted proxy (identity.trusted_proxies), as the
// edge believes X-Forwarded-For: from any other peer X-Real-IP is ignored
// and the peer is the client. From a trusted nginx, X-Real-IP takes the
// place of X-Forwarded-For, so a client cannot put an address of its own
// in front of it. User and plan headers (and a JWT) are read as at the
// edge: nginx must set or clear them.
//
// nginx's auth_request understands 2xx (pass), 401 and 403 (refuse), so
// the answers are: 204 to pass, with the rate-limit headers; 403 for the
// deny list; 401 for every other refusal, whose X-Ratewarden-Status says
// what the client should get (429, 302 to the challenge page, 503, 400,
// 414), with Retry-After and X-Ratewarden-Location for nginx to pass on
// through auth_request_set and an error_page (docs/nginx.md).
package authz

import (
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/edge"
)

// Headers nginx sets on the subrequest, and those the answer carries.
const (
	HeaderURI      = "X-Original-Uri"
	HeaderMethod   = "X-Original-Method"
	HeaderRealIP   = "X-Real-Ip"
	HeaderStatus   = "X-Ratewarden-Status"   // the status the client should get
	HeaderLocation = "X-Ratewarden-Location" // the challenge page, for a 302
	HeaderDecision = "X-Ratewarden-Decision" // the outcome
)

// maxURI bounds the X-Original-URI read; longer URIs are decided on their
// first maxURI bytes, whose path canonpath then refuses as too long.
const maxURI = 16 << 10

// maxMethod bounds the method a decision records.
const maxMethod = 32

// Handler returns the decision endpoint deciding with lim. Any path and
// method are answered: nginx chooses the subrequest's.
func Handler(lim *edge.Limiter) http.Handler {
	cfg := lim.Config()
	page, param := cfg.Challenge.Page, cfg.Challenge.Param
	reqIDHeader := cfg.Edge.RequestIDHeader
	ipHeader := http.CanonicalHeaderKey(cfg.Identity.ClientIPHeader)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		uri, method := r.Header.Get(HeaderURI), r.Header.Get(HeaderMethod)
		if len(uri) > maxURI {
			uri = uri[:maxURI]
		}
		trusted := lim.Trusts(r.RemoteAddr)
		if trusted {
			if ip, err := netip.ParseAddr(strings.TrimSpace(r.Header.Get(HeaderRealIP))); err == nil {
				r.Header[ipHeader] = []string{ip.String()}
			}
		}
		if uri == "" {
			uri = "/"
		}
		if method == "" {
			method = r.Method
		}
		if len(method) > maxMethod {
			method = strings.ToValidUTF8(method[:maxMethod], "")
		}
		path := uri
		if i := strings.IndexByte(path, '?'); i >= 0 {
			path = path[:i]
		}
		id := r.Header.Get(reqIDHeader)
		if len(id) > 128 {
			id = ""
		}
		req := edge.Request{RemoteAddr: r.RemoteAddr, Method: method, Host: r.Host, Path: path, URI: uri,
			Header: r.Header, RequestID: id}
		var v edge.Verdict
		lim.Begin(r.Context(), now, &req, &v)
		h := w.Header()
		edge.SetHeaders(h, &v)
		h.Set(HeaderDecision, v.Outcome.String())
		h.Set("Cache-Control", "no-store")
		resp, refused := edge.Refusal(&v, page, param)
		status := http.StatusNoContent
		if refused {
			status = http.StatusUnauthorized
			if resp.Status == http.StatusForbidden {
				status = http.StatusForbidden
			}
			h.Set(HeaderStatus, strconv.Itoa(resp.Status))
			if resp.Location != "" {
				h.Set(HeaderLocation, resp.Location)
			}
			if resp.RetryAfter > 0 {
				h.Set("Retry-After", strconv.FormatInt(resp.RetryAfter, 10))
			}
			// What the client gets, not what nginx got.
			v.Status = resp.Status
		}
		w.WriteHeader(status)
		lim.End(r.Context(), time.Now(), &v)
	})
}
