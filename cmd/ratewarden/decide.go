package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
)

// decideFlags are the flags of the decision services (rls, authz): the
// edge's, without an origin.
type decideFlags struct {
	cfgPath, listen, admin, decisionsFile, decisionsDir, node *string
}

func newDecideFlags(name, synopsis string, stderr io.Writer) (*flag.FlagSet, *decideFlags) {
	fs := newFlags(name, synopsis, stderr)
	return fs, &decideFlags{
		cfgPath:       fs.String("config", "", "configuration `file` (default: the built-in seed configuration)"),
		listen:        fs.String("listen", "", "listen `address` (overrides "+name+".listen)"),
		admin:         fs.String("admin-listen", "", "metrics and health `address`, \"off\" to disable (overrides edge.admin_listen)"),
		decisionsFile: fs.String("decisions-file", "", "append decisions as JSON lines to `path` (overrides edge.decisions_file)"),
		decisionsDir:  fs.String("decisions-dir", "", "write the decision log to `directory` (overrides decisions.dir)"),
		node:          fs.String("node", "", "node `name` recorded in decisions (overrides edge.node)"),
	}
}

// load parses args and returns the configuration with the flags applied;
// listen is the command's own listen key.
func (f *decideFlags) load(fs *flag.FlagSet, args []string, listen func(*config.Config) *string) (*config.Config, error) {
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return nil, errUsage
	}
	cfg, err := loadConfig(*f.cfgPath)
	if err != nil {
		return nil, err
	}
	override(listen(cfg), *f.listen)
	override(&cfg.Edge.AdminListen, *f.admin)
	override(&cfg.Edge.DecisionsFile, *f.decisionsFile)
	override(&cfg.Decisions.Dir, *f.decisionsDir)
	override(&cfg.Edge.Node, *f.node)
	if cfg.Edge.AdminListen == "off" {
		cfg.Edge.AdminListen = ""
	}
	return cfg, checkOverrides(cfg, fs, fs.Name()+".listen")
}

func runRLS(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string) (err error) {
	fs, f := newDecideFlags("rls", "rls [--config FILE] [--listen ADDR] [flags]", stderr)
	cfg, err := f.load(fs, args, func(c *config.Config) *string { return &c.RLS.Listen })
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	undo := assemble.NewStartUndo(assemble.EdgePaths(cfg)...)
	defer func() { undo.Undo(err) }()
	s, err := assemble.NewRLS(ctx, cfg, assemble.Options{Log: log, Getenv: getenv, Reload: hangups})
	if err != nil {
		return err
	}
	defer closeEdge(s.Edge, cfg, log)
	ln, err := net.Listen("tcp", cfg.RLS.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	admin, err := assemble.StartAdmin(cfg, s.AdminHandler, nil, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer shutdownAdmin(admin, cfg)
	undo.Started()
	log.Info("rate limit service listening", "addr", ln.Addr().String(), "service", "envoy.service.ratelimit.v3.RateLimitService", "node", cfg.Edge.Node)
	return s.Serve(ctx, ln, cfg.Edge.ShutdownGrace, log)
}

func runAuthz(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string) (err error) {
	fs, f := newDecideFlags("authz", "authz [--config FILE] [--listen ADDR] [flags]", stderr)
	cfg, err := f.load(fs, args, func(c *config.Config) *string { return &c.Authz.Listen })
	if err != nil {
		return err
	}
	cfg.Edge.Upstream = ""
	log := slog.New(slog.NewTextHandler(stderr, nil))
	undo := assemble.NewStartUndo(assemble.EdgePaths(cfg)...)
	defer func() { undo.Undo(err) }()
	e, err := assemble.NewEdge(ctx, cfg, assemble.Options{Log: log, Getenv: getenv, Reload: hangups})
	if err != nil {
		return err
	}
	defer closeEdge(e, cfg, log)
	c := *cfg
	c.Edge.Listen = cfg.Authz.Listen
	ln, err := assemble.Listen(&c, log)
	if err != nil {
		return err
	}
	srv := assemble.Server(cfg, e.AuthzHandler(), ln)
	admin, err := assemble.StartAdmin(cfg, func() (http.Handler, error) { return e.AdminHandler(ln) }, nil, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer shutdownAdmin(admin, cfg)
	undo.Started()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("auth_request endpoint listening", "addr", ln.Addr().String(), "node", cfg.Edge.Node)
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Edge.ShutdownGrace)
	defer cancel()
	return srv.Shutdown(sctx)
}

// closeEdge closes e within edge.shutdown_grace, flushing its decisions.
func closeEdge(e *assemble.Edge, cfg *config.Config, log *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Edge.ShutdownGrace)
	defer cancel()
	if err := e.Close(sctx); err != nil {
		log.Error("shutdown", "err", err)
	}
}

func shutdownAdmin(srv *http.Server, cfg *config.Config) {
	if srv == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Edge.ShutdownGrace)
	defer cancel()
	srv.Shutdown(sctx)
}
