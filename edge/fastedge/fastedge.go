// Package fastedge serves the edge with fasthttp (edge.server: fasthttp):
// the limiter in front of a reverse proxy to the origin, with the
// behaviour of edge.Limiter.Middleware and edge.NewReverseProxy (refusals,
// rate-limit headers, canonical paths, header hygiene, body cap and
// deadline, origin timeouts, one decision per request emitted when the
// response ends) at less CPU per request: fasthttp reuses its request and
// response objects and reads and writes connections through its own
// buffers. The net/http middleware stays for embedding.
//
// It uses the limiter's transport-independent API: Begin, Refusal, the
// rate-limit header values, ForwardHeaders and End.
package fastedge

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge"
	"github.com/ratewarden/ratewarden/edge/identity"
	"github.com/ratewarden/ratewarden/internal/clientip"
)

// Origin answers passed requests: an *OriginClient (the reverse proxy to
// edge.upstream) or, for the demo origin, any Do that fills in resp. A
// streamed response body (resp.BodyStream) is copied to the client and
// closed; Do may also fill in resp's body.
type Origin interface {
	Do(req *fasthttp.Request, resp *fasthttp.Response) error
}

// Handler is the edge's whole HTTP surface for fasthttp: the token
// endpoint, when challenges are enabled, and the limiter in front of the
// origin.
type Handler struct {
	l           *edge.Limiter
	origin      Origin
	tokens      fasthttp.RequestHandler // nil without the token endpoint
	endpoint    string
	page, param string
	maxBody     int64
	bodyTimeout time.Duration
	idHeader    string
	aliasAll    bool     // any header name may be an alias (edge.Limiter.AliasesWithoutUnderscore)
	headers     []string // what Begin reads, canonical
	// originHost is the Host sent when the client sent none.
	originHost string
	pool       sync.Pool // *exchange
	// aside holds the headers of requests whose body has not come yet, by
	// the server's header they were read into (HeaderReceived).
	aside sync.Map
}

// Config is what a Handler needs besides the limiter and the origin.
type Config struct {
	ChallengePage, ChallengeParam string        // challenge.page and param
	MaxBodyBytes                  int64         // edge.client.max_body_bytes; 0: no cap
	BodyTimeout                   time.Duration // edge.client.body_timeout
	VerifierSecret                string        // guards the token endpoint; "" disables it
	OriginHost                    string        // the origin's host:port, the Host of a request that had none
}

// NewHandler returns the handler that serves l in front of origin.
func NewHandler(l *edge.Limiter, origin Origin, c Config) *Handler {
	h := &Handler{
		l: l, origin: origin, page: c.ChallengePage, param: c.ChallengeParam,
		maxBody: c.MaxBodyBytes, bodyTimeout: c.BodyTimeout,
		idHeader: http.CanonicalHeaderKey(l.RequestIDHeader()), headers: l.DecisionHeaders(),
		originHost: c.OriginHost, aliasAll: l.AliasesWithoutUnderscore(),
	}
	if endpoint, ok := l.TokenEndpoint(); ok {
		// The token endpoint is rare and not on the request path: it is
		// the net/http handler, adapted.
		h.endpoint = endpoint
		h.tokens = fasthttpadaptor.NewFastHTTPHandler(l.TokenHandler(c.VerifierSecret))
	}
	h.pool.New = func() any { return &exchange{h: h, hdr: make(http.Header, len(h.headers))} }
	return h
}

// Serve serves one request.
func (h *Handler) Serve(ctx *fasthttp.RequestCtx) {
	if cl := ctx.Request.Header.ContentLength(); cl > 0 {
		if kept := h.takeAside(&ctx.Request.Header); kept != nil {
			releaseHeader(kept)
		}
	}
	bad, hop, under := scanHeaders(&ctx.Request.Header)
	if bad {
		// fasthttp lets a header name with a space in it through; net/http
		// refuses it, and so does the edge, before deciding, as net/http's
		// server does: an origin could read it as another header.
		ctx.Error("400 Bad Request: invalid header name", fasthttp.StatusBadRequest)
		ctx.SetConnectionClose()
		return
	}
	if p := ctx.Request.Header.Protocol(); len(p) == len("HTTP/1.1") && p[5] != '1' {
		// fasthttp takes any HTTP/d.d (HTTP/2.0, HTTP/0.9) and reads it as
		// HTTP/1.1; net/http's server answers 505 to a major version
		// other than 1, before deciding, and so does the edge.
		ctx.Error("505 HTTP Version Not Supported: unsupported protocol version", fasthttp.StatusHTTPVersionNotSupported)
		ctx.SetConnectionClose()
		return
	}
	if h.tokens != nil && h.isEndpoint(ctx) {
		h.tokens(ctx)
		return
	}
	x := h.pool.Get().(*exchange)
	defer recoverPanic(ctx)
	x.hop, x.under = hop, under
	x.start(ctx, ctx.Time())
	if !x.serve() {
		x.finish(time.Now())
	}
}

