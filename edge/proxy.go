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
// origin, waits for it as o says (a zero timeout waits for ever), and
// answers with ProxyError when it does not answer: 502 when it cannot be
// reached within o.ConnectTimeout, 504 when its response headers do not
// come within o.ResponseHeaderTimeout.
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
		},
		Transport:    tr,
		ErrorHandler: ProxyError,
	}
}
