// Package lambdaedge builds ratewarden for CloudFront's viewer request: a
// Lambda@Edge function for the Node.js 20 runtime, with the configuration
// compiled in, written by `ratewarden lambda-edge build`.
//
// Lambda@Edge runs Node.js or Python only, allows no environment
// variables, and caps a viewer-request package at 1 MB zipped. The
// function is therefore a JavaScript port of the edge's decision path
// (js/core.mjs: canonical paths, identity and JWTs, tiers and rules, the
// breaker and its local fallback, challenge tokens, responses, the
// decision event's JSON), counting in the Go DynamoDB store's table with
// the same keys and conditional UpdateItem (js/store.mjs), with the AWS SDK
// for JavaScript v3 that the runtime provides. The port is held to the Go
// core by the conformance vectors of testdata/vectors.json, which the Go
// Limiter and the built function both run and must agree on byte for byte.
//
// Build writes the function's files (index.mjs, its modules, config.json)
// into a directory and zips them. config.json is Compile's output: the
// rules as the Go Limiter compiles them (edge.Compile), the identity, list
// and forwarding settings, and the names of the secrets, which the function
// reads from SSM Parameter Store or Secrets Manager once per cold start.
package lambdaedge

import (
	"archive/zip"
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/textproto"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/edge"
	"github.com/ratewarden/ratewarden/edge/identity"
	"github.com/ratewarden/ratewarden/edge/lists"
	"github.com/ratewarden/ratewarden/internal/clientip"
)

//go:embed js/*.mjs
var sources embed.FS

// MaxZipBytes is Lambda@Edge's limit on a viewer-request package, zipped.
const MaxZipBytes = 1 << 20

// MaxKeys bounds the keys a warm container keeps, in its local fallback
// counters and in its over-limit cache each (store.max_keys and
// store.sync.max_keys, if lower): a viewer-request function has 128 MB.
const MaxKeys = 50_000

// Config is the function's compiled configuration, config.json.
type Config struct {
	Version         int             `json:"version"`
	Node            string          `json:"node"`
	RequestIDHeader string          `json:"requestIdHeader"` // lower case
	PathCase        string          `json:"pathCase"`
	RejectAmbiguous bool            `json:"rejectAmbiguous"`
	FailClosed      []string        `json:"failClosed"`
	Tiers           map[string]Tier `json:"tiers"`
	Identity        Identity        `json:"identity"`
	Store           Store           `json:"store"`
	Challenge       Challenge       `json:"challenge"`
	Forward         Forward         `json:"forward"`
	Lists           map[string]List `json:"lists"`
	Secrets         Secrets         `json:"secrets"`
}

// Tier is a compiled tier.
type Tier struct {
	Global Rule   `json:"global"`
	Paths  []Path `json:"paths"` // longest prefix first
}

// Path is a path rule.
type Path struct {
	Prefix string `json:"prefix"`
	Match  string `json:"match"`
	Rule   Rule   `json:"rule"`
}

// Rule is a compiled rule (edge.RulePlan).
type Rule struct {
	ID        string `json:"id"`
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	WindowNs  int64  `json:"windowNs"`
	Capacity  int64  `json:"capacity"`
	Challenge bool   `json:"challenge"`
	Ceiling   int64  `json:"ceiling"`
	Shadow    bool   `json:"shadow"`
	MaxCount  int64  `json:"maxCount"`
	Local     struct {
		Limit    int64 `json:"limit"`
		MaxCount int64 `json:"maxCount"`
	} `json:"local"`
}

// Identity is the identity section, resolved.
type Identity struct {
	Trusted    []string `json:"trusted"` // masked prefixes
	CloudFront bool     `json:"cloudFront"`
	IPHeader   string   `json:"ipHeader"`   // lower case
	UserHeader string   `json:"userHeader"` // lower case
	PlanHeader string   `json:"planHeader"` // lower case
	IPv6Bits   int      `json:"ipv6Bits"`
	JWT        *JWT     `json:"jwt,omitempty"`
}

