package assemble

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions/seglog"
	"github.com/ratewarden/ratewarden/edge"
	"github.com/ratewarden/ratewarden/edge/identity"
	"github.com/ratewarden/ratewarden/edge/lists"
	"github.com/ratewarden/ratewarden/internal/connlimit"
	"github.com/ratewarden/ratewarden/internal/logevery"
	"github.com/ratewarden/ratewarden/internal/peercap"
	"github.com/ratewarden/ratewarden/internal/sendtimeout"
)

// BuiltinUpstream as edge.upstream makes the edge serve a small demo origin
// itself, so the quick start runs on a machine with nothing else.
const BuiltinUpstream = "builtin"

// Options are what a command adds to the configuration. The zero value is
// usable.
type Options struct {
	Log    *slog.Logger        // default: discard
	Getenv func(string) string // default: os.Getenv
	// Fallback receives decisions as JSON lines when the configuration
	// names no decision sink (Lambda's stdout, which CloudWatch Logs
	// collects); nil leaves them unrecorded.
	Fallback io.Writer
	// Clock, if set, is the edge's clock for decision times
	// (edge.Options.Clock) and for the feedback events its list watchers
	// record: the demo's story time. Default: the wall clock.
	Clock func() time.Time
	// DecisionLog, if set, is the log of decisions.dir, opened by the
	// caller, that the edge writes its decisions to; the caller closes it
	// after the edge. Serve opens it so that its aggregator reads through
	// the same Log and wakes at each append (aggregator.LogOptions.Log).
	DecisionLog *seglog.Log
	// Reload, if set, has the edge re-read every list it reads at each
	// value received, whether or not the lists' files or table changed:
	// main's SIGHUP, so that a list written by hand or by `lists add`
	// applies now rather than at the next lists.refresh.
	Reload <-chan struct{}
}

// Edge is the limiter with everything the configuration asks of it: the
// counter store stack, the decision sinks, the allow, deny and challenge
// lists, the challenge keys and the origin. It is what `ratewarden edge` and
// `ratewarden lambda` serve.
type Edge struct {
	Limiter *edge.Limiter
	Sinks   *Sinks                    // never nil; Sinks.Emitter is nil when decisions are not recorded
	Lists   map[string]*lists.Watcher // by list name: lists.Allow, Deny, Challenge
	Origin  http.Handler              // the reverse proxy to edge.upstream, or the demo origin; nil without edge.upstream
	// VerifierSecret guards the token endpoint; empty disables it.
	VerifierSecret string

	closers []func(context.Context) error // in opening order
}

// NewEdge assembles the Edge cfg describes. On error, whatever was opened is
// closed again.
func NewEdge(ctx context.Context, cfg *config.Config, o Options) (_ *Edge, err error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	in, err := ReadInputs(cfg, getenv)
	if err != nil {
		return nil, err
	}
	for _, w := range in.Warnings {
		log.Warn(w)
	}
	e := &Edge{Lists: map[string]*lists.Watcher{}, VerifierSecret: in.VerifierSecret}
	defer func() {
		if err != nil {
			e.Close(context.Background())
		}
	}()
	opts := edge.Options{Env: getenv, Keys: in.Keys, Log: log, Clock: o.Clock}
	if e.Sinks, err = decisionSinks(ctx, cfg, log, getenv, o.Fallback, o.DecisionLog); err != nil {
		return nil, err
	}
	e.closers = append(e.closers, e.Sinks.Close)
	if e.Sinks.Emitter != nil {
		opts.Sink = e.Sinks.Emitter
	}
	// The edge owns the decision stream, so it records the changes to the
	// lists it reads (see package lists), on its decisions' clock.
	var record lists.Recorder
	if e.Sinks.Emitter != nil && (cfg.Lists.Record == nil || *cfg.Lists.Record) {
		record = e.Sinks.Emitter
	}
	if e.Lists, err = watchLists(ctx, cfg, log, record, o.Clock); err != nil {
		return nil, err
	}
	if o.Reload != nil && len(e.Lists) > 0 {
		go reloadLists(ctx, o.Reload, e.Lists, log)
	}
	for name, w := range e.Lists {
		e.closers = append(e.closers, w.Close)
		switch name {
		case lists.Allow:
			opts.Allow = w
		case lists.Deny:
			opts.Deny = w
		case lists.Challenge:
			opts.Challenge = w
		}
	}
	store, closeStore, err := Store(ctx, cfg, log, getenv)
	if err != nil {
		return nil, err
	}
	if store != nil {
		opts.Store = store
		e.closers = append(e.closers, closeStore)
	}
	if e.Limiter, err = edge.New(cfg, opts); err != nil {
		return nil, err
	}
	e.closers = append(e.closers, e.Limiter.Close)
	if cfg.Edge.Upstream == "" {
		// A decision service (rls, authz) forwards nothing.
		return e, nil
	}
	if e.Origin, err = Upstream(cfg.Edge.Upstream, cfg.Edge.Origin); err != nil {
		return nil, err
	}
	return e, nil
}

// Handler is the edge's whole HTTP surface: the token endpoint and the
// limiter in front of the origin.
func (e *Edge) Handler() http.Handler { return e.Limiter.Handler(e.Origin, e.VerifierSecret) }

// AdminHandler serves /metrics (Prometheus, from the OpenTelemetry
// instruments of the limiter, the sinks and the lists) and /healthz.
func (e *Edge) AdminHandler(ln *Listener) (http.Handler, error) {
	return adminHandler(e.Limiter, e.Sinks, e.Lists, ln)
}

