// Command benchproxy serves the two ends of the reverse-proxy benchmark
// (tests/bench-proxy): a small origin, and the bare httputil.ReverseProxy
// that `ratewarden edge` is compared with.
//
//	benchproxy -origin 127.0.0.1:18001
//	benchproxy -bare 127.0.0.1:18002 -upstream http://127.0.0.1:18001
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/edge"
)

func main() {
	origin := flag.String("origin", "", "serve the origin on `addr`")
	bare := flag.String("bare", "", "serve a bare httputil.ReverseProxy on `addr`")
	upstream := flag.String("upstream", "", "the bare proxy's origin `URL`")
	flag.Parse()
	switch {
	case *origin != "":
		log.Fatal(http.ListenAndServe(*origin, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"ok":true}`)
		})))
	case *bare != "":
		u, err := url.Parse(*upstream)
		if err != nil || u.Host == "" {
			log.Fatalf("-upstream %q: want an absolute URL", *upstream)
		}
		p := httputil.NewSingleHostReverseProxy(u)
		// The same connection pool as ratewarden's proxy, so that only the
		// limiter differs.
		p.Transport = edge.NewReverseProxy(u, config.Origin{}).Transport
		log.Fatal(http.ListenAndServe(*bare, p))
	default:
		flag.Usage()
	}
}