// JWT is the bearer-token verifier's settings; an HS256 key is a secret.
type JWT struct {
	Algorithm    string `json:"algorithm"`
	PublicKeyPEM string `json:"publicKeyPEM,omitempty"`
	UserClaim    string `json:"userClaim"`
	PlanClaim    string `json:"planClaim"`
	LeewayNs     int64  `json:"leewayNs"`
	RequireExp   bool   `json:"requireExp"`
	Issuer       string `json:"issuer"`
	Audience     string `json:"audience"`
}

// Store is the counter store: store.dynamodb.table.
type Store struct {
	Table       string  `json:"table"`
	Region      string  `json:"region"` // "" for the region running the function
	TimeoutMs   float64 `json:"timeoutMs"`
	MaxAttempts int     `json:"maxAttempts"`
	Breaker     struct {
		Failures   int   `json:"failures"`
		CooldownNs int64 `json:"cooldownNs"`
	} `json:"breaker"`
	MaxKeys   int `json:"maxKeys"`   // of the local fallback counters
	CacheKeys int `json:"cacheKeys"` // of the over-limit cache
}

// Challenge is the challenge section.
type Challenge struct {
	Enabled bool   `json:"enabled"`
	Page    string `json:"page"`
	// PageMatch is the prefix, in match form, of the requests for the
	// page, which are never challenged (edge.Plan.ChallengePage).
	PageMatch string `json:"pageMatch"`
	Param     string `json:"param"`
	Header    string `json:"header"` // lower case
	Cookie    string `json:"cookie"`
}

// Forward is what a passed request's headers become.
type Forward struct {
	Strip    []string `json:"strip"` // lower case
	SetUser  bool     `json:"setUser"`
	User     string   `json:"user"` // canonical
	Plan     string   `json:"plan"` // canonical
	Tier     string   `json:"tier,omitempty"`
	Decision string   `json:"decision,omitempty"`
}

// List is an allow or deny list.
type List struct {
	Prefixes []string `json:"prefixes"`
	Users    []string `json:"users"`
}

// Secrets names where the secrets are.
type Secrets struct {
	Source string            `json:"source"` // ssm or secretsmanager
	Region string            `json:"region"`
	Names  map[string]string `json:"names"` // challengeKeys, jwtKey → parameter name or secret id
}

