package assemble_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/assemble"
)

// TestReadInputs: what the configuration names outside itself is checked
// once, for config check and NewEdge alike: every problem is in the error,
// what merely looks wrong is a warning, and NewEdge refuses what
// ReadInputs refuses.
func TestReadInputs(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "allow.txt")
	if err := os.WriteFile(list, []byte("198.51.100.0/24\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const keys = "k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	const secret = "0123456789abcdef0123456789abcdef"
	challenge := "challenge: {enabled: true}\n"
	for _, c := range []struct {
		name, yaml string
		env        map[string]string
		errs       []string // substrings of the error; none for success
		warnings   []string // substrings of the warnings, in order
	}{
		{"nothing outside", "", nil, nil, nil},
		{"everything there", challenge + "lists: {allow_file: " + list + "}\nidentity:\n  jwt: {algorithm: HS256, key_env: JWT_KEY}\n",
			map[string]string{"JWT_KEY": secret, "RATEWARDEN_CHALLENGE_KEYS": keys, "RATEWARDEN_VERIFIER_SECRET": secret}, nil, nil},
		{"missing files and variables", "lists: {deny_file: " + filepath.Join(dir, "nope.txt") + "}\n" +
			"identity:\n  jwt: {algorithm: RS256, public_key_file: " + filepath.Join(dir, "nope.pem") + "}\n" +
			"decisions:\n  privacy: {users: hmac}\n", nil,
			[]string{"lists.deny_file: load list: open " + filepath.Join(dir, "nope.txt"), "identity.jwt.public_key_file: open " + filepath.Join(dir, "nope.pem"),
				"decisions.privacy: hmac needs a key in RATEWARDEN_PRIVACY_KEY"}, nil},
		{"unset HS256 key", "identity:\n  jwt: {algorithm: HS256, key_env: JWT_KEY}\n", nil, []string{"identity.jwt.key_env: the key in $JWT_KEY is 0 bytes"}, nil},
		{"short verifier secret", challenge, map[string]string{"RATEWARDEN_CHALLENGE_KEYS": keys, "RATEWARDEN_VERIFIER_SECRET": secret[:31]},
			[]string{"challenge.verifier_secret_env: RATEWARDEN_VERIFIER_SECRET: verifier secret of 31 bytes: want at least 32"}, nil},
		{"bad challenge keys", challenge, map[string]string{"RATEWARDEN_CHALLENGE_KEYS": "k1:short", "RATEWARDEN_VERIFIER_SECRET": secret},
			[]string{"challenge.keys_env: RATEWARDEN_CHALLENGE_KEYS: "}, nil},
		{"challenges without keys or secret", challenge, nil, nil,
			[]string{"RATEWARDEN_CHALLENGE_KEYS is not set", "RATEWARDEN_VERIFIER_SECRET is not set: the token endpoint is closed"}},
		{"every address trusted", "identity: {trusted_proxies: [\"0.0.0.0/0\", 10.0.0.0/8, \"::/0\"]}\n", nil, nil,
			[]string{`identity.trusted_proxies[0]: "0.0.0.0/0" trusts every address`, `identity.trusted_proxies[2]: "::/0" trusts every address`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := loadConfig(t, "edge: {upstream: ORIGIN}\n"+c.yaml+anonymous)
			getenv := func(k string) string { return c.env[k] }
			in, err := assemble.ReadInputs(cfg, getenv)
			for _, want := range c.errs {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error %v, want it to say %q", err, want)
				}
			}
			if len(c.errs) == 0 && err != nil {
				t.Fatalf("error %v", err)
			}
			// NewEdge refuses exactly what ReadInputs refuses.
			e, eerr := assemble.NewEdge(context.Background(), cfg, assemble.Options{Getenv: getenv})
			if (eerr == nil) != (err == nil) || (eerr != nil && eerr.Error() != err.Error()) {
				t.Errorf("NewEdge: %v; ReadInputs: %v", eerr, err)
			}
			if e != nil {
				e.Close(context.Background())
			}
			if err != nil {
				return
			}
			if len(in.Warnings) != len(c.warnings) {
				t.Fatalf("warnings %q, want %d", in.Warnings, len(c.warnings))
			}
			for i, w := range c.warnings {
				if !strings.Contains(in.Warnings[i], w) {
					t.Errorf("warning %d: %q, want it to say %q", i, in.Warnings[i], w)
				}
			}
		})
	}
}
