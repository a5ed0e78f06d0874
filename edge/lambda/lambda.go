// Package lambda runs the edge limiter inside AWS Lambda behind API Gateway
// (REST APIs, payload 1.0, and HTTP APIs, payload 2.0) or an Application
// Load Balancer. The event becomes an http.Request, goes through the same
// limiter handler as the reverse proxy (one decision core), and the
// response becomes the event's response.
//
// Lambda freezes the process between invocations and may end it without a
// signal, so a Handler flushes the decisions of every event (Options.Flush)
// before it returns the response: nothing an invocation decided waits in a
// buffer for a next invocation that may never come.
package lambda

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
)

// Flusher makes what was recorded so far durable, or hands it to a
// synchronous sink; *decisions.Emitter and *assemble.Edge are Flushers.
type Flusher interface {
	Flush(ctx context.Context) error
}

// Options configure a Handler. The zero value flushes nothing.
type Options struct {
	// Flush is called after every event is served and before its response
	// is returned, with the invocation's context.
	Flush Flusher
	// OnError receives Flush's errors. The response is returned all the
	// same: recording a decision never fails a request.
	OnError func(error)
	// OnNoAddress is told once, at the first ALB event without
	// X-Forwarded-For (ErrNoForwardedFor), that the load balancer gives no
	// client address: every such request is decided without one (the
	// path's failure mode; see edge.Limiter), which only the load
	// balancer's setting can mend.
	OnNoAddress func(error)
}

// ErrNoForwardedFor is what Options.OnNoAddress is told: an ALB event
// carries the client's address in X-Forwarded-For alone.
var ErrNoForwardedFor = errors.New("ALB event without X-Forwarded-For: the request has no client address, " +
	"so it is not counted and its path's failure mode decides it (fail_closed under a fail_closed prefix, else fail_open); " +
	"set the load balancer's routing.http.xff_header_processing.mode to append (the default): " +
	"remove sends no X-Forwarded-For, and preserve passes on the client's own")

// Handler adapts an http.Handler (typically Limiter.Handler in front of the
// application) to Lambda events. It is safe for concurrent use.
type Handler struct {
	next   http.Handler
	opts   Options
	noAddr sync.Once
}

// New returns a Handler serving events with next.
func New(next http.Handler, opts Options) *Handler { return &Handler{next: next, opts: opts} }

