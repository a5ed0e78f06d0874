package assemble

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/edge/authz"
	"github.com/ratewarden/ratewarden/edge/rls"
)

// maxRLSMessage bounds a rate limit call's size: far above any descriptor
// list Envoy builds, far below what would let one call hold much memory.
const maxRLSMessage = 1 << 20

// RLS is `ratewarden rls`: Envoy's rate limit service on a gRPC server,
// with gRPC health checking (reported SERVING under "" and
// rls.ServiceName until shutdown begins) and server reflection, deciding
// with the Edge the configuration describes.
type RLS struct {
	*Edge
	Service *rls.Service
	Server  *grpc.Server
	Health  *health.Server
}

// NewRLS assembles the rate limit service cfg describes: the Edge (store,
// sinks, lists, keys) without an origin, and the gRPC server.
func NewRLS(ctx context.Context, cfg *config.Config, o Options) (*RLS, error) {
	c := *cfg
	c.Edge.Upstream = ""
	e, err := NewEdge(ctx, &c, o)
	if err != nil {
		return nil, err
	}
	svc := rls.New(e.Limiter, rls.Options{})
	srv := grpc.NewServer(
		grpc.MaxRecvMsgSize(maxRLSMessage),
		grpc.MaxConcurrentStreams(uint32(cfg.RLS.MaxConcurrent)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
	rlsv3.RegisterRateLimitServiceServer(srv, svc)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(rls.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	return &RLS{Edge: e, Service: svc, Server: srv, Health: hs}, nil
}

// Serve serves calls on ln until ctx is done, then shuts down gracefully:
// health turns NOT_SERVING, calls under way finish within grace (then
// they are cut off), and Close is left to the caller.
func (r *RLS) Serve(ctx context.Context, ln net.Listener, grace time.Duration, log *slog.Logger) error {
	errc := make(chan error, 1)
	go func() { errc <- r.Server.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	r.Health.Shutdown()
	done := make(chan struct{})
	go func() { r.Server.GracefulStop(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		r.Server.Stop()
		<-done
	}
	return nil
}

// AdminHandler serves /metrics (the edge's instruments and the service's
// call counts) and /healthz.
func (r *RLS) AdminHandler() (http.Handler, error) {
	return metricsHandler("github.com/ratewarden/ratewarden/edge", func(meter metric.Meter) error {
		if err := registerEdgeMetrics(meter, r.Limiter, r.Sinks, r.Lists); err != nil {
			return err
		}
		return registerObservables(meter, r.Service.Stats, []observable[rls.Stats]{
			{"ratewarden.rls.calls", "Rate limit service calls.", "{call}", false, func(s rls.Stats) int64 { return int64(s.Calls) }},
			{"ratewarden.rls.invalid", "Rate limit service calls refused as INVALID_ARGUMENT.", "{call}", false, func(s rls.Stats) int64 { return int64(s.Invalid) }},
			{"ratewarden.rls.over_limit", "Rate limit service calls answered OVER_LIMIT or UNAVAILABLE.", "{call}", false, func(s rls.Stats) int64 { return int64(s.OverLimit) }},
		})
	})
}

// AuthzHandler is `ratewarden authz`'s HTTP surface: the decision
// endpoint of nginx's auth_request, for an Edge assembled without an
// origin.
func (e *Edge) AuthzHandler() http.Handler { return authz.Handler(e.Limiter) }
