package identity

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
)

// candidates returns every address an X-Forwarded-For text names, read
// plainly: each comma-separated element, trimmed, as an address or an
// address with a port, unmapped.
func candidates(xff string) []netip.Addr {
	var out []netip.Addr
	for _, line := range strings.Split(xff, "\n") {
		for _, e := range strings.Split(line, ",") {
			e = strings.Trim(e, " \t")
			if a, err := netip.ParseAddr(e); err == nil {
				out = append(out, a.Unmap())
			}
			if ap, err := netip.ParseAddrPort(e); err == nil {
				out = append(out, ap.Addr().Unmap())
			}
			if inner, ok := strings.CutPrefix(e, "["); ok { // [2001:db8::1], as Forwarded writes it
				if a, err := netip.ParseAddr(strings.TrimSuffix(inner, "]")); err == nil && strings.HasSuffix(inner, "]") {
					out = append(out, a.Unmap())
				}
			}
		}
	}
	return out
}

func FuzzXFF(f *testing.F) {
	seeds := [][2]string{
		{"10.0.0.1:443", "203.0.113.7, 10.0.0.5"},
		{"10.0.0.1:443", "6.6.6.6, 203.0.113.7, 10.0.0.5, 10.0.0.6"},
		{"10.0.0.1:443", "10.0.0.9,10.0.0.8"},
		{"10.0.0.1:443", "203.0.113.7, garbage, 10.0.0.5"},
		{"10.0.0.1:443", "6.6.6.6\n203.0.113.7,10.0.0.2"},
		{"10.0.0.1:443", "[2001:db8::1]:80, ::ffff:1.2.3.4, 1.2.3.4:5"},
		{"[::ffff:10.0.0.1]:443", "fe80::1%eth0"},
		{"[2001:db8:ffff::1]:1", ",,, ,"},
		{"198.51.100.1:5000", "203.0.113.7"},
		{"@", "1.2.3.4"},
		{"", ""},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	r, err := New(config.Identity{TrustedProxies: trustedProxies}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, remote, xff string) {
		h := http.Header{"X-Forwarded-For": strings.Split(xff, "\n")}
		id := r.Resolve(remote, h, now)
		if !id.ClientIP.IsValid() {
			if id.Addr.IsValid() || id.Source != decisions.SourcePeer {
				t.Fatalf("no client address but %+v", id)
			}
			return
		}
		if id.ClientIP.Is4In6() || id.ClientIP.Zone() != "" {
			t.Fatalf("ClientIP %v is mapped or zoned", id.ClientIP)
		}
		if !id.Addr.IsValid() || id.Addr.Is4() != id.ClientIP.Is4() {
			t.Fatalf("Addr %v does not belong to ClientIP %v", id.Addr, id.ClientIP)
		}
		peer, _ := parseHostPort(remote)
		peer = peer.Unmap().WithZone("")
		switch id.Source {
		case decisions.SourcePeer:
			if id.ClientIP != peer {
				t.Fatalf("SourcePeer with ClientIP %v, peer %v", id.ClientIP, peer)
			}
		case decisions.SourceForwarded:
			if !r.isTrusted(peer) {
				t.Fatalf("forwarded address %v from untrusted peer %v", id.ClientIP, peer)
			}
			found := false
			for _, c := range candidates(xff) {
				found = found || c == id.ClientIP
			}
			if !found {
				t.Fatalf("forwarded address %v does not appear in %q", id.ClientIP, xff)
			}
		default:
			t.Fatalf("Source %q", id.Source)
		}
	})
}

// hs256Valid reports whether tok is an HS256 JWT whose signature is the
// HMAC of its first two segments under key, checked without the library.
func hs256Valid(tok string, key []byte) bool {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return false
	}
	hb, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return false
	}
	var header struct {
		Alg string `json:"alg"`
	}
	if json.Unmarshal(hb, &header) != nil || header.Alg != "HS256" {
		return false
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(parts[0] + "." + parts[1]))
	return hmac.Equal(m.Sum(nil), sig)
}

func FuzzJWT(f *testing.F) {
	key := []byte(hsKey)
	f.Add(signHS(f, key, claims{"sub": "alice", "plan": "pro", "exp": now.Add(time.Hour).Unix()}))
	f.Add(signHS(f, key, claims{"sub": "alice", "exp": now.Add(-time.Hour).Unix()}))
	f.Add(signHS(f, []byte("wrong-key-wrong-key-wrong-key-wrong-key"), claims{"sub": "alice"}))
	f.Add("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJhbGljZSJ9.")
	f.Add("a.b.c")
	f.Add("")
	f.Add(strings.Repeat(".", 100))
	r, err := New(config.Identity{JWT: &config.JWT{Algorithm: "HS256", KeyEnv: "K"}}, func(string) string { return hsKey })
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		id := r.Resolve("198.51.100.1:1", http.Header{"Authorization": {"Bearer " + tok}}, now)
		switch id.Source {
		case decisions.SourceJWT:
			if !hs256Valid(trimOWS(tok), key) {
				t.Fatalf("accepted a token not validly signed: %q", tok)
			}
			if id.User == "" {
				t.Fatalf("accepted token without a user: %q", tok)
			}
		case decisions.SourceInvalidJWT:
			if id.User != "" || id.Plan != "" {
				t.Fatalf("invalid token but identity %+v", id)
			}
		default:
			t.Fatalf("Source %q for a bearer token", id.Source)
		}
	})
}

// FuzzParseIPv4 holds the one-pass IPv4 parser to netip.ParseAddr: whatever
// it accepts, netip accepts as the same IPv4 address, and every IPv4
// address netip accepts from a dotted quad, it accepts too.
func FuzzParseIPv4(f *testing.F) {
	for _, s := range []string{"1.2.3.4", "255.255.255.255", "0.0.0.0", "01.2.3.4", "1.2.3", "1.2.3.4.5", "256.1.1.1", "1..2.3", "::1", "1.2.3.4%z", "1.2.3.04", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseIPv4(s)
		want, err := netip.ParseAddr(s)
		wantOK := err == nil && want.Is4()
		if ok != wantOK || (ok && got != want) {
			t.Fatalf("parseIPv4(%q) = %v, %v; netip says %v, %v", s, got, ok, want, err)
		}
	})
}

// FuzzParseHostPort holds parseHostPort's one-pass IPv4 path to the
// general parse it stands in front of: the same address and verdict for
// any text.
func FuzzParseHostPort(f *testing.F) {
	for _, s := range []string{"203.0.113.7:4711", "203.0.113.7", "1.2.3.4:", "1.2.3.4:65536", "1.2.3.4:0", "1.2.3.04:1", "1.2.3.4:1:2",
		"1.2.3.4%z:1", "[1.2.3.4]:1", "[::1]:80", "::1", "::ffff:1.2.3.4", "1.2.3:4", "", ":", "1.2.3.4:+1", "1.2.3.4:00080"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, gotOK := parseHostPort(s)
		want, wantOK := parseHostPortShape(s)
		if got != want || gotOK != wantOK {
			t.Fatalf("parseHostPort(%q) = %v, %v; the general parse says %v, %v", s, got, gotOK, want, wantOK)
		}
	})
}
