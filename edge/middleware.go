package edge

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/ratewarden/ratewarden/decisions"
)

// Middleware returns next behind the limiter: refused requests are answered
// by the edge (429, 302 to the challenge page, 403, 503, or 400 for a path
// with no canonical form) and never reach next; passed requests reach next
// with the rate-limit headers already set on the response, their path
// canonical, their headers as the forward section of the configuration
// says (see forward), their body capped (edge.client.max_body_bytes, 413)
// and due within edge.client.body_timeout (408). When the response ends
// (next returns, or panics because the client or the origin broke off),
// concurrency slots are released and the request's one decision is
// emitted with its status, upstream latency and response error.
func (l *Limiter) Middleware(next http.Handler) http.Handler {
	limits := bodyLimits{timeout: l.cfg.Edge.Client.BodyTimeout, maxBytes: l.cfg.Edge.Client.MaxBodyBytes}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wall := time.Now()
		now := l.decisionTime(wall)
		req := Request{
			RemoteAddr: r.RemoteAddr, Method: r.Method, Host: r.Host, Path: requestPath(r.URL),
			URI: r.URL.RequestURI(), Header: r.Header,
		}
		req.RequestID = l.requestID(r)
		x := &exchange{ResponseWriter: w}
		v := &x.v
		l.Begin(r.Context(), now, &req, v)
		defer l.endExchange(x, r)
		if resp, refused := Refusal(v, l.cfg.Challenge.Page, l.cfg.Challenge.Param); refused {
			resp.Write(x, v)
			return
		}
		SetHeaders(w.Header(), v)
		if !x.guard(r, wall, limits) {
			return
		}
		x.handoff = time.Now()
		next.ServeHTTP(x, withExchange(l.forward(r, v), x))
	})
}

// decisionTime returns the time of a decision taken at wall: wall itself,
// or the limiter's clock when Options.Clock set one. The default path is a
// nil check, with no indirect call.
func (l *Limiter) decisionTime(wall time.Time) time.Time {
	if l.clock != nil {
		return l.clock()
	}
	return wall
}

// DecisionTime returns the time of a decision taken at wall: wall itself,
// or the limiter's clock when Options.Clock set one. Servers other than
// Middleware pass it to Begin and End.
func (l *Limiter) DecisionTime(wall time.Time) time.Time { return l.decisionTime(wall) }

// TokenEndpoint returns the path of the token endpoint (challenge.endpoint)
// and true when the edge serves it (challenges enabled, with keys), as
// Handler routes it.
func (l *Limiter) TokenEndpoint() (string, bool) {
	return l.cfg.Challenge.Endpoint, l.cfg.Challenge.Enabled && l.keys != nil
}

// requestID returns r's request id from the configured header, or, when it
// has none (or an overlong one), a generated id, which it sets on r for
// the origin.
func (l *Limiter) requestID(r *http.Request) string {
	hdr := l.cfg.Edge.RequestIDHeader
	id, generated := l.RequestID(r.Header.Get(hdr))
	if generated {
		r.Header.Set(hdr, id)
	}
	return id
}

// RequestID returns the request id of a request whose request id header
// (edge.request_id_header, RequestIDHeader) is got: got itself, or, when
// it is empty or longer than 128 bytes, a generated id, which the caller
// sets on the request for the origin (generated true).
func (l *Limiter) RequestID(got string) (id string, generated bool) {
	if got == "" || len(got) > 128 {
		return l.ids.next(), true
	}
	return got, false
}

// RequestIDHeader is the header that carries request ids
// (edge.request_id_header).
func (l *Limiter) RequestIDHeader() string { return l.cfg.Edge.RequestIDHeader }

// DecisionHeaders returns the canonical keys of the request headers Begin
// reads: the identity headers (identity.Resolver.Headers), and with
// challenges the challenge token header and Cookie. A server whose headers
// are not an http.Header copies these into the Request's.
func (l *Limiter) DecisionHeaders() []string {
	keys := l.ident.Headers()
	if l.keys != nil {
		keys = append(keys, textproto.CanonicalMIMEHeaderKey(l.cfg.Challenge.Header), "Cookie")
	}
	return keys
}

// requestIDs generates request ids: a random per-process prefix and a
// counter, so ids are unique without a random read per request.
type requestIDs struct {
	prefix string
	n      atomic.Uint64
}

func newRequestIDs() *requestIDs {
	var b [6]byte
	rand.Read(b[:])
	return &requestIDs{prefix: hex.EncodeToString(b[:]) + "-"}
}

func (g *requestIDs) next() string {
	var buf [32]byte
	b := append(buf[:0], g.prefix...)
	b = strconv.AppendUint(b, g.n.Add(1), 36)
	return string(b)
}

// tokenRequest is the body of a token request from the CAPTCHA verifier.
type tokenRequest struct {
	IP   string `json:"ip"`   // the client address that solved the challenge
	User string `json:"user"` // or the user id
	TTL  string `json:"ttl"`  // optional, at most the configured token TTL
}

// maxTokenBodyBytes is the size of the largest body the token endpoint
// reads.
const maxTokenBodyBytes = 4096

