package assemble

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/edge/fastedge"
)

// FastHTTP is the edge.server value that serves the edge with fasthttp.
const FastHTTP = "fasthttp"

// fastServer is the fasthttp server of e (edge.server: fasthttp) for the
// listener ln, in front of the origin edge.upstream names, or of the demo
// origin. It tells ln which connections are idle, as Server does.
func fastServer(cfg *config.Config, e *Edge, ln *Listener, log *slog.Logger) (*fastServerCloser, error) {
	var origin fastedge.Origin
	host := ""
	if cfg.Edge.Upstream == BuiltinUpstream {
		origin = builtinOrigin{}
	} else {
		u, err := url.Parse(cfg.Edge.Upstream)
		if err != nil {
			return nil, fmt.Errorf("upstream %q: want an absolute http or https URL", cfg.Edge.Upstream)
		}
		c, err := fastedge.NewOriginClient(u, cfg.Edge.Origin, cfg.Edge.Client.MaxConnections)
		if err != nil {
			return nil, err
		}
		origin, host = c, c.Host()
	}
	h := fastedge.NewHandler(e.Limiter, origin, fastedge.Config{
		ChallengePage: cfg.Challenge.Page, ChallengeParam: cfg.Challenge.Param,
		MaxBodyBytes: cfg.Edge.Client.MaxBodyBytes, BodyTimeout: cfg.Edge.Client.BodyTimeout,
		VerifierSecret: e.VerifierSecret, OriginHost: host,
	})
	srv := fastedge.NewServer(cfg.Edge.Client, h, log)
	srv.ConnState = func(c net.Conn, s fasthttp.ConnState) {
		ln.limit.Idle(c, s == fasthttp.StateNew || s == fasthttp.StateIdle)
	}
	return &fastServerCloser{srv: srv}, nil
}

// fastServerCloser gives fasthttp's server the methods of net/http's that
// EdgeServer uses.
type fastServerCloser struct{ srv *fasthttp.Server }

func (s *fastServerCloser) Serve(ln net.Listener) error {
	err := s.srv.Serve(ln)
	if err == nil {
		err = errServerClosed
	}
	return err
}

// errServerClosed is what Serve returns once the server was shut down, as
// net/http's does.
var errServerClosed = errors.New("fasthttp: server closed")

// Shutdown stops accepting and waits for the requests under way until ctx
// is done.
func (s *fastServerCloser) Shutdown(ctx context.Context) error {
	return s.srv.ShutdownWithContext(ctx)
}

// Close stops accepting and closes the idle connections at once.
func (s *fastServerCloser) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.srv.ShutdownWithContext(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// builtinOrigin is the demo origin (BuiltinUpstream) for fasthttp: the
// answer of Upstream's.
type builtinOrigin struct{}

func (builtinOrigin) Do(req *fasthttp.Request, resp *fasthttp.Response) error {
	resp.Header.SetContentType("application/json")
	b := append([]byte(`{"origin":"builtin","path":`), strconv.Quote(string(req.URI().Path()))...)
	resp.SetBodyRaw(append(b, "}\n"...))
	return nil
}
