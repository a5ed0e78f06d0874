// Package readtimeout bounds how long a reverse proxy waits for each read
// of an origin's response body, as nginx's proxy_read_timeout does: an
// origin that sent its headers and then stalls mid-body would otherwise
// hold the client's connection, and the proxy's, for ever. So is each read
// of a connection switched to another protocol (101, WebSocket): one on
// which the origin stays silent is closed.
//
// The bound is per read, not per response, so a long download or a
// stream goes on for as long as the origin keeps sending: each read of a
// body of Transport's responses gets the timeout from its start to
// complete (less at most 1/64 of it: package deadline). The time between
// two reads (the proxy writing to its client) is not counted: that is the
// client's to bound. A read that does not complete in time ends the
// response, as canceling its request does (the connection to the origin
// is closed, not reused), and fails with ErrTimeout.
//
// The bound is a timer on the body, not a deadline on the connection:
// net/http's Transport reads a connection while it is idle in its pool
// and while it waits for response headers, and an HTTP/2 connection
// carries many responses at once, so a connection's read deadline would
// bound far more than a body's reads.
package readtimeout

import (
	"context"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/internal/deadline"
)

// ErrTimeout is the error of a read of a response body that did not
// complete within the timeout. It is a net.Error whose Timeout is true,
// and errors.Is(ErrTimeout, os.ErrDeadlineExceeded) holds.
var ErrTimeout error = timeoutError{}

type timeoutError struct{}

func (timeoutError) Error() string        { return "read the response body: no data within the read timeout" }
func (timeoutError) Timeout() bool        { return true }
func (timeoutError) Temporary() bool      { return false }
func (timeoutError) Is(target error) bool { return target == os.ErrDeadlineExceeded }

// Transport returns rt with each read of a response body bounded by d
// (see the package doc); d ≤ 0 returns rt itself. The wait for the
// response headers is not under d (http.Transport's
// ResponseHeaderTimeout is). Reads of a switched protocol's connection
// (101, WebSocket) are bounded alike: one that does not complete within d
// closes the connection. timedOut, if not nil, is called with the request of a
// response whose body read timed out, in the goroutine that read it, as
// that read returns ErrTimeout.
func Transport(rt http.RoundTripper, d time.Duration, timedOut func(*http.Request)) http.RoundTripper {
	if d <= 0 {
		return rt
	}
	return &transport{rt: rt, d: d, timedOut: timedOut}
}

type transport struct {
	rt       http.RoundTripper
	d        time.Duration
	timedOut func(*http.Request)
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	b := &body{d: t.d, req: req, timedOut: t.timedOut}
	var ctx context.Context
	ctx, b.cancel = context.WithCancelCause(req.Context())
	resp, err := t.rt.RoundTrip(req.WithContext(ctx))
	switch {
	case err != nil:
		b.cancel(nil)
		return resp, err
	case resp.StatusCode == http.StatusSwitchingProtocols:
		// The body is the connection, for the protocol switched to
		// (WebSocket), which the caller owns now: canceling the request
		// no longer closes it. Each read of the origin's side gets d as a
		// body's does, and one that does not complete in time closes the
		// connection, as nginx's proxy_read_timeout does: a switched
		// connection on which the origin stays silent would otherwise
		// hold the client's connection, and its share of the edge's
		// connections, for ever. A timed-out read is not reported to
		// timedOut: the proxy reads a switched connection outside the
		// request's goroutine, and an idle one ending is not a failed
		// response.
		rwc, ok := resp.Body.(io.ReadWriteCloser)
		if !ok {
			return resp, nil
		}
		end := b.cancel
		b.cancel = func(cause error) {
			if cause != nil {
				rwc.Close()
			}
			end(cause)
		}
		b.timedOut = nil
		b.until.Init(t.d, deadline.Keep(t.d))
		b.rc = rwc
		resp.Body = switched{b, rwc}
		return resp, nil
	case resp.Body == nil || resp.Body == http.NoBody:
		b.cancel(nil)
		return resp, nil
	}
	b.until.Init(t.d, deadline.Keep(t.d))
	b.rc = resp.Body
	resp.Body = b
	return resp, nil
}

// body is a response body whose reads are bounded by a timer: scheduled
// at the deadline until, renewed as package deadline says, it cancels the
// request when it finds a read under way past the deadline.
type body struct {
	rc       io.ReadCloser
	d        time.Duration
	until    deadline.Renewing
	timer    *time.Timer // nil until the first read
	cancel   context.CancelCauseFunc
	reading  atomic.Bool
	fired    atomic.Bool
	req      *http.Request
	timedOut func(*http.Request)
}

func (b *body) Read(p []byte) (int, error) {
	if _, renew := b.until.Next(); renew {
		if b.timer == nil {
			b.timer = time.AfterFunc(b.d, b.expire)
		} else {
			b.timer.Reset(b.d)
		}
	}
	b.reading.Store(true)
	n, err := b.rc.Read(p)
	b.reading.Store(false)
	if err != nil && err != io.EOF && b.fired.Load() {
		err = ErrTimeout
		if b.timedOut != nil {
			b.timedOut(b.req)
			b.timedOut = nil // once
		}
	}
	return n, err
}

// expire is the timer's: a read still under way past the deadline is
// cut off. The timer may fire late, or for a deadline since renewed (a
// read that renews it reschedules the timer): the deadline is looked at
// again, and only a read is cut off, not the time between two.
func (b *body) expire() {
	if b.reading.Load() && b.until.Passed() {
		b.fired.Store(true)
		b.cancel(ErrTimeout)
	}
}

// switched is the connection of a switched protocol: reads bounded as a
// body's, writes the connection's own.
type switched struct {
	*body
	w io.Writer
}

func (s switched) Write(p []byte) (int, error) { return s.w.Write(p) }

func (b *body) Close() error {
	if b.timer != nil {
		b.timer.Stop()
	}
	err := b.rc.Close()
	b.cancel(nil) // the body is done with: nothing is left to cancel
	return err
}
