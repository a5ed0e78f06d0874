// Package config is ratewarden's one configuration file, read by every
// command: its schema, strict decoding with file:line errors, defaults and
// validation.
package config

import (
	"net/url"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/seglog"
	"github.com/ratewarden/ratewarden/internal/canonpath"
	"github.com/ratewarden/ratewarden/internal/limitspec"
)

// Config is the whole configuration file. The zero value is not valid; use
// Load, or fill it and call Defaults then Validate.
type Config struct {
	Edge       Edge             `yaml:"edge"`
	Identity   Identity         `yaml:"identity"`
	Store      Store            `yaml:"store"`
	Challenge  Challenge        `yaml:"challenge"`
	Lists      Lists            `yaml:"lists"`
	Decisions  Decisions        `yaml:"decisions"`
	Paths      Paths            `yaml:"paths"`
	Forward    Forward          `yaml:"forward"`
	FailClosed []string         `yaml:"fail_closed"` // path prefixes that fail closed (503) when the store fails
	Tiers      map[string]*Tier `yaml:"tiers"`
	Alerts     Alerts           `yaml:"alerts"`      // anomaly detection over the aggregator's windows
	Feedback   Feedback         `yaml:"feedback"`    // policies from alerts to list entries
	LambdaEdge LambdaEdge       `yaml:"lambda_edge"` // ratewarden at CloudFront's viewer request
	Serve      Serve            `yaml:"serve"`
	RLS        RLS              `yaml:"rls"`
	Authz      Authz            `yaml:"authz"`

	// file is the path the configuration was read from, for error messages.
	file string
	// lines maps a key path such as "tiers.anonymous.paths./api/reports.limit"
	// to the line it was found on.
	lines map[string]int
	// nulls holds the key paths written with a null value, which means the
	// default as an absent key does.
	nulls map[string]bool
}

// File returns the name the configuration was read from, as given to Parse
// or Load; "" for a configuration built in code.
func (c *Config) File() string { return c.file }

// Has reports whether the file set key, a key path such as "alerts" or
// "feedback.policies": a section present, however empty, rather than
// filled by Defaults.
func (c *Config) Has(key string) bool {
	_, ok := c.lines[key]
	return ok
}

// Edge is the edge process: where it listens and where it forwards.
type Edge struct {
	Listen          string        `yaml:"listen"`            // default 127.0.0.1:8080
	Upstream        string        `yaml:"upstream"`          // origin URL, required for the reverse proxy
	AdminListen     string        `yaml:"admin_listen"`      // Prometheus metrics and health; "" disables; default 127.0.0.1:9090
	Node            string        `yaml:"node"`              // node name in decisions; default the host name
	DecisionsFile   string        `yaml:"decisions_file"`    // JSON-lines decision log; "" disables
	DecisionQueue   int           `yaml:"decision_queue"`    // bounded queue of decisions awaiting the sink; default 4096
	RequestIDHeader string        `yaml:"request_id_header"` // default X-Request-Id
	ShutdownGrace   time.Duration `yaml:"shutdown_grace"`    // default 10s
	// Server is the HTTP server and reverse proxy of `ratewarden edge` and
	// `ratewarden serve`: net/http (the default; the limiter's Middleware
	// in front of httputil.ReverseProxy) or fasthttp (package
	// edge/fastedge: the same behaviour at less CPU per request).
	Server string `yaml:"server"`
	Client Client `yaml:"client"`
	Origin Origin `yaml:"origin"`
}

