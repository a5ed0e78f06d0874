package tests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// TestJSONSchemaAjv checks decisions/decision.schema.json with ajv, a
// validator that is not ours (tests/jsonschema.js, formats asserted): every
// generated decision is valid, and every wrong object is refused, addresses
// that are not addresses among them.
func TestJSONSchemaAjv(t *testing.T) {
	node := program(t, "node", "tests/run's prerequisites")
	file(t, "node_modules/ajv/package.json", "npm ci --prefix tests")
	file(t, "node_modules/ajv-formats/package.json", "npm ci --prefix tests")

	var good []byte
	for _, d := range decisiontest.NewGenerator(14, time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)).Batch(5022) {
		good = decisions.AppendJSON(good, &d)
		good = append(good, '\n')
	}
	valid := `{"v":1,"kind":"decision","time":"2026-11-30T03:00:01Z","node":"edge-1","client_ip":"203.0.113.7","outcome":"allow"}`
	with := func(old, new string) string { return strings.Replace(valid, old, new, 1) }
	feedback := `{"v":1,"kind":"feedback","time":"2026-11-30T03:00:01Z","node":"aggregator-1","list":"deny","action":"add","target":"203.0.113.0/24"}`
	cases := []struct {
		name, line string
		ok         bool
	}{
		{"minimal decision", valid, true},
		{"IPv6", with("203.0.113.7", "2001:db8::7"), true},
		{"IPv4-mapped IPv6", with("203.0.113.7", "::ffff:203.0.113.7"), true},
		{"pseudonym", with("203.0.113.7", "fd12:3456:789a:bcde:f012:3456:789a:bcde"), true},
		{"unknown address", with("203.0.113.7", ""), true},
		{"feedback on a CIDR", feedback, true},
		{"feedback on a user", strings.Replace(feedback, "203.0.113.0/24", "user:u_1", 1), true},
		{"no version", with(`"v":1,`, ""), false},
		{"unknown kind", with(`"decision"`, `"verdict"`), false},
		{"time not RFC 3339", with("2026-11-30T03:00:01Z", "yesterday"), false},
		{"unknown outcome", with(`"allow"`, `"maybe"`), false},
		{"count a string", with(`"outcome"`, `"count":"6","outcome"`), false},
		{"client_ip not an address", with("203.0.113.7", "not-an-ip"), false},
		{"client_ip out of range", with("203.0.113.7", "999.0.113.7"), false},
		{"client_ip with a zone", with("203.0.113.7", "fe80::1%eth0"), false},
		{"client_ip with a port", with("203.0.113.7", "203.0.113.7:443"), false},
		{"target not an address", strings.Replace(feedback, "203.0.113.0/24", "everyone", 1), false},
		{"drops at the cap", `{"v":1,"kind":"drops","time":"2026-11-30T03:00:01Z","node":"edge-1","dropped":1099511627776}`, true},
		{"drops over the cap", `{"v":1,"kind":"drops","time":"2026-11-30T03:00:01Z","node":"edge-1","dropped":1099511627777}`, false},
	}
	lines := bytes.Clone(good)
	for _, c := range cases {
		lines = append(lines, c.line+"\n"...)
	}
	in := filepath.Join(t.TempDir(), "decisions.jsonl")
	if err := os.WriteFile(in, lines, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, "jsonschema.js", "../decisions/decision.schema.json", in).CombinedOutput()
	if err != nil {
		t.Fatalf("ajv: %v\n%s", err, out)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	n := bytes.Count(good, []byte("\n"))
	if len(got) != n+len(cases) {
		t.Fatalf("ajv answered %d lines for %d", len(got), n+len(cases))
	}
	invalid := 0
	for i, g := range got[:n] {
		if g != "ok" && invalid < 5 {
			t.Errorf("generated decision %d refused: %s\n%s", i, g, strings.SplitN(string(good), "\n", i+2)[i])
		}
		if g != "ok" {
			invalid++
		}
	}
	if invalid > 0 {
		t.Errorf("%d of %d generated decisions refused", invalid, n)
	}
	for i, c := range cases {
		if g := got[n+i]; (g == "ok") != c.ok {
			t.Errorf("%s: ajv says %s, want valid=%v\n%s", c.name, g, c.ok, c.line)
		}
	}
}
