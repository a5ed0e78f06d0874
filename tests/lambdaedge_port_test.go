package tests

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/edge/canonpath"
	"github.com/ratewarden/ratewarden/internal/jsonstr"
)

// byteString writes s's bytes as characters U+0000 to U+00FF, the form the
// function's core works on; fromByteString reads it back.
func byteString(s string) string {
	r := make([]rune, len(s))
	for i := 0; i < len(s); i++ {
		r[i] = rune(s[i])
	}
	return string(r)
}

func fromByteString(t *testing.T, s string) string {
	t.Helper()
	var b []byte
	for _, r := range s {
		if r > 0xff {
			t.Fatalf("%q is not a byte string", s)
		}
		b = append(b, byte(r))
	}
	return string(b)
}

// hostile returns n strings built from pieces an attacker combines to get
// around a path rule or break an encoder: escapes of slashes, dots and
// percent signs in both cases, dot segments, backslashes, parameters,
// control characters, non-ASCII bytes valid and not.
func hostile(rng *rand.Rand, n int, pieces []string) []string {
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for range 1 + rng.IntN(8) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		out[i] = b.String()
	}
	return out
}

// TestLambdaEdgePortAgrees runs the function's ports of canonpath.Clean,
// canonpath.HasPrefix, netip address parsing and printing, and
// jsonstr.Append on thousands of hostile inputs and compares each answer
// with the Go original's: the conformance vectors pick cases, this looks
// for the ones nobody picked.
func TestLambdaEdgePortAgrees(t *testing.T) {
	fnDir := buildFunction(t, loadConfigFile(t, "../examples/seed.yaml"))
	rng := rand.New(rand.NewPCG(16, 2026))
	pathPieces := []string{"/", "/", "a", "api", "API", "reports", ".", "..", "%2e", "%2E", "%2f", "%2F", "%5c", "%25", "%252e", "%25%32%66",
		"\\", ";", ";x=1", "%3B", "%41", "%7e", "~", "%", "%g", "%0", "\x00", "%00", "\x7f", "%7F", " ", "%20", "é", "\xc3\xa9", "%C3%A9",
		"%c3", "\xc3", "%c0%ae", "\xed\xa0\x80", "%E2%84%AA", "%C4%B1", "\u212a", "?", "#", "@", ":", "'", "\"", "<", "[", "//"}
	var paths []string
	for _, p := range hostile(rng, 4000, pathPieces) {
		paths = append(paths, p, "/"+p)
	}
	paths = append(paths, "", "/", strings.Repeat("/a", 4096), "/"+strings.Repeat("a", canonpath.MaxLen))
	type prefixCase struct {
		p, prefix   string
		insensitive bool
	}
	var prefixes []prefixCase
	for _, p := range paths {
		cp, _, err := canonpath.Clean(p)
		if err != nil {
			continue
		}
		for _, prefix := range []string{"/api/reports", "/API/Reports/", "/api", "/a/", "/api/k", "/", "/ap%C3%A9"} {
			prefixes = append(prefixes, prefixCase{cp, canonpath.Fold(prefix), true}, prefixCase{cp, prefix, false})
		}
	}
	addrPieces := []string{"1", "0", "01", "255", "256", ".", ".", ":", ":", "::", "ffff", "FFFF", "db8", "2001", "%eth0", "%", "1.2.3.4", "::ffff:", "g", " "}
	addrs := append(hostile(rng, 4000, addrPieces), "::", "::1", "1::", "::ffff:1.2.3.4", "::1.2.3.4", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:1.2.3.4",
		"1:0:0:4:0:0:0:8", "2001:db8::1:0:0:1", "0:0:1:0:0:1:0:0", "fe80::1%eth0", "::ffff:0:0", "1.2.3.4", "01.2.3.4", "1.2.3.4.5")
	strs := append(hostile(rng, 4000, []string{"a", "\"", "\\", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "\u2028", "\u2029", "é", "\xff", "\xc3", "\xe6\x9d", "😀", "\xf0\x9f", "<&>", "\xed\xa0\x80", "\xf4\x90\x80\x80"}), "")

	in := map[string]any{}
	enc := func(ss []string) []string {
		out := make([]string, len(ss))
		for i, s := range ss {
			out[i] = byteString(s)
		}
		return out
	}
	in["paths"], in["addrs"], in["strings"] = enc(paths), addrs, enc(strs)
	var pc [][3]any
	for _, c := range prefixes {
		pc = append(pc, [3]any{byteString(c.p), byteString(c.prefix), c.insensitive})
	}
	in["prefixes"] = pc
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(program(t, "node", "Node.js 20"), "lambdaedge_port.mjs", fnDir)
	cmd.Stdin = bytes.NewReader(b)
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	var out struct {
		Clean []struct {
			Path string `json:"path"`
			Form int    `json:"form"`
			Err  string `json:"err"`
		} `json:"clean"`
		Prefix []bool   `json:"prefix"`
		Addrs  []string `json:"addrs"`
		JSON   []string `json:"json"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	bad := 0
	fail := func(format string, args ...any) {
		if bad++; bad <= 20 {
			t.Errorf(format, args...)
		}
	}
	for i, p := range paths {
		want, form, err := canonpath.Clean(p)
		got := out.Clean[i]
		switch {
		case err != nil && got.Err != err.Error():
			fail("Clean(%q): Go %v, port %+v", p, err, got)
		case err == nil && (got.Err != "" || fromByteString(t, got.Path) != want || got.Form != int(form)):
			fail("Clean(%q): Go %q form %v, port %+v", p, want, form, got)
		}
	}
	for i, c := range prefixes {
		cs := canonpath.Sensitive
		if c.insensitive {
			cs = canonpath.Insensitive
		}
		if want := canonpath.HasPrefix(c.p, c.prefix, cs); out.Prefix[i] != want {
			fail("HasPrefix(%q, %q, %v): Go %v, port %v", c.p, c.prefix, cs, want, out.Prefix[i])
		}
	}
	for i, s := range addrs {
		want := ""
		if a, err := netip.ParseAddr(s); err == nil {
			want = a.Unmap().String()
		}
		if out.Addrs[i] != want {
			fail("address %q: Go %q, port %q", s, want, out.Addrs[i])
		}
	}
	for i, s := range strs {
		if want := string(jsonstr.Append(nil, s)); fromByteString(t, out.JSON[i]) != want {
			fail("JSON of %q: Go %s, port %s", s, want, out.JSON[i])
		}
	}
	if bad > 0 {
		t.Errorf("%d disagreements in all", bad)
	}
	t.Logf("%d paths, %d prefix matches, %d addresses, %d strings agree", len(paths), len(prefixes), len(addrs), len(strs))
}
