package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/examples"
)

func runEdge(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlags("edge", "edge [--config FILE] [--listen ADDR] [--upstream URL|builtin] [flags]", stderr)
	cfgPath := fs.String("config", "", "configuration `file` (default: the built-in seed configuration)")
	listen := fs.String("listen", "", "listen `address` (overrides edge.listen)")
	upstream := fs.String("upstream", "", "origin `URL`, or \"builtin\" for a demo origin (overrides edge.upstream)")
	admin := fs.String("admin-listen", "", "metrics and health `address`, \"off\" to disable (overrides edge.admin_listen)")
	decisionsFile := fs.String("decisions-file", "", "append decisions as JSON lines to `path` (overrides edge.decisions_file)")
	decisionsDir := fs.String("decisions-dir", "", "write the decision log to `directory` (overrides decisions.dir)")
	node := fs.String("node", "", "edge node `name` recorded in decisions (overrides edge.node)")
	kinesisStream := fs.String("kinesis-stream", "", "ship decisions to the Kinesis stream `name` too (overrides decisions.kinesis.stream)")
	spillDir := fs.String("kinesis-spill-dir", "", "keep what the stream cannot take in `directory` (overrides decisions.kinesis.spill_dir)")
	server := fs.String("server", "", "the edge's HTTP `server`: net/http or fasthttp (overrides edge.server)")
	pprofAddr := fs.String("pprof-listen", "", "serve Go profiles (net/http/pprof) on the loopback `address`; off by default")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	if *cfgPath == "" && *upstream == "" {
		*upstream = assemble.BuiltinUpstream
	}
	override(&cfg.Edge.Listen, *listen)
	override(&cfg.Edge.Upstream, *upstream)
	override(&cfg.Edge.AdminListen, *admin)
	if err := overrideServer(cfg, *server); err != nil {
		return err
	}
	override(&cfg.Edge.DecisionsFile, *decisionsFile)
	override(&cfg.Decisions.Dir, *decisionsDir)
	override(&cfg.Edge.Node, *node)
	override(&cfg.Decisions.Kinesis.Stream, *kinesisStream)
	override(&cfg.Decisions.Kinesis.SpillDir, *spillDir)
	if cfg.Edge.AdminListen == "off" {
		cfg.Edge.AdminListen = ""
	}
	if cfg.Edge.Upstream == "" {
		return fmt.Errorf("%s sets no edge.upstream: name the origin there or with --upstream URL (--upstream %s serves a demo origin)", *cfgPath, assemble.BuiltinUpstream)
	}
	if err := checkOverrides(cfg, fs, "edge.listen"); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	return serveEdge(ctx, cfg, log, getenv, *pprofAddr)
}

func override(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

// overrideServer sets edge.server to the --server flag's value, if given,
// checked as the configuration's is (with --upstream builtin the merged
// configuration is not validated again).
func overrideServer(cfg *config.Config, server string) error {
	if server == "" {
		return nil
	}
	if !slices.Contains(config.EdgeServers, server) {
		return badFlag(fmt.Errorf("--server %q: want one of %s", server, strings.Join(config.EdgeServers, ", ")))
	}
	cfg.Edge.Server = server
	return nil
}

// loadConfig reads path, or the built-in seed configuration.
func loadConfig(path string) (*config.Config, error) {
	if path != "" {
		return config.Load(path)
	}
	cfg, err := config.Parse(examples.Seed, "built-in seed.yaml")
	if err != nil {
		return nil, err
	}
	cfg.Defaults()
	return cfg, cfg.Validate()
}

func serveEdge(ctx context.Context, cfg *config.Config, log *slog.Logger, getenv func(string) string, pprofAddr string) (err error) {
	undo := assemble.NewStartUndo(assemble.EdgePaths(cfg)...)
	defer func() { undo.Undo(err) }()
	e, err := assemble.NewEdge(ctx, cfg, assemble.Options{Log: log, Getenv: getenv, Reload: hangups})
	if err != nil {
		return err
	}
	defer closeEdge(e, cfg, log)
	srv, err := assemble.StartEdgeServer(cfg, e, log)
	if err != nil {
		return err
	}
	perrc := make(chan error, 1)
	if pprofAddr != "" {
		psrv, paddr, err := listenPprof(pprofAddr, perrc)
		if err != nil {
			srv.Close()
			return err
		}
		defer psrv.Close()
		log.Info("pprof listening", "addr", paddr.String())
	}
	undo.Started()
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-perrc:
		srv.Close()
		return fmt.Errorf("pprof: %w", err)
	case err := <-srv.Err():
		srv.Close()
		return fmt.Errorf("serve: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Edge.ShutdownGrace)
	defer cancel()
	err = srv.Shutdown(sctx)
	return err
}
