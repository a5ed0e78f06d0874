// Package rls serves Envoy's rate limit service API
// (envoy.service.ratelimit.v3.RateLimitService) from an edge.Limiter, so
// that an Envoy or Istio deployment points its rate limit filter at
// ratewarden instead of envoyproxy/ratelimit and keeps ratewarden's tiers,
// challenges, lists, stores, fail modes and decision events.
//
// One ShouldRateLimit call is one request and one decision. The entries of
// all its descriptors together describe the request (config.RLS names the
// keys): the client address (remote_address), the user and plan (which
// pick the tier), the path (whose rules count the request; an entry that
// config.RLS.Descriptors maps stands for a path), the method and a
// challenge token. Entries with other keys are ignored. The request counts
// hits_addend hits (a descriptor's own hits_addend overrides the call's;
// the largest wins; 0 counts one), against its tier's path rule and global
// rule exactly as at the edge.
//
// The answer: OverallCode OK when the decision passes (allow, allow list,
// token pass, shadow block, fail open), OVER_LIMIT when it refuses (block,
// local limit, challenge, deny list, rejected, fail closed — or the gRPC
// status UNAVAILABLE for fail closed with rls.fail_closed: error). Every
// descriptor's status carries the deciding rule: its code, its limit, the
// hits remaining and the time until it resets. The response headers are
// the decision (rls.decision_header), RateLimit-Limit, -Remaining and
// -Reset, Retry-After on refusals, and Location for a challenge; a refusal
// also carries the decision and the status the edge would answer as
// dynamic metadata, for Envoy's local_reply_config to map (docs/envoy.md).
package rls

import (
	"context"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge"
)

// ServiceName is the gRPC service name, also the name its health is
// reported under.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// Service is the rate limit service. It is safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	lim      *edge.Limiter
	cfg      config.RLS
	page     string // challenge page and its parameter
	param    string
	tokenHdr string // the challenge token header the limiter reads
	domains  map[string]bool
	paths    map[entry]string // descriptor entry → path
	failErr  bool             // fail closed as the gRPC status UNAVAILABLE
	now      func() time.Time

	calls   atomic.Uint64
	invalid atomic.Uint64
	over    atomic.Uint64
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

type entry struct{ key, value string }

// Options are the collaborators of a Service; the zero value is usable.
type Options struct {
	Now func() time.Time // default time.Now
}

// New returns the service deciding with lim, as lim's configuration's rls
// section says.
func New(lim *edge.Limiter, o Options) *Service {
	cfg := lim.Config()
	s := &Service{lim: lim, cfg: cfg.RLS, page: cfg.Challenge.Page, param: cfg.Challenge.Param,
		tokenHdr: http.CanonicalHeaderKey(cfg.Challenge.Header), failErr: cfg.RLS.FailClosed == "error", now: o.Now}
	if s.now == nil {
		s.now = time.Now
	}
	if len(cfg.RLS.Domains) > 0 {
		s.domains = make(map[string]bool, len(cfg.RLS.Domains))
		for _, d := range cfg.RLS.Domains {
			s.domains[d] = true
		}
	}
	s.paths = make(map[entry]string, len(cfg.RLS.Descriptors))
	for _, d := range cfg.RLS.Descriptors {
		s.paths[entry{d.Key, d.Value}] = d.Path
	}
	return s
}

// Stats are what the service counted.
type Stats struct {
	Calls     uint64 // ShouldRateLimit calls
	Invalid   uint64 // refused as INVALID_ARGUMENT
	OverLimit uint64 // answered OVER_LIMIT (or UNAVAILABLE for fail closed)
}

// Stats returns the counts so far.
func (s *Service) Stats() Stats {
	return Stats{Calls: s.calls.Load(), Invalid: s.invalid.Load(), OverLimit: s.over.Load()}
}

// call is what the descriptors of one call say of its request.
type call struct {
	ip      netip.Addr
	addr    bool // an address entry was seen
	user    string
	plan    string
	path    string
	method  string
	token   string
	hits    uint64
	invalid string // why the call is refused, if it is
}

