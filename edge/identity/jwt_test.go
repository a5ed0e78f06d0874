package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
)

const hsKey = "0123456789abcdef0123456789abcdef-test-only"

type claims = jwt.MapClaims

type privateKeySet struct {
	rsa, rsaOther, rsaSmall *rsa.PrivateKey
	ec, ecOther, p384       *ecdsa.PrivateKey
}

// privateKeys are generated once per test binary: RSA generation is slow.
var privateKeys = sync.OnceValues(func() (privateKeySet, error) {
	var k privateKeySet
	var errs [6]error
	k.rsa, errs[0] = rsa.GenerateKey(rand.Reader, 2048)
	k.rsaOther, errs[1] = rsa.GenerateKey(rand.Reader, 2048)
	k.rsaSmall, errs[2] = rsa.GenerateKey(rand.Reader, 1024)
	k.ec, errs[3] = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k.ecOther, errs[4] = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k.p384, errs[5] = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	return k, errors.Join(errs[:]...)
})

type testKeys struct {
	rsa, rsaOther *rsa.PrivateKey
	ec, ecOther   *ecdsa.PrivateKey
	rsaPEM        []byte // the RSA public key as written, for the alg-confusion attack
	rsaPath       string
	ecPath        string
	p384Path      string
	rsaSmallPath  string
	garbagePath   string
}

// writeKeys writes the public keys as PEM files into dir.
func writeKeys(t testing.TB, dir string) testKeys {
	t.Helper()
	pk, err := privateKeys()
	if err != nil {
		t.Fatalf("generate keys: %v", err)
	}
	write := func(name string, pub any) (string, []byte) {
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		b := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p, b
	}
	k := testKeys{rsa: pk.rsa, rsaOther: pk.rsaOther, ec: pk.ec, ecOther: pk.ecOther}
	k.rsaPath, k.rsaPEM = write("rsa.pem", &pk.rsa.PublicKey)
	k.ecPath, _ = write("ec.pem", &pk.ec.PublicKey)
	k.p384Path, _ = write("p384.pem", &pk.p384.PublicKey)
	k.rsaSmallPath, _ = write("rsa1024.pem", &pk.rsaSmall.PublicKey)
	k.garbagePath = filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(k.garbagePath, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	return k
}

func sign(t testing.TB, m jwt.SigningMethod, key any, c claims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, c).SignedString(key)
	if err != nil {
		t.Fatalf("sign %s: %v", m.Alg(), err)
	}
	return s
}

func signHS(t testing.TB, key []byte, c claims) string {
	t.Helper()
	return sign(t, jwt.SigningMethodHS256, key, c)
}

