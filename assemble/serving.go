package assemble

import (
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
	srv, admin *http.Server
	addr       net.Addr
	adminAddr  net.Addr // nil without an admin listener
	errc       chan error
}

// StartEdgeServer listens and serves e as cfg says, logging the addresses
// ("edge listening", "admin listening").
func StartEdgeServer(cfg *config.Config, e *Edge, log *slog.Logger) (*EdgeServer, error) {
	s := &EdgeServer{srv: Server(cfg, e.Handler()), errc: make(chan error, 2)}
	ln, err := Listen(cfg)
	if err != nil {
		return nil, err
	}
	s.addr = ln.Addr()
	go func() { s.errc <- s.srv.Serve(ln) }()
	log.Info("edge listening", "addr", ln.Addr().String(), "upstream", cfg.Edge.Upstream, "node", cfg.Edge.Node)
	if cfg.Edge.AdminListen == "" {
		return s, nil
	}
	h, err := e.AdminHandler()
	if err != nil {
		s.srv.Close()
		return nil, err
	}
	aln, err := net.Listen("tcp", cfg.Edge.AdminListen)
	if err != nil {
		s.srv.Close()
		return nil, fmt.Errorf("admin listen: %w", err)
	}
	s.adminAddr = aln.Addr()
	s.admin = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { s.errc <- s.admin.Serve(aln) }()
	log.Info("admin listening", "addr", aln.Addr().String(), "metrics", "/metrics")
	return s, nil
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