// Client bounds what one client may hold of the edge: the time it takes to
// send a request, the size of its body, and connections. docs/security.md
// sets these beside nginx's and Envoy's defaults.
type Client struct {
	HeaderTimeout time.Duration `yaml:"header_timeout"` // to receive the request line and headers; default 10s
	// BodyTimeout is the time to receive the whole request body of a
	// passed request, counted from the decision: a body that takes longer
	// (a slowloris client) is cut off and answered 408. Default 60s.
	BodyTimeout time.Duration `yaml:"body_timeout"`
	IdleTimeout time.Duration `yaml:"idle_timeout"` // a keep-alive connection waits this long for its next request; default 2m
	// SendTimeout bounds each write of a response to the client (of at
	// most 64 KiB): a client that does not accept it within this time
	// (one that stopped reading: a slow-read attack) is cut off and its
	// connection closed, recorded as send_timeout. Default 60s, as
	// nginx's send_timeout.
	SendTimeout    time.Duration `yaml:"send_timeout"`
	MaxBodyBytes   int64         `yaml:"max_body_bytes"`  // larger request bodies are refused with 413; 0 (the default): no cap
	MaxConnections int           `yaml:"max_connections"` // open client connections at most; then a new one replaces an idle one or waits; default 10000
	// MaxConnectionsPerAddress caps the connections one client address
	// (an IPv6 client: its identity.ipv6_prefix) holds open at a time;
	// past it a new connection is reset at accept. Trusted proxies
	// (identity.trusted_proxies) are not capped. Default a tenth of
	// MaxConnections (at least 1), so that no fewer than ten addresses
	// can take every connection; MaxConnections itself is no cap.
	MaxConnectionsPerAddress int `yaml:"max_connections_per_address"`
}

// Origin bounds the wait for the origin behind the reverse proxy.
type Origin struct {
	ConnectTimeout time.Duration `yaml:"connect_timeout"` // to connect, TLS included; default 5s, then 502
	// ResponseHeaderTimeout is the wait for the origin's response headers
	// once the request (its body included) is sent; then 504. Default 30s.
	ResponseHeaderTimeout time.Duration `yaml:"response_header_timeout"`
	// ReadTimeout bounds each read of the origin's response body once its
	// headers have come (a gap between bytes, not the whole body, as
	// nginx's proxy_read_timeout): an origin that stalls mid-body is cut
	// off, the client's response aborted, recorded as
	// upstream_read_timeout. Default 60s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
}

// Identity says how clients are identified.
type Identity struct {
	TrustedProxies []string `yaml:"trusted_proxies"`  // CIDRs or addresses whose forwarding and user headers are believed
	ClientIPHeader string   `yaml:"client_ip_header"` // x-forwarded-for (default) or cloudfront-viewer-address
	UserHeader     string   `yaml:"user_header"`      // default X-User-Id; believed from trusted proxies only
	PlanHeader     string   `yaml:"plan_header"`      // default X-User-Plan; believed from trusted proxies only
	IPv6Prefix     int      `yaml:"ipv6_prefix"`      // anonymous IPv6 clients are counted per prefix of this length; default DefaultIPv6Prefix
	NAT64Prefixes  []string `yaml:"nat64_prefixes"`   // prefixes (/32, /40, /48, /56, /64 or /96, RFC 6052) of stateless NAT64 translators in front of the edge: a peer, forwarded address or list entry in one is the IPv4 client it carries
	JWT            *JWT     `yaml:"jwt"`              // optional bearer-token authentication
}

// JWT verifies bearer tokens in the Authorization header.
type JWT struct {
	Algorithm     string `yaml:"algorithm"`       // HS256, RS256 or ES256
	KeyEnv        string `yaml:"key_env"`         // HS256: environment variable holding the shared key
	PublicKeyFile string `yaml:"public_key_file"` // RS256/ES256: PEM public key
	UserClaim     string `yaml:"user_claim"`      // default sub
	PlanClaim     string `yaml:"plan_claim"`      // default plan
	Issuer        string `yaml:"issuer"`          // required iss when set
	Audience      string `yaml:"audience"`        // required aud when set
	// Leeway is the clock skew allowed on exp and nbf; default 30s. A
	// written 0s is no leeway, not the default.
	Leeway *time.Duration `yaml:"leeway"`
	// RequireExp refuses tokens without an exp claim, which would
	// otherwise be accepted forever; default true.
	RequireExp *bool `yaml:"require_exp"`
}