// Compile compiles cfg (after Defaults and Validate) into the function's
// configuration. It reads the allow and deny list files and an RS256 or
// ES256 public key file, whose contents it compiles in.
func Compile(cfg *config.Config) (*Config, error) {
	if err := cfg.ValidateLambdaEdge(); err != nil {
		return nil, err
	}
	plan, err := edge.Compile(cfg)
	if err != nil {
		return nil, err
	}
	// identity.New checks the identity section as every shape does; the
	// HS256 key is read at run time, so a placeholder stands in for it.
	if _, err := identity.New(cfg.Identity, func(string) string { return strings.Repeat("k", 32) }); err != nil {
		return nil, err
	}
	le := cfg.LambdaEdge
	c := &Config{
		Version: 1, Node: le.Node, RequestIDHeader: strings.ToLower(cfg.Edge.RequestIDHeader),
		PathCase: cfg.Paths.Case.String(), RejectAmbiguous: cfg.Paths.Ambiguous != "rewrite",
		FailClosed: nonNil(plan.FailClosed), Tiers: map[string]Tier{}, Lists: map[string]List{},
	}
	for _, t := range plan.Tiers {
		ct := Tier{Global: rule(t.Global), Paths: []Path{}}
		for _, p := range t.Paths {
			ct.Paths = append(ct.Paths, Path{Prefix: p.Prefix, Match: p.Match, Rule: rule(p.Rule)})
		}
		c.Tiers[t.Name] = ct
	}
	if c.Identity, err = compileIdentity(cfg.Identity); err != nil {
		return nil, err
	}
	s := cfg.Store
	c.Store = Store{Table: s.DynamoDB.Table, Region: le.TableRegion, TimeoutMs: float64(s.Timeout) / float64(time.Millisecond),
		MaxAttempts: 3, MaxKeys: min(s.MaxKeys, MaxKeys), CacheKeys: min(s.Sync.MaxKeys, MaxKeys)}
	c.Store.Breaker.Failures, c.Store.Breaker.CooldownNs = s.Breaker.Failures, int64(s.Breaker.Cooldown)
	ch := cfg.Challenge
	c.Challenge = Challenge{Enabled: ch.Enabled, Page: ch.Page, PageMatch: plan.ChallengePage, Param: ch.Param, Header: strings.ToLower(ch.Header), Cookie: ch.Cookie}
	c.Forward = compileForward(cfg)
	for _, l := range []struct{ name, file string }{{lists.Allow, cfg.Lists.AllowFile}, {lists.Deny, cfg.Lists.DenyFile}} {
		if c.Lists[l.name], err = compileList(l.name, l.file); err != nil {
			return nil, err
		}
	}
	c.Secrets = Secrets{Source: le.SecretsSource, Region: le.SecretsRegion, Names: map[string]string{}}
	if ch.Enabled {
		c.Secrets.Names["challengeKeys"] = le.ChallengeKeysParameter
	}
	if c.Identity.JWT != nil && c.Identity.JWT.Algorithm == "HS256" {
		c.Secrets.Names["jwtKey"] = le.JWTKeyParameter
	}
	return c, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func rule(r edge.RulePlan) Rule {
	out := Rule{ID: r.ID, Algorithm: r.Algorithm, Limit: r.Limit, WindowNs: int64(r.Window), Capacity: r.Capacity,
		Challenge: r.Challenge, Ceiling: r.Ceiling, Shadow: r.Shadow, MaxCount: r.MaxCount}
	out.Local.Limit, out.Local.MaxCount = r.LocalLimit, r.LocalMaxCount
	return out
}

func compileIdentity(id config.Identity) (Identity, error) {
	out := Identity{Trusted: []string{}, IPv6Bits: id.IPv6Prefix}
	if out.IPv6Bits == 0 {
		out.IPv6Bits = identity.DefaultIPv6Prefix
	}
	for _, s := range id.TrustedProxies {
		// As identity.New reads them, into masked prefixes; it has checked them.
		p, err := clientip.ParseEntry(strings.TrimSpace(s))
		if err != nil {
			return out, fmt.Errorf("identity.trusted_proxies: %q: %w", s, err)
		}
		out.Trusted = append(out.Trusted, p.String())
	}
	h := strings.ToLower(strings.TrimSpace(id.ClientIPHeader))
	out.CloudFront = h == "cloudfront-viewer-address"
	out.IPHeader = cmpOr(h, identity.DefaultClientIPHeader)
	out.UserHeader = strings.ToLower(cmpOr(strings.TrimSpace(id.UserHeader), identity.DefaultUserHeader))
	out.PlanHeader = strings.ToLower(cmpOr(strings.TrimSpace(id.PlanHeader), identity.DefaultPlanHeader))
	if j := id.JWT; j != nil {
		leeway := identity.DefaultLeeway
		if j.Leeway != nil {
			leeway = *j.Leeway
		}
		cj := &JWT{Algorithm: strings.ToUpper(strings.TrimSpace(j.Algorithm)), UserClaim: cmpOr(j.UserClaim, identity.DefaultUserClaim),
			PlanClaim: cmpOr(j.PlanClaim, identity.DefaultPlanClaim), LeewayNs: int64(leeway),
			RequireExp: j.RequireExp == nil || *j.RequireExp, Issuer: j.Issuer, Audience: j.Audience}
		if cj.Algorithm != "HS256" {
			pem, err := os.ReadFile(j.PublicKeyFile)
			if err != nil {
				return out, fmt.Errorf("identity.jwt.public_key_file: %w", err)
			}
			cj.PublicKeyPEM = string(pem)
		}
		out.JWT = cj
	}
	return out, nil
}

func compileForward(cfg *config.Config) Forward {
	key := textproto.CanonicalMIMEHeaderKey
	user := key(cmpOr(strings.TrimSpace(cfg.Identity.UserHeader), identity.DefaultUserHeader))
	plan := key(cmpOr(strings.TrimSpace(cfg.Identity.PlanHeader), identity.DefaultPlanHeader))
	f := Forward{SetUser: cfg.Forward.User == nil || *cfg.Forward.User, User: user, Plan: plan}
	if cfg.Forward.TierHeader != "" {
		f.Tier = key(cfg.Forward.TierHeader)
	}
	if cfg.Forward.DecisionHeader != "" {
		f.Decision = key(cfg.Forward.DecisionHeader)
	}
	strip := []string{user, plan}
	strip = append(strip, config.ClientIPHeaders...)
	strip = append(strip, "Forwarded", "X-Forwarded-Host", "X-Forwarded-Proto")
	strip = append(strip, cfg.Forward.StripHeaders...)
	for _, h := range strip {
		if l := strings.ToLower(h); !slices.Contains(f.Strip, l) {
			f.Strip = append(f.Strip, l)
		}
	}
	return f
}

func compileList(name, file string) (List, error) {
	out := List{Prefixes: []string{}, Users: []string{}}
	if file == "" {
		return out, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return out, fmt.Errorf("lists.%s_file: %w", name, err)
	}
	defer f.Close()
	l, err := lists.Parse(f, file)
	if err != nil {
		return out, fmt.Errorf("lists.%s_file: %w", name, err)
	}
	prefixes, users := l.Targets(time.Now())
	for _, p := range prefixes {
		out.Prefixes = append(out.Prefixes, p.String())
	}
	out.Users = append(out.Users, users...)
	return out, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Files returns the function's files: the JavaScript sources and
// config.json, by name.
func Files(c *Config) (map[string][]byte, error) {
	files := map[string][]byte{}
	err := fs.WalkDir(sources, "js", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := sources.ReadFile(p)
		files[filepath.Base(p)] = b
		return err
	})
	if err != nil {
		return nil, err
	}
	cj, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, err
	}
	files["config.json"] = append(cj, '\n')
	return files, nil
}

