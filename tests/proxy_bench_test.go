package tests

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge"
	"github.com/ratewarden/ratewarden/edge/fastedge"
)

// BenchmarkProxy compares requests/s through the edge's handler (limiter
// with the seed configuration, decisions emitted, reverse proxy; on
// net/http and, as ratewarden_fasthttp, on package edge/fastedge) with a
// bare httputil.ReverseProxy, to the same origin, with the same load generator,
// in the same run. Clients come from a pool of 1 M addresses in
// X-Forwarded-For from a trusted proxy, so the limiter tracks many keys and
// the requests pass (nothing is refused early).
func BenchmarkProxy(b *testing.B) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"ok":true}`)
	}))
	defer origin.Close()
	u, _ := url.Parse(origin.URL)

	cfg, err := config.Load("../examples/seed.yaml")
	if err != nil {
		b.Fatal(err)
	}
	cfg.Identity.TrustedProxies = []string{"127.0.0.1/32"}
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	em := decisions.NewEmitter(decisions.Discard, decisions.EmitterOptions{})
	defer em.Close(context.Background())
	lim, err := edge.New(cfg, edge.Options{Sink: em})
	if err != nil {
		b.Fatal(err)
	}
	defer lim.Close(context.Background())

	bare := httputil.NewSingleHostReverseProxy(u)
	bare.Transport = edge.NewReverseProxy(u, config.Origin{}).Transport // same connection pool settings
	netHTTP := func(h http.Handler) func(b *testing.B) (string, func()) {
		return func(b *testing.B) (string, func()) {
			srv := httptest.NewServer(h)
			return srv.URL, srv.Close
		}
	}
	handlers := []struct {
		name  string
		start func(b *testing.B) (string, func())
	}{
		{"bare_httputil", netHTTP(bare)},
		{"ratewarden", netHTTP(lim.Handler(edge.NewReverseProxy(u, config.Origin{}), ""))},
		{"ratewarden_fasthttp", func(b *testing.B) (string, func()) {
			oc, err := fastedge.NewOriginClient(u, cfg.Edge.Origin, 1024)
			if err != nil {
				b.Fatal(err)
			}
			h := fastedge.NewHandler(lim, oc, fastedge.Config{BodyTimeout: cfg.Edge.Client.BodyTimeout, OriginHost: oc.Host()})
			srv := fastedge.NewServer(cfg.Edge.Client, h, nil)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go srv.Serve(ln)
			return "http://" + ln.Addr().String(), func() { srv.Shutdown() }
		}},
	}
	for _, hc := range handlers {
		b.Run(hc.name, func(b *testing.B) {
			base, stop := hc.start(b)
			defer stop()
			tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			var next atomic.Uint64
			var failed atomic.Uint64
			b.SetParallelism(8)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				req, _ := http.NewRequest("GET", base+"/api/search?q=shoes", nil)
				for pb.Next() {
					n := next.Add(1)
					req.Header.Set("X-Forwarded-For", "10."+strconv.Itoa(int(n>>16&255))+"."+strconv.Itoa(int(n>>8&255))+"."+strconv.Itoa(int(n&255)))
					resp, err := client.Do(req)
					if err != nil {
						failed.Add(1)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						failed.Add(1)
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
			if f := failed.Load(); f > 0 {
				b.Fatalf("%d of %d requests failed or were refused", f, b.N)
			}
		})
	}
}