// Store is the counter store and what happens when it fails.
type Store struct {
	Type    string        `yaml:"type"`     // memory (default), dynamodb or redis
	Timeout time.Duration `yaml:"timeout"`  // deadline of every store call; default 50ms
	MaxKeys int           `yaml:"max_keys"` // memory: tracked keys at most; default 1000000
	Breaker Breaker       `yaml:"breaker"`
	// EdgeNodes is how many edge nodes share the limits; while the breaker is
	// open each node enforces limit ÷ EdgeNodes locally. Default 1.
	EdgeNodes int      `yaml:"edge_nodes"`
	DynamoDB  DynamoDB `yaml:"dynamodb"`
	Redis     Redis    `yaml:"redis"`
	Sync      Sync     `yaml:"sync"`
}

// DynamoDB is the DynamoDB counter store (store.type dynamodb). The AWS
// SDK's credential chain, region and endpoint settings apply.
type DynamoDB struct {
	Table    string `yaml:"table"`    // default ratewarden-counters
	Region   string `yaml:"region"`   // the SDK's region when empty; also kept in every key, so regions of a Global Table count apart
	Endpoint string `yaml:"endpoint"` // the SDK's endpoint (AWS_ENDPOINT_URL_DYNAMODB) when empty
	// ReadAfterConditionFailure reads the item after a refused update,
	// for DynamoDB-compatible endpoints that ignore
	// ReturnValuesOnConditionCheckFailure (dynalite); default false.
	ReadAfterConditionFailure bool `yaml:"read_after_condition_failure"`
	// ConcurrencyLease is how long the concurrency slots an edge process
	// holds on a key stay counted after its last acquire or release of
	// the key: the slots of an edge that crashed holding them are taken
	// back once it has passed. Longer than the longest request that holds
	// a slot; default 10m.
	ConcurrencyLease time.Duration `yaml:"concurrency_lease"`
}

// Redis is the Redis counter store (store.type redis).
type Redis struct {
	Addrs       []string        `yaml:"addrs"`        // host:port; several for Redis Cluster; default [127.0.0.1:6379]
	Username    string          `yaml:"username"`     // ACL user; "" for none
	PasswordEnv string          `yaml:"password_env"` // environment variable holding the password; default RATEWARDEN_REDIS_PASSWORD
	DB          int             `yaml:"db"`           // database number (not with Cluster); default 0
	TLS         bool            `yaml:"tls"`          // connect with TLS
	PoolSize    int             `yaml:"pool_size"`    // connections per node; 0 is the client's default
	Prefix      string          `yaml:"prefix"`       // key prefix; default rw:
	Clock       limitspec.Clock `yaml:"clock"`        // server (default: Redis's clock) or caller (the edge's)
	// Batch sends the calls made at the same time in shared pipelines
	// (redisstore.Batcher): under concurrency a round trip carries many
	// calls, and their system calls cost a share each. Default false.
	Batch bool `yaml:"batch"`
}

// Sync sits in front of a distributed store: it answers keys already over
// their limit locally until the store could answer otherwise, and with
// MaxError > 0 counts far-from-limit hits locally, sending them in batches.
type Sync struct {
	MaxError      float64       `yaml:"max_error"`      // share of a limit that may be over-admitted per window across edge_nodes; 0 (default) is exact
	FlushInterval time.Duration `yaml:"flush_interval"` // how often batched hits are sent; default 1s
	MaxKeys       int           `yaml:"max_keys"`       // keys tracked at most; default 100000
	Exact         []string      `yaml:"exact"`          // rule ids always counted exactly, such as anonymous:/api/reports
}

// Breaker is the circuit breaker in front of the store.
type Breaker struct {
	Failures int           `yaml:"failures"` // consecutive failures that open it; default 5
	Cooldown time.Duration `yaml:"cooldown"` // how long it stays open before one probe; default 5s
}

