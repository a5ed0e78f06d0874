package edge

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/internal/readtimeout"
)

// NewReverseProxy returns the reverse proxy `ratewarden edge` puts behind
// the limiter: it forwards to origin keeping the Host header, sets
// X-Forwarded-Host and -Proto, sets X-Forwarded-For and Forwarded to the
// client address the limiter resolved (Middleware passes it on; without it,
// the TCP peer's), keeps up to 256 idle connections to the origin, waits
// for it as o says (a zero timeout waits for ever), and answers with
// ProxyError when it does not answer: 502 when it cannot be reached within
// o.ConnectTimeout, 504 when its response headers do not come within
// o.ResponseHeaderTimeout. Each read of the response body must complete
// within o.ReadTimeout (package internal/readtimeout): past it, the
// response to the client is aborted (it sees a truncated one) and,
// behind Middleware, recorded as upstream_read_timeout; a connection
// switched to another protocol (WebSocket, the only one it switches to:
// onlyWebSocket) on which the origin sends nothing for as long is closed. The forwarding
// headers a client sent never reach the origin.
func NewReverseProxy(origin *url.URL, o config.Origin) *httputil.ReverseProxy {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 1024
	tr.MaxIdleConnsPerHost = 256
	tr.DialContext = (&net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = o.ConnectTimeout
	tr.ResponseHeaderTimeout = o.ResponseHeaderTimeout
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(origin)
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host
			onlyWebSocket(pr.Out.Header)
			if x, ok := pr.In.Context().Value(exchangeKey{}).(*exchange); ok && x.v.ClientIP.IsValid() {
				a := x.v.ClientIP
				// One address, the client's: leftmost and rightmost readers
				// of X-Forwarded-For agree, and no hop the edge did not
				// believe is passed on.
				proto := "http"
				if pr.In.TLS != nil {
					proto = "https"
				}
				pr.Out.Header["X-Forwarded-For"] = []string{a.String()}
				pr.Out.Header["Forwarded"] = []string{string(AppendForwarded(nil, a, pr.In.Host, proto))}
			}
		},
		Transport:    readtimeout.Transport(tr, o.ReadTimeout, readTimedOut),
		ErrorHandler: ProxyError,
		BufferPool:   copyBuffers,
	}
}

// onlyWebSocket leaves in h, an outgoing request's headers, a request to
// switch protocols only when it asks for WebSocket alone; any other it
// removes, so the origin answers an ordinary request. A switched
// connection is a tunnel the limiter does not see into: to h2c (HTTP/2
// without TLS) it would carry any number of requests to the origin on
// the one the limiter counted. The proxy has set Upgrade to the first
// value the client sent, whole ("websocket, h2c" lets the origin choose
// h2c), and Connection to "Upgrade".
func onlyWebSocket(h http.Header) {
	if up, ok := h["Upgrade"]; ok && (len(up) != 1 || !strings.EqualFold(up[0], "websocket")) {
		delete(h, "Upgrade")
		delete(h, "Connection")
	}
}

// readTimedOut notes, behind Middleware, that a read of the origin's
// response body to r timed out: the response ends as
// upstream_read_timeout. It runs in the handler's goroutine (the proxy
// reads the body there), before the proxy aborts the response.
func readTimedOut(r *http.Request) {
	if x, ok := r.Context().Value(exchangeKey{}).(*exchange); ok && x.respErr == "" {
		x.respErr = decisions.UpstreamReadTimeout
	}
}

// copyBuffers are the buffers the proxy copies response bodies through:
// without a pool, httputil.ReverseProxy allocates 32 KiB for every
// response, and clearing it and collecting it was the largest single cost
// of a small response (BENCHMARKS.md, issue 15).
var copyBuffers = &bufferPool{}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }
