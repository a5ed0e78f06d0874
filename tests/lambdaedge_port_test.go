package tests

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ratewarden/ratewarden/edge/challenge"
	"github.com/ratewarden/ratewarden/edge/identity"
	"github.com/ratewarden/ratewarden/internal/canonpath"
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
		"%c3", "\xc3", "%c0%ae", "\xed\xa0\x80", "%E2%84%AA", "%C4%B1", "\u212a", "?", "#", "@", ":", "'", "\"", "<", "[", "//",
		"*", "%2A", "%2a", "%3A", "%3a", "%40", "%24", "%3D", "x"}
	var paths []string
	for _, p := range hostile(rng, 4000, pathPieces) {
		paths = append(paths, p, "/"+p)
	}
	paths = append(paths, "", "/", strings.Repeat("/a", 4096), "/"+strings.Repeat("a", canonpath.MaxLen),
		"/"+strings.Repeat("#", 2800), "/"+strings.Repeat("#", (canonpath.MaxLen-1)/3))
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
		for _, prefix := range []string{"/api/reports", "/API/Reports/", "/api", "/a/", "/api/k", "/", "/ap%C3%A9", "/api/x%2A", "/a:x", "/A%3Ax/", "/%40@"} {
			prefixes = append(prefixes, prefixCase{cp, canonpath.MatchForm(prefix, canonpath.Insensitive), true},
				prefixCase{cp, canonpath.MatchForm(prefix, canonpath.Sensitive), false})
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
	fail, done := runPort(t, fnDir, in, &out)
	defer done()
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
	t.Logf("%d paths, %d prefix matches, %d addresses, %d strings agree", len(paths), len(prefixes), len(addrs), len(strs))
}