// read reads the entries of req into c.
func (s *Service) read(req *rlsv3.RateLimitRequest, c *call) {
	switch {
	case req.GetDomain() == "":
		c.invalid = "rate limit domain must not be empty"
		return
	case len(req.GetDomain()) > maxDomain:
		c.invalid = "rate limit domain longer than " + strconv.Itoa(maxDomain) + " bytes"
		return
	case s.domains != nil && !s.domains[req.GetDomain()]:
		c.invalid = "rate limit domain is not served: " + quote(req.GetDomain())
		return
	case len(req.GetDescriptors()) == 0:
		c.invalid = "rate limit descriptor list must not be empty"
		return
	case len(req.GetDescriptors()) > s.cfg.MaxDescriptors:
		c.invalid = "more than rls.max_descriptors (" + strconv.Itoa(s.cfg.MaxDescriptors) + ") descriptors"
		return
	}
	c.hits = uint64(req.GetHitsAddend())
	var descHits uint64
	for _, d := range req.GetDescriptors() {
		entries := d.GetEntries()
		if len(entries) == 0 {
			c.invalid = "a descriptor has no entries"
			return
		}
		if len(entries) > s.cfg.MaxEntries {
			c.invalid = "a descriptor has more than rls.max_entries (" + strconv.Itoa(s.cfg.MaxEntries) + ") entries"
			return
		}
		if h := d.GetHitsAddend(); h != nil {
			descHits = max(descHits, h.GetValue())
		}
		for _, e := range entries {
			k, v := e.GetKey(), e.GetValue()
			switch k {
			case s.cfg.AddressKey:
				if !c.addr {
					c.addr = true
					c.ip, _ = netip.ParseAddr(v)
				}
			case s.cfg.UserKey:
				first(&c.user, v)
			case s.cfg.PlanKey:
				first(&c.plan, v)
			case s.cfg.PathKey:
				first(&c.path, v)
			case s.cfg.MethodKey:
				first(&c.method, v)
			case s.cfg.TokenKey:
				first(&c.token, v)
			default:
				if p, ok := s.paths[entry{k, v}]; ok {
					first(&c.path, p)
				}
			}
		}
	}
	if descHits > 0 {
		c.hits = descHits
	}
	c.method = decisions.Cut(c.method, maxMethod)
}

// Bounds on what a call can make a decision record: the domain (recorded
// as the host) and the method. A user or plan longer than
// identity.MaxUserLen is not believed; a path longer than canonpath.MaxLen
// is rejected.
const (
	maxDomain = 256
	maxMethod = 32
)

func first(dst *string, v string) {
	if *dst == "" {
		*dst = v
	}
}

// ShouldRateLimit decides the request req describes.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	s.calls.Add(1)
	now := s.now()
	var c call
	s.read(req, &c)
	var v edge.Verdict
	r := edge.Request{Method: c.method, Host: decisions.Cut(req.GetDomain(), maxDomain), Path: c.path, URI: c.path, Shadow: s.cfg.ShadowMode}
	id := s.lim.Identify(c.ip, c.user, c.plan)
	r.Identity = &id
	if c.invalid != "" {
		s.invalid.Add(1)
		r.Path = ""
		s.lim.Reject(now, &r, &v, "invalid rate limit call: "+c.invalid)
		return nil, status.Error(codes.InvalidArgument, c.invalid)
	}
	r.Hits = int64(min(c.hits, edge.MaxHits))
	if r.Path == "" {
		r.Path, r.URI = "/", "/"
	} else if i := strings.IndexByte(r.Path, '?'); i >= 0 {
		// Envoy's :path carries the query; rules match the path.
		r.Path = r.Path[:i]
	}
	if c.token != "" {
		r.Header = http.Header{s.tokenHdr: {c.token}}
	}
	s.lim.Decide(ctx, now, &r, &v)
	// There is no end of the response to wait for: concurrency rules hold
	// a slot only for the call.
	s.lim.Release(ctx, now, &v)
	if v.Outcome == decisions.FailClosed && s.failErr {
		s.over.Add(1)
		return nil, status.Error(codes.Unavailable, "counter store unavailable: "+v.Reason)
	}
	return s.response(req, &v), nil
}

