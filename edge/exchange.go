package edge

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// exchange is one request that Middleware serves, from its decision to
// the end of its response: the ResponseWriter next writes to, which notes
// the status, when the response began and whether writing to the client
// failed, and the guard of the request body, which enforces the body cap
// and the body deadline. The handler's goroutine owns it; only the body
// fields are shared with the goroutine that reads the body (the proxy's
// transport), through atomics.
type exchange struct {
	http.ResponseWriter
	v Verdict

	status   int       // the final status written; 0 until then
	began    time.Time // when the status was written
	handoff  time.Time // when the request was handed to next; zero if it was not
	respErr  string    // set by the proxy's error handler, or by Middleware
	writeErr string    // a write to the client failed: send_timeout, or client_closed (it went away)

	body     io.ReadCloser // the request body, when guarded
	maxBody  int64         // 0: no cap
	read     atomic.Int64  // body bytes read
	bodyEnd  atomic.Int64  // unix ns at which the body was read to its end; 0 before
	bodyFail atomic.Int32  // bodyOK, bodyTimedOut or bodyTooLarge
	deadline bool          // a read deadline was set for the body
}

const (
	bodyOK = iota
	bodyTimedOut
	bodyTooLarge
)

var (
	_ http.ResponseWriter = (*exchange)(nil)
	_ http.Flusher        = (*exchange)(nil)
	_ http.Hijacker       = (*exchange)(nil)
	_ io.ReadCloser       = guardedBody{}
)

// ErrBodyTooLarge is what a guarded request body returns past the cap,
// under either server.
var ErrBodyTooLarge = errors.New("read request body: larger than edge.client.max_body_bytes")

func (x *exchange) WriteHeader(status int) {
	if x.status == 0 && (status >= 200 || status == http.StatusSwitchingProtocols) {
		x.status, x.began = status, time.Now()
	}
	x.ResponseWriter.WriteHeader(status)
}

func (x *exchange) Write(p []byte) (int, error) {
	if x.status == 0 {
		x.status, x.began = http.StatusOK, time.Now()
	}
	n, err := x.ResponseWriter.Write(p)
	if err != nil {
		x.writeFailed(err)
	}
	return n, err
}

// Flush sends what is buffered, the headers included: a streaming
// response (server-sent events, say) reaches the client as it comes. A
// writer that cannot flush (the Lambda adapter's, which keeps the whole
// response) is no failure.
func (x *exchange) Flush() {
	if x.status == 0 {
		x.status, x.began = http.StatusOK, time.Now()
	}
	if err := http.NewResponseController(x.ResponseWriter).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		x.writeFailed(err)
	}
}

// writeFailed notes that a write to the client failed with err
// (WriteFailure); the first failure is the one noted.
func (x *exchange) writeFailed(err error) {
	if x.writeErr == "" {
		x.writeErr = WriteFailure(err)
	}
}

// WriteFailure names, under either server, the response error of a write
// to the client that failed with err: send_timeout when it timed out
// (edge.client.send_timeout: the client stopped reading), client_closed
// otherwise (it went away).
func WriteFailure(err error) string {
	if isTimeout(err) {
		return decisions.SendTimeout
	}
	return decisions.ClientClosed
}

// Hijack hands the connection over, for protocol upgrades (WebSocket),
// whose 101 the proxy then writes to the connection itself.
func (x *exchange) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(x.ResponseWriter).Hijack()
	if err == nil && x.status == 0 {
		x.status, x.began = http.StatusSwitchingProtocols, time.Now()
	}
	return c, rw, err
}

// Unwrap lets http.ResponseController reach the server's writer.
func (x *exchange) Unwrap() http.ResponseWriter { return x.ResponseWriter }

// guard puts the body cap and the body deadline on r's body, if it has
// one. It reports false, having answered 413, when the declared length
// is over the cap.
func (x *exchange) guard(r *http.Request, now time.Time, c bodyLimits) bool {
	if r.Body == nil || r.Body == http.NoBody {
		return true
	}
	if c.maxBytes > 0 && r.ContentLength > c.maxBytes {
		x.fail(decisions.BodyTooLarge)
		return false
	}
	x.body, x.maxBody = r.Body, c.maxBytes
	r.Body = guardedBody{x}
	if c.timeout > 0 {
		// The server's writer takes the deadline; others (the Lambda
		// adapter's, whose body is in memory) do not need one.
		x.deadline = http.NewResponseController(x.ResponseWriter).SetReadDeadline(now.Add(c.timeout)) == nil
	}
	return true
}

// bodyLimits are the limits guard puts on a request body.
type bodyLimits struct {
	timeout  time.Duration
	maxBytes int64
}

// guardedBody is the request body as next reads it.
type guardedBody struct{ x *exchange }

func (b guardedBody) Read(p []byte) (int, error) {
	x := b.x
	if x.maxBody > 0 {
		// Read at most one byte past the cap: enough to know it is over.
		if left := x.maxBody + 1 - x.read.Load(); int64(len(p)) > left {
			p = p[:left]
		}
	}
	n, err := x.body.Read(p)
	if read := x.read.Add(int64(n)); x.maxBody > 0 && read > x.maxBody {
		x.bodyFail.CompareAndSwap(bodyOK, bodyTooLarge)
		return n, ErrBodyTooLarge
	}
	switch {
	case err == io.EOF:
		x.bodyEnd.Store(time.Now().UnixNano())
		if x.deadline {
			// Past its body the connection is read again only to notice the
			// client leaving: a deadline left in place would take that for
			// a hang-up and cancel the request.
			http.NewResponseController(x.ResponseWriter).SetReadDeadline(time.Time{})
		}
	case err != nil && isTimeout(err):
		x.bodyFail.CompareAndSwap(bodyOK, bodyTimedOut)
	}
	return n, err
}