func TestResolveJWT(t *testing.T) {
	k := writeKeys(t, t.TempDir())
	env := map[string]string{"JWT_KEY": hsKey}
	hs := mustNew(t, config.Identity{TrustedProxies: trustedProxies, JWT: &config.JWT{Algorithm: "HS256", KeyEnv: "JWT_KEY"}}, env)
	hsIss := mustNew(t, config.Identity{JWT: &config.JWT{Algorithm: "HS256", KeyEnv: "JWT_KEY",
		Issuer: "https://id.example", Audience: "api", UserClaim: "uid", PlanClaim: "tier", Leeway: new(5 * time.Second)}}, env)
	// No leeway, and tokens without exp accepted: both must be written.
	hsStrictNoExp := mustNew(t, config.Identity{JWT: &config.JWT{Algorithm: "HS256", KeyEnv: "JWT_KEY",
		Leeway: new(time.Duration(0)), RequireExp: new(false)}}, env)
	rs := mustNew(t, config.Identity{JWT: &config.JWT{Algorithm: "RS256", PublicKeyFile: k.rsaPath}}, nil)
	es := mustNew(t, config.Identity{JWT: &config.JWT{Algorithm: "ES256", PublicKeyFile: k.ecPath}}, nil)

	exp := now.Add(time.Hour).Unix()
	valid := claims{"sub": "alice", "plan": "pro", "exp": exp}
	hsValid := signHS(t, []byte(hsKey), valid)
	with := func(extra claims) claims {
		c := claims{}
		for k, v := range valid {
			c[k] = v
		}
		for k, v := range extra {
			if v == nil {
				delete(c, k)
				continue
			}
			c[k] = v
		}
		return c
	}
	hsWith := func(extra claims) string { return signHS(t, []byte(hsKey), with(extra)) }
	issValid := claims{"uid": "bob", "tier": "free", "iss": "https://id.example", "aud": "api", "exp": exp}
	issWith := func(extra claims) string {
		c := claims{}
		for k, v := range issValid {
			c[k] = v
		}
		for k, v := range extra {
			c[k] = v
		}
		return signHS(t, []byte(hsKey), c)
	}
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, valid).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	hsValidParts := strings.Split(hsValid, ".")

	const (
		untrusted = "198.51.100.1:5000"
		trusted   = "10.0.0.1:443"
	)
	bearer := func(tok string) http.Header { return hdr("Authorization", "Bearer "+tok) }
	ok := func(user, plan string) Identity {
		return Identity{ClientIP: addr("198.51.100.1"), Addr: addr("198.51.100.1"), User: user, Plan: plan, Source: decisions.SourceJWT}
	}
	invalid := Identity{ClientIP: addr("198.51.100.1"), Addr: addr("198.51.100.1"), Source: decisions.SourceInvalidJWT}

	cases := []struct {
		name   string
		r      *Resolver
		remote string
		h      http.Header
		want   Identity
	}{
		{"HS256 valid", hs, untrusted, bearer(hsValid), ok("alice", "pro")},
		{"HS256 no plan", hs, untrusted, bearer(hsWith(claims{"plan": nil})), ok("alice", "")},
		{"HS256 lowercase scheme", hs, untrusted, hdr("Authorization", "bearer  "+hsValid), ok("alice", "pro")},
		{"HS256 no exp", hs, untrusted, bearer(hsWith(claims{"exp": nil})), invalid},
		{"no exp, not required", hsStrictNoExp, untrusted, bearer(hsWith(claims{"exp": nil})), ok("alice", "pro")},
		{"expired a second ago, no leeway", hsStrictNoExp, untrusted, bearer(hsWith(claims{"exp": now.Add(-time.Second).Unix()})), invalid},
		{"nbf a second ahead, no leeway", hsStrictNoExp, untrusted, bearer(hsWith(claims{"nbf": now.Add(time.Second).Unix()})), invalid},
		{"expires in a second, no leeway", hsStrictNoExp, untrusted, bearer(hsWith(claims{"exp": now.Add(time.Second).Unix()})), ok("alice", "pro")},
		{"RS256 valid", rs, untrusted, bearer(sign(t, jwt.SigningMethodRS256, k.rsa, valid)), ok("alice", "pro")},
		{"ES256 valid", es, untrusted, bearer(sign(t, jwt.SigningMethodES256, k.ec, valid)), ok("alice", "pro")},
		{"claims and iss/aud configured", hsIss, untrusted, bearer(issWith(nil)), ok("bob", "free")},
		{"aud list", hsIss, untrusted, bearer(issWith(claims{"aud": []string{"other", "api"}})), ok("bob", "free")},

		{"expired", hs, untrusted, bearer(hsWith(claims{"exp": now.Add(-time.Minute).Unix()})), invalid},
		{"expired within leeway", hs, untrusted, bearer(hsWith(claims{"exp": now.Add(-20 * time.Second).Unix()})), ok("alice", "pro")},
		{"expired beyond configured leeway", hsIss, untrusted, bearer(issWith(claims{"exp": now.Add(-6 * time.Second).Unix()})), invalid},
		{"nbf in future", hs, untrusted, bearer(hsWith(claims{"nbf": now.Add(time.Minute).Unix()})), invalid},
		{"nbf within leeway", hs, untrusted, bearer(hsWith(claims{"nbf": now.Add(20 * time.Second).Unix()})), ok("alice", "pro")},
		{"exp not a number", hs, untrusted, bearer(hsWith(claims{"exp": "tomorrow"})), invalid},
		{"HS256 wrong key", hs, untrusted, bearer(signHS(t, []byte("another-key-another-key-another-key"), valid)), invalid},
		{"RS256 wrong key", rs, untrusted, bearer(sign(t, jwt.SigningMethodRS256, k.rsaOther, valid)), invalid},
		{"ES256 wrong key", es, untrusted, bearer(sign(t, jwt.SigningMethodES256, k.ecOther, valid)), invalid},
		{"alg none", hs, untrusted, bearer(none), invalid},
		{"alg none RS256", rs, untrusted, bearer(none), invalid},
		{"alg none stripped signature", hs, untrusted, bearer(hsValidParts[0] + "." + hsValidParts[1] + "."), invalid},
		{"alg confusion HS256 with RSA public key", rs, untrusted, bearer(signHS(t, k.rsaPEM, valid)), invalid},
		{"RS256 token to HS256", hs, untrusted, bearer(sign(t, jwt.SigningMethodRS256, k.rsa, valid)), invalid},
		{"ES256 token to RS256", rs, untrusted, bearer(sign(t, jwt.SigningMethodES256, k.ec, valid)), invalid},
		{"RS512 token to RS256", rs, untrusted, bearer(sign(t, jwt.SigningMethodRS512, k.rsa, valid)), invalid},
		{"HS384 token to HS256", hs, untrusted, bearer(sign(t, jwt.SigningMethodHS384, []byte(hsKey), valid)), invalid},
		{"wrong issuer", hsIss, untrusted, bearer(issWith(claims{"iss": "https://evil.example"})), invalid},
		{"missing issuer", hsIss, untrusted, bearer(signHS(t, []byte(hsKey), claims{"uid": "bob", "aud": "api", "exp": exp})), invalid},
		{"wrong audience", hsIss, untrusted, bearer(issWith(claims{"aud": "other"})), invalid},
		{"missing audience", hsIss, untrusted, bearer(signHS(t, []byte(hsKey), claims{"uid": "bob", "iss": "https://id.example", "exp": exp})), invalid},
		{"missing user claim", hs, untrusted, bearer(hsWith(claims{"sub": nil})), invalid},
		{"empty user claim", hs, untrusted, bearer(hsWith(claims{"sub": ""})), invalid},
		{"numeric user claim", hs, untrusted, bearer(hsWith(claims{"sub": 42})), invalid},
		{"oversized user claim", hs, untrusted, bearer(hsWith(claims{"sub": strings.Repeat("u", MaxUserLen+1)})), invalid},
		// Ids the feedback lists could not hold as they are (Believes): the
		// client is counted by its address, not listed as another user.
		{"user claim with a leading no-break space", hs, untrusted, bearer(hsWith(claims{"sub": "\u00a0victim"})), invalid},
		{"user claim with a trailing space", hs, untrusted, bearer(hsWith(claims{"sub": "victim "})), invalid},
		{"user claim with a control character", hs, untrusted, bearer(hsWith(claims{"sub": "mallory\x01"})), invalid},
		{"user claim with a C1 control", hs, untrusted, bearer(hsWith(claims{"sub": "mallory\u0085x"})), invalid},
		{"user claim with DEL", hs, untrusted, bearer(hsWith(claims{"sub": "mallory\x7f"})), invalid},
		{"user claim with an escape sequence", hs, untrusted, bearer(hsWith(claims{"sub": "\x1b[2Jmallory"})), invalid},
		{"user claim with a newline", hs, untrusted, bearer(hsWith(claims{"sub": "mallory\nalice"})), invalid},
		{"user claim with U+FFFD", hs, untrusted, bearer(hsWith(claims{"sub": "mallory\ufffd"})), invalid},
		{"user claim with inner spaces and letters", hs, untrusted, bearer(hsWith(claims{"sub": "José García"})),
			Identity{ClientIP: addr("198.51.100.1"), Addr: addr("198.51.100.1"), User: "José García", Plan: "pro", Source: decisions.SourceJWT}},
		{"numeric plan claim", hs, untrusted, bearer(hsWith(claims{"plan": 3})), invalid},
		{"oversized token", hs, untrusted, bearer(hsWith(claims{"pad": strings.Repeat("p", MaxTokenLen)})), invalid},
		{"garbage", hs, untrusted, bearer("garbage"), invalid},
		{"three garbage segments", hs, untrusted, bearer("a.b.c"), invalid},
		{"empty bearer", hs, untrusted, hdr("Authorization", "Bearer"), invalid},
		{"padded signature", hs, untrusted, bearer(hsValid + "="), invalid},

		{"JWT beats trusted headers", hs, trusted, hdr("Authorization", "Bearer "+hsValid, "X-User-Id", "mallory"),
			Identity{ClientIP: addr("10.0.0.1"), Addr: addr("10.0.0.1"), User: "alice", Plan: "pro", Source: decisions.SourceJWT}},
		{"JWT beats spoofed headers", hs, untrusted, hdr("Authorization", "Bearer "+hsValid, "X-User-Id", "mallory"), ok("alice", "pro")},
		{"invalid JWT beats trusted headers", hs, trusted, hdr("Authorization", "Bearer x", "X-User-Id", "bob"),
			Identity{ClientIP: addr("10.0.0.1"), Addr: addr("10.0.0.1"), Source: decisions.SourceInvalidJWT}},
		{"JWT with forwarded address", hs, trusted, hdr("Authorization", "Bearer "+hsValid, "X-Forwarded-For", "203.0.113.7"),
			Identity{ClientIP: addr("203.0.113.7"), Addr: addr("203.0.113.7"), User: "alice", Plan: "pro", Source: decisions.SourceJWT}},
		{"basic scheme is not a JWT", hs, trusted, hdr("Authorization", "Basic YTpi", "X-User-Id", "bob"),
			Identity{ClientIP: addr("10.0.0.1"), Addr: addr("10.0.0.1"), User: "bob", Source: decisions.SourceHeader}},
		{"Bearerx scheme is not a JWT", hs, untrusted, hdr("Authorization", "Bearerx "+hsValid),
			Identity{ClientIP: addr("198.51.100.1"), Addr: addr("198.51.100.1"), Source: decisions.SourcePeer}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.r.Resolve(c.remote, c.h, now); got != c.want {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}
