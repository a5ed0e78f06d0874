package config

import (
	"sort"
	"strconv"
	"strings"
)

// LambdaEdge is ratewarden at CloudFront's viewer request, the function
// `ratewarden lambda-edge build` writes. Lambda@Edge allows no environment
// variables, so the secrets the other shapes read from the environment
// (challenge.keys_env, identity.jwt.key_env) are read from SSM Parameter
// Store or Secrets Manager, once per cold start.
type LambdaEdge struct {
	Node          string `yaml:"node"`           // node name in decisions; default cloudfront
	SecretsSource string `yaml:"secrets_source"` // ssm (default) or secretsmanager
	SecretsRegion string `yaml:"secrets_region"` // default us-east-1, where Lambda@Edge functions live
	// ChallengeKeysParameter holds challenge.keys_env's value
	// ("kid:base64key,..."); default /ratewarden/challenge-keys.
	ChallengeKeysParameter string `yaml:"challenge_keys_parameter"`
	// JWTKeyParameter holds the HS256 key of identity.jwt; default
	// /ratewarden/jwt-key.
	JWTKeyParameter string `yaml:"jwt_key_parameter"`
	// TableRegion is the region of store.dynamodb.table the function
	// counts in; "" (the default) for the region running the function,
	// which then needs a replica of the table as a Global Table. Keys hold
	// the region, so regions count apart, as in the Go store.
	TableRegion string `yaml:"table_region"`
}

// SecretsSources are the allowed lambda_edge.secrets_source values; the
// first is the default.
var SecretsSources = []string{"ssm", "secretsmanager"}

func (le *LambdaEdge) defaults() {
	def(&le.Node, "cloudfront")
	def(&le.SecretsSource, SecretsSources[0])
	def(&le.SecretsRegion, "us-east-1")
	def(&le.ChallengeKeysParameter, "/ratewarden/challenge-keys")
	def(&le.JWTKeyParameter, "/ratewarden/jwt-key")
}

func (v *validator) lambdaEdge(le *LambdaEdge) {
	v.oneOf(key("lambda_edge", "secrets_source"), le.SecretsSource, SecretsSources)
	for _, p := range []struct{ k, v string }{{"challenge_keys_parameter", le.ChallengeKeysParameter}, {"jwt_key_parameter", le.JWTKeyParameter}} {
		if len(p.v) > 2048 || strings.ContainsAny(p.v, " \t\n") {
			v.report(key("lambda_edge", p.k), p.v, "is not allowed", "an SSM parameter name or secret id such as /ratewarden/challenge-keys")
		}
	}
}

// ValidateLambdaEdge checks what the viewer-request function cannot do
// that the other shapes can, after Validate: it counts fixed windows only
// (one conditional UpdateItem per hit; CloudFront sees no response end for
// concurrency limits), reads no files or lists table at run time (an RS256
// or ES256 key is compiled in; allow and deny lists are compiled in from
// their files, and it has no challenge list), records client addresses
// and user ids as they are (no decisions.privacy), and does not read
// request bodies (no edge.client.max_body_bytes).
func (c *Config) ValidateLambdaEdge() error {
	v := &validator{collector: collector{file: c.file}, lines: c.lines}
	for _, l := range []struct{ k, v string }{{"challenge_file", c.Lists.ChallengeFile}, {"table", c.Lists.Table}} {
		if l.v != "" {
			v.report(key("lists", l.k), l.v, "is not supported at CloudFront's edge", "lists.allow_file and lists.deny_file, compiled in at build")
		}
	}
	if c.Edge.Client.MaxBodyBytes != 0 {
		v.report(key("edge", "client", "max_body_bytes"), strconv.FormatInt(c.Edge.Client.MaxBodyBytes, 10), "is not supported at CloudFront's edge",
			"0: the viewer-request function does not read the body; cap it at the origin, or with an AWS WAF size constraint on the body")
	}
	if ps := c.Identity.NAT64Prefixes; len(ps) > 0 {
		v.report(key("identity", "nat64_prefixes"), strings.Join(ps, ", "), "is not supported at CloudFront's edge",
			"none: CloudFront states the viewer's own address, which no translator of yours has rewritten")
	}
	for _, p := range []struct{ k, v string }{{"addresses", c.Decisions.Privacy.Addresses}, {"users", c.Decisions.Privacy.Users}} {
		if p.v != "keep" {
			v.report(key("decisions", "privacy", p.k), p.v, "is not supported at CloudFront's edge", "keep")
		}
	}
	names := make([]string, 0, len(c.Tiers))
	for n := range c.Tiers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t := c.Tiers[n]
		if t.Global != nil {
			v.fixedWindow(key("tiers", n, "global", "algorithm"), t.Global)
		}
		prefixes := make([]string, 0, len(t.Paths))
		for p := range t.Paths {
			prefixes = append(prefixes, p)
		}
		sort.Strings(prefixes)
		for _, p := range prefixes {
			v.fixedWindow(key("tiers", n, "paths", p, "algorithm"), t.Paths[p])
		}
	}
	return v.err()
}

func (v *validator) fixedWindow(segs []string, r *Rule) {
	if r != nil && r.Algorithm != "fixed_window" {
		v.report(segs, r.Algorithm, "is not supported at CloudFront's edge", "fixed_window")
	}
}