// TestLambdaEdgeIdentityPortAgrees compares the function's ports of the
// identity resolver (trusted proxies, X-Forwarded-For, user headers, JWTs),
// the challenge-token verifier and the Cookie header's reading with the Go
// originals on hostile inputs: what a viewer sends is all it controls.
func TestLambdaEdgeIdentityPortAgrees(t *testing.T) {
	cfg := conformanceConfig(t, "", "unused")
	fnDir := buildFunction(t, cfg)
	compiled := mustCompile(t, cfg)
	rng := rand.New(rand.NewPCG(7, 16))
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	res, err := identity.New(cfg.Identity, vectorEnv)
	if err != nil {
		t.Fatal(err)
	}
	hs := []byte(vectorJWTKey)
	sign := func(claims jwt.MapClaims, m jwt.SigningMethod, key any) string {
		s, err := jwt.NewWithClaims(m, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	exp := now.Add(time.Hour).Unix()
	tokens := []string{
		sign(jwt.MapClaims{"sub": "alice", "exp": exp}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": "bob", "plan": "pro", "exp": exp}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": "carol", "exp": now.Add(-10 * time.Second).Unix()}, jwt.SigningMethodHS256, hs), // within the leeway
		sign(jwt.MapClaims{"sub": "carol", "exp": now.Add(-time.Minute).Unix()}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": "dave", "exp": float64(exp) + 0.75}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": "erin", "exp": strconv.FormatInt(exp, 10)}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": "frank"}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": "gina", "exp": exp, "nbf": now.Add(time.Minute).Unix()}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": "gina", "exp": exp, "nbf": now.Add(10 * time.Second).Unix()}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": "", "exp": exp}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": strings.Repeat("u", 257), "exp": exp}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": 42, "exp": exp}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": "hank", "plan": 7, "exp": exp}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": "ivy", "plan": nil, "exp": exp}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": "jo", "exp": exp}, jwt.SigningMethodHS384, hs),
		sign(jwt.MapClaims{"sub": "kim", "exp": exp}, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType),
		sign(jwt.MapClaims{"sub": "lee", "exp": exp}, jwt.SigningMethodHS256, []byte("some-other-key-of-32-bytes-long!")),
		sign(jwt.MapClaims{"sub": "Köln\u2028", "exp": exp}, jwt.SigningMethodHS256, hs),
		// Ids the lists could not hold as they are (identity.Believes).
		sign(jwt.MapClaims{"sub": "\u00a0victim", "exp": exp}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": "mallory\x01", "exp": exp}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": "mallory\u0085x", "exp": exp}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": "mallory\x7f", "exp": exp}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": "mallory\ufffd", "exp": exp}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": "\ufeffbom", "exp": exp}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": "Köln\u3000", "exp": exp}, jwt.SigningMethodHS256, hs),
		sign(jwt.MapClaims{"sub": "José García", "exp": exp}, jwt.SigningMethodHS256, hs),
	}
	mutate := func(s string) string {
		b := []byte(s)
		switch rng.IntN(6) {
		case 0:
			b[rng.IntN(len(b))] ^= 1
		case 1:
			b = b[:rng.IntN(len(b))]
		case 2:
			b = append(b, "="...)
		case 3:
			b = append(b, '.')
		case 4:
			return strings.Replace(s, ".", "..", 1)
		default:
			return strings.ReplaceAll(strings.ReplaceAll(s, "-", "+"), "_", "/")
		}
		return string(b)
	}
	for _, tk := range slices.Clone(tokens) {
		for range 20 {
			tokens = append(tokens, mutate(tk))
		}
	}
	authValues := []string{"Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "Bearerx abc", "bearer\tabc", "BEARER  abc  "}
	for _, tk := range tokens {
		scheme := []string{"Bearer ", "bearer ", "BEARER\t", "Bearer  "}[rng.IntN(4)]
		authValues = append(authValues, scheme+tk+[]string{"", " ", "\t"}[rng.IntN(3)])
	}
	peers := []string{"203.0.113.7", "10.1.2.3", "::ffff:10.1.2.3", "2001:db8::7", "fe80::1%eth0", "", "garbage", "10.0.0.1:8080", "[10.0.0.1]:80", "[2001:db8::1]:443"}
	xffPieces := []string{"1.2.3.4", "10.0.0.5", "10.9.9.9", " ", ",", ", ", "[2001:db8::1]:80", "2001:db8::2", "unknown", "01.2.3.4", "1.2.3.4:80", "::ffff:1.2.3.4", "fe80::1%eth0", "\t"}
	type identityCase struct {
		Peer    string              `json:"peer"`
		Headers map[string][]string `json:"headers"`
	}
	// User header values, hostile ones among them: white space, control
	// characters and bytes that are not UTF-8 (identity.Believes).
	userHeaders := []string{"zoe", " zoe ", "", strings.Repeat("z", 257), "z\u00e9", "\u00a0zoe", "zoe\u2028",
		"zoe\x7f", "zoe\x1b[2J", "zoe\xff", "z\xc3", "\ufeffzoe", "zo e"}
	var cases []identityCase
	for i := range 3000 {
		h := map[string][]string{}
		if rng.IntN(2) == 0 {
			for range 1 + rng.IntN(2) {
				h["x-forwarded-for"] = append(h["x-forwarded-for"], strings.Join(hostile(rng, 1, xffPieces), ""))
			}
		}
		if rng.IntN(3) == 0 {
			for range 1 + rng.IntN(2) {
				h["x-user-id"] = append(h["x-user-id"], userHeaders[rng.IntN(len(userHeaders))])
			}
		}
		if rng.IntN(3) == 0 {
			h["x-user-plan"] = append(h["x-user-plan"], []string{"pro", " pro", "", strings.Repeat("p", 257)}[rng.IntN(4)])
		}
		if i%2 == 0 {
			h["authorization"] = []string{authValues[rng.IntN(len(authValues))]}
		}
		cases = append(cases, identityCase{Peer: peers[rng.IntN(len(peers))], Headers: h})
	}

	keys, err := challenge.ParseKeys(vectorChallengeKeys)
	if err != nil {
		t.Fatal(err)
	}
	type tokenCase struct {
		Token   string `json:"token"`
		Subject string `json:"subject"`
	}
	var tcs []tokenCase
	subjects := []string{"ip:203.0.113.7", "ip:2001:db8::", "user:alice", "ip:", "user:K\u00f6ln"}
	for i := range 3000 {
		subj := subjects[rng.IntN(len(subjects))]
		tok := keys.Issue(subj, now, time.Duration(rng.IntN(3600)-600)*time.Second)
		if i%3 != 0 {
			tok = mutate(tok)
		}
		if i%7 == 0 {
			subj = subjects[rng.IntN(len(subjects))]
		}
		tcs = append(tcs, tokenCase{Token: tok, Subject: subj})
	}
	tcs = append(tcs, tokenCase{"v1.k1.01." + strings.Repeat("A", 43), "ip:"}, tokenCase{"v1.k1.99999999999999999999." + strings.Repeat("A", 43), "ip:"},
		tokenCase{"v1.zz.1." + strings.Repeat("A", 43), "ip:"}, tokenCase{"", "ip:"}, tokenCase{strings.Repeat("v", 600), "ip:"})

	type cookieCase struct {
		Lines []string `json:"lines"`
		Name  string   `json:"name"`
	}
	cookiePieces := []string{"rw_challenge=", "rw_challenge", "=", "v1.k1.1.x", ";", "; ", " ", "\"", "a=b", "rw_challenge=\"q\"", "\\", ",", "x y", "\t", "é", "rw_challenge=second"}
	var ccs []cookieCase
	for range 2000 {
		ccs = append(ccs, cookieCase{Lines: hostile(rng, 1+rng.IntN(2), cookiePieces), Name: "rw_challenge"})
	}

	encHeaders := func(h map[string][]string) map[string][]string {
		out := map[string][]string{}
		for k, vs := range h {
			for _, v := range vs {
				out[k] = append(out[k], byteString(v))
			}
		}
		return out
	}
	jsCases := make([]identityCase, len(cases))
	for i, c := range cases {
		jsCases[i] = identityCase{Peer: byteString(c.Peer), Headers: encHeaders(c.Headers)}
	}
	jsCookies := make([]cookieCase, len(ccs))
	for i, c := range ccs {
		jsCookies[i] = cookieCase{Lines: encHeaders(map[string][]string{"c": c.Lines})["c"], Name: c.Name}
	}
	jsTokens := make([]tokenCase, len(tcs))
	for i, c := range tcs {
		jsTokens[i] = tokenCase{Token: byteString(c.Token), Subject: byteString(c.Subject)}
	}
	in := map[string]any{"paths": []string{}, "prefixes": [][3]any{}, "addrs": []string{}, "strings": []string{},
		"identity": map[string]any{"config": compiled.Identity, "jwtKey": vectorJWTKey, "now": strconv.FormatInt(now.UnixNano(), 10), "cases": jsCases},
		"tokens":   map[string]any{"keys": vectorChallengeKeys, "now": strconv.FormatInt(now.UnixNano(), 10), "cases": jsTokens},
		"cookies":  jsCookies}
	var out struct {
		Identity [][5]string `json:"identity"`
		Tokens   []bool      `json:"tokens"`
		Cookies  []string    `json:"cookies"`
	}
	fail, done := runPort(t, fnDir, in, &out)
	defer done()
	addrText := func(a netip.Addr) string {
		if !a.IsValid() {
			return ""
		}
		return a.String()
	}
	for i, c := range cases {
		h := http.Header{}
		for k, vs := range c.Headers {
			for _, v := range vs {
				h.Add(k, v)
			}
		}
		id := res.Resolve(c.Peer, h, now)
		want := [5]string{addrText(id.ClientIP), addrText(id.Addr), id.User, id.Plan, id.Source}
		got := out.Identity[i]
		for j := range got {
			got[j] = fromByteString(t, got[j])
		}
		if got != want {
			fail("identity of peer %q headers %q: Go %q, port %q", c.Peer, c.Headers, want, got)
		}
	}
	for i, c := range tcs {
		_, err := keys.Verify(c.Token, c.Subject, now)
		if want := err == nil; out.Tokens[i] != want {
			fail("token %q for %q: Go valid %v (%v), port %v", c.Token, c.Subject, want, err, out.Tokens[i])
		}
	}
	for i, c := range ccs {
		want := ""
		for _, ck := range (&http.Request{Header: http.Header{"Cookie": c.Lines}}).Cookies() {
			if ck.Name == c.Name {
				want = ck.Value
				break
			}
		}
		if got := fromByteString(t, out.Cookies[i]); got != want {
			fail("cookie %s in %q: Go %q, port %q", c.Name, c.Lines, want, got)
		}
	}
	t.Logf("%d identities (%d bearer tokens), %d challenge tokens, %d cookie headers agree", len(cases), len(tokens), len(tcs), len(ccs))
}

// runPort runs tests/lambdaedge_port.mjs on in, decodes its answers into
// out, and returns how to report a disagreement (the first 20 in full)
// and, to defer, the summary of all of them.
func runPort(t *testing.T, fnDir string, in, out any) (fail func(format string, args ...any), done func()) {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(program(t, "node", "Node.js 20"), "lambdaedge_port.mjs", fnDir)
	cmd.Stdin = bytes.NewReader(b)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatal(err)
	}
	bad := 0
	return func(format string, args ...any) {
			if bad++; bad <= 20 {
				t.Errorf(format, args...)
			}
		}, func() {
			if bad > 0 {
				t.Errorf("%d disagreements in all", bad)
			}
		}
}