// Challenge configures CAPTCHA challenges and their tokens.
type Challenge struct {
	Enabled  bool          `yaml:"enabled"`
	Factor   float64       `yaml:"factor"`    // challenge while count ≤ factor × limit, block above; default 2
	Page     string        `yaml:"page"`      // challenge page; default /captcha
	Param    string        `yaml:"param"`     // query parameter carrying the original URI; default redirect
	TokenTTL time.Duration `yaml:"token_ttl"` // default 30m
	Cookie   string        `yaml:"cookie"`    // default rw_challenge
	Header   string        `yaml:"header"`    // default X-Ratewarden-Token
	KeysEnv  string        `yaml:"keys_env"`  // "kid:base64key,..." (first signs); default RATEWARDEN_CHALLENGE_KEYS
	// VerifierSecretEnv holds the shared secret the CAPTCHA verifier presents
	// to the token endpoint; default RATEWARDEN_VERIFIER_SECRET.
	VerifierSecretEnv string `yaml:"verifier_secret_env"`
	Endpoint          string `yaml:"endpoint"` // token endpoint path on the edge; default /.ratewarden/token
	// EndpointFailures limits wrong verifier secrets at the token endpoint
	// per client address; past it every request from the address is
	// refused until the window lets it.
	EndpointFailures FailureLimit `yaml:"endpoint_failures"`
}

// PagePath returns the path the challenge page is asked for by: Page
// before any query when Page is a path, the URL's path (escaped) when it
// is a URL; "" when it has none.
func (c *Challenge) PagePath() string {
	if !strings.HasPrefix(c.Page, "/") {
		u, err := url.Parse(c.Page)
		if err != nil {
			return ""
		}
		return u.EscapedPath()
	}
	p, _, _ := strings.Cut(c.Page, "?")
	return p
}

// FailureLimit is a number of failures allowed in a sliding window.
type FailureLimit struct {
	Limit  int64         `yaml:"limit"`  // failures per window; default 10
	Window time.Duration `yaml:"window"` // default 1m
}

// Decisions is the local decision log: an append-only directory of
// segments, the embedded default for recording every decision.
type Decisions struct {
	Dir          string          `yaml:"dir"`           // log directory; "" disables (edge.decisions_file may still write JSON lines)
	Codec        columnar.Codec  `yaml:"codec"`         // arrow (default: Arrow record batches, zstd) or json
	Sync         seglog.SyncMode `yaml:"sync"`          // batch, interval (default) or never
	SyncInterval time.Duration   `yaml:"sync_interval"` // with sync: interval; default 10ms
	SegmentBytes int64           `yaml:"segment_bytes"` // roll a segment at this size; default 134217728 (128 MiB)
	SegmentAge   time.Duration   `yaml:"segment_age"`   // roll a segment this old; default 1h
	RetainAge    time.Duration   `yaml:"retain_age"`    // delete segments whose newest event is older; default 168h
	RetainBytes  int64           `yaml:"retain_bytes"`  // delete the oldest segments while the log is larger; default 10737418240 (10 GiB)
	// Linger is how long a decision may wait for others to share its log
	// record, and Batch how many fill one: a record pays a fixed cost,
	// so at low rates records wait to fill. Defaults 1s and 3072 (at most
	// three quarters of edge.decision_queue): at 10 decisions a second a
	// record of 10 is 5.3 times smaller than their JSON lines, a decision
	// reaches the aggregator soon enough for its window to close within
	// window + 2 s (BENCHMARKS.md, Freshness), and at high rates records
	// are large enough to be compressed per buffer
	// (decisionlog.PerBufferFrom).
	Linger  time.Duration `yaml:"linger"`
	Batch   int           `yaml:"batch"`
	Privacy Privacy       `yaml:"privacy"`
	Kinesis Kinesis       `yaml:"kinesis"`
}