// Result is what Build wrote.
type Result struct {
	Dir      string // the function's files
	Zip      string // the deployment package
	ZipBytes int
}

// Build compiles cfg and writes the function into out: out/function/ with
// index.mjs (the handler, index.handler), its modules and config.json, and
// out/function.zip, the package to upload. It fails if the zip exceeds
// MaxZipBytes.
func Build(cfg *config.Config, out string) (Result, error) {
	c, err := Compile(cfg)
	if err != nil {
		return Result{}, err
	}
	files, err := Files(c)
	if err != nil {
		return Result{}, fmt.Errorf("build lambda@edge function: %w", err)
	}
	dir := filepath.Join(out, "function")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Result{}, fmt.Errorf("build lambda@edge function: %w", err)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), files[n], 0o644); err != nil {
			return Result{}, fmt.Errorf("build lambda@edge function: %w", err)
		}
		// A fixed time keeps the package byte-for-byte reproducible.
		w, err := zw.CreateHeader(&zip.FileHeader{Name: n, Method: zip.Deflate, Modified: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			return Result{}, fmt.Errorf("build lambda@edge function: %w", err)
		}
		if _, err := w.Write(files[n]); err != nil {
			return Result{}, fmt.Errorf("build lambda@edge function: %w", err)
		}
	}
	if err := zw.Close(); err != nil {
		return Result{}, fmt.Errorf("build lambda@edge function: %w", err)
	}
	if zb.Len() > MaxZipBytes {
		return Result{}, fmt.Errorf("build lambda@edge function: package of %d bytes zipped; Lambda@Edge allows %d for viewer requests", zb.Len(), MaxZipBytes)
	}
	zipPath := filepath.Join(out, "function.zip")
	if err := os.WriteFile(zipPath, zb.Bytes(), 0o644); err != nil {
		return Result{}, fmt.Errorf("build lambda@edge function: %w", err)
	}
	return Result{Dir: dir, Zip: zipPath, ZipBytes: zb.Len()}, nil
}