// decodeTokenRequest decodes the body of a token request strictly: one JSON
// object of at most maxTokenBodyBytes bytes, of valid UTF-8, whose names are
// tokenRequest's exactly (in case too), each at most once, and nothing
// after it but white space. A body that two JSON readers could read
// differently (the last or the first of two "ip", "IP" as "ip", a second
// object after the first) is refused, so that what the verifier's own
// checks read is what the edge issues the token for.
func decodeTokenRequest(body io.Reader) (tokenRequest, error) {
	var tr tokenRequest
	b, err := io.ReadAll(io.LimitReader(body, maxTokenBodyBytes+1))
	if err != nil {
		return tr, err
	}
	if len(b) > maxTokenBodyBytes {
		return tr, errors.New("larger than " + strconv.Itoa(maxTokenBodyBytes) + " bytes")
	}
	err = jsonv2.Unmarshal(b, &tr, jsonv2.RejectUnknownMembers(true))
	if se := (*jsonv2.SemanticError)(nil); errors.As(err, &se) && errors.Is(se.Err, jsonv2.ErrUnknownName) {
		// The library's words name the Go type and call the name a string.
		return tr, errors.New("unknown field " + strconv.Quote(se.JSONPointer.LastToken()) + " (names are case-sensitive)")
	}
	return tr, err
}

type tokenResponse struct {
	Token   string    `json:"token"`
	Expires time.Time `json:"expires"`
	Cookie  string    `json:"cookie"` // the cookie name the edge reads
	Header  string    `json:"header"` // or the header name
}

// TokenHandler serves the token endpoint: the CAPTCHA verifier, once a
// client solved the challenge, POSTs {"ip": "..."} or {"user": "..."} with
// "Authorization: Bearer <verifier secret>" and gets a challenge token to
// hand to the client (as the cookie or header named in the response).
// A nil keyring, challenges off, or a secret CheckVerifierSecret refuses
// serves 404. Wrong secrets are limited per client address
// (challenge.endpoint_failures): past the limit every request from the
// address gets 429 and no secret is checked. Every request yields a
// decision of the rule token_endpoint whose reason says what was done.
func (l *Limiter) TokenHandler(secret string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l.keys == nil || l.tokenRule == nil || CheckVerifierSecret(secret) != nil {
			http.NotFound(w, r)
			return
		}
		now := l.decisionTime(time.Now())
		req := Request{RemoteAddr: r.RemoteAddr, Method: r.Method, Host: r.Host, Path: r.URL.Path,
			URI: r.URL.RequestURI(), Header: r.Header, RequestID: l.requestID(r)}
		x := &exchange{ResponseWriter: w}
		v := &x.v
		w = x // so that the decision records the response
		allowed := l.tokenAttempt(r.Context(), now, &req, v)
		defer l.endExchange(x, r)
		if !allowed {
			resp, _ := Refusal(v, l.cfg.Challenge.Page, l.cfg.Challenge.Param)
			resp.Write(w, v)
			return
		}
		fail := func(reason string, status int, code, msg string) {
			l.tokenDone(r.Context(), now, v, reason)
			writeJSONError(w, status, errorBody(code, msg, 0))
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			fail(reasonTokenBadMethod, http.StatusMethodNotAllowed, "method_not_allowed", "use POST")
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(secret)) != 1 {
			l.metrics.tokenEndpointDenied.Add(1)
			reason := reasonWrongSecret
			if !ok || got == "" {
				reason = reasonNoSecret
			}
			fail(reason, http.StatusUnauthorized, "unauthorized", "a valid verifier secret is required")
			return
		}
		tr, err := decodeTokenRequest(r.Body)
		if err != nil {
			fail(reasonTokenBadBody, http.StatusBadRequest, "bad_request", "body: "+err.Error())
			return
		}
		var ip netip.Addr
		switch {
		case tr.User != "" && tr.IP != "":
			fail(reasonTokenBadBody, http.StatusBadRequest, "bad_request", "give ip or user, not both")
			return
		case tr.User != "":
			// Only an id the edge believes (decisions.CheckUserID): a
			// request claiming any other is counted by its address, so a
			// token for it would let no client through, and " bob" would
			// be a subject apart from "bob".
			if err := decisions.CheckUserID(tr.User); err != nil {
				fail(reasonTokenBadBody, http.StatusBadRequest, "bad_request", "user: "+err.Error())
				return
			}
		case tr.IP != "":
			a, err := netip.ParseAddr(tr.IP)
			if err != nil {
				fail(reasonTokenBadBody, http.StatusBadRequest, "bad_request", "ip: "+err.Error())
				return
			}
			ip = l.ident.ClientAddr(a)
		default:
			fail(reasonTokenBadBody, http.StatusBadRequest, "bad_request", "give ip or user")
			return
		}
		ttl := l.cfg.Challenge.TokenTTL
		if tr.TTL != "" {
			d, err := time.ParseDuration(tr.TTL)
			if err != nil || d <= 0 || d > ttl {
				fail(reasonTokenBadBody, http.StatusBadRequest, "bad_request", "ttl: a duration up to "+ttl.String())
				return
			}
			ttl = d
		}
		tok := l.keys.Issue(l.SubjectFor(ip, tr.User), now, ttl)
		l.metrics.tokensIssued.Add(1)
		l.tokenDone(r.Context(), now, v, reasonTokenIssued)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(tokenResponse{Token: tok, Expires: now.Add(ttl).UTC().Truncate(time.Second),
			Cookie: l.cfg.Challenge.Cookie, Header: l.cfg.Challenge.Header})
	})
}

func writeJSONError(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

// Handler returns the edge's whole HTTP surface in front of next: the token
// endpoint (if challenges are enabled) and everything else behind the
// limiter.
func (l *Limiter) Handler(next http.Handler, verifierSecret string) http.Handler {
	limited := l.Middleware(next)
	endpoint, ok := l.TokenEndpoint()
	if !ok {
		return limited
	}
	tokens := l.TokenHandler(verifierSecret)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == endpoint {
			tokens.ServeHTTP(w, r)
			return
		}
		limited.ServeHTTP(w, r)
	})
}