func (b guardedBody) Close() error { return b.x.body.Close() }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// bodyError returns the response error of a body that failed, or "".
func (x *exchange) bodyError() string {
	switch x.bodyFail.Load() {
	case bodyTimedOut:
		return decisions.BodyTimeout
	case bodyTooLarge:
		return decisions.BodyTooLarge
	}
	return ""
}

// fail answers the request with the edge's response for the error e, or
// with nothing when the client went away, and records e.
func (x *exchange) fail(e string) {
	x.respErr = e
	resp, closeConn, ok := FailureResponse(e)
	if !ok {
		return // nobody to answer
	}
	h := x.Header()
	if closeConn {
		h.Set("Connection", "close")
	}
	h.Set("Cache-Control", "no-store")
	writeJSONError(x, resp.Status, resp.Body)
}

// FailureResponse returns the edge's answer to a request whose response
// failed with e (a decisions response error): 504 for an origin that did
// not answer in time, 408 for a body that did not arrive in time, 413 for
// a body over the cap, 502 otherwise, with a JSON body; ok is false for a
// client that went away or stopped reading, which gets no answer.
// closeConn says that the connection cannot carry another request (the
// rest of the body is not read). The response goes out with
// Cache-Control: no-store.
func FailureResponse(e string) (resp Response, closeConn, ok bool) {
	var code, msg string
	switch e {
	case decisions.ClientClosed, decisions.SendTimeout:
		return Response{}, false, false
	case decisions.UpstreamTimeout:
		resp.Status, code, msg = http.StatusGatewayTimeout, "gateway_timeout", "The origin did not answer in time."
	case decisions.BodyTimeout:
		resp.Status, code, msg = http.StatusRequestTimeout, "request_timeout", "The request body did not arrive in time."
	case decisions.BodyTooLarge:
		resp.Status, code, msg = http.StatusRequestEntityTooLarge, "content_too_large", "The request body is too large."
	default:
		resp.Status, code, msg = http.StatusBadGateway, "bad_gateway", "The origin did not answer."
	}
	resp.Body = errorBody(code, msg, 0)
	return resp, resp.Status == http.StatusRequestTimeout || resp.Status == http.StatusRequestEntityTooLarge, true
}

// classify names the failure err of the exchange with r's origin as a
// response error.
func (x *exchange) classify(r *http.Request, err error) string {
	if e := x.bodyError(); e != "" {
		return e
	}
	if r.Context().Err() != nil {
		return decisions.ClientClosed
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return decisions.UpstreamUnreachable
	}
	if isTimeout(err) {
		return decisions.UpstreamTimeout
	}
	return decisions.UpstreamFailed
}

// endExchange is deferred by the handlers that decide (Middleware and
// TokenHandler): when the response has ended, or the handler panicked
// (the proxy aborts a response that the client or the origin broke off),
// it records how the response ended and emits the request's one decision,
// then lets the panic go on.
func (l *Limiter) endExchange(x *exchange, r *http.Request) {
	p := recover()
	wall := time.Now()
	x.end(r, wall, p)
	l.End(r.Context(), l.decisionTime(wall), &x.v)
	if p != nil {
		panic(p)
	}
}

// end fills in v's response fields when next returned or panicked (p is
// what it panicked with, or nil).
func (x *exchange) end(r *http.Request, now time.Time, p any) {
	v := &x.v
	switch {
	case x.respErr != "":
	case x.writeErr != "":
		x.respErr = x.writeErr
	case p != nil && r.Context().Err() != nil:
		x.respErr = decisions.ClientClosed
	case p != nil:
		// The proxy aborts the response when the origin breaks off its
		// body; the client sees a truncated response.
		x.respErr = decisions.UpstreamFailed
	}
	status := x.status
	if status == 0 && x.respErr == "" && p == nil {
		status = http.StatusOK // net/http's answer to a handler that wrote nothing
	}
	v.Status, v.ResponseError = status, x.respErr
	var bodyEnd time.Time
	if ns := x.bodyEnd.Load(); ns != 0 {
		bodyEnd = time.Unix(0, ns)
	}
	if lat, ok := UpstreamLatency(x.handoff, bodyEnd, x.began, now, x.respErr); ok {
		v.UpstreamLatency = lat
	}
}

// UpstreamLatency is the origin's share of an exchange that ended at end:
// from when the request was handed to the origin (handoff), or from when
// its body was read to the end if that came later, until the response
// began (or until end, when it did not). ok is false when the request
// never reached the origin: not handed off, or its body timed out or was
// over the cap. Both servers' exchanges record it alike.
func UpstreamLatency(handoff, bodyEnd, began, end time.Time, respErr string) (d time.Duration, ok bool) {
	if handoff.IsZero() || respErr == decisions.BodyTimeout || respErr == decisions.BodyTooLarge {
		return 0, false
	}
	sent := handoff
	if bodyEnd.After(sent) {
		sent = bodyEnd
	}
	until := began
	if until.IsZero() {
		until = end
	}
	return max(until.Sub(sent), 0), true
}

// ProxyError is the reverse proxy's error handler: it answers a request
// the origin failed (504 for a timeout, 502 otherwise; 408 and 413 when
// the client's body was at fault; nothing when the client went away) and,
// behind Middleware, records why in the request's decision.
func ProxyError(w http.ResponseWriter, r *http.Request, err error) {
	x, ok := w.(*exchange)
	if !ok {
		x = &exchange{ResponseWriter: w}
	}
	x.fail(x.classify(r, err))
}