// response builds the answer to req for the verdict v.
func (s *Service) response(req *rlsv3.RateLimitRequest, v *edge.Verdict) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	refusal, refused := edge.Refusal(v, s.page, s.param)
	if refused {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		s.over.Add(1)
	}
	p := &v.Policies[0]
	code := resp.OverallCode
	if p.Name != "" && v.Count > v.Limit {
		// Over the rule even when the call passes (shadow): say so.
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	hdrs := make([]*corev3.HeaderValue, 0, 6)
	hdrs = append(hdrs, &corev3.HeaderValue{Key: s.cfg.DecisionHeader, Value: v.Outcome.String()})
	var st *rlsv3.RateLimitResponse_DescriptorStatus
	// A store that did not answer counted nothing: no limit is stated
	// rather than a remaining count that is not known.
	counted := p.Name != "" && (v.Count > 0 || (v.Outcome != decisions.FailOpen && v.Outcome != decisions.FailClosed))
	if counted {
		st = &rlsv3.RateLimitResponse_DescriptorStatus{Code: code, CurrentLimit: currentLimit(p),
			LimitRemaining: uint32(min(max(p.Remaining, 0), 1<<32-1)), DurationUntilReset: durationpb.New(p.Reset)}
		hdrs = append(hdrs,
			&corev3.HeaderValue{Key: "ratelimit-limit", Value: strconv.FormatInt(p.Limit, 10)},
			&corev3.HeaderValue{Key: "ratelimit-remaining", Value: strconv.FormatInt(max(p.Remaining, 0), 10)},
			&corev3.HeaderValue{Key: "ratelimit-reset", Value: strconv.FormatInt(p.ResetSeconds(), 10)})
	} else {
		// Nothing was counted (a list, a rejected path, no client, no store).
		st = &rlsv3.RateLimitResponse_DescriptorStatus{Code: code}
	}
	if refused {
		// Envoy hands it on as dynamic metadata (namespace
		// envoy.filters.http.ratelimit), which a local_reply_config mapper's
		// metadata_filter can match to answer 302, 403 or 503 instead of 429.
		resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{
			"decision": structpb.NewStringValue(v.Outcome.String()),
			"status":   structpb.NewNumberValue(float64(refusal.Status)),
		}}
		if refusal.Location != "" {
			hdrs = append(hdrs, &corev3.HeaderValue{Key: "location", Value: refusal.Location})
		}
		if refusal.RetryAfter > 0 {
			hdrs = append(hdrs, &corev3.HeaderValue{Key: "retry-after", Value: strconv.FormatInt(refusal.RetryAfter, 10)})
		}
	}
	resp.ResponseHeadersToAdd = hdrs
	resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))
	for i := range resp.Statuses {
		resp.Statuses[i] = st
	}
	return resp
}

// currentLimit states p in Envoy's terms: requests per unit, the unit the
// largest that divides the window (with a multiplier past one).
func currentLimit(p *edge.Policy) *rlsv3.RateLimitResponse_RateLimit {
	rl := &rlsv3.RateLimitResponse_RateLimit{Name: p.Name, RequestsPerUnit: uint32(min(max(p.Limit, 0), 1<<32-1))}
	if p.Window <= 0 {
		return rl // a concurrency limit: no unit
	}
	for _, u := range units {
		if p.Window%u.d == 0 {
			rl.Unit = u.unit
			if n := p.Window / u.d; n > 1 {
				rl.UnitMultiplier = wrapperspb.UInt32(uint32(min(n, 1<<32-1)))
			}
			return rl
		}
	}
	// Below a second, or not whole seconds: seconds, rounded up.
	rl.Unit = rlsv3.RateLimitResponse_RateLimit_SECOND
	rl.UnitMultiplier = wrapperspb.UInt32(uint32(min((p.Window+time.Second-1)/time.Second, 1<<32-1)))
	return rl
}

var units = []struct {
	d    time.Duration
	unit rlsv3.RateLimitResponse_RateLimit_Unit
}{
	{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
	{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
	{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	{time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
}

// quote quotes a caller's string for an error message, cut to 64 bytes.
func quote(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strconv.Quote(s)
}