// recoverPanic keeps a panic in serving one request from ending the
// process, as net/http's server does: fasthttp's does not recover. The
// request's exchange is dropped, not pooled again; the client gets 500
// and its connection is closed.
func recoverPanic(ctx *fasthttp.RequestCtx) {
	if p := recover(); p != nil {
		ctx.Response.Reset()
		ctx.Error("500 Internal Server Error", fasthttp.StatusInternalServerError)
		ctx.SetConnectionClose()
	}
}

// isEndpoint reports whether the request's path, as sent, is the token
// endpoint's.
func (h *Handler) isEndpoint(ctx *fasthttp.RequestCtx) bool {
	_, pq := splitTarget(ctx.Request.Header.RequestURI())
	if i := bytes.IndexByte(pq, '?'); i >= 0 {
		pq = pq[:i]
	}
	return string(pq) == h.endpoint
}

// scanHeaders reports, in one pass over the names of a request's headers,
// whether one has a space or a tab in it (bad), whether one is hop-by-hop
// (hop), and whether one has an underscore in it (under), which may make
// it another spelling of a header the edge removes
// (edge.Limiter.IsHeaderAlias).
func scanHeaders(h *fasthttp.RequestHeader) (bad, hop, under bool) {
	h.VisitAll(func(k, _ []byte) {
		bad = bad || bytes.ContainsAny(k, " \t")
		hop = hop || isHop(k)
		under = under || bytes.IndexByte(k, '_') >= 0
	})
	return bad, hop, under
}

// removeAliases removes from hd the headers that are other spellings of
// those the edge removes or sets (edge.Limiter.IsHeaderAlias).
func removeAliases(hd *fasthttp.RequestHeader, l *edge.Limiter) {
	var aliases []string
	hd.VisitAll(func(k, _ []byte) {
		if l.IsHeaderAlias(string(k)) {
			aliases = append(aliases, string(k))
		}
	})
	for _, k := range aliases {
		hd.Del(k)
	}
}

// hasHopHeader reports whether a response has a hop-by-hop header.
func hasHopHeader(h *fasthttp.ResponseHeader) (hop bool) {
	h.VisitAll(func(k, _ []byte) { hop = hop || isHop(k) })
	return hop
}

// isHop reports whether k, canonical, is one of hopHeaders.
func isHop(k []byte) bool {
	switch len(k) {
	case 2:
		return string(k) == "Te"
	case 7:
		return string(k) == "Trailer" || string(k) == "Upgrade"
	case 10:
		return string(k) == "Connection" || string(k) == "Keep-Alive"
	case 16:
		return string(k) == "Proxy-Connection"
	case 17:
		return string(k) == "Transfer-Encoding"
	case 18:
		return string(k) == "Proxy-Authenticate"
	case 19:
		return string(k) == "Proxy-Authorization"
	}
	return false
}

// HeaderReceived is the server's hook for a request whose headers have
// arrived: a request with a body gets edge.client.body_timeout to send
// it, and the server reads no more than a byte of it ahead of Serve, so
// that a body over the cap, or too slow, is the edge's to answer and
// record.
//
// That byte is read before Serve: when it does not come in time, or the
// client goes away instead, the server calls ServerError with the request
// headers gone. So the headers of a request with a Content-Length are
// kept aside until Serve or ServerError takes them back, and ServerError
// decides and records the request as Serve would have (body_timeout, 408;
// client_closed).
func (h *Handler) HeaderReceived(hdr *fasthttp.RequestHeader) fasthttp.RequestConfig {
	cl := hdr.ContentLength()
	if cl > 0 {
		kept := headerPool.Get().(*fasthttp.RequestHeader)
		hdr.CopyTo(kept)
		h.aside.Store(hdr, kept)
	}
	if cl > 0 || cl == -1 {
		return fasthttp.RequestConfig{ReadTimeout: h.bodyTimeout, MaxRequestBodySize: 1}
	}
	return fasthttp.RequestConfig{}
}