// Kinesis ships every decision to an Amazon Kinesis data stream as well,
// for aggregators on other machines. The AWS SDK's standard credential
// chain, region and endpoint settings (AWS_REGION, AWS_ENDPOINT_URL,
// AWS_ENDPOINT_URL_KINESIS, ...) apply.
type Kinesis struct {
	Stream     string         `yaml:"stream"`     // stream name; "" disables
	Codec      columnar.Codec `yaml:"codec"`      // arrow (default: many decisions per record) or json (one per record)
	Partitions int            `yaml:"partitions"` // partitions, each at a fixed hash key; default 4, a multiple of the stream's shard count
	SpillDir   string         `yaml:"spill_dir"`  // where undeliverable batches wait; default kinesis-spill
	Retry      time.Duration  `yaml:"retry"`      // wait before retrying a spilled batch; default 5s
	// Linger and Batch are the Kinesis sink's own: how long a decision may
	// wait for others, and how many make a batch (split into a record per
	// partition). Defaults 500ms and 1024: a decision reaches the
	// aggregator soon enough for its window to close within window + 2 s
	// (BENCHMARKS.md, Freshness on Kinesis); a longer linger makes fuller,
	// fewer records at low rates (5s: 74.6 B a decision at the seed's
	// rate, against 225.1 B) and needs a longer aggregate --lateness.
	Linger time.Duration `yaml:"linger"`
	Batch  int           `yaml:"batch"`
}

// Privacy says how client addresses and user ids are recorded in the log.
type Privacy struct {
	Addresses string `yaml:"addresses"` // keep (default), truncate (/24, /48) or hmac
	Users     string `yaml:"users"`     // keep (default) or hmac
	KeyEnv    string `yaml:"key_env"`   // environment variable holding the HMAC key (≥ 32 bytes, base64); default RATEWARDEN_PRIVACY_KEY
}

// Paths says how request paths are read: every rule, fail_closed prefix
// and forwarded request uses the canonical form of the path (see package
// internal/canonpath), so that spelling a path another way does not escape a
// rule.
type Paths struct {
	// Case is insensitive (default: /API/Reports counts as /api/reports) or
	// sensitive, as the origin reads paths.
	Case canonpath.Case `yaml:"case"`
	// Ambiguous is what happens to a path with dot segments, repeated
	// slashes or backslashes: reject (default: 400) or rewrite (forward
	// its canonical form).
	Ambiguous string `yaml:"ambiguous"`
}

// Forward says which headers of a passed request reach the origin.
type Forward struct {
	// StripHeaders are removed from requests whose peer is not a trusted
	// proxy, besides the identity headers (identity.user_header,
	// plan_header and client_ip_header), which always are. Default
	// X-Real-Ip, True-Client-Ip, X-Client-Ip, Cf-Connecting-Ip,
	// Fastly-Client-Ip, X-Cluster-Client-Ip, and X-Original-Url and
	// X-Rewrite-Url, from which some origins take the path (Symfony before
	// 3.4.14, Zend Framework), which the edge did not count.
	StripHeaders []string `yaml:"strip_headers"`
	// User sets identity.user_header and plan_header to the user and plan
	// the edge resolved (JWT or trusted proxy), and removes them for
	// anonymous clients; default true. False passes a trusted proxy's
	// headers as they are.
	User *bool `yaml:"user"`
	// TierHeader, when set, carries the tier the edge counted the request
	// in, such as X-Ratewarden-Tier; a client's own is always removed.
	TierHeader string `yaml:"tier_header"`
	// DecisionHeader, when set, carries the decision's outcome, such as
	// X-Ratewarden-Decision; a client's own is always removed.
	DecisionHeader string `yaml:"decision_header"`
}

