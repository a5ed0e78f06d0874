package assemble

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/ratewarden/ratewarden/config"
)

// EdgeServer is an Edge on its listeners: the proxy on edge.listen and,
// when edge.admin_listen is set, /metrics and /healthz. `ratewarden edge`
// and `ratewarden serve` run it.
type EdgeServer struct {
	srv   proxyServer
	admin *http.Server
	addr  net.Addr
	errc  chan error
}

// proxyServer is the server on edge.listen: net/http's or fasthttp's
// (edge.server).
type proxyServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// StartEdgeServer listens and serves e as cfg says, with the server
// edge.server names (net/http: e.Handler on Server; fasthttp: package
// edge/fastedge), logging the addresses ("edge listening", "admin
// listening").
func StartEdgeServer(cfg *config.Config, e *Edge, log *slog.Logger) (*EdgeServer, error) {
	s := &EdgeServer{errc: make(chan error, 2)}
	ln, err := Listen(cfg, log)
	if err != nil {
		return nil, err
	}
	if cfg.Edge.Server == FastHTTP {
		srv, err := fastServer(cfg, e, ln, log)
		if err != nil {
			ln.Close()
			return nil, err
		}
		s.srv = srv
	} else {
		s.srv = Server(cfg, e.Handler(), ln)
	}
	s.addr = ln.Addr()
	// The admin listener first: an edge whose admin address is taken
	// must not have served a request before it stops.
	if s.admin, err = StartAdmin(cfg, func() (http.Handler, error) { return e.AdminHandler(ln) }, s.errc, log); err != nil {
		s.srv.Close()
		ln.Close()
		return nil, err
	}
	go func() { s.errc <- s.srv.Serve(ln) }()
	log.Info("edge listening", "addr", ln.Addr().String(), "upstream", cfg.Edge.Upstream, "node", cfg.Edge.Node, "server", cmp.Or(cfg.Edge.Server, config.EdgeServers[0]))
	return s, nil
}

// StartAdmin serves the handler that handler returns (/metrics and
// /healthz) on edge.admin_listen, logging its address ("admin
// listening"), unless edge.admin_listen is empty: then it returns nil. A
// failure of the listener once started goes to errc, or is dropped when
// errc is nil.
func StartAdmin(cfg *config.Config, handler func() (http.Handler, error), errc chan<- error, log *slog.Logger) (*http.Server, error) {
	if cfg.Edge.AdminListen == "" {
		return nil, nil
	}
	h, err := handler()
	if err != nil {
		return nil, err
	}
	aln, err := net.Listen("tcp", cfg.Edge.AdminListen)
	if err != nil {
		return nil, fmt.Errorf("admin listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(aln); errc != nil {
			errc <- err
		}
	}()
	log.Info("admin listening", "addr", aln.Addr().String(), "metrics", "/metrics")
	return srv, nil
}

// Addr is the proxy's address.
func (s *EdgeServer) Addr() net.Addr { return s.addr }

// Err receives a listener's failure.
func (s *EdgeServer) Err() <-chan error { return s.errc }

// Shutdown stops accepting, waits for the requests in flight (until ctx is
// done) and stops the admin listener.
func (s *EdgeServer) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if s.admin != nil {
		err = errors.Join(err, s.admin.Shutdown(ctx))
	}
	return err
}

// Close stops both listeners at once.
func (s *EdgeServer) Close() {
	s.srv.Close()
	if s.admin != nil {
		s.admin.Close()
	}
}