var headerPool = sync.Pool{New: func() any { return new(fasthttp.RequestHeader) }}

func releaseHeader(h *fasthttp.RequestHeader) {
	h.Reset()
	headerPool.Put(h)
}

// takeAside returns the headers kept aside for the request whose headers
// are hdr, and forgets them; nil if there are none.
func (h *Handler) takeAside(hdr *fasthttp.RequestHeader) *fasthttp.RequestHeader {
	if kept, ok := h.aside.LoadAndDelete(hdr); ok {
		return kept.(*fasthttp.RequestHeader)
	}
	return nil
}

// ServerError is the server's hook for a request it could not read. A
// request whose headers had come and whose body did not (HeaderReceived)
// is decided and recorded; anything else is answered as serverError says,
// with no decision, as net/http's server answers what it cannot read.
func (h *Handler) ServerError(ctx *fasthttp.RequestCtx, err error) {
	kept := h.takeAside(&ctx.Request.Header)
	timedOut, gone := isTimeout(err), clientGone(err)
	if kept == nil || !(timedOut || gone) {
		if kept != nil {
			releaseHeader(kept)
		}
		serverError(ctx, err)
		return
	}
	kept.CopyTo(&ctx.Request.Header)
	releaseHeader(kept)
	wall := time.Now()
	x := h.pool.Get().(*exchange)
	x.start(ctx, wall)
	switch resp, refused := edge.Refusal(&x.v, h.page, h.param); {
	case refused:
		x.refuse(resp)
	case timedOut:
		x.fail(decisions.BodyTimeout)
	default:
		x.fail(decisions.ClientClosed)
	}
	x.finish(wall)
}

// clientGone reports whether err is a read that found the client's
// connection closed or reset.
func clientGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}

// exchange is one request from its decision to the end of its response,
// pooled with what it reuses: the Request and Verdict the limiter fills in,
// the headers Begin reads, the request to the origin and its response.
type exchange struct {
	h   *Handler
	ctx *fasthttp.RequestCtx
	req edge.Request
	v   edge.Verdict
	hdr http.Header
	buf []byte

	out  fasthttp.Request
	resp fasthttp.Response

	status   int
	handoff  time.Time // when the request went to the origin; zero if it did not
	began    time.Time // when the origin's response headers came
	bodyEnd  time.Time // when the request body was read to its end
	respErr  string
	body     io.Reader // the client's request body, when there is one
	read     int64
	bodyFail string     // the response error of a failed request body
	stream   io.Reader  // the origin's response body, streamed to the client
	trusted  bool       // the peer is a trusted proxy
	hop      bool       // the request has hop-by-hop headers
	under    bool       // a request header's name has an underscore in it
	peer     netip.Addr //
	host     string     // the request's host: an absolute-form target's, or the Host header
	pathQ    []byte     // path and query as sent (into the request's buffer)
}

// start fills in the limiter's Request from ctx and decides it.
func (x *exchange) start(ctx *fasthttp.RequestCtx, wall time.Time) {
	h := x.h
	x.ctx = ctx
	r := &x.req
	*r = edge.Request{}
	if a, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		x.peer = clientip.Of(a.AddrPort().Addr())
	} else {
		x.peer = identityPeer(ctx.RemoteAddr())
	}
	r.Peer = x.peer
	r.Method = method(ctx.Method())
	authority, pq := splitTarget(ctx.Request.Header.RequestURI())
	x.pathQ = pq
	if authority != nil {
		x.host = string(authority)
	} else {
		x.host = string(ctx.Request.Header.Host())
	}
	r.Host = x.host
	uri := "/"
	if len(pq) > 0 {
		uri = string(pq)
	}
	r.URI = uri
	r.Path = uri
	if i := bytes.IndexByte(pq, '?'); i >= 0 {
		r.Path = uri[:i]
	} else if len(pq) == 0 {
		r.Path = ""
	}
	for _, k := range h.headers {
		vals := x.hdr[k][:0]
		for _, v := range ctx.Request.Header.PeekAll(k) {
			vals = append(vals, string(v))
		}
		if len(vals) == 0 {
			delete(x.hdr, k)
		} else {
			x.hdr[k] = vals
		}
	}
	r.Header = x.hdr
	id, generated := h.l.RequestID(string(ctx.Request.Header.Peek(h.idHeader)))
	r.RequestID = id
	x.trusted = h.l.TrustsPeer(x.peer)
	h.l.Begin(context.Background(), h.l.DecisionTime(wall), r, &x.v)
	if generated {
		// Set on the client's request, it is copied to the origin's.
		ctx.Request.Header.Set(h.idHeader, id)
	}
}