// Lists are the feedback lists the edge obeys: allow, deny and challenge,
// each read from a file, or all three from a DynamoDB lists table.
type Lists struct {
	AllowFile string `yaml:"allow_file"`
	DenyFile  string `yaml:"deny_file"`
	// ChallengeFile lists identities challenged on their next request
	// whatever their count; needs challenge.enabled.
	ChallengeFile string `yaml:"challenge_file"`
	// Table is a DynamoDB lists table (as `aws init` creates) to read the
	// three lists from instead of files, with store.dynamodb's region and
	// endpoint; "" reads files.
	Table   string        `yaml:"table"`
	Refresh time.Duration `yaml:"refresh"` // default 30s
	// Record makes the edge record each change it sees in the lists as a
	// feedback event in its decisions; default true. Edges that share a
	// lists table and a Kinesis stream should leave it on in one only, so
	// each change is recorded once.
	Record *bool `yaml:"record"`
}

// Tier is a set of limits for one class of client.
type Tier struct {
	Extends string           `yaml:"extends"` // a tier whose path rules this one inherits
	Global  *Rule            `yaml:"global"`
	Paths   map[string]*Rule `yaml:"paths"` // path prefix → rule; longest prefix wins
}

// Rule is one limit.
type Rule struct {
	Limit     int64         `yaml:"limit"`
	Window    time.Duration `yaml:"window"`    // 1s to 24h; default 1m
	Algorithm string        `yaml:"algorithm"` // fixed_window (default), sliding_window, token_bucket, concurrency
	Burst     int64         `yaml:"burst"`     // token_bucket capacity; default limit
	Challenge *bool         `yaml:"challenge"` // default challenge.enabled
	Shadow    bool          `yaml:"shadow"`    // evaluate and record, never refuse
}

// RLS is `ratewarden rls`, Envoy's rate limit service
// (envoy.service.ratelimit.v3): where it listens, and how the descriptor
// entries of a call map onto the client, the path and the rules that
// count it. One call is one decision: the entries of all its descriptors
// together describe one request.
type RLS struct {
	Listen string `yaml:"listen"` // gRPC address; default 127.0.0.1:8081
	// Domains are the domains answered; a call for another domain (or with
	// none) is refused with INVALID_ARGUMENT. Empty (the default): any.
	Domains []string `yaml:"domains"`
	// The descriptor keys read (an entry with another key is ignored,
	// unless Descriptors names it). Defaults remote_address (Envoy's
	// remote_address action), user, plan, path, method and
	// challenge_token.
	AddressKey string `yaml:"address_key"`
	UserKey    string `yaml:"user_key"`
	PlanKey    string `yaml:"plan_key"`
	PathKey    string `yaml:"path_key"`
	MethodKey  string `yaml:"method_key"`
	TokenKey   string `yaml:"token_key"`
	// Descriptors map an entry key and value (a generic_key or
	// header_match action's) to the path whose rules count the call, for
	// deployments that do not send the path itself.
	Descriptors []RLSDescriptor `yaml:"descriptors"`
	// ShadowMode answers OK to every call the limits would refuse, and
	// records it as shadow_block; the statuses still say OVER_LIMIT.
	ShadowMode bool `yaml:"shadow_mode"`
	// FailClosed is the answer when a fail_closed path cannot be counted:
	// over_limit (default: OVER_LIMIT with the decision header
	// fail_closed) or error (the gRPC status UNAVAILABLE, which Envoy
	// handles by its failure_mode_deny).
	FailClosed     string `yaml:"fail_closed"`
	DecisionHeader string `yaml:"decision_header"` // response header carrying the outcome; default x-ratewarden-decision
	MaxDescriptors int    `yaml:"max_descriptors"` // descriptors read per call at most, more is INVALID_ARGUMENT; default 64
	MaxEntries     int    `yaml:"max_entries"`     // entries per descriptor at most; default 32
	MaxConcurrent  int    `yaml:"max_concurrent"`  // gRPC streams per connection at most; default 1024
}

// RLSDescriptor maps one descriptor entry to a path.
type RLSDescriptor struct {
	Key   string `yaml:"key"`   // entry key, such as header_match or generic_key
	Value string `yaml:"value"` // entry value, such as reports
	Path  string `yaml:"path"`  // canonical path counted, such as /api/reports
}

