package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/ratewarden/ratewarden/assemble"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := newFlags("serve", "serve [--config FILE] [--listen ADDR] [--upstream URL|builtin] [--dashboard-listen ADDR|off] [flags]", stderr)
	cfgPath := fs.String("config", "", "configuration `file` (default: the built-in seed configuration)")
	listen := fs.String("listen", "", "edge listen `address` (overrides edge.listen)")
	upstream := fs.String("upstream", "", "origin `URL`, or \"builtin\" for a demo origin (overrides edge.upstream; default builtin when neither is set)")
	admin := fs.String("admin-listen", "", "the edge's metrics and health `address`, \"off\" to disable (overrides edge.admin_listen)")
	dash := fs.String("dashboard-listen", "", "live dashboard `address`, \"off\" to disable (overrides serve.dashboard.listen)")
	decisionsDir := fs.String("decisions-dir", "", "the decision log `directory` (overrides decisions.dir; default "+assemble.DefaultServeLog+")")
	stateDir := fs.String("state-dir", "", "the aggregator's state `directory` (overrides serve.state_dir)")
	partials := fs.String("partials-dir", "", "the aggregator's partials `directory` (overrides serve.partials_dir)")
	partialsSpec := fs.String("partials", "", "or store the partials in `store`, "+assemble.PartialsSpecs+", instead")
	server := fs.String("server", "", "the edge's HTTP `server`: net/http or fasthttp (overrides edge.server)")
	af := newAggregatorFlags("")
	fs.StringVar(&af.o.EMF, "emf", "", "also write each window's CloudWatch EMF documents to `sink`: "+assemble.EMFSinkSpecs+"; each rule of the configuration gets [Tier, Rule] documents of its own")
	af.emfTimeoutFlag(fs)
	af.namespaceFlag(fs)
	af.idleFlag(fs)
	af.capFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	if _, err := af.o.Rollup(); err != nil { // the flags' values; serve.* are checked with the configuration
		return badFlag(err)
	}
	if *partialsSpec != "" {
		if *partials != "" {
			return badFlag(errors.New("serve: give --partials-dir or --partials, not both"))
		}
		if err := assemble.CheckPartialsSpec(*partialsSpec); err != nil {
			return badFlag(err)
		}
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	override(&cfg.Edge.Listen, *listen)
	override(&cfg.Edge.Upstream, *upstream)
	override(&cfg.Edge.AdminListen, *admin)
	if err := overrideServer(cfg, *server); err != nil {
		return err
	}
	override(&cfg.Serve.Dashboard.Listen, *dash)
	override(&cfg.Decisions.Dir, *decisionsDir)
	override(&cfg.Serve.StateDir, *stateDir)
	override(&cfg.Serve.PartialsDir, *partials)
	if cfg.Edge.AdminListen == "off" {
		cfg.Edge.AdminListen = ""
	}
	if cfg.Serve.Dashboard.Listen == "off" {
		cfg.Serve.Dashboard.Listen = ""
	}
	if cfg.Edge.Upstream == "" || *cfgPath == "" && *upstream == "" {
		cfg.Edge.Upstream = assemble.BuiltinUpstream
	}
	if err := checkOverrides(cfg, fs, "edge.listen"); err != nil {
		return err
	}
	// serve writes its alert lines to alerts.sinks.file, a file of its
	// state directory unless it says "-": standard output, where --emf
	// stdout writes too.
	if af.o.EMF == "stdout" && (cfg.Has("alerts") || cfg.Has("feedback")) && cfg.Alerts.Sinks.File == "-" {
		return stdoutTwice("serve", `the configuration's alerts.sinks.file "-"`, "")
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	o := assemble.ServeOptions{Options: assemble.Options{Log: log, Getenv: getenv, Reload: hangups}, Aggregator: &af.o, Stdout: stdout}
	if *partialsSpec != "" {
		if o.Partials, err = assemble.Partials(ctx, *partialsSpec); err != nil {
			return err
		}
	}
	o.Ready = func(a assemble.ServeAddrs) {
		if a.Dashboard != "" {
			fmt.Fprintf(stderr, "serve: edge on http://%s/, dashboard on http://%s/, decisions in %s\n", a.Edge, a.Dashboard, cfg.Decisions.Dir)
		} else {
			fmt.Fprintf(stderr, "serve: edge on http://%s/, decisions in %s\n", a.Edge, cfg.Decisions.Dir)
		}
	}
	return assemble.Serve(ctx, cfg, o)
}