// Close flushes the decisions and closes every part, the last opened first:
// the limiter (giving back concurrency slots) before the store, the store
// before the sinks, so the decisions of the last requests are written.
func (e *Edge) Close(ctx context.Context) error {
	var errs []error
	for i := len(e.closers) - 1; i >= 0; i-- {
		errs = append(errs, e.closers[i](ctx))
	}
	e.closers = nil
	return errors.Join(errs...)
}

// Upstream is the reverse proxy to the origin, waiting for it as o says,
// or the demo origin for BuiltinUpstream.
func Upstream(upstream string, o config.Origin) (http.Handler, error) {
	if upstream == BuiltinUpstream {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, "{\"origin\":\"builtin\",\"path\":%q}\n", r.URL.Path)
		}), nil
	}
	u, err := url.Parse(upstream)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("upstream %q: want an absolute http or https URL", upstream)
	}
	return edge.NewReverseProxy(u, o), nil
}

// Server is the HTTP server for the edge's listener ln, with the
// configuration's limits on headers and idle connections
// (edge.client.header_timeout, edge.client.idle_timeout). The body
// deadline is the limiter's (edge.client.body_timeout), set once a request
// is decided; there is no write timeout, so that long downloads and
// streams are not cut off: each write is bounded instead, by Listen
// (edge.client.send_timeout). The server tells ln which connections are
// idle, for the listener to close one when it is full.
func Server(cfg *config.Config, h http.Handler, ln *Listener) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.Edge.Client.HeaderTimeout,
		IdleTimeout:       cfg.Edge.Client.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ConnState: func(c net.Conn, s http.ConnState) {
			ln.limit.Idle(c, s == http.StateNew || s == http.StateIdle)
		},
	}
}

// Listener is the edge's client listener (Listen).
type Listener struct {
	net.Listener
	limit *connlimit.Listener
	peers *peercap.Listener
}

// Listen listens on edge.listen for at most edge.client.max_connections
// client connections at a time. When they are all open, a new connection
// takes the place of an idle one (a keep-alive connection between
// requests, or one that has not sent a byte yet: package
// internal/connlimit), which is closed; when none is idle, it waits in the
// kernel's backlog until one closes. Of those connections, one client
// address (an IPv6 client's identity.ipv6_prefix, as its rate-limit
// counter) holds at most edge.client.max_connections_per_address; a
// connection past that is reset at accept, counted and logged
// at most once a minute ("connections refused"), and takes no slot of the
// first cap. Trusted proxies (identity.trusted_proxies) carry many clients
// and are not capped per address; a per-address cap of max_connections
// is no cap. Each write to a connection must be
// accepted within edge.client.send_timeout (package
// internal/sendtimeout), under either server. The server on it must tell
// it which connections are idle (Server, fastServer).
func Listen(cfg *config.Config, log *slog.Logger) (*Listener, error) {
	ln, err := net.Listen("tcp", cfg.Edge.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	l := &Listener{}
	if c := cfg.Edge.Client; c.MaxConnectionsPerAddress < c.MaxConnections {
		l.peers = peercap.New(ln, c.MaxConnectionsPerAddress, peerKey(&cfg.Identity), refusalLog(log, time.Minute))
		ln = l.peers
	}
	l.limit = connlimit.New(sendtimeout.Listener(ln, cfg.Edge.Client.SendTimeout), cfg.Edge.Client.MaxConnections)
	l.Listener = l.limit
	return l, nil
}

// refused is the number of connections reset for being over
// edge.client.max_connections_per_address.
func (l *Listener) refused() int64 {
	if l.peers == nil {
		return 0
	}
	return l.peers.Refused()
}

// peerKey is what a client connection is capped under: none for a trusted
// proxy, else the address its rate-limit counter is kept under (an IPv6
// client's prefix of identity.ipv6_prefix bits; an IPv4 client behind a
// translator of identity.nat64_prefixes, its IPv4 address).
func peerKey(id *config.Identity) peercap.Key {
	trusted, bits, nat := id.TrustedPrefixes(), id.IPv6Prefix, id.NAT64()
	return func(a netip.Addr) (netip.Addr, bool) {
		a = nat.Of(a)
		for _, p := range trusted {
			if p.Contains(a) {
				return netip.Addr{}, false
			}
		}
		return identity.CountingAddr(a, bits), true
	}
}

// refusalLog logs a refused connection at most once every interval, with
// the refusals so far; a nil log logs nothing.
func refusalLog(log *slog.Logger, interval time.Duration) func(netip.Addr, int64) {
	if log == nil {
		return nil
	}
	gate := logevery.New(interval)
	return func(a netip.Addr, refused int64) {
		if ok, _ := gate.Allow(time.Now()); !ok {
			return // refused counts the lines held back
		}
		log.Warn("connections refused", "addr", a.String(), "over", "edge.client.max_connections_per_address", "refused_total", refused)
	}
}

// reloadLists re-reads every list of ws at each value of reload, until ctx
// is done; a list that fails to read keeps its last good content, as at a
// refresh.
func reloadLists(ctx context.Context, reload <-chan struct{}, ws map[string]*lists.Watcher, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-reload:
		}
		for _, name := range slices.Sorted(maps.Keys(ws)) {
			if err := ws[name].Reload(); err != nil {
				log.Error("list reload failed; keeping the last good list", "list", name, "err", err)
				continue
			}
			log.Info("list reloaded", "list", name)
		}
	}
}
