package edge

import (
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
)

// NewReverseProxy returns the reverse proxy `ratewarden edge` puts behind
// the limiter: it forwards to origin keeping the Host header, sets
// X-Forwarded-For/-Host/-Proto, keeps up to 256 idle connections to the
// origin, and answers 502 with a JSON body when the origin does not answer.
func NewReverseProxy(origin *url.URL) *httputil.ReverseProxy {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 1024
	tr.MaxIdleConnsPerHost = 256
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(origin)
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host
		},
		Transport: tr,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, `{"error":"bad_gateway","message":"The origin did not answer."}`+"\n")
		},
	}
}
