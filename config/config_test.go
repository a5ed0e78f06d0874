package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/seglog"
	"github.com/ratewarden/ratewarden/internal/canonpath"
	"github.com/ratewarden/ratewarden/internal/limitspec"
)

// examples is where the shipped configuration files are, relative to this
// package.
const examples = "../examples"

func TestExamplesLoad(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(examples, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"seed.yaml", "minimal.yaml", "full.yaml"} {
		if !slices.Contains(files, filepath.Join(examples, want)) {
			t.Errorf("examples/%s is missing", want)
		}
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if _, err := Load(f); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSeed checks that examples/seed.yaml is the seed design's limits table,
// rule by rule, after extends.
func TestSeed(t *testing.T) {
	c, err := Load(filepath.Join(examples, "seed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The built-in configuration: no proxy, loopback included, may claim
	// a client's address, user or plan.
	if len(c.Identity.TrustedProxies) != 0 || len(c.Warnings()) != 0 {
		t.Errorf("seed.yaml trusts %q; warnings %v", c.Identity.TrustedProxies, c.Warnings())
	}
	var lines []string
	tiers := c.ResolvedTiers()
	for _, name := range sortedKeys(tiers) {
		tier := tiers[name]
		lines = append(lines, fmt.Sprintf("%s global %s", name, describe(tier.Global)))
		for _, prefix := range sortedKeys(tier.Paths) {
			lines = append(lines, fmt.Sprintf("%s %s %s", name, prefix, describe(tier.Paths[prefix])))
		}
	}
	got := strings.Join(lines, "\n")
	const want = `anonymous global 60/1m fixed_window challenge
anonymous /api/export 3/1m fixed_window challenge
anonymous /api/reports 5/1m fixed_window challenge
anonymous /api/search 30/1m fixed_window challenge
authenticated global 300/1m fixed_window challenge
authenticated /api/export 20/1m fixed_window challenge
authenticated /api/reports 30/1m fixed_window challenge
authenticated /api/search 120/1m fixed_window challenge
enterprise global 10000/1m fixed_window challenge
enterprise /api/export 20/1m fixed_window challenge
enterprise /api/reports 30/1m fixed_window challenge
enterprise /api/search 120/1m fixed_window challenge
free global 100/1m fixed_window challenge
free /api/export 20/1m fixed_window challenge
free /api/reports 30/1m fixed_window challenge
free /api/search 120/1m fixed_window challenge
pro global 1000/1m fixed_window challenge
pro /api/export 20/1m fixed_window challenge
pro /api/reports 30/1m fixed_window challenge
pro /api/search 120/1m fixed_window challenge`
	if got != want {
		t.Errorf("seed tiers:\n%s\nwant:\n%s", got, want)
	}

	for _, c := range []struct {
		key       string
		got, want any
	}{
		{"fail_closed", c.FailClosed, []string{"/api/admin/", "/api/billing/"}},
		{"challenge.enabled", c.Challenge.Enabled, true},
		{"challenge.factor", c.Challenge.Factor, 2.0},
		{"challenge.token_ttl", c.Challenge.TokenTTL, 30 * time.Minute},
		{"challenge.page", c.Challenge.Page, "/captcha"},
		{"challenge.param", c.Challenge.Param, "redirect"},
		{"store.type", c.Store.Type, "memory"},
		{"edge.upstream", c.Edge.Upstream, "http://127.0.0.1:3000"},
		{"identity.user_header", c.Identity.UserHeader, "X-User-Id"},
		{"identity.plan_header", c.Identity.PlanHeader, "X-User-Plan"},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.key, c.got, c.want)
		}
	}
}

func describe(r *Rule) string {
	if r == nil {
		return "<nil>"
	}
	s := fmt.Sprintf("%d/%s %s", r.Limit, fmtDuration(r.Window), r.Algorithm)
	if r.Burst != 0 {
		s += " burst " + strconv.FormatInt(r.Burst, 10)
	}
	if r.Challenge != nil && *r.Challenge {
		s += " challenge"
	}
	if r.Shadow {
		s += " shadow"
	}
	return s
}

func TestDefaults(t *testing.T) {
	c, err := Load(filepath.Join(examples, "minimal.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "edge"
	}
	g := c.Tiers["anonymous"].Global
	for _, d := range []struct {
		key       string
		got, want any
	}{
		{"edge.listen", c.Edge.Listen, "127.0.0.1:8080"},
		{"edge.admin_listen", c.Edge.AdminListen, "127.0.0.1:9090"},
		{"edge.node", c.Edge.Node, host},
		{"edge.decision_queue", c.Edge.DecisionQueue, 4096},
		{"decisions.linger", c.Decisions.Linger, time.Second},
		{"decisions.batch", c.Decisions.Batch, 3072},
		{"decisions.kinesis.linger", c.Decisions.Kinesis.Linger, 500 * time.Millisecond},
		{"decisions.kinesis.batch", c.Decisions.Kinesis.Batch, 1024},
		{"edge.request_id_header", c.Edge.RequestIDHeader, "X-Request-Id"},
		{"edge.shutdown_grace", c.Edge.ShutdownGrace, 10 * time.Second},
		{"edge.client.header_timeout", c.Edge.Client.HeaderTimeout, 10 * time.Second},
		{"edge.client.body_timeout", c.Edge.Client.BodyTimeout, 60 * time.Second},
		{"edge.client.idle_timeout", c.Edge.Client.IdleTimeout, 2 * time.Minute},
		{"edge.client.send_timeout", c.Edge.Client.SendTimeout, time.Minute},
		{"edge.client.max_body_bytes", c.Edge.Client.MaxBodyBytes, int64(0)},
		{"edge.client.max_connections", c.Edge.Client.MaxConnections, 10000},
		{"edge.client.max_connections_per_address", c.Edge.Client.MaxConnectionsPerAddress, 1000},
		{"edge.origin.connect_timeout", c.Edge.Origin.ConnectTimeout, 5 * time.Second},
		{"edge.origin.response_header_timeout", c.Edge.Origin.ResponseHeaderTimeout, 30 * time.Second},
		{"edge.origin.read_timeout", c.Edge.Origin.ReadTimeout, time.Minute},
		{"identity.client_ip_header", c.Identity.ClientIPHeader, "x-forwarded-for"},
		{"identity.user_header", c.Identity.UserHeader, "X-User-Id"},
		{"identity.plan_header", c.Identity.PlanHeader, "X-User-Plan"},
		{"identity.ipv6_prefix", c.Identity.IPv6Prefix, 64},
		{"identity.jwt", c.Identity.JWT, (*JWT)(nil)},
		{"store.type", c.Store.Type, "memory"},
		{"store.timeout", c.Store.Timeout, 50 * time.Millisecond},
		{"store.max_keys", c.Store.MaxKeys, 1000000},
		{"store.edge_nodes", c.Store.EdgeNodes, 1},
		{"store.breaker.failures", c.Store.Breaker.Failures, 5},
		{"store.breaker.cooldown", c.Store.Breaker.Cooldown, 5 * time.Second},
		{"challenge.enabled", c.Challenge.Enabled, false},
		{"challenge.factor", c.Challenge.Factor, 2.0},
		{"challenge.page", c.Challenge.Page, "/captcha"},
		{"challenge.param", c.Challenge.Param, "redirect"},
		{"challenge.token_ttl", c.Challenge.TokenTTL, 30 * time.Minute},
		{"challenge.cookie", c.Challenge.Cookie, "rw_challenge"},
		{"challenge.header", c.Challenge.Header, "X-Ratewarden-Token"},
		{"challenge.keys_env", c.Challenge.KeysEnv, "RATEWARDEN_CHALLENGE_KEYS"},
		{"challenge.verifier_secret_env", c.Challenge.VerifierSecretEnv, "RATEWARDEN_VERIFIER_SECRET"},
		{"challenge.endpoint", c.Challenge.Endpoint, "/.ratewarden/token"},
		{"challenge.endpoint_failures.limit", c.Challenge.EndpointFailures.Limit, int64(10)},
		{"challenge.endpoint_failures.window", c.Challenge.EndpointFailures.Window, time.Minute},
		{"lists.refresh", c.Lists.Refresh, 30 * time.Second},
		{"lists.record", *c.Lists.Record, true},
		{"serve.state_dir", c.Serve.StateDir, "ratewarden-state"},
		{"serve.partials_dir", c.Serve.PartialsDir, "ratewarden-partials"},
		{"serve.window", c.Serve.Window, 10 * time.Second},
		{"serve.lateness", c.Serve.Lateness, 500 * time.Millisecond},
		{"serve.top_k", c.Serve.TopK, 100},
		{"serve.dashboard.listen", c.Serve.Dashboard.Listen, "127.0.0.1:9092"},
		{"serve.dashboard.token_env", c.Serve.Dashboard.TokenEnv, "RATEWARDEN_DASHBOARD_TOKEN"},
		{"serve.dashboard.retain", c.Serve.Dashboard.Retain, 24 * time.Hour},
		{"global.limit", g.Limit, int64(60)},
		{"global.window", g.Window, time.Minute},
		{"global.algorithm", g.Algorithm, "fixed_window"},
		{"global.burst", g.Burst, int64(0)},
		{"global.challenge", *g.Challenge, false},
	} {
		if !reflect.DeepEqual(d.got, d.want) {
			t.Errorf("%s = %#v, want %#v", d.key, d.got, d.want)
		}
	}
}

// TestJWTLeewayZero: a leeway written as 0s is zero, not the default.
func TestJWTLeewayZero(t *testing.T) {
	c := mustParse(t, "identity:\n  jwt: {algorithm: RS256, public_key_file: key.pem, leeway: 0s}\n")
	c.Defaults()
	if got := *c.Identity.JWT.Leeway; got != 0 {
		t.Errorf("leeway: 0s became %v", got)
	}
	if !*c.Identity.JWT.RequireExp {
		t.Error("require_exp is false by default")
	}
}

func TestRuleDefaults(t *testing.T) {
	c := mustParse(t, `
identity:
  jwt: {algorithm: RS256, public_key_file: key.pem}
challenge: {enabled: true}
tiers:
  anonymous:
    global: {limit: 60, algorithm: token_bucket}
    paths:
      /a: {limit: 5, algorithm: token_bucket, burst: 7, challenge: false}
`)
	c.Defaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	a := c.Tiers["anonymous"]
	for _, d := range []struct{ got, want string }{
		{describe(a.Global), "60/1m token_bucket burst 60 challenge"},
		{describe(a.Paths["/a"]), "5/1m token_bucket burst 7"},
		{c.Identity.JWT.UserClaim + " " + c.Identity.JWT.PlanClaim + " " + c.Identity.JWT.Leeway.String(), "sub plan 30s"},
		{strconv.FormatBool(*c.Identity.JWT.RequireExp), "true"},
	} {
		if d.got != d.want {
			t.Errorf("got %q, want %q", d.got, d.want)
		}
	}
}

// TestLogBatchFollowsQueue: decisions.batch defaults to 3,072 but to at
// most three quarters of a smaller edge.decision_queue (a batch of the
// whole queue drops decisions), and a batch set explicitly is kept.
func TestLogBatchFollowsQueue(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want int
	}{
		{"", 3072},
		{"edge:\n  decision_queue: 2000\n", 1500},
		{"edge:\n  decision_queue: 100000\n", 3072},
		{"edge:\n  decision_queue: 2000\ndecisions:\n  batch: 1800\n", 1800},
		{"edge:\n  decision_queue: 1000\n", 750},
	} {
		cfg, err := load([]byte(c.yaml+anonymous), "t.yaml")
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		if cfg.Decisions.Batch != c.want {
			t.Errorf("%q: decisions.batch %d, want %d", c.yaml, cfg.Decisions.Batch, c.want)
		}
		// The Kinesis sink's batch follows a queue smaller than its
		// default too, or the queue alone would fail validation.
		if want := min(1024, cfg.Edge.DecisionQueue); cfg.Decisions.Kinesis.Batch != want {
			t.Errorf("%q: decisions.kinesis.batch %d, want %d", c.yaml, cfg.Decisions.Kinesis.Batch, want)
		}
	}
}

// TestFullExample checks that examples/full.yaml writes every key of the
// schema, and that the values it writes are the defaults: filling the
// defaults into it changes nothing but the node name, whose default is the
// host name.
func TestFullExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(examples, "full.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(data, "full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// identity.jwt is absent by default, so full.yaml shows it commented
	// out; uncommented, it must show every key.
	shown, err := Parse(jwtUncommented.ReplaceAll(data, []byte("  $1")), "full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range schemaKeys(reflect.TypeFor[Config](), "") {
		if _, ok := shown.lines[k]; !ok {
			t.Errorf("full.yaml does not show %s", k)
		}
	}
	if c.Identity.JWT != nil {
		t.Error("full.yaml turns on identity.jwt, which is off by default")
	}
	// Only the anonymous tier writes every rule key; the others are short.
	filled, _ := Parse(data, "full.yaml")
	filled.Defaults()
	filled.Edge.Node = ""
	if a, b := filled.Tiers["anonymous"], c.Tiers["anonymous"]; !reflect.DeepEqual(a, b) {
		t.Errorf("full.yaml's anonymous tier differs from its defaults:\n%+v\nwant\n%+v", a, b)
	}
	filled.Tiers = c.Tiers
	if !reflect.DeepEqual(filled, c) {
		t.Errorf("full.yaml differs from its defaults:\n%+v\nwant\n%+v", filled, c)
	}
}

// jwtUncommented matches the commented-out lines of full.yaml's
// identity.jwt section.
var jwtUncommented = regexp.MustCompile(`(?m)^  # (jwt:.*|  [a-z_]+: .*)$`)

// schemaKeys lists the key paths of t's yaml fields, using the map keys
// full.yaml uses for tiers and paths.
func schemaKeys(t reflect.Type, path string) []string {
	sample := map[string]string{"tiers": "anonymous", "paths": "/api/reports"}
	var keys []string
	for _, f := range fieldsOf(t) {
		ft := t.Field(f.index).Type
		k := joinKey(path, f.name)
		keys = append(keys, k)
		if ft.Kind() == reflect.Map {
			k = joinKey(k, sample[f.name])
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Duration]() {
			keys = append(keys, schemaKeys(ft, k)...)
		}
	}
	return keys
}

const anonymous = `
tiers:
  anonymous:
    global: {limit: 60}
`

// TestErrors checks that each problem is reported with its key path, the
// line marked "# <-" (0 when no line is marked) and the message text.
func TestErrors(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, yaml, key, want string
	}{
		// Decoding.
		{"unknown nested key", `
tiers:
  anonymous:
    globl: {limit: 60} # <-
`, "tiers.anonymous.globl", "unknown key; use one of extends, global, paths"},
		{"unknown top key", "tier: {} # <-\n" + anonymous, "tier", "unknown key; use one of edge, identity, store, challenge, lists, decisions, paths, forward, fail_closed, tiers"},
		{"wrong type", `
tiers:
  anonymous:
    global:
      limit: lots # <-
`, "tiers.anonymous.global.limit", `"lots" is not an integer; use a whole number such as 60`},
		{"quoted integer", `
tiers:
  anonymous:
    global: {limit: "60"} # <-
`, "tiers.anonymous.global.limit", `"60" is not an integer`},
		{"fractional integer", `
tiers:
  anonymous:
    global: {limit: 1.5} # <-
`, "tiers.anonymous.global.limit", `"1.5" is not an integer`},
		{"integer out of range", "store:\n  edge_nodes: 9223372036854775808 # <-\n" + anonymous, "store.edge_nodes", `"9223372036854775808" is out of range`},
		{"boolean for string", "edge:\n  listen: true # <-\n" + anonymous, "edge.listen", `"true" is not a string`},
		{"string for boolean", "challenge:\n  enabled: yes # <-\n" + anonymous, "challenge.enabled", `"yes" is not a boolean; use true or false`},
		{"mapping for list", "fail_closed: {a: b} # <-\n" + anonymous, "fail_closed", "is a mapping, not a list"},
		// Choices owned by other packages, decoded into their types.
		{"sync mode", "decisions:\n  sync: sometimes # <-\n" + anonymous, "decisions.sync", `"sometimes" is not allowed; use one of interval, batch, never`},
		{"redis clock", "store:\n  type: redis\n  redis:\n    addrs: [127.0.0.1:6379]\n    clock: atomic # <-\n" + anonymous, "store.redis.clock", `"atomic" is not allowed; use one of server, caller`},
		{"path case", "paths:\n  case: upper # <-\n" + anonymous, "paths.case", `"upper" is not allowed; use one of insensitive, sensitive`},
		{"decision codec", "decisions:\n  codec: xml # <-\n" + anonymous, "decisions.codec", `"xml" is not allowed; use one of arrow, json`},
		{"kinesis codec", "decisions:\n  kinesis:\n    stream: s\n    codec: avro # <-\n" + anonymous, "decisions.kinesis.codec", `"avro" is not allowed; use one of arrow, json`},
		{"choice of the wrong type", "paths:\n  case: [a] # <-\n" + anonymous, "paths.case", "use one of insensitive, sensitive"},
		{"scalar for mapping", "edge: 5 # <-\n" + anonymous, "edge", `"5" is not a mapping; use a mapping with keys listen, upstream,`},
		{"list for scalar", "edge:\n  listen: [a] # <-\n" + anonymous, "edge.listen", "is a list, not a string"},
		{"duplicate key", `
tiers:
  anonymous:
    global: {limit: 60}
  anonymous: # <-
    global: {limit: 70}
`, "tiers.anonymous", "duplicate key (first on line 3); use each key once"},
		{"duplicate nested key", `
tiers:
  anonymous:
    global:
      limit: 60
      limit: 70 # <-
`, "tiers.anonymous.global.limit", "duplicate key (first on line 5)"},
		{"bad duration", `
tiers:
  anonymous:
    global: {limit: 60, window: 5 minutes} # <-
`, "tiers.anonymous.global.window", `"5 minutes" is not a duration; use a duration such as 30s, 1m or 1h30m`},
		{"bare number duration", `
tiers:
  anonymous:
    global: {limit: 60, window: 60} # <-
`, "tiers.anonymous.global.window", `"60" is not a duration`},
		{"merge key", `
rule: &r {limit: 60}
tiers:
  anonymous:
    global:
      <<: *r # <-
`, "tiers.anonymous.global.<<", "merge keys are not supported"},
		{"non-scalar key", "edge:\n  [a]: b # <-\n" + anonymous, "edge", "has a key that is a list"},
		{"second document", anonymous + "---  # <-\nedge: {}\n", "", "starts a second YAML document; use one document per file"},
		{"syntax error", "edge:\n  listen: [a,\n  # <-\n", "", "invalid YAML: did not find expected node content"},

		// Validation.
		{"edge server", "edge:\n  server: nginx # <-\n" + anonymous,
			"edge.server", `"nginx" is not allowed; use one of fasthttp, net/http`},
		{"body timeout too short", "edge:\n  client:\n    body_timeout: 1ms # <-\n" + anonymous,
			"edge.client.body_timeout", `"1ms" is not allowed; use 10ms to 1h`},
		{"send timeout too long", "edge:\n  client:\n    send_timeout: 2h # <-\n" + anonymous,
			"edge.client.send_timeout", `"2h" is not allowed; use 10ms to 1h`},
		{"negative body cap", "edge:\n  client:\n    max_body_bytes: -1 # <-\n" + anonymous,
			"edge.client.max_body_bytes", `"-1" is not allowed; use 0 to 1099511627776`},
		{"connection cap negative", "edge:\n  client:\n    max_connections: -5 # <-\n" + anonymous,
			"edge.client.max_connections", `"-5" is not allowed; use 1 to 10000000`},
		{"per-address cap over the cap", "edge:\n  client:\n    max_connections: 500\n    max_connections_per_address: 501 # <-\n" + anonymous,
			"edge.client.max_connections_per_address", `"501" is not allowed; use 1 to 500 (edge.client.max_connections; that is no cap per address)`},
		{"per-address cap negative", "edge:\n  client:\n    max_connections_per_address: -1 # <-\n" + anonymous,
			"edge.client.max_connections_per_address", `"-1" is not allowed; use 1 to 10000 (edge.client.max_connections; that is no cap per address)`},
		{"upstream timeout too long", "edge:\n  origin:\n    response_header_timeout: 2h # <-\n" + anonymous,
			"edge.origin.response_header_timeout", `"2h" is not allowed; use 10ms to 1h`},
		{"read timeout too short", "edge:\n  origin:\n    read_timeout: 1ms # <-\n" + anonymous,
			"edge.origin.read_timeout", `"1ms" is not allowed; use 10ms to 1h`},
		{"read timeout too long", "edge:\n  origin:\n    read_timeout: 90m # <-\n" + anonymous,
			"edge.origin.read_timeout", `"1h30m" is not allowed; use 10ms to 1h`},
		{"connect timeout negative", "edge:\n  origin:\n    connect_timeout: -1s # <-\n" + anonymous,
			"edge.origin.connect_timeout", `"-1s" is not allowed; use 10ms to 5m`},
		{"limit zero", `
tiers:
  anonymous:
    global: {limit: 0} # <-
`, "tiers.anonymous.global.limit", `"0" is not allowed; use 1 to 1000000000`},
		{"limit missing", `
tiers:
  anonymous:
    global: {window: 1m} # <-
`, "tiers.anonymous.global.limit", `is missing; use 1 to 1000000000 hits per window`},
		{"window short", `
tiers:
  anonymous:
    global: {limit: 60}
    paths:
      /api:
        limit: 5
        window: 500ms # <-
`, "tiers.anonymous.paths./api.window", `"500ms" is not allowed; use 1s to 24h`},
		{"window long", `
tiers:
  anonymous:
    global: {limit: 60, window: 25h} # <-
`, "tiers.anonymous.global.window", `"25h" is not allowed; use 1s to 24h`},
		{"algorithm", `
tiers:
  anonymous:
    global: {limit: 60}
    paths:
      /api/reports:
        limit: 5
        algorithm: leaky # <-
`, "tiers.anonymous.paths./api/reports.algorithm", `"leaky" is not allowed; use one of fixed_window, sliding_window, token_bucket, concurrency`},
		{"burst negative", `
tiers:
  anonymous:
    global: {limit: 60, algorithm: token_bucket, burst: -1} # <-
`, "tiers.anonymous.global.burst", `"-1" is not allowed; use 0 to 1000000000`},
		{"path prefix", `
tiers:
  anonymous:
    global: {limit: 60}
    paths:
      api/reports: {limit: 5} # <-
`, "tiers.anonymous.paths.api/reports", `"api/reports" is not allowed as a path prefix; use a path prefix starting with /`},
		{"dotted path prefix keeps its line", `
tiers:
  anonymous:
    global: {limit: 60}
    paths:
      /v1.2/x: {limit: 0} # <-
`, "tiers.anonymous.paths./v1.2/x.limit", `"0" is not allowed`},
		{"anonymous missing", `
tiers: # <-
  authenticated:
    global: {limit: 60}
`, "tiers.anonymous", "is missing; use a tier named anonymous"},
		{"no tiers", "edge: {}\n", "tiers.anonymous", "is missing"},
		{"global missing", `
tiers:
  anonymous:
    global: {limit: 60}
  free: # <-
    paths:
      /a: {limit: 1}
`, "tiers.free.global", "is missing; use a global rule"},
		{"null tier", anonymous + "  free: # <-\n", "tiers.free.global", "is missing"},
		{"tier name", anonymous + "  free plan: {global: {limit: 1}} # <-\n", "tiers.free plan", `"free plan" is not allowed as a tier name; use letters, digits, _ and -`},
		{"tier name too long", anonymous + "  " + strings.Repeat("t", 257) + ": {global: {limit: 1}} # <-\n", "tiers." + strings.Repeat("t", 257), "is not allowed as a tier name; use letters, digits, _ and -, at most 256 bytes"},
		{"node too long", "edge:\n  node: " + strings.Repeat("n", 257) + " # <-\n" + anonymous, "edge.node", "is too long; use a node name of at most 256 bytes"},
		{"extends unknown", anonymous + "  free:\n    extends: gold # <-\n", "tiers.free.extends", `"gold" is not a tier; use one of anonymous`},
		{"extends self", anonymous + "  free:\n    extends: free # <-\n", "tiers.free.extends", `"free" is the tier itself`},
		{"extends cycle", anonymous + `
  a:
    extends: b # <-
    global: {limit: 1}
  b:
    extends: a
    global: {limit: 1}
`, "tiers.a.extends", `"b" is not allowed: a extends b, which extends a; use extends in one direction only`},
		{"extends two levels", anonymous + `
  a:
    global: {limit: 1}
  b:
    extends: a
  c:
    extends: b # <-
`, "tiers.c.extends", `"b" is not allowed: it extends a and extends is one level only`},
		{"fail closed", "fail_closed:\n  - /api/admin/\n  - api/billing/ # <-\n" + anonymous, "fail_closed[1]", `"api/billing/" is not allowed; use a path prefix starting with /`},
		{"fail closed not canonical", "fail_closed:\n  - /api//admin/ # <-\n" + anonymous, "fail_closed[0]", `"/api//admin/" is not a canonical path; use /api/admin/: no dot segments`},
		{"fail closed encoded slash", "fail_closed:\n  - /api%2Fadmin/ # <-\n" + anonymous, "fail_closed[0]", `"/api%2Fadmin/" is not allowed: has an encoded slash or backslash; use a path prefix such as /api/admin/`},
		{"path prefix dot segment", "tiers:\n  anonymous:\n    global: {limit: 1}\n    paths:\n      /api/./reports: {limit: 1} # <-\n", "tiers.anonymous.paths./api/./reports", `is not a canonical path; use /api/reports`},
		// A prefix is matched as a prefix, not a pattern: a * in it would
		// make a rule that never matches the paths it was written for.
		{"path prefix glob", "tiers:\n  anonymous:\n    global: {limit: 1}\n    paths:\n      /api/reports/*: {limit: 1} # <-\n", "tiers.anonymous.paths./api/reports/*", `"/api/reports/*" is not allowed as a path prefix; use a prefix without *: rules match by prefix, not by pattern, and /api/reports/ covers every path under it (a literal * is written %2A)`},
		{"path prefix glob inside", "tiers:\n  anonymous:\n    global: {limit: 1}\n    paths:\n      /api/*/export: {limit: 1} # <-\n", "tiers.anonymous.paths./api/*/export", `use a prefix without *: rules match by prefix, not by pattern, and /api/ covers every path under it (a literal * is written %2A)`},
		{"fail closed glob", "fail_closed:\n  - /admin* # <-\n" + anonymous, "fail_closed[0]", `"/admin*" is not allowed; use a prefix without *: rules match by prefix, not by pattern, and /admin covers every path under it (a literal * is written %2A)`},
		// A query or a fragment is never part of the path a rule matches.
		{"path prefix query", "tiers:\n  anonymous:\n    global: {limit: 1}\n    paths:\n      /api/search?q=: {limit: 1} # <-\n", "tiers.anonymous.paths./api/search?q=", `"/api/search?q=" is not allowed as a path prefix; use /api/search: rules match the path alone, without its query (?…) or fragment (#…)`},
		{"fail closed fragment", "fail_closed:\n  - '/admin#x' # <-\n" + anonymous, "fail_closed[0]", `"/admin#x" is not allowed; use /admin: rules match the path alone`},
		{"path prefix parameter", "tiers:\n  anonymous:\n    global: {limit: 1}\n    paths:\n      /api;v=1/: {limit: 1} # <-\n", "tiers.anonymous.paths./api;v=1/", `use a prefix without ;`},
		{"prefixes one when matched", "paths: {case: sensitive}\ntiers:\n  anonymous:\n    global: {limit: 1}\n    paths:\n      /v1/a%3Ab: {limit: 1}\n      /v1/a:b: {limit: 1} # <-\n", "tiers.anonymous.paths./v1/a:b", `"/v1/a:b" is /v1/a%3Ab when matched: an escaped delimiter (%2A, %3A...) matches as the delimiter (*, :...); use one of the two`},
		{"prefixes one without case", "tiers:\n  anonymous:\n    global: {limit: 1}\n    paths:\n      /API/x: {limit: 1}\n      /api/x: {limit: 1} # <-\n", "tiers.anonymous.paths./api/x", `"/api/x" is /API/x when paths.case is insensitive; use one of the two, or paths.case: sensitive`},
		{"paths case", "paths:\n  case: lower # <-\n" + anonymous, "paths.case", `"lower" is not allowed; use one of insensitive, sensitive`},
		{"paths ambiguous", "paths:\n  ambiguous: clean # <-\n" + anonymous, "paths.ambiguous", `"clean" is not allowed; use one of reject, rewrite`},
		{"strip header", "forward:\n  strip_headers: [X-Real-Ip, \"X Bad\"] # <-\n" + anonymous, "forward.strip_headers[1]", "use an HTTP header name"},
		{"tier header is identity", "forward:\n  tier_header: x-user-id # <-\n" + anonymous, "forward.tier_header", `"x-user-id" is an identity header; use a header of its own, such as X-Ratewarden-Tier`},
		{"decision header twice", "forward:\n  tier_header: X-Rw\n  decision_header: X-Rw # <-\n" + anonymous, "forward.decision_header", "is also the tier header"},
		{"upstream scheme", "edge:\n  upstream: ftp://origin # <-\n" + anonymous, "edge.upstream", `"ftp://origin" is not allowed; use an absolute http or https URL`},
		{"upstream relative", "edge:\n  upstream: 127.0.0.1:3000 # <-\n" + anonymous, "edge.upstream", "is not allowed"},
		{"listen", "edge:\n  listen: localhost # <-\n" + anonymous, "edge.listen", `"localhost" is not allowed; use host:port`},
		// A port no listener or dialer takes: config check passed it, and
		// the edge failed at its listen without naming the key.
		{"listen port", "edge:\n  listen: 127.0.0.1:99999 # <-\n" + anonymous, "edge.listen", `"127.0.0.1:99999" is not allowed; use host:port with a port from 0 to 65535`},
		{"listen port name", "edge:\n  admin_listen: localhost:metrics # <-\n" + anonymous, "edge.admin_listen", `"localhost:metrics" is not allowed; use host:port`},
		{"decision queue", "edge:\n  decision_queue: -1 # <-\n" + anonymous, "edge.decision_queue", `"-1" is not allowed; use 1 or more`},
		{"request id header", "edge:\n  request_id_header: X Request # <-\n" + anonymous, "edge.request_id_header", "use an HTTP header name"},
		{"store type", "store:\n  type: dynamo # <-\n" + anonymous, "store.type", `"dynamo" is not allowed; use one of memory, dynamodb, redis`},
		{"store timeout", "store:\n  timeout: 11s # <-\n" + anonymous, "store.timeout", `"11s" is not allowed; use 1ms to 10s`},
		{"max keys", "store:\n  max_keys: 999 # <-\n" + anonymous, "store.max_keys", `"999" is not allowed; use 1000 or more`},
		{"edge nodes", "store:\n  edge_nodes: -2 # <-\n" + anonymous, "store.edge_nodes", `"-2" is not allowed; use 1 or more`},
		{"breaker failures", "store:\n  breaker:\n    failures: -1 # <-\n" + anonymous, "store.breaker.failures", "use 1 or more"},
		{"breaker cooldown", "store:\n  breaker: {cooldown: 50ms} # <-\n" + anonymous, "store.breaker.cooldown", `"50ms" is not allowed; use 100ms or more`},
		{"redis addr", "store:\n  type: redis\n  redis:\n    addrs: [redis.local] # <-\n" + anonymous, "store.redis.addrs[0]", `"redis.local" is not allowed; use host:port`},
		{"redis port", "store:\n  type: redis\n  redis:\n    addrs: [redis.local:70000] # <-\n" + anonymous, "store.redis.addrs[0]", `"redis.local:70000" is not allowed; use host:port with a port from 1 to 65535`},
		{"redis clock", "store:\n  type: redis\n  redis:\n    clock: edge # <-\n" + anonymous, "store.redis.clock", `"edge" is not allowed; use one of server, caller`},
		{"dynamodb table", "store:\n  type: dynamodb\n  dynamodb:\n    table: a # <-\n" + anonymous, "store.dynamodb.table", "use 3 to 255 of"},
		{"dynamodb lease", "store:\n  type: dynamodb\n  dynamodb:\n    concurrency_lease: 10s # <-\n" + anonymous, "store.dynamodb.concurrency_lease", `"10s" is not allowed; use 1m to 24h`},
		{"sync max error", "store:\n  sync:\n    max_error: 0.9 # <-\n" + anonymous, "store.sync.max_error", `"0.9" is not allowed; use a share from 0 (exact) to 0.5`},
		{"sync exact", "store:\n  sync:\n    exact: [anonymous:/nowhere] # <-\n" + anonymous, "store.sync.exact[0]", `"anonymous:/nowhere" names no rule`},
		{"kinesis stream", "decisions:\n  kinesis:\n    stream: no spaces # <-\n" + anonymous, "decisions.kinesis.stream", `"no spaces" is not allowed`},
		{"kinesis partitions", "decisions:\n  kinesis:\n    partitions: -1 # <-\n" + anonymous, "decisions.kinesis.partitions", "use 1 to 500"},
		{"kinesis linger", "decisions:\n  kinesis:\n    linger: 2m # <-\n" + anonymous, "decisions.kinesis.linger", `"2m" is not allowed; use 1ms to 1m`},
		{"kinesis batch", "decisions:\n  kinesis:\n    batch: 100000 # <-\n" + anonymous, "decisions.kinesis.batch", "use 1 to 65536"},
		{"log linger", "decisions:\n  linger: -1s # <-\n" + anonymous, "decisions.linger", "use 1ms to 1m"},
		{"log batch", "decisions:\n  batch: -3 # <-\n" + anonymous, "decisions.batch", "use 1 to 65536"},
		{"batch over queue", "edge:\n  decision_queue: 100\ndecisions:\n  batch: 200 # <-\n" + anonymous, "decisions.batch", `"200" is more than edge.decision_queue; use at most 100`},
		{"ipv6 prefix", "identity:\n  ipv6_prefix: 129 # <-\n" + anonymous, "identity.ipv6_prefix", "use 1 to 128"},
		{"client ip header", "identity:\n  client_ip_header: x-real-ip # <-\n" + anonymous, "identity.client_ip_header", `"x-real-ip" is not allowed; use one of x-forwarded-for, cloudfront-viewer-address`},
		{"trusted proxy", "identity:\n  trusted_proxies:\n    - 10.0.0.0/8\n    - proxy.local # <-\n" + anonymous, "identity.trusted_proxies[1]", `"proxy.local" is not allowed; use an address or CIDR prefix`},
		// A prefix with host bits is the whole prefix to the edge: 10.0.3.7/8
		// trusted every address of 10.0.0.0/8, silently, where the lists
		// refuse such an entry.
		{"trusted proxy host bits", "identity:\n  trusted_proxies: [10.0.3.7/8] # <-\n" + anonymous, "identity.trusted_proxies[0]", `"10.0.3.7/8" has host bits set; use 10.0.0.0/8 for the prefix, or 10.0.3.7 for the one address`},
		{"trusted proxy host bits IPv6", "identity:\n  trusted_proxies: [\"2001:db8::1/32\"] # <-\n" + anonymous, "identity.trusted_proxies[0]", `"2001:db8::1/32" has host bits set; use 2001:db8::/32 for the prefix`},
		{"trusted proxy zone", "identity:\n  trusted_proxies: [\"fe80::1%eth0\"] # <-\n" + anonymous, "identity.trusted_proxies[0]", "without a zone"},
		{"trusted proxy mapped", "identity:\n  trusted_proxies: [\"::ffff:0:0/80\"] # <-\n" + anonymous, "identity.trusted_proxies[0]", "is not allowed"},
		{"trusted proxy NAT64", "identity:\n  trusted_proxies: [\"64:ff9b::/64\"] # <-\n" + anonymous, "identity.trusted_proxies[0]", "an IPv4-mapped or NAT64 (64:ff9b::/96) prefix needs at least 96 bits"},
		{"trusted proxy in a NAT64 prefix of the site", "identity:\n  nat64_prefixes: [\"2001:db8:64::/96\"]\n  trusted_proxies: [\"2001:db8:64::/80\"] # <-\n" + anonymous, "identity.trusted_proxies[0]",
			`"2001:db8:64::/80" holds identity.nat64_prefixes 2001:db8:64::/96, whose addresses are IPv4 clients, and IPv6 addresses around it; use the addresses or prefixes of your proxies, leaving 2001:db8:64::/96 out`},
		// A wider prefix that holds the site's prefix is refused alike,
		// wherever its first address lies.
		{"trusted proxy holding a NAT64 prefix of the site", "identity:\n  nat64_prefixes: [\"2001:db8:64::/96\"]\n  trusted_proxies: [10.0.0.0/8, \"2001:db8::/32\"] # <-\n" + anonymous, "identity.trusted_proxies[1]",
			`"2001:db8::/32" holds identity.nat64_prefixes 2001:db8:64::/96, whose addresses are IPv4 clients, and IPv6 addresses around it; use the addresses or prefixes of your proxies, leaving 2001:db8:64::/96 out; a proxy behind that translator by its IPv4 address or prefix, or by one written inside 2001:db8:64::/96`},
		{"trusted proxy every IPv6 address with a NAT64 prefix", "identity:\n  nat64_prefixes: [\"2001:db8:64::/96\"]\n  trusted_proxies: [\"::/0\"] # <-\n" + anonymous, "identity.trusted_proxies[0]", "holds identity.nat64_prefixes 2001:db8:64::/96"},
		{"trusted proxy holding a /64 NAT64 prefix", "identity:\n  nat64_prefixes: [\"2001:db8:122:344::/64\"]\n  trusted_proxies: [\"2001:db8:122::/48\"] # <-\n" + anonymous, "identity.trusted_proxies[0]", "holds identity.nat64_prefixes 2001:db8:122:344::/64, whose"},
		{"trusted proxy starting in a /64 NAT64 prefix", "identity:\n  nat64_prefixes: [\"2001:db8:122:344::/64\"]\n  trusted_proxies: [\"2001:db8:122:344::/63\"] # <-\n" + anonymous, "identity.trusted_proxies[0]", "holds identity.nat64_prefixes 2001:db8:122:344::/64, whose"},
		{"trusted proxy holding a /32 NAT64 prefix", "identity:\n  nat64_prefixes: [\"2001:db8::/32\"]\n  trusted_proxies: [\"2001:db8::/31\"] # <-\n" + anonymous, "identity.trusted_proxies[0]", "holds identity.nat64_prefixes 2001:db8::/32, whose"},
		{"NAT64 prefix of a length RFC 6052 does not define", "identity:\n  nat64_prefixes: [\"2001:db8:64::/80\"] # <-\n" + anonymous, "identity.nat64_prefixes[0]",
			`"2001:db8:64::/80" is not a /32, /40, /48, /56, /64 or /96; use an IPv6 prefix of 32, 40, 48, 56, 64 or 96 bits (RFC 6052) such as 2001:db8:64::/96 or 2001:db8:122:344::/64`},
		{"NAT64 prefix of 128 bits", "identity:\n  nat64_prefixes: [\"2001:db8:64::1/128\"] # <-\n" + anonymous, "identity.nat64_prefixes[0]", "is not a /32, /40, /48, /56, /64 or /96"},
		{"NAT64 prefix holding the well-known prefix", "identity:\n  nat64_prefixes: [\"64:ff9b::/64\"] # <-\n" + anonymous, "identity.nat64_prefixes[0]", `"64:ff9b::/64" holds the well-known prefix 64:ff9b::/96; use`},
		{"NAT64 prefix inside another", "identity:\n  nat64_prefixes:\n    - 2001:db8::/32\n    - 2001:db8:64::/96 # <-\n" + anonymous, "identity.nat64_prefixes[1]",
			`"2001:db8:64::/96" overlaps identity.nat64_prefixes[0] (2001:db8::/32); use prefixes apart: an address in both would carry a different IPv4 address in each`},
		{"NAT64 prefix around another", "identity:\n  nat64_prefixes:\n    - 2001:db8:122:344::/64\n    - 2001:db8:122::/48 # <-\n" + anonymous, "identity.nat64_prefixes[1]", `overlaps identity.nat64_prefixes[0] (2001:db8:122:344::/64)`},
		{"NAT64 prefix twice", "identity:\n  nat64_prefixes:\n    - 2001:db8:64::/96\n    - 2001:db8:64::1/96 # <-\n" + anonymous, "identity.nat64_prefixes[1]", `overlaps identity.nat64_prefixes[0] (2001:db8:64::/96)`},
		// A prefix with host bits was masked silently, as trusted_proxies
		// refuse it: 64:ff9b::1/96 read as the well-known prefix.
		{"NAT64 prefix host bits", "identity:\n  nat64_prefixes: [\"2001:db8:64::7/96\"] # <-\n" + anonymous, "identity.nat64_prefixes[0]", `"2001:db8:64::7/96" has host bits set; use 2001:db8:64::/96 for the prefix`},
		{"NAT64 well-known prefix host bits", "identity:\n  nat64_prefixes:\n    - 2001:db8:122:344::/64\n    - 64:ff9b::1/96 # <-\n" + anonymous, "identity.nat64_prefixes[1]", `"64:ff9b::1/96" has host bits set; use 64:ff9b::/96 for the prefix`},
		{"NAT64 prefix IPv4", "identity:\n  nat64_prefixes: [\"192.0.2.0/24\"] # <-\n" + anonymous, "identity.nat64_prefixes[0]", "is not an IPv6 prefix"},
		{"NAT64 prefix mapped", "identity:\n  nat64_prefixes: [\"::ffff:0:0/96\"] # <-\n" + anonymous, "identity.nat64_prefixes[0]", "is not an IPv6 prefix"},
		{"NAT64 prefix of loopback", "identity:\n  nat64_prefixes: [\"::/96\"] # <-\n" + anonymous, "identity.nat64_prefixes[0]", "holds the loopback and unspecified addresses"},
		{"NAT64 /64 prefix of loopback", "identity:\n  nat64_prefixes: [\"::/64\"] # <-\n" + anonymous, "identity.nat64_prefixes[0]", "holds the loopback and unspecified addresses"},
		{"NAT64 prefix not a CIDR", "identity:\n  nat64_prefixes: [\"2001:db8:64::\"] # <-\n" + anonymous, "identity.nat64_prefixes[0]", "is not a valid CIDR"},
		{"same user and plan header", "identity:\n  user_header: X-Who\n  plan_header: x-who # <-\n" + anonymous, "identity.plan_header", `"x-who" is also the user header; use a different header`},
		{"same user and plan claim", "identity:\n  jwt: {algorithm: HS256, key_env: K, user_claim: sub, plan_claim: sub} # <-\n" + anonymous, "identity.jwt.plan_claim", "is also the user claim"},
		{"user header", "identity:\n  user_header: \"X:User\" # <-\n" + anonymous, "identity.user_header", "use an HTTP header name"},
		{"jwt algorithm", "identity:\n  jwt: {algorithm: none} # <-\n" + anonymous, "identity.jwt.algorithm", `"none" is not allowed; use one of HS256, RS256, ES256`},
		{"jwt key env", "identity:\n  jwt: # <-\n    algorithm: HS256\n" + anonymous, "identity.jwt.key_env", "is missing; use the environment variable holding the HS256 shared key"},
		{"jwt public key", "identity:\n  jwt: # <-\n    algorithm: ES256\n    key_env: K\n" + anonymous, "identity.jwt.public_key_file", "is missing; use the PEM file holding the ES256 public key"},
		{"jwt leeway", "identity:\n  jwt: {algorithm: HS256, key_env: K, leeway: -1s} # <-\n" + anonymous, "identity.jwt.leeway", `"-1s" is not allowed; use 0s or more`},
		{"challenge factor", "challenge:\n  enabled: true\n  factor: 0.5 # <-\n" + anonymous, "challenge.factor", `"0.5" is not allowed; use a number from 1 to 100`},
		{"challenge factor nan", "challenge:\n  enabled: true\n  factor: .nan # <-\n" + anonymous, "challenge.factor", `"NaN" is not allowed`},
		{"challenge on one rule", `
challenge:
  factor: 0.5 # <-
tiers:
  anonymous:
    global: {limit: 60, challenge: true}
`, "challenge.factor", `"0.5" is not allowed`},
		{"token ttl", "challenge:\n  enabled: true\n  token_ttl: 30s # <-\n" + anonymous, "challenge.token_ttl", `"30s" is not allowed; use 1m to 24h`},
		{"challenge page", "challenge:\n  enabled: true\n  page: captcha # <-\n" + anonymous, "challenge.page", "use a path starting with / or an absolute http or https URL"},
		{"challenge page at the root", "challenge:\n  enabled: true\n  page: /?site=1 # <-\n" + anonymous, "challenge.page", "use a path of its own, such as /captcha"},
		{"challenge page not canonical", "challenge:\n  enabled: true\n  page: /a/../captcha # <-\n" + anonymous, "challenge.page", `"/a/../captcha" is not a canonical path; use /captcha`},
		{"challenge endpoint", "challenge:\n  enabled: true\n  endpoint: token # <-\n" + anonymous, "challenge.endpoint", "use a path starting with /"},
		{"endpoint failures limit", "challenge:\n  enabled: true\n  endpoint_failures:\n    limit: -1 # <-\n" + anonymous, "challenge.endpoint_failures.limit", `"-1" is not allowed; use 1 to 1000000000`},
		{"endpoint failures window", "challenge:\n  enabled: true\n  endpoint_failures: {window: 48h} # <-\n" + anonymous, "challenge.endpoint_failures.window", `"48h" is not allowed; use 1s to 24h`},
		{"challenge cookie", "challenge:\n  enabled: true\n  cookie: a;b # <-\n" + anonymous, "challenge.cookie", "use a cookie name"},
		{"lists refresh", "lists:\n  refresh: 10ms # <-\n" + anonymous, "lists.refresh", `"10ms" is not allowed; use 1s or more`},
		{"challenge list without challenges", "lists:\n  challenge_file: c.list # <-\n" + anonymous, "lists.challenge_file", `"c.list" needs challenge.enabled: true; use challenge.enabled: true`},
		{"lists table name", "lists:\n  table: a # <-\n" + anonymous, "lists.table", `"a" is not allowed; use 3 to 255 of`},
		{"one file for two lists", "challenge: {enabled: true}\nlists:\n  allow_file: /etc/rw/l.list\n  challenge_file: /etc/rw/c.list\n  deny_file: /etc/rw/l.list # <-\n" + anonymous,
			"lists.deny_file", `"/etc/rw/l.list" is also lists.allow_file; use a file of its own for each list`},
		{"one file for two lists, spelled apart", "lists:\n  allow_file: ./rw//l.list\n  deny_file: rw/x/../l.list # <-\n" + anonymous,
			"lists.deny_file", `"rw/x/../l.list" is also lists.allow_file; use a file of its own for each list`},
		{"one file for two lists, relative and absolute", "lists:\n  allow_file: l.list\n  deny_file: " + wd + "/l.list # <-\n" + anonymous,
			"lists.deny_file", `/l.list" is also lists.allow_file; use a file of its own for each list`},
		{"lists table and files", "lists:\n  table: ratewarden-lists\n  deny_file: d.list # <-\n" + anonymous, "lists.deny_file", `"d.list" cannot be used with lists.table; use either lists.table or list files`},
		{"serve window", "serve:\n  window: 7s # <-\n" + anonymous, "serve.window", `"7s" is not allowed; use 1s to 1h, dividing an hour`},
		{"serve window long", "serve:\n  window: 2h # <-\n" + anonymous, "serve.window", `"2h" is not allowed`},
		{"serve lateness", "serve:\n  window: 1s\n  lateness: 11s # <-\n" + anonymous, "serve.lateness", `"11s" is not allowed; use 0s to 10s`},
		{"serve top k", "serve:\n  top_k: -3 # <-\n" + anonymous, "serve.top_k", `"-3" is not allowed; use 1 to 100000`},
		{"dashboard listen", "serve:\n  dashboard:\n    listen: 9092 # <-\n" + anonymous, "serve.dashboard.listen", "use host:port"},
		{"dashboard retain", "serve:\n  dashboard:\n    retain: 30d # <-\n" + anonymous, "serve.dashboard.retain", ""},
		{"dashboard token env", "serve:\n  dashboard:\n    token_env: MY-TOKEN # <-\n" + anonymous, "serve.dashboard.token_env", "use an environment variable name"},
		{"rls fail closed", "rls:\n  fail_closed: unknown # <-\n" + anonymous, "rls.fail_closed", `"unknown" is not allowed; use one of over_limit, error`},
		{"rls duplicate key", "rls:\n  user_key: remote_address # <-\n" + anonymous, "rls.user_key", `"remote_address" is also rls.address_key`},
		{"rls descriptor path", "rls:\n  descriptors:\n    - key: header_match\n      value: reports\n      path: api/reports # <-\n" + anonymous, "rls.descriptors[0].path", `use a path prefix starting with /`},
		{"rls max descriptors", "rls:\n  max_descriptors: 5000 # <-\n" + anonymous, "rls.max_descriptors", `"5000" is not allowed; use 1 to 4096`},
		{"rls listen", "rls:\n  listen: nowhere # <-\n" + anonymous, "rls.listen", `use host:port`},
		{"authz listen", "authz:\n  listen: nowhere # <-\n" + anonymous, "authz.listen", `use host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := markedLine(tc.yaml)
			e := find(t, check(tc.yaml), tc.key)
			prefix := "test.yaml"
			if line > 0 {
				prefix += ":" + strconv.Itoa(line)
			}
			if tc.key != "" {
				prefix += ": " + tc.key
			}
			msg := e.Error()
			if e.Line != line || !strings.HasPrefix(msg, prefix+": ") || !strings.Contains(msg, tc.want) {
				t.Errorf("got  %s\nwant %s: …%s…", msg, prefix, tc.want)
			}
		})
	}
}

// TestValid checks configurations near the edges of what is allowed.
func TestValid(t *testing.T) {
	for _, tc := range []struct{ name, yaml string }{
		{"concurrency ignores window", `
tiers:
  anonymous:
    global: {limit: 60}
    paths:
      /upload: {limit: 4, algorithm: concurrency, window: 48h}
`},
		{"factor unchecked without challenges", "challenge: {factor: 0.5}\n" + anonymous},
		{"admin listener disabled", "edge: {admin_listen: \"\"}\n" + anonymous},
		{"null values take defaults", "edge:\n  listen:\nstore:\n" + anonymous},
		{"proxies", "identity: {trusted_proxies: [10.0.0.0/8, 192.168.1.1, \"::1\", \"2001:db8::/32\"]}\n" + anonymous},
		{"NAT64 prefixes of every length RFC 6052 defines", "identity:\n  nat64_prefixes: [\"2001:db8::/32\", \"2001:db9:100::/40\", \"2001:dba:122::/48\", \"2001:dbb:122:300::/56\", \"2001:dbc:122:344::/64\", \"2001:dbd:64::/96\", \"64:ff9b::/96\", \"64:ff9b:1::/48\"]\n" + anonymous},
		{"proxies beside and inside a /64 NAT64 prefix", "identity:\n  nat64_prefixes: [\"2001:db8:122:344::/64\"]\n  trusted_proxies: [\"2001:db8:122:345::/64\", \"2001:db8:122:344:a::/80\", \"2001:db8:122:344:ff00::/72\", \"2001:db8:123::/48\"]\n" + anonymous},
		{"header names ignore case", "identity: {client_ip_header: CloudFront-Viewer-Address}\n" + anonymous},
		{"jwt algorithm ignores case", "identity: {jwt: {algorithm: es256, public_key_file: k.pem}}\n" + anonymous},
		{"plan tier extends anonymous", anonymous + "  free: {extends: anonymous}\n"},
		{"empty file is only missing anonymous", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := check(tc.yaml)
			if tc.yaml == "" {
				var list ErrorList
				if !errors.As(err, &list) || len(list) != 1 || list[0].Key != "tiers.anonymous" {
					t.Fatalf("got %v, want only tiers.anonymous missing", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestAliases(t *testing.T) {
	c := mustParse(t, `
tiers:
  anonymous:
    global: &r {limit: 5}
    paths: {/a: *r, /b: *r}
`)
	c.Defaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	p := c.Tiers["anonymous"].Paths
	if p["/a"] == p["/b"] || p["/a"].Limit != 5 || p["/b"].Limit != 5 {
		t.Errorf("aliased rules: %+v %+v", p["/a"], p["/b"])
	}
}

// TestAdminListen holds the one exception to "empty means the default":
// only an empty string disables the admin listener; null and an absent key
// mean the default, as for every other key.
func TestAdminListen(t *testing.T) {
	for _, c := range []struct{ edge, want string }{
		{"edge: {admin_listen: \"\"}\n", ""},
		{"edge: {admin_listen: ''}\n", ""},
		{"edge: {admin_listen: null}\n", "127.0.0.1:9090"},
		{"edge: {admin_listen: ~}\n", "127.0.0.1:9090"},
		{"edge:\n  admin_listen:\n", "127.0.0.1:9090"},
		{"edge: {listen: 127.0.0.1:8081}\n", "127.0.0.1:9090"},
		{"edge: {admin_listen: 127.0.0.1:9191}\n", "127.0.0.1:9191"},
	} {
		cfg := mustParse(t, c.edge+anonymous)
		cfg.Defaults()
		if cfg.Edge.AdminListen != c.want {
			t.Errorf("%q: admin_listen = %q, want %q", c.edge, cfg.Edge.AdminListen, c.want)
		}
	}
	// serve.dashboard.listen likewise: "" disables the dashboard.
	for yaml, want := range map[string]string{
		"serve: {dashboard: {listen: \"\"}}\n":    "",
		"serve: {dashboard: {listen: null}}\n":    "127.0.0.1:9092",
		"serve: {dashboard: {listen: ':9000'}}\n": ":9000",
	} {
		cfg := mustParse(t, yaml+anonymous)
		cfg.Defaults()
		if cfg.Serve.Dashboard.Listen != want {
			t.Errorf("%q: serve.dashboard.listen = %q, want %q", yaml, cfg.Serve.Dashboard.Listen, want)
		}
	}
}

func TestErrorFormat(t *testing.T) {
	err := check(`
tiers:
  anonymous:
    global: {limit: 60}
    paths:
      /api/reports: {limit: 5, algorithm: leaky}
`)
	const want = `test.yaml:6: tiers.anonymous.paths./api/reports.algorithm: "leaky" is not allowed; use one of fixed_window, sliding_window, token_bucket, concurrency`
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
	var e *Error
	if !errors.As(err, &e) || e.File != "test.yaml" || e.Line != 6 || e.Value != "leaky" {
		t.Errorf("errors.As: %#v", e)
	}
}

// TestAllErrors checks that decoding reports every error, in line order, up
// to MaxErrors and a count of the rest.
func TestAllErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString(anonymous)
	b.WriteString("    paths:\n")
	for i := range MaxErrors + 5 {
		fmt.Fprintf(&b, "      /p%d: {limit: x}\n", i)
	}
	var list ErrorList
	if !errors.As(check(b.String()), &list) {
		t.Fatal("no ErrorList")
	}
	if len(list) != MaxErrors+1 {
		t.Fatalf("got %d errors, want %d", len(list), MaxErrors+1)
	}
	for i, e := range list[:MaxErrors] {
		if want := 6 + i; e.Line != want {
			t.Errorf("error %d on line %d, want %d: %v", i, e.Line, want, e)
		}
	}
	if got, want := list[MaxErrors].Error(), "test.yaml: 5 more errors not shown"; got != want {
		t.Errorf("last: %q, want %q", got, want)
	}
}

func TestResolvedTiers(t *testing.T) {
	c := mustParse(t, `
tiers:
  anonymous:
    global: {limit: 60}
  authenticated:
    global: {limit: 300}
    paths:
      /a: {limit: 30}
      /b: {limit: 20}
  pro:
    extends: authenticated
    global: {limit: 1000}
    paths:
      /b: {limit: 200}
      /c: {limit: 100}
  basic:
    extends: authenticated
`)
	c.Defaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	got := c.ResolvedTiers()
	summary := func(tier *Tier) string {
		s := []string{"global " + describe(tier.Global)}
		for _, p := range sortedKeys(tier.Paths) {
			s = append(s, p+" "+describe(tier.Paths[p]))
		}
		return strings.Join(s, ", ")
	}
	for _, tc := range []struct{ tier, want string }{
		{"anonymous", "global 60/1m fixed_window"},
		{"authenticated", "global 300/1m fixed_window, /a 30/1m fixed_window, /b 20/1m fixed_window"},
		{"pro", "global 1000/1m fixed_window, /a 30/1m fixed_window, /b 200/1m fixed_window, /c 100/1m fixed_window"},
		{"basic", "global 300/1m fixed_window, /a 30/1m fixed_window, /b 20/1m fixed_window"},
	} {
		if s := summary(got[tc.tier]); s != tc.want {
			t.Errorf("%s: %s\nwant %s", tc.tier, s, tc.want)
		}
	}
	if got["pro"].Paths["/a"] == c.Tiers["authenticated"].Paths["/a"] || got["pro"].Paths["/a"] == got["basic"].Paths["/a"] {
		t.Error("resolved rules share a *Rule")
	}
	if c.Tiers["pro"].Paths["/a"] != nil || got["pro"].Extends != "" {
		t.Error("ResolvedTiers modified the configuration or kept extends")
	}
	// The rule ids, inherited rules included, as the edge names them.
	ids, want := strings.Join(c.RuleIDs(), " "), "anonymous:global authenticated:/a authenticated:/b authenticated:global "+
		"basic:/a basic:/b basic:global pro:/a pro:/b pro:/c pro:global"
	if ids != want {
		t.Errorf("RuleIDs() = %s\nwant %s", ids, want)
	}
}

func TestTierFor(t *testing.T) {
	seed, err := Load(filepath.Join(examples, "seed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	minimal, err := Load(filepath.Join(examples, "minimal.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c             *Config
		authenticated bool
		plan, want    string
	}{
		{seed, false, "", "anonymous"},
		{seed, false, "pro", "anonymous"},
		{seed, true, "pro", "pro"},
		{seed, true, "enterprise", "enterprise"},
		{seed, true, "", "authenticated"},
		{seed, true, "gold", "authenticated"},
		{seed, true, "anonymous", "authenticated"},
		{minimal, true, "pro", "anonymous"},
	} {
		if got := tc.c.TierFor(tc.authenticated, tc.plan); got != tc.want {
			t.Errorf("TierFor(%v, %q) = %q, want %q", tc.authenticated, tc.plan, got, tc.want)
		}
	}
}

func TestTrustedPrefixes(t *testing.T) {
	id := Identity{TrustedProxies: []string{"10.1.2.3/8", "192.168.1.1", "::1", "bad", "::ffff:10.0.0.0/104"}}
	got := id.TrustedPrefixes()
	want := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("192.168.1.1/32"),
		netip.MustParsePrefix("::1/128"),
		netip.MustParsePrefix("10.0.0.0/8"),
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestTrustedPrefixesNAT64: a trusted proxy written in a /64 NAT64 prefix
// of the site is the IPv4 address or prefix it carries (RFC 6052's
// layout: the u octet, then the IPv4 address); one whose u octet is not
// zero is plain IPv6; the prefix itself is every IPv4 client behind the
// translator, and warned about as such.
func TestTrustedPrefixesNAT64(t *testing.T) {
	c := mustParse(t, "identity:\n  nat64_prefixes: [\"2001:db8:122:344::/64\"]\n  trusted_proxies:\n    - 2001:db8:122:344:a::/80\n    - \"2001:db8:122:344:c0:2:2100::\"\n    - 2001:db8:122:344:ff00::/72\n    - 2001:db8:122:344::/64\n"+anonymous)
	c.Defaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("192.0.2.33/32"),
		netip.MustParsePrefix("2001:db8:122:344:ff00::/72"),
		netip.MustParsePrefix("0.0.0.0/0"),
	}
	if got := c.Identity.TrustedPrefixes(); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	ws := c.Warnings()
	if len(ws) != 1 || !strings.HasPrefix(ws[0].Error(), `test.yaml:7: identity.trusted_proxies[3]: "2001:db8:122:344::/64" trusts every address`) {
		t.Errorf("warnings %v, want one that the /64 trusts every address", ws)
	}
}

// TestDecodeAndValidationErrors checks that Load reports decoding and
// validation errors together, without validating a value that failed to
// decode.
func TestDecodeAndValidationErrors(t *testing.T) {
	err := check(`
edge:
  listen: nonsense
tiers:
  anonymous:
    global: {limit: lots, window: 5m}
    paths:
      api: {limit: 5}
`)
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("got %v, want an ErrorList", err)
	}
	var got []string
	for _, e := range list {
		got = append(got, strconv.Itoa(e.Line)+" "+e.Key)
	}
	want := []string{"3 edge.listen", "6 tiers.anonymous.global.limit", "8 tiers.anonymous.paths.api"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q\n%v", got, want, err)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxFileSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "absent.yaml"), "absent.yaml"},
		{big, big + ": file is larger than 1 MiB"},
	} {
		if _, err := Load(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%s) = %v, want %q", tc.path, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(examples, "*.yaml"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		anonymous,
		"a: &a [*a]",
		"tiers: {anonymous: {global: &g {limit: 1}}, b: {global: *g, extends: anonymous}}",
		"tiers: {a: {extends: b}, b: {extends: a}}",
		"{",
		"- 1\n- 2",
		"edge: !!int 5",
		"identity: {jwt: {algorithm: HS256}, trusted_proxies: [\"fe80::1%eth0\"]}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.yaml")
		if err == nil {
			c.Defaults()
			if err = c.Validate(); err == nil {
				c.ResolvedTiers()
				return
			}
		}
		if !strings.Contains(err.Error(), "fuzz.yaml") {
			t.Fatalf("error does not name the file: %v", err)
		}
		var list ErrorList
		if !errors.As(err, &list) {
			t.Fatalf("error is not an ErrorList: %v", err)
		}
		for _, e := range list {
			if e.File != "fuzz.yaml" {
				t.Fatalf("error without the file: %#v", e)
			}
		}
	})
}

// mustParse decodes yaml as test.yaml or fails the test.
func mustParse(t *testing.T, yaml string) *Config {
	t.Helper()
	c, err := Parse([]byte(yaml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// check does what Load does with yaml as test.yaml.
func check(yaml string) error {
	_, err := load([]byte(yaml), "test.yaml")
	return err
}

// find returns the error about key, or fails the test.
func find(t *testing.T, err error, key string) *Error {
	t.Helper()
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("got %v, want an ErrorList", err)
	}
	for _, e := range list {
		if e.Key == key {
			return e
		}
	}
	t.Fatalf("no error about %q in:\n%v", key, err)
	return nil
}

// markedLine is the line of yaml that holds "# <-", or 0.
func markedLine(yaml string) int {
	for i, l := range strings.Split(yaml, "\n") {
		if strings.Contains(l, "# <-") {
			return i + 1
		}
	}
	return 0
}

// TestTrustedProxyWarnings: trusted ranges that take in every address, or
// more public space than any proxy fleet, are warned about with their
// line; private ranges and providers' published ranges are not.
func TestTrustedProxyWarnings(t *testing.T) {
	for _, c := range []struct {
		proxy string
		warn  string // "" for no warning
	}{
		{"0.0.0.0/0", "trusts every address"},
		{`"::/0"`, "trusts every address"},
		{`"::ffff:0.0.0.0/96"`, "trusts every address"},
		{`"64:ff9b::/96"`, "trusts every address"}, // every IPv4 client behind a translator
		{`"64:ff9b::10.0.0.0/104"`, ""},
		{"0.0.0.0/1", "is wider than /8"},
		{"1.0.0.0/7", "is wider than /8"},
		{"2000::/3", "is wider than /24"},
		{"2600::/12", "is wider than /24"},
		{"10.0.0.0/8", ""},
		{"13.32.0.0/15", ""},
		{"2600:9000::/28", ""},
		{"fc00::/7", ""},
		{"127.0.0.1", ""},
		{`"::1"`, ""},
	} {
		t.Run(c.proxy, func(t *testing.T) {
			c1 := mustParse(t, "identity:\n  trusted_proxies:\n    - 192.0.2.1\n    - "+c.proxy+"\n")
			c1.Defaults()
			ws := c1.Warnings()
			if c.warn == "" {
				if len(ws) != 0 {
					t.Errorf("warnings %v", ws)
				}
				return
			}
			want := "test.yaml:4: identity.trusted_proxies[1]: " + strconv.Quote(strings.Trim(c.proxy, `"`)) + " " + c.warn
			if len(ws) != 1 || !strings.HasPrefix(ws[0].Error(), want) {
				t.Errorf("warnings %v, want one starting %s", ws, want)
			}
		})
	}
}

