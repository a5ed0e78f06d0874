package config

import (
	"os"
	"slices"
	"time"

	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/internal/limitspec"
)

// Defaults fills every unset field with its documented default; it is the
// one place defaults live. A zero value counts as unset ("0s", "" and 0 mean
// the default), except edge.admin_listen, which a file may set to "" to
// disable the admin listener (null, like an absent key, means the default). Defaults does not apply extends (see
// ResolvedTiers) and is idempotent. It is not safe for concurrent use with
// any other use of c.
func (c *Config) Defaults() {
	e := &c.Edge
	def(&e.Listen, "127.0.0.1:8080")
	if _, written := c.lines["edge.admin_listen"]; !written || c.nulls["edge.admin_listen"] {
		def(&e.AdminListen, "127.0.0.1:9090")
	}
	if e.Node == "" {
		e.Node = hostname()
	}
	def(&e.DecisionQueue, 4096)
	def(&e.RequestIDHeader, "X-Request-Id")
	def(&e.ShutdownGrace, 10*time.Second)
	def(&e.Server, EdgeServers[0])
	def(&e.Client.HeaderTimeout, 10*time.Second)
	def(&e.Client.BodyTimeout, 60*time.Second)
	def(&e.Client.IdleTimeout, 2*time.Minute)
	def(&e.Client.SendTimeout, time.Minute)
	def(&e.Client.MaxConnections, 10_000)
	def(&e.Client.MaxConnectionsPerAddress, min(1000, max(1, e.Client.MaxConnections))) // a max_connections out of range is reported, not this
	def(&e.Origin.ConnectTimeout, 5*time.Second)
	def(&e.Origin.ResponseHeaderTimeout, 30*time.Second)
	def(&e.Origin.ReadTimeout, time.Minute)

	id := &c.Identity
	def(&id.ClientIPHeader, ClientIPHeaders[0])
	def(&id.UserHeader, "X-User-Id")
	def(&id.PlanHeader, "X-User-Plan")
	def(&id.IPv6Prefix, DefaultIPv6Prefix)
	if j := id.JWT; j != nil {
		def(&j.UserClaim, "sub")
		def(&j.PlanClaim, "plan")
		if j.Leeway == nil {
			j.Leeway = new(30 * time.Second)
		}
		if j.RequireExp == nil {
			j.RequireExp = new(true)
		}
	}

	s := &c.Store
	def(&s.Type, StoreTypes[0])
	def(&s.Timeout, 50*time.Millisecond)
	def(&s.MaxKeys, 1_000_000)
	def(&s.EdgeNodes, 1)
	def(&s.Breaker.Failures, 5)
	def(&s.Breaker.Cooldown, 5*time.Second)
	def(&s.DynamoDB.Table, "ratewarden-counters")
	def(&s.DynamoDB.ConcurrencyLease, 10*time.Minute)
	if len(s.Redis.Addrs) == 0 {
		s.Redis.Addrs = []string{"127.0.0.1:6379"}
	}
	def(&s.Redis.PasswordEnv, "RATEWARDEN_REDIS_PASSWORD")
	def(&s.Redis.Prefix, "rw:")
	def(&s.Sync.FlushInterval, time.Second)
	def(&s.Sync.MaxKeys, 100_000)

	ch := &c.Challenge
	def(&ch.Factor, 2)
	def(&ch.Page, "/captcha")
	def(&ch.Param, "redirect")
	def(&ch.TokenTTL, 30*time.Minute)
	def(&ch.Cookie, "rw_challenge")
	def(&ch.Header, "X-Ratewarden-Token")
	def(&ch.KeysEnv, "RATEWARDEN_CHALLENGE_KEYS")
	def(&ch.VerifierSecretEnv, "RATEWARDEN_VERIFIER_SECRET")
	def(&ch.Endpoint, "/.ratewarden/token")
	def(&ch.EndpointFailures.Limit, 10)
	def(&ch.EndpointFailures.Window, time.Minute)

	def(&c.Lists.Refresh, 30*time.Second)
	if c.Lists.Record == nil {
		c.Lists.Record = new(true)
	}
	c.LambdaEdge.defaults()

	sv := &c.Serve
	def(&sv.StateDir, "ratewarden-state")
	def(&sv.PartialsDir, "ratewarden-partials")
	def(&sv.Window, 10*time.Second)
	def(&sv.Lateness, 500*time.Millisecond) // as aggregate --lateness: windows of 1 s are emitted within window + 2 s
	def(&sv.TopK, 100)
	if _, written := c.lines["serve.dashboard.listen"]; !written || c.nulls["serve.dashboard.listen"] {
		def(&sv.Dashboard.Listen, "127.0.0.1:9092")
	}
	def(&sv.Dashboard.TokenEnv, "RATEWARDEN_DASHBOARD_TOKEN")
	def(&sv.Dashboard.Retain, 24*time.Hour)

	def(&c.Paths.Ambiguous, AmbiguousPaths[0])
	if _, written := c.lines["forward.strip_headers"]; !written && c.Forward.StripHeaders == nil {
		c.Forward.StripHeaders = slices.Clone(DefaultStripHeaders)
	}
	if c.Forward.User == nil {
		user := true
		c.Forward.User = &user
	}

	d := &c.Decisions
	def(&d.Codec, columnar.CodecArrow)
	def(&d.SyncInterval, 10*time.Millisecond)
	def(&d.SegmentBytes, 128<<20)
	def(&d.SegmentAge, time.Hour)
	def(&d.RetainAge, 7*24*time.Hour)
	def(&d.RetainBytes, 10<<30)
	def(&d.Linger, time.Second)
	// Records of 3,072 are written compressed per buffer, which readers
	// decode several times faster (decisionlog.PerBufferFrom); a quarter of
	// the queue is left for the decisions arriving while the writer wakes.
	def(&d.Batch, min(3072, max(1, c.Edge.DecisionQueue*3/4)))
	def(&d.Privacy.Addresses, "keep")
	def(&d.Privacy.Users, "keep")
	def(&d.Privacy.KeyEnv, "RATEWARDEN_PRIVACY_KEY")
	def(&d.Kinesis.Codec, columnar.CodecArrow)
	def(&d.Kinesis.Partitions, 4)
	def(&d.Kinesis.SpillDir, "kinesis-spill")
	def(&d.Kinesis.Retry, 5*time.Second)
	// As long as the aggregator's lateness, and short enough that with
	// the source's poll (kinesis.DefaultPoll) a window is emitted within
	// window + 2 s (BENCHMARKS.md, Freshness on Kinesis).
	def(&d.Kinesis.Linger, 500*time.Millisecond)
	// At most the queue, as decisions.batch: a smaller edge.decision_queue
	// alone must not make the default invalid.
	def(&d.Kinesis.Batch, min(1024, max(1, c.Edge.DecisionQueue)))

	c.alertDefaults()
	r := &c.RLS
	def(&r.Listen, "127.0.0.1:8081")
	def(&r.AddressKey, "remote_address")
	def(&r.UserKey, "user")
	def(&r.PlanKey, "plan")
	def(&r.PathKey, "path")
	def(&r.MethodKey, "method")
	def(&r.TokenKey, "challenge_token")
	def(&r.FailClosed, RLSFailClosed[0])
	def(&r.DecisionHeader, "x-ratewarden-decision")
	def(&r.MaxDescriptors, 64)
	def(&r.MaxEntries, 32)
	def(&r.MaxConcurrent, 1024)
	def(&c.Authz.Listen, "127.0.0.1:8082")

	for _, t := range c.Tiers {
		if t == nil {
			continue
		}
		c.ruleDefaults(t.Global)
		for _, r := range t.Paths {
			c.ruleDefaults(r)
		}
	}
}

func (c *Config) ruleDefaults(r *Rule) {
	if r == nil {
		return
	}
	def(&r.Window, time.Minute)
	def(&r.Algorithm, limitspec.FixedWindow.String())
	if r.Algorithm == limitspec.TokenBucket.String() {
		def(&r.Burst, min(max(r.Limit, 0), MaxLimit)) // a limit out of range is reported, not this
	}
	if r.Challenge == nil {
		enabled := c.Challenge.Enabled
		r.Challenge = &enabled
	}
}

// def sets *p to v when *p is the zero value.
func def[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

func hostname() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "edge"
}