// serve answers the decided request: the edge's refusal, or the origin's
// response. It reports whether the response is streamed, in which case
// the exchange ends when the server closes the stream.
func (x *exchange) serve() bool {
	h, ctx, v := x.h, x.ctx, &x.v
	if resp, refused := edge.Refusal(v, h.page, h.param); refused {
		x.refuse(resp)
		return false
	}
	cl := ctx.Request.Header.ContentLength()
	if cl > 0 || cl == -1 {
		if h.maxBody > 0 && int64(cl) > h.maxBody {
			x.fail(decisions.BodyTooLarge)
			return false
		}
		x.body = ctx.RequestBodyStream()
	}
	out := &x.out
	x.forward(out, cl)
	x.handoff = time.Now()
	err := h.origin.Do(out, &x.resp)
	if err != nil {
		x.fail(x.classify(err))
		return false
	}
	x.began = time.Now()
	return x.answer()
}

// refuse answers with resp, the edge's refusal.
func (x *exchange) refuse(resp edge.Response) {
	ctx := x.ctx
	x.setRateLimitHeaders()
	resp.EachHeader(ctx.Response.Header.Set)
	x.status = resp.Status
	ctx.SetStatusCode(resp.Status)
	if len(resp.Body) > 0 {
		ctx.Response.SetBodyRaw(resp.Body)
	}
}

// forward makes out the request to the origin: the client's headers,
// cleaned as net/http's reverse proxy and edge.ForwardHeaders clean them,
// its canonical path, and its body through the cap and the deadline.
func (x *exchange) forward(out *fasthttp.Request, cl int) {
	h, ctx, v := x.h, x.ctx, &x.v
	ctx.Request.Header.CopyTo(&out.Header)
	oh := &out.Header
	oh.SetNoDefaultContentType(true)
	// In the edge's own version, whatever the client's (RFC 9110 section
	// 2.5), as net/http's reverse proxy sends it.
	oh.SetProtocolBytes(http11)
	if x.hop {
		removeHopHeaders(oh)
		// The request id is the edge's for the origin, whatever the
		// client's Connection names.
		oh.Set(h.idHeader, v.RequestID)
	} else {
		oh.ResetConnectionClose()
	}
	if x.under || h.aliasAll {
		removeAliases(oh, h.l)
	}
	h.l.ForwardHeaders(oh, x.trusted, v)
	// What a client says of the forwarding is replaced, trusted or not: one
	// address, the client's, so that leftmost and rightmost readers of
	// X-Forwarded-For agree.
	if v.ClientIP.IsValid() {
		x.buf = v.ClientIP.AppendTo(x.buf[:0])
		oh.SetBytesV("X-Forwarded-For", x.buf)
		x.buf = edge.AppendForwarded(x.buf[:0], v.ClientIP, x.host, "http")
		oh.SetBytesV("Forwarded", x.buf)
	} else if x.peer.IsValid() {
		x.buf = x.peer.AppendTo(x.buf[:0])
		oh.SetBytesV("X-Forwarded-For", x.buf)
	} else {
		oh.Del("X-Forwarded-For")
	}
	oh.Set("X-Forwarded-Host", x.host)
	oh.Set("X-Forwarded-Proto", "http")
	host := x.host
	if host == "" {
		host = h.originHost
	}
	oh.SetHost(host)
	target := x.pathQ
	if p, rewrite := v.ForwardPath(); rewrite {
		x.buf = append(x.buf[:0], p...)
		if i := bytes.IndexByte(target, '?'); i >= 0 {
			x.buf = append(x.buf, target[i:]...)
		}
		target = x.buf
	}
	if len(target) == 0 || target[0] != '/' {
		// A target the limiter passed is a path.
		target = append(x.buf[:0:0], '/')
	}
	oh.SetRequestURIBytes(target)
	if x.body != nil {
		out.SetBodyStream(requestBody{x}, cl)
	}
}

// hopHeaders are removed from requests and responses, as net/http's
// reverse proxy removes them (RFC 9110 section 7.6.1); fasthttp frames
// bodies itself.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// header is what removeHopHeaders needs of fasthttp's request and response
// headers.
type header interface {
	Peek(key string) []byte
	PeekAll(key string) [][]byte
	Del(key string)
	Set(key, value string)
	ResetConnectionClose()
}