// TestChoicesDecodeIntoTheirOwnersTypes: a choice is decoded once, into the
// type of the package it configures; the zero value is the default.
func TestChoicesDecodeIntoTheirOwnersTypes(t *testing.T) {
	c, err := Parse([]byte("decisions:\n  sync: batch\n  codec: json\n  kinesis:\n    codec: json\nstore:\n  redis:\n    clock: caller\npaths:\n  case: sensitive\n"+anonymous), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Decisions.Sync != seglog.SyncEveryBatch || c.Store.Redis.Clock != limitspec.CallerTime || c.Paths.Case != canonpath.Sensitive {
		t.Errorf("decoded %v, %v, %v", c.Decisions.Sync, c.Store.Redis.Clock, c.Paths.Case)
	}
	if c.Decisions.Codec != columnar.CodecJSON || c.Decisions.Kinesis.Codec != columnar.CodecJSON {
		t.Errorf("decoded codecs %v, %v", c.Decisions.Codec, c.Decisions.Kinesis.Codec)
	}
	d, err := Parse([]byte(anonymous), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d.Defaults()
	if d.Decisions.Sync != seglog.SyncInterval || d.Store.Redis.Clock != limitspec.ServerTime || d.Paths.Case != canonpath.Insensitive {
		t.Errorf("defaults %v, %v, %v", d.Decisions.Sync, d.Store.Redis.Clock, d.Paths.Case)
	}
	if d.Decisions.Codec != columnar.CodecArrow || d.Decisions.Kinesis.Codec != columnar.CodecArrow {
		t.Errorf("default codecs %v, %v", d.Decisions.Codec, d.Decisions.Kinesis.Codec)
	}
}

// TestRuleNamesFitTheReaders: the longest rule name a valid configuration
// makes (a tier name of the longest, ":", a path prefix of the longest
// canonical path) is one the readers of the decisions believe.
func TestRuleNamesFitTheReaders(t *testing.T) {
	if longest := decisions.MaxNameLen + 1 + canonpath.MaxLen; longest > decisions.MaxRuleLen {
		t.Errorf("a rule name of %d bytes, readers believe %d", longest, decisions.MaxRuleLen)
	}
}

// TestDerivedDefaultNotBlamed: a key the file leaves out, whose default is
// derived from another key set out of range, is not reported: the error is
// the key the user wrote (edge.client.max_connections_per_address defaults
// to at most edge.client.max_connections, and was reported as "-4 is not
// allowed; use 1 to 1" on the line of `client:`).
func TestDerivedDefaultNotBlamed(t *testing.T) {
	for _, tc := range []struct{ yaml, key string }{
		{"edge:\n  client:\n    max_connections: -4 # <-\n" + anonymous, "edge.client.max_connections"},
		{"edge:\n  client:\n    max_connections: 10000001 # <-\n" + anonymous, "edge.client.max_connections"},
		// decisions.batch and decisions.kinesis.batch default to at most the queue.
		{"edge:\n  decision_queue: -5 # <-\n" + anonymous, "edge.decision_queue"},
		// A token bucket's burst defaults to its limit.
		{"tiers:\n  anonymous:\n    global: {limit: -3, algorithm: token_bucket} # <-\n", "tiers.anonymous.global.limit"},
		{"tiers:\n  anonymous:\n    global: {limit: 2000000000, algorithm: token_bucket} # <-\n", "tiers.anonymous.global.limit"},
	} {
		var list ErrorList
		if !errors.As(check(tc.yaml), &list) {
			t.Fatalf("%q: no ErrorList", tc.yaml)
		}
		if want := markedLine(tc.yaml); len(list) != 1 || list[0].Key != tc.key || list[0].Line != want {
			t.Errorf("%q: got %v, want one error, %s on line %d", tc.yaml, list, tc.key, want)
		}
	}
	// Set beside it, the per-address cap is still checked on its own line.
	e := find(t, check("edge:\n  client:\n    max_connections: -4\n    max_connections_per_address: -1\n"+anonymous), "edge.client.max_connections_per_address")
	if e.Line != 4 || !strings.Contains(e.Error(), `"-1" is not allowed`) {
		t.Errorf("per-address cap: %v", e)
	}
}