// Authz is `ratewarden authz`, the decision endpoint for nginx's
// auth_request: it decides the request nginx describes in its
// subrequest's headers and answers 204, 401 or 403.
type Authz struct {
	Listen string `yaml:"listen"` // default 127.0.0.1:8082
}

// RLSFailClosed are the allowed rls.fail_closed values; the first is the
// default.
var RLSFailClosed = []string{"over_limit", "error"}

// Reserved tier names.
const (
	TierAnonymous     = "anonymous"
	TierAuthenticated = "authenticated"
)

// The allowed values of enumerated keys that config itself owns, each in one
// place: adding a store or a header is one line here (and its
// implementation elsewhere). A choice whose meaning belongs to another
// package is decoded straight into that package's type (a seglog.SyncMode,
// a limitspec.Clock, which redisstore aliases, a canonpath.Case): see
// choice in decode.go.
var (
	// EdgeServers are the allowed edge.server values; the first is the
	// default.
	EdgeServers = []string{"fasthttp", "net/http"}
	// StoreTypes are the allowed store.type values; the first is the default.
	StoreTypes = []string{"memory", "dynamodb", "redis"}
	// ClientIPHeaders are the allowed identity.client_ip_header values; the
	// first is the default.
	ClientIPHeaders = []string{"x-forwarded-for", "cloudfront-viewer-address"}
	// JWTAlgorithms are the allowed identity.jwt.algorithm values.
	JWTAlgorithms = []string{"HS256", "RS256", "ES256"}
	// AmbiguousPaths are the allowed paths.ambiguous values; the first is
	// the default.
	AmbiguousPaths = []string{"reject", "rewrite"}
	// DefaultStripHeaders is forward.strip_headers' default: headers that
	// carry a client address and that origins are known to believe.
	DefaultStripHeaders = []string{"X-Real-Ip", "True-Client-Ip", "X-Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip", "X-Cluster-Client-Ip",
		"X-Original-Url", "X-Rewrite-Url"}
)

// Serve is what `ratewarden serve` runs beside the edge: the aggregator
// following the local decision log (decisions.dir, "decision-log" when
// unset) and the live dashboard.
type Serve struct {
	StateDir    string        `yaml:"state_dir"`    // the aggregator's state; default ratewarden-state
	PartialsDir string        `yaml:"partials_dir"` // the aggregator's partials, which the dashboard reads; default ratewarden-partials
	Window      time.Duration `yaml:"window"`       // window length, 1s to 1h dividing an hour; default 10s
	// Lateness is how far behind the latest event an event may be and
	// still join its window; default 1s.
	Lateness  time.Duration `yaml:"lateness"`
	TopK      int           `yaml:"top_k"` // clients held by each top-offenders list; default 100
	Dashboard Dashboard     `yaml:"dashboard"`
}

// Dashboard is the live web dashboard.
type Dashboard struct {
	Listen string `yaml:"listen"` // default 127.0.0.1:9092; "" disables
	// TokenEnv names the environment variable holding the bearer token
	// the dashboard's API requires; default RATEWARDEN_DASHBOARD_TOKEN.
	// Unset or empty, the API is open, and only a loopback listen is
	// allowed unless AllowRemote.
	TokenEnv    string `yaml:"token_env"`
	AllowRemote bool   `yaml:"allow_remote"` // listen on a non-loopback address without a token
	AlertsFile  string `yaml:"alerts_file"`  // alert and action JSON lines to show; "" shows none
	// Retain is how much of the most recent history the dashboard keeps in
	// memory; default 24h.
	Retain time.Duration `yaml:"retain"`
}

// DefaultIPv6Prefix is identity.ipv6_prefix's default: the length of the
// prefix an anonymous IPv6 client is counted under, at the edge and in the
// aggregator alike.
const DefaultIPv6Prefix = 64