// Invoke handles one raw event: an API Gateway REST (1.0), HTTP API (2.0)
// or ALB event, detected from its shape. Pass it to lambda.Start.
func (h *Handler) Invoke(ctx context.Context, raw json.RawMessage) (any, error) {
	var probe struct {
		Version        string `json:"version"`
		RequestContext struct {
			ELB *json.RawMessage `json:"elb"`
		} `json:"requestContext"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("decode event: %w", err)
	}
	switch {
	case probe.RequestContext.ELB != nil:
		var ev events.ALBTargetGroupRequest
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, fmt.Errorf("decode ALB event: %w", err)
		}
		return h.ALB(ctx, ev)
	case probe.Version == "2.0":
		var ev events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, fmt.Errorf("decode HTTP API event: %w", err)
		}
		return h.HTTPAPI(ctx, ev)
	}
	var ev events.APIGatewayProxyRequest
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, fmt.Errorf("decode REST API event: %w", err)
	}
	return h.RESTAPI(ctx, ev)
}

// RESTAPI handles an API Gateway REST API (payload 1.0) event.
func (h *Handler) RESTAPI(ctx context.Context, ev events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
	hdr := headerOf(ev.Headers, ev.MultiValueHeaders)
	q := queryOf(ev.QueryStringParameters, ev.MultiValueQueryStringParameters)
	r, err := newRequest(ctx, ev.HTTPMethod, ev.Path, q, hdr, ev.Body, ev.IsBase64Encoded, ev.RequestContext.Identity.SourceIP)
	if err != nil {
		return events.APIGatewayProxyResponse{}, err
	}
	rec := h.serve(r)
	body, b64 := rec.body()
	return events.APIGatewayProxyResponse{StatusCode: rec.status, Headers: single(rec.hdr), MultiValueHeaders: rec.hdr,
		Body: body, IsBase64Encoded: b64}, nil
}

// HTTPAPI handles an API Gateway HTTP API (payload 2.0) event.
func (h *Handler) HTTPAPI(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	hdr := headerOf(ev.Headers, nil)
	if len(ev.Cookies) > 0 {
		hdr.Set("Cookie", strings.Join(ev.Cookies, "; "))
	}
	http := ev.RequestContext.HTTP
	r, err := newRequest(ctx, http.Method, ev.RawPath, ev.RawQueryString, hdr, ev.Body, ev.IsBase64Encoded, http.SourceIP)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	rec := h.serve(r)
	body, b64 := rec.body()
	cookies := rec.hdr.Values("Set-Cookie")
	rec.hdr.Del("Set-Cookie")
	return events.APIGatewayV2HTTPResponse{StatusCode: rec.status, Headers: single(rec.hdr), MultiValueHeaders: rec.hdr,
		Cookies: cookies, Body: body, IsBase64Encoded: b64}, nil
}

// ALB handles an Application Load Balancer event. The event carries no
// peer address: the ALB appends the address it accepted the connection
// from to X-Forwarded-For, so that last hop is taken as the peer, and the
// hops before it are believed only if that peer is a trusted proxy. That
// takes the load balancer's default routing.http.xff_header_processing.mode,
// append: with remove no event has the header, and with preserve the
// client's own header (or none) is passed on. An event without it has no
// client address (Options.OnNoAddress).
func (h *Handler) ALB(ctx context.Context, ev events.ALBTargetGroupRequest) (events.ALBTargetGroupResponse, error) {
	hdr := headerOf(ev.Headers, ev.MultiValueHeaders)
	q := queryOf(unescapeQuery(ev.QueryStringParameters, ev.MultiValueQueryStringParameters))
	peer := ""
	if xff := hdr.Values("X-Forwarded-For"); len(xff) > 0 {
		last := xff[len(xff)-1]
		if i := strings.LastIndexByte(last, ','); i >= 0 {
			last = last[i+1:]
		}
		peer = strings.TrimSpace(last)
	}
	if peer == "" && h.opts.OnNoAddress != nil {
		h.noAddr.Do(func() { h.opts.OnNoAddress(ErrNoForwardedFor) })
	}
	r, err := newRequest(ctx, ev.HTTPMethod, ev.Path, q, hdr, ev.Body, ev.IsBase64Encoded, peer)
	if err != nil {
		return events.ALBTargetGroupResponse{}, err
	}
	rec := h.serve(r)
	body, b64 := rec.body()
	resp := events.ALBTargetGroupResponse{StatusCode: rec.status, StatusDescription: fmt.Sprintf("%d %s", rec.status, http.StatusText(rec.status)),
		Body: body, IsBase64Encoded: b64}
	if ev.MultiValueHeaders != nil {
		resp.MultiValueHeaders = rec.hdr
	} else {
		resp.Headers = single(rec.hdr)
	}
	return resp, nil
}

func headerOf(single map[string]string, multi map[string][]string) http.Header {
	h := make(http.Header, len(single)+len(multi))
	for k, vs := range multi {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	for k, v := range single {
		if _, ok := h[http.CanonicalHeaderKey(k)]; !ok {
			h.Set(k, v)
		}
	}
	return h
}

// unescapeQuery returns an ALB event's query parameters decoded: the load
// balancer passes them as the client encoded them, where API Gateway
// decodes them (queryOf encodes them). An escape that is not one is kept
// as sent.
func unescapeQuery(single map[string]string, multi map[string][]string) (map[string]string, map[string][]string) {
	unescape := func(s string) string {
		if u, err := url.QueryUnescape(s); err == nil {
			return u
		}
		return s
	}
	var s map[string]string
	if single != nil {
		s = make(map[string]string, len(single))
		for k, v := range single {
			s[unescape(k)] = unescape(v)
		}
	}
	var m map[string][]string
	if multi != nil {
		m = make(map[string][]string, len(multi))
		for k, vs := range multi {
			u := make([]string, len(vs))
			for i, v := range vs {
				u[i] = unescape(v)
			}
			k = unescape(k)
			m[k] = append(m[k], u...)
		}
	}
	return s, m
}

func queryOf(single map[string]string, multi map[string][]string) string {
	q := make(url.Values, len(single)+len(multi))
	for k, vs := range multi {
		q[k] = vs
	}
	for k, v := range single {
		if _, ok := q[k]; !ok {
			q.Set(k, v)
		}
	}
	return q.Encode()
}

func newRequest(ctx context.Context, method, path, query string, h http.Header, body string, b64 bool, sourceIP string) (*http.Request, error) {
	var b []byte
	if b64 {
		var err error
		if b, err = base64.StdEncoding.DecodeString(body); err != nil {
			return nil, fmt.Errorf("decode event body: %w", err)
		}
	} else {
		b = []byte(body)
	}
	u := &url.URL{Path: path, RawQuery: query}
	r, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	r.Header = h
	r.Host = h.Get("Host")
	r.RequestURI = u.RequestURI()
	r.RemoteAddr = sourceIP
	return r, nil
}

// recorder is an http.ResponseWriter that keeps the response.
type recorder struct {
	hdr    http.Header
	status int
	buf    bytes.Buffer
}

// serve runs r through next and flushes what it recorded.
func (h *Handler) serve(r *http.Request) *recorder {
	rec := &recorder{hdr: make(http.Header)}
	h.next.ServeHTTP(rec, r)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if h.opts.Flush != nil {
		if err := h.opts.Flush.Flush(r.Context()); err != nil && h.opts.OnError != nil {
			h.opts.OnError(err)
		}
	}
	return rec
}

func (rec *recorder) Header() http.Header { return rec.hdr }

func (rec *recorder) Write(p []byte) (int, error) {
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return rec.buf.Write(p)
}

func (rec *recorder) WriteHeader(status int) {
	if rec.status == 0 {
		rec.status = status
	}
}

// body returns the body as text, or base64 when it is not valid UTF-8.
func (rec *recorder) body() (string, bool) {
	if utf8.Valid(rec.buf.Bytes()) {
		return rec.buf.String(), false
	}
	return base64.StdEncoding.EncodeToString(rec.buf.Bytes()), true
}

func single(h http.Header) map[string]string {
	m := make(map[string]string, len(h))
	for k, vs := range h {
		m[k] = strings.Join(vs, ",")
	}
	return m
}
