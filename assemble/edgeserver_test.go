package assemble_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
)

// TestEdgeServerShutdown runs StartEdgeServer under each edge.server: a
// request under way when shutdown begins is answered within
// edge.shutdown_grace, and then no connection is accepted; the demo origin
// (edge.upstream: builtin) serves under each.
func TestEdgeServerShutdown(t *testing.T) {
	for _, server := range config.EdgeServers {
		t.Run(server, func(t *testing.T) {
			started := make(chan struct{})
			origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(started)
				time.Sleep(300 * time.Millisecond)
				io.WriteString(w, "late")
			}))
			defer origin.Close()
			cfg := loadConfig(t, "edge:\n  listen: 127.0.0.1:0\n  admin_listen: \"\"\n  upstream: "+origin.URL+"\n  server: "+server+"\n"+anonymous)
			srv := startEdgeServer(t, cfg)
			base := "http://" + srv.Addr().String()
			type answer struct {
				body string
				err  error
			}
			got := make(chan answer, 1)
			go func() {
				resp, err := http.Get(base + "/slow")
				if err != nil {
					got <- answer{err: err}
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				got <- answer{string(b), err}
			}()
			<-started
			ctx, cancel := context.WithTimeout(context.Background(), cfg.Edge.ShutdownGrace)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				t.Errorf("shutdown: %v", err)
			}
			if a := <-got; a.err != nil || a.body != "late" {
				t.Errorf("the request under way: %q %v", a.body, a.err)
			}
			if _, err := http.Get(base + "/after"); err == nil {
				t.Error("a request after shutdown was served")
			}
		})
		t.Run(server+" builtin", func(t *testing.T) {
			cfg := loadConfig(t, "edge:\n  listen: 127.0.0.1:0\n  admin_listen: \"\"\n  server: "+server+"\n"+anonymous)
			cfg.Edge.Upstream = assemble.BuiltinUpstream
			srv := startEdgeServer(t, cfg)
			defer srv.Close()
			resp, err := http.Get("http://" + srv.Addr().String() + "/api/x")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `{"origin":"builtin","path":"/api/x"}` || resp.Header.Get("X-Ratelimit-Limit") == "" {
				t.Errorf("builtin origin: %d %q %v", resp.StatusCode, b, resp.Header)
			}
		})
	}
}

// startEdgeServer assembles the edge cfg describes and serves it as
// `ratewarden edge` does; the edge is closed when t ends.
func startEdgeServer(t *testing.T, cfg *config.Config) *assemble.EdgeServer {
	t.Helper()
	e, err := assemble.NewEdge(context.Background(), cfg, assemble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	srv, err := assemble.StartEdgeServer(cfg, e, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return srv
}
