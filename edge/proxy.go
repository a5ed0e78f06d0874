package edge

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/ratewarden/ratewarden/edge/config"
)

// NewReverseProxy returns the reverse proxy `ratewarden edge` puts behind
// the limiter: it forwards to origin keeping the Host header, sets
// X-Forwarded-For/-Host/-Proto, keeps up to 256 idle connections to the
// origin, and answers with ProxyError when the origin does not answer.
// It uses the default origin timeouts.
func NewReverseProxy(origin *url.URL) *httputil.ReverseProxy {
	var c config.Config
	c.Defaults()
	return newReverseProxy(origin, c.Edge.Origin)
}

// newReverseProxy is NewReverseProxy with the origin timeouts o: connect
// (502 when it passes) and response headers (504).
func newReverseProxy(origin *url.URL, o config.Origin) *httputil.ReverseProxy {
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
		},
		Transport:    tr,
		ErrorHandler: ProxyError,
	}
}