func removeHopHeaders(hd header) {
	// The headers Connection names are hop-by-hop too.
	for _, line := range hd.PeekAll("Connection") {
		for len(line) > 0 {
			var tok []byte
			if i := bytes.IndexByte(line, ','); i >= 0 {
				tok, line = line[:i], line[i+1:]
			} else {
				tok, line = line, nil
			}
			if tok = bytes.TrimSpace(tok); len(tok) > 0 && !bytes.EqualFold(tok, []byte("close")) && !bytes.EqualFold(tok, []byte("keep-alive")) {
				hd.Del(string(tok))
			}
		}
	}
	trailers := false
	for _, te := range hd.PeekAll("Te") {
		trailers = trailers || bytes.Contains(bytes.ToLower(te), []byte("trailers"))
	}
	for _, k := range hopHeaders {
		hd.Del(k)
	}
	hd.ResetConnectionClose()
	if trailers {
		hd.Set("Te", "trailers")
	}
}

// answer copies the origin's response to the client, its body streamed.
func (x *exchange) answer() bool {
	ctx, resp := x.ctx, &x.resp
	resp.Header.CopyTo(&ctx.Response.Header)
	// The edge answers in its own protocol version, whatever the origin's.
	ctx.Response.Header.SetProtocol(http11)
	if hasHopHeader(&ctx.Response.Header) {
		removeHopHeaders(&ctx.Response.Header)
	} else {
		ctx.Response.Header.ResetConnectionClose()
	}
	x.setRateLimitHeaders()
	x.status = resp.StatusCode()
	if s := resp.BodyStream(); s != nil {
		x.stream = s
		cl := resp.Header.ContentLength()
		if cl < 0 {
			cl = -1
		}
		ctx.Response.SetBodyStream(responseBody{x}, cl)
		return true
	}
	if b := resp.Body(); len(b) > 0 {
		ctx.Response.SetBody(b)
	}
	return false
}

// setRateLimitHeaders sets the rate-limit headers of the verdict, as
// edge.SetHeaders does.
func (x *exchange) setRateLimitHeaders() {
	v := &x.v
	if v.Policies[0].Name == "" {
		return
	}
	b, ends := edge.AppendRateLimitValues(x.buf[:0], v)
	x.buf = b
	start := 0
	for i, end := range ends {
		x.ctx.Response.Header.SetCanonical(keyBytes[i], b[start:end])
		start = end
	}
}

var http11 = []byte("HTTP/1.1")

var keyBytes = func() (k [5][]byte) {
	for i, s := range edge.RateLimitHeaders {
		k[i] = []byte(s)
	}
	return k
}()

// fail answers with the edge's response for the error e (nothing for a
// client that went away) and records e.
func (x *exchange) fail(e string) {
	x.respErr = e
	resp, closeConn, ok := edge.FailureResponse(e)
	if !ok {
		return
	}
	rh := &x.ctx.Response.Header
	x.ctx.Response.ResetBody()
	if closeConn {
		rh.SetConnectionClose()
	}
	rh.Set("Cache-Control", "no-store")
	rh.Set("Content-Type", "application/json")
	x.status = resp.Status
	x.ctx.SetStatusCode(resp.Status)
	x.ctx.Response.SetBodyRaw(resp.Body)
}

// classify names the failure err of the request to the origin.
func (x *exchange) classify(err error) string {
	if x.bodyFail != "" {
		return x.bodyFail
	}
	var de *dialError
	if errors.As(err, &de) {
		return decisions.UpstreamUnreachable
	}
	if isTimeout(err) {
		return decisions.UpstreamTimeout
	}
	return decisions.UpstreamFailed
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, fasthttp.ErrDialTimeout) || (errors.As(err, &ne) && ne.Timeout())
}

// finish records how the response ended, emits the decision and returns
// the exchange to the pool.
func (x *exchange) finish(wall time.Time) {
	v := &x.v
	v.Status, v.ResponseError = x.status, x.respErr
	if lat, ok := edge.UpstreamLatency(x.handoff, x.bodyEnd, x.began, wall, x.respErr); ok {
		v.UpstreamLatency = lat
	}
	l := x.h.l
	l.End(context.Background(), l.DecisionTime(wall), v)
	x.reset()
	x.h.pool.Put(x)
}

func (x *exchange) reset() {
	x.ctx, x.body, x.stream = nil, nil, nil
	x.status, x.read, x.respErr, x.bodyFail = 0, 0, "", ""
	x.handoff, x.began, x.bodyEnd = time.Time{}, time.Time{}, time.Time{}
	x.pathQ, x.host, x.hop, x.under = nil, "", false, false
	x.out.Reset()
	x.resp.Reset()
	x.req = edge.Request{}
}

// requestBody is the client's request body as the origin client reads it:
// capped, and its failures noted for the decision.
type requestBody struct{ x *exchange }

func (b requestBody) Read(p []byte) (int, error) {
	x := b.x
	m := x.h.maxBody
	if m > 0 {
		if x.read > m {
			return 0, edge.ErrBodyTooLarge // read past the cap already
		}
		// Read at most one byte past the cap: enough to know it is over.
		if left := m + 1 - x.read; int64(len(p)) > left {
			p = p[:left]
		}
	}
	n, err := x.body.Read(p)
	x.read += int64(n)
	if m > 0 && x.read > m {
		// The byte past the cap is not passed on.
		x.bodyFail = decisions.BodyTooLarge
		return n - 1, edge.ErrBodyTooLarge
	}
	switch {
	case err == io.EOF:
		x.bodyEnd = time.Now()
	case err != nil && isTimeout(err):
		x.bodyFail = decisions.BodyTimeout
	case err != nil:
		// The client broke off its body: it went away.
		x.bodyFail = decisions.ClientClosed
	}
	return n, err
}

// responseBody is the origin's response body as the server writes it to
// the client. The server closes it when the response has ended, written
// or not: the exchange then ends.
type responseBody struct{ x *exchange }

var _ fasthttp.ReadCloserWithError = responseBody{}

func (b responseBody) Read(p []byte) (int, error) {
	x := b.x
	n, err := x.stream.Read(p)
	if err != nil && err != io.EOF && x.respErr == "" {
		// The origin broke off its body, or stalled mid-body past
		// edge.origin.read_timeout (the only deadline on a body's reads:
		// originConn); the client sees a truncated response.
		x.respErr = decisions.UpstreamFailed
		if isTimeout(err) {
			x.respErr = decisions.UpstreamReadTimeout
		}
	}
	return n, err
}

// CloseWithError ends the exchange: err is why the server stopped writing
// the body, nil when it was written whole.
func (b responseBody) CloseWithError(err error) error {
	x := b.x
	if err != nil && x.respErr == "" {
		x.respErr = edge.WriteFailure(err)
	}
	if c, ok := x.stream.(fasthttp.ReadCloserWithError); ok {
		var cerr error
		if x.respErr != "" {
			cerr = errors.New(x.respErr)
		}
		c.CloseWithError(cerr)
	}
	x.finish(time.Now())
	return nil
}

// method returns m as a string, without allocating for the common methods.
func method(m []byte) string {
	switch string(m) {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodHead:
		return http.MethodHead
	case http.MethodPost:
		return http.MethodPost
	case http.MethodPut:
		return http.MethodPut
	case http.MethodPatch:
		return http.MethodPatch
	case http.MethodDelete:
		return http.MethodDelete
	case http.MethodOptions:
		return http.MethodOptions
	}
	return string(m)
}

// splitTarget splits a request target as sent into the authority of an
// absolute-form target (nil for the others) and its path and query,
// still percent-encoded, as net/http reads them: "http://a.example/x?y"
// is a.example and /x?y, "/x?y" is nil and /x?y. The userinfo of an
// authority is not part of the host.
func splitTarget(t []byte) (authority, pathQuery []byte) {
	if len(t) == 0 || t[0] == '/' || t[0] == '*' {
		return nil, t
	}
	i := bytes.Index(t, []byte("://"))
	if i <= 0 || !isScheme(t[:i]) {
		return nil, t
	}
	rest := t[i+3:]
	j := bytes.IndexAny(rest, "/?")
	if j < 0 {
		j = len(rest)
	}
	authority, pathQuery = rest[:j], rest[j:]
	if k := bytes.LastIndexByte(authority, '@'); k >= 0 {
		authority = authority[k+1:]
	}
	return authority, pathQuery
}

func isScheme(s []byte) bool {
	for i, c := range s {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// identityPeer parses a peer address that is not a *net.TCPAddr.
func identityPeer(a net.Addr) netip.Addr {
	if a == nil {
		return netip.Addr{}
	}
	return clientip.Of(identity.ParsePeer(a.String()))
}
