package lambdaedge_test

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/edge/lambdaedge"
)

// parse loads yaml as the command does, from a file named edge.yaml.
func parse(t *testing.T, yaml string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestCompileRefuses: what the viewer-request function cannot do is a
// configuration error naming the file, the line, the key and what is
// allowed.
func TestCompileRefuses(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"sliding window", "tiers:\n  anonymous:\n    global: {limit: 60}\n    paths:\n      /api/x: {limit: 5, algorithm: sliding_window}\n",
			`edge.yaml:5: tiers.anonymous.paths./api/x.algorithm: "sliding_window" is not supported at CloudFront's edge; use fixed_window`},
		{"concurrency", "tiers:\n  anonymous:\n    global: {limit: 60, algorithm: concurrency}\n",
			`edge.yaml:3: tiers.anonymous.global.algorithm: "concurrency" is not supported at CloudFront's edge; use fixed_window`},
		{"challenge list", "challenge: {enabled: true}\nlists:\n  challenge_file: /lists/challenge.txt\ntiers:\n  anonymous:\n    global: {limit: 60}\n",
			`edge.yaml:3: lists.challenge_file: "/lists/challenge.txt" is not supported at CloudFront's edge; use lists.allow_file and lists.deny_file, compiled in at build`},
		{"lists table", "lists:\n  table: ratewarden-lists\ntiers:\n  anonymous:\n    global: {limit: 60}\n",
			`edge.yaml:2: lists.table: "ratewarden-lists" is not supported at CloudFront's edge; use lists.allow_file and lists.deny_file, compiled in at build`},
		{"address privacy", "decisions:\n  privacy:\n    addresses: truncate\ntiers:\n  anonymous:\n    global: {limit: 60}\n",
			`edge.yaml:3: decisions.privacy.addresses: "truncate" is not supported at CloudFront's edge; use keep`},
		{"user privacy", "decisions:\n  privacy: {users: hmac}\ntiers:\n  anonymous:\n    global: {limit: 60}\n",
			`edge.yaml:2: decisions.privacy.users: "hmac" is not supported at CloudFront's edge; use keep`},
		{"body cap", "edge:\n  client:\n    max_body_bytes: 1048576\ntiers:\n  anonymous:\n    global: {limit: 60}\n",
			`edge.yaml:3: edge.client.max_body_bytes: "1048576" is not supported at CloudFront's edge; use 0: the viewer-request function does not read the body; cap it at the origin, or with an AWS WAF size constraint on the body`},
		{"NAT64 prefixes", "identity:\n  nat64_prefixes: [\"2001:db8:64::/96\"]\ntiers:\n  anonymous:\n    global: {limit: 60}\n",
			`edge.yaml:2: identity.nat64_prefixes: "2001:db8:64::/96" is not supported at CloudFront's edge; use none: CloudFront states the viewer's own address, which no translator of yours has rewritten`},
		{"missing list file", "lists:\n  deny_file: /nonexistent/deny.txt\ntiers:\n  anonymous:\n    global: {limit: 60}\n", "lists.deny_file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := lambdaedge.Compile(parse(t, c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one with %q", err, c.want)
			}
		})
	}
}

// TestBuild: the package holds the entry point, its modules and the
// compiled configuration, zipped well under Lambda@Edge's 1 MB, and the
// same configuration builds the same zip.
func TestBuild(t *testing.T) {
	cfg := parse(t, "challenge: {enabled: true}\nidentity:\n  jwt: {algorithm: HS256, key_env: K}\ntiers:\n  anonymous:\n    global: {limit: 60}\n    paths:\n      /API/Reports: {limit: 5}\n")
	a, err := lambdaedge.Build(cfg, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := lambdaedge.Build(cfg, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	za, _ := os.ReadFile(a.Zip)
	zb, _ := os.ReadFile(b.Zip)
	if !bytes.Equal(za, zb) || a.ZipBytes > lambdaedge.MaxZipBytes/10 {
		t.Fatalf("zips of %d and %d bytes, equal %v; want equal and under a tenth of %d", a.ZipBytes, b.ZipBytes, bytes.Equal(za, zb), lambdaedge.MaxZipBytes)
	}
	zr, err := zip.NewReader(bytes.NewReader(za), int64(len(za)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	if got := strings.Join(names, " "); got != "config.json core.mjs handler.mjs index.mjs store.mjs" {
		t.Errorf("zip holds %s", got)
	}
	conf, err := os.ReadFile(filepath.Join(a.Dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"match": "/api/reports"`, `"challengeKeys": "/ratewarden/challenge-keys"`, `"jwtKey": "/ratewarden/jwt-key"`, `"region": "us-east-1"`} {
		if !bytes.Contains(conf, []byte(want)) {
			t.Errorf("config.json lacks %s:\n%s", want, conf)
		}
	}
	if bytes.Contains(conf, []byte("RATEWARDEN_CHALLENGE_KEYS")) {
		t.Error("config.json names an environment variable; Lambda@Edge has none")
	}
}
