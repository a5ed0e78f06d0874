package fastedge

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/internal/deadline"
)

// OriginClient is the reverse proxy's client to the origin: a
// fasthttp.HostClient that keeps connections to it for reuse, streams
// response bodies, and waits for it as edge.origin says.
type OriginClient struct {
	hc     *fasthttp.HostClient
	prefix string // the upstream URL's path, put before every request's
	host   string // the upstream's host:port
}

// NewOriginClient returns the client to origin, an absolute http or https
// URL: a connection that is not made within o.ConnectTimeout fails the
// request as upstream_unreachable (502); response headers that do not come
// within o.ResponseHeaderTimeout of the request being sent, as
// upstream_timeout (504). The body of the response is not under that
// deadline: long downloads and streams are not cut off. Each read of it
// must complete within o.ReadTimeout instead (originConn), or fails with
// a timeout (upstream_read_timeout). maxConns bounds the connections to
// the origin (edge.client.max_connections: one per client connection at
// most).
func NewOriginClient(origin *url.URL, o config.Origin, maxConns int) (*OriginClient, error) {
	if origin.Host == "" || (origin.Scheme != "http" && origin.Scheme != "https") {
		return nil, fmt.Errorf("upstream %q: want an absolute http or https URL", origin.String())
	}
	host := origin.Host
	if origin.Port() == "" {
		port := "80"
		if origin.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(origin.Hostname(), port)
	}
	d := &dialer{
		net:     net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second},
		timeout: o.ConnectTimeout, readTimeout: o.ReadTimeout,
	}
	if origin.Scheme == "https" {
		d.tls = &tls.Config{ServerName: origin.Hostname(), MinVersion: tls.VersionTLS12}
	}
	c := &OriginClient{host: origin.Host, prefix: singleSlash(origin.EscapedPath())}
	c.hc = &fasthttp.HostClient{
		Addr:                          host,
		Dial:                          d.dial,
		MaxConns:                      maxConns,
		MaxIdleConnDuration:           90 * time.Second,
		ReadTimeout:                   o.ResponseHeaderTimeout, // replaced once the headers have come (originConn)
		StreamResponseBody:            true,
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: false,
		DisablePathNormalizing:        true,
		RetryIfErr:                    retry,
	}
	return c, nil
}

// Host is the upstream's host (and port, if it names one).
func (c *OriginClient) Host() string { return c.host }

// Do sends req to the origin and reads its response headers into resp;
// the body is resp.BodyStream, to be closed.
func (c *OriginClient) Do(req *fasthttp.Request, resp *fasthttp.Response) error {
	if c.prefix != "" {
		// As httputil.ProxyRequest.SetURL joins the upstream's path and the
		// request's.
		uri := req.Header.RequestURI()
		b := make([]byte, 0, len(c.prefix)+len(uri))
		b = append(b, c.prefix...)
		if len(uri) > 0 && uri[0] == '/' {
			uri = uri[1:]
		}
		b = append(b, '/')
		req.Header.SetRequestURIBytes(append(b, uri...))
	}
	return c.hc.Do(req, resp)
}

// singleSlash returns the upstream path to put before requests': "" for
// none or "/", else the path without its trailing slash.
func singleSlash(p string) string {
	for len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}

// retry says whether a request that failed is sent again: only an
// idempotent request without a body (the client has no body stream to
// resend), and not after a timeout or a failed connect, which would only
// multiply the wait; what is left is a kept connection the origin had
// closed.
func retry(req *fasthttp.Request, attempts int, err error) (resetTimeout, again bool) {
	if isTimeout(err) {
		return false, false
	}
	if _, ok := err.(*dialError); ok {
		return false, false
	}
	m := req.Header.Method()
	idempotent := bytes.Equal(m, []byte("GET")) || bytes.Equal(m, []byte("HEAD")) || bytes.Equal(m, []byte("OPTIONS")) ||
		bytes.Equal(m, []byte("PUT")) || bytes.Equal(m, []byte("DELETE"))
	return true, idempotent && attempts < 2
}

// dialError is a failure to connect to the origin: upstream_unreachable.
type dialError struct{ err error }

func (e *dialError) Error() string { return "connect to the origin: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

type dialer struct {
	net         net.Dialer
	timeout     time.Duration
	readTimeout time.Duration // of each read of a response body
	tls         *tls.Config   // for an https origin
}

func (d *dialer) dial(addr string) (net.Conn, error) {
	c, err := d.net.Dial("tcp", addr)
	if err != nil {
		return nil, &dialError{err}
	}
	if d.tls != nil {
		tc := tls.Client(c, d.tls)
		if d.timeout > 0 {
			tc.SetDeadline(time.Now().Add(d.timeout))
		}
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, &dialError{err}
		}
		tc.SetDeadline(time.Time{})
		c = tc
	}
	oc := &originConn{Conn: c, header: true}
	oc.body.Init(d.readTimeout, deadline.Keep(d.readTimeout))
	return oc, nil
}

// originConn is a connection to the origin whose read deadline is the
// client's (ResponseHeaderTimeout, which it sets for each response) until
// the end of the response headers (the first blank line), and no longer:
// the body then streams for as long as the origin keeps sending, as with
// net/http's Transport.ResponseHeaderTimeout, each read of it under a
// deadline of readTimeout from its start, renewed as package deadline
// says (edge.origin.read_timeout; none when it is 0).
//
// The deadline of a body is cleared when the next request is written, so
// that it does not outlive the response on a connection kept for reuse
// (the client also sets its own before it reads the next response).
// The client reads and writes a connection from one goroutine at a time.
type originConn struct {
	net.Conn
	header bool // reading a response's headers
	set    bool // a read deadline is set, the client's or the body's
	body   deadline.Renewing
	tail   [3]byte // the last bytes read, for a blank line across two reads
	ntail  int
}

var blankLine = []byte("\r\n\r\n")

func (c *originConn) SetReadDeadline(t time.Time) error {
	c.header, c.set, c.ntail = true, !t.IsZero(), 0
	c.body.Forget()
	return c.Conn.SetReadDeadline(t)
}

func (c *originConn) Write(p []byte) (int, error) {
	if !c.header {
		// A request: what is read next is its response's headers.
		c.header, c.ntail = true, 0
		if c.set {
			c.set = false
			c.body.Forget()
			c.Conn.SetReadDeadline(time.Time{})
		}
	}
	return c.Conn.Write(p)
}

func (c *originConn) Read(p []byte) (int, error) {
	if !c.header {
		if t, ok := c.body.Next(); ok {
			c.set = true
			if err := c.Conn.SetReadDeadline(t); err != nil {
				c.body.Forget()
				return 0, err
			}
		}
	}
	n, err := c.Conn.Read(p)
	if c.header && n > 0 && c.headersEnded(p[:n]) {
		c.header = false
		if c.set && c.body.Timeout() == 0 {
			// With a read timeout, the body's first read replaces it.
			c.set = false
			c.Conn.SetReadDeadline(time.Time{})
		}
	}
	return n, err
}

// headersEnded reports whether the blank line that ends the headers is in
// b or across the previous read and b.
func (c *originConn) headersEnded(b []byte) bool {
	var joint [6]byte
	k := copy(joint[:], c.tail[:c.ntail])
	k += copy(joint[k:], b)
	if bytes.Contains(joint[:k], blankLine) || bytes.Contains(b, blankLine) {
		return true
	}
	// Keep the last three bytes of what was read.
	all := append(joint[:k:k], b[max(len(b)-3, 0):]...)
	c.ntail = copy(c.tail[:], all[max(len(all)-3, 0):])
	return false
}
