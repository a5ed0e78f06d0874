package edge

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// verifierSecret is a verifier secret of the shortest allowed length.
const verifierSecret = "0123456789abcdef0123456789abcdef"

// TestTokenEndpointLimit: wrong verifier secrets are limited per client
// address (10 a minute by default); past the limit every request from that
// address is refused, the right secret too, without the secret being
// checked; right secrets do not count; every request yields a decision
// that says what the endpoint did and never holds the secret.
func TestTokenEndpointLimit(t *testing.T) {
	sink := &recordSink{}
	cfg := seedConfig(t, nil)
	l := newLimiter(t, cfg, Options{Keys: testKeys(t), Sink: sink})
	h := l.Handler(http.NotFoundHandler(), verifierSecret)
	post := func(remote, secret string) int {
		r := httptest.NewRequest("POST", cfg.Challenge.Endpoint, strings.NewReader(`{"ip":"203.0.113.7"}`))
		r.RemoteAddr = remote
		if secret != "" {
			r.Header.Set("Authorization", "Bearer "+secret)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Code
	}
	const attacker, verifier = "198.51.100.66:4000", "192.0.2.10:5000"
	var got []int
	for i := range 30 {
		secret := fmt.Sprintf("guess-%02d-guess-%02d-guess-%02d-xx", i, i, i)
		if i == 0 {
			secret = ""
		}
		got = append(got, post(attacker, secret))
	}
	got = append(got, post(attacker, verifierSecret))
	want := strings.Repeat("401 ", 10) + strings.Repeat("429 ", 21)
	if s := fmt.Sprint(got); s != "["+strings.TrimSpace(want)+"]" {
		t.Errorf("attacker's statuses %s, want [%s]", s, strings.TrimSpace(want))
	}
	// The verifier at another address is not held up, and its requests,
	// good ones and bad ones, do not count as wrong secrets.
	for i := range 20 {
		if s := post(verifier, verifierSecret); s != 200 {
			t.Fatalf("verifier request %d: %d", i, s)
		}
	}
	if s := post(verifier, "wrong"); s != 401 {
		t.Errorf("verifier's first wrong secret: %d, want 401", s)
	}

	if len(sink.ds) != 31+21 {
		t.Fatalf("%d decisions for %d requests", len(sink.ds), 31+21)
	}
	for i, d := range sink.ds {
		b := decisions.AppendJSON(nil, &d)
		if strings.Contains(string(b), "guess-") || strings.Contains(string(b), verifierSecret) {
			t.Errorf("decision %d holds the secret: %s", i, b)
		}
		if d.RequestID == "" || d.Rule != "token_endpoint" || d.Path != cfg.Challenge.Endpoint || d.Method != "POST" || !strings.HasPrefix(d.Reason, "token endpoint: ") {
			t.Errorf("decision %d: %s", i, b)
		}
	}
	check := func(i int, outcome decisions.Outcome, reason string, count int64) {
		t.Helper()
		d := sink.ds[i]
		if d.Outcome != outcome || d.Reason != "token endpoint: "+reason || d.Count != count || d.ClientIP.String() != strings.Split(map[bool]string{true: attacker, false: verifier}[i < 31], ":")[0] {
			t.Errorf("decision %d: %s %q count %d from %v, want %s %q count %d", i, d.Outcome, d.Reason, d.Count, d.ClientIP, outcome, reason, count)
		}
	}
	check(0, decisions.Allow, "no verifier secret", 1)
	check(1, decisions.Allow, "wrong verifier secret", 2)
	check(9, decisions.Allow, "wrong verifier secret", 10)
	check(10, decisions.Block, "over the limit of wrong verifier secrets", 11)
	check(30, decisions.Block, "over the limit of wrong verifier secrets", 12) // counted no further
	check(31, decisions.Allow, "token issued", 1)
	check(50, decisions.Allow, "token issued", 1)
	check(51, decisions.Allow, "wrong verifier secret", 1)
	if st := l.Stats(); st.TokenDenied != 11 || st.TokensIssued != 20 {
		t.Errorf("stats: %d denied, %d issued", st.TokenDenied, st.TokensIssued)
	}
}

// TestTokenEndpointShortSecret: a verifier secret shorter than 32 bytes
// does not open the token endpoint.
func TestTokenEndpointShortSecret(t *testing.T) {
	cfg := seedConfig(t, nil)
	l := newLimiter(t, cfg, Options{Keys: testKeys(t)})
	short := verifierSecret[:31]
	r := httptest.NewRequest("POST", cfg.Challenge.Endpoint, strings.NewReader(`{"ip":"203.0.113.7"}`))
	r.Header.Set("Authorization", "Bearer "+short)
	rec := httptest.NewRecorder()
	l.Handler(http.NotFoundHandler(), short).ServeHTTP(rec, r)
	if rec.Code != 404 {
		t.Errorf("token endpoint with a %d-byte secret: %d, want 404", len(short), rec.Code)
	}
	for _, c := range []struct {
		secret string
		ok     bool
	}{{"", false}, {short, false}, {verifierSecret, true}} {
		if err := CheckVerifierSecret(c.secret); (err == nil) != c.ok {
			t.Errorf("CheckVerifierSecret(%d bytes): %v", len(c.secret), err)
		}
	}
}

// TestTokenEndpointStrictBody: the token endpoint refuses a body that JSON
// readers disagree on, so that the verifier cannot be made to vouch for one
// identity while the edge issues a token for another: names in another case
// (encoding/json took "IP", and "uſer" by Unicode folding, as "ip" and
// "user"), a name twice (it took the last), anything after the object (it
// read the first value only) and a body over 4096 bytes (it read the first
// 4096). Each is a 400 with the reason "bad request"; a plain body, and one
// of exactly 4096 bytes, still get a token.
func TestTokenEndpointStrictBody(t *testing.T) {
	sink := &recordSink{}
	keys := testKeys(t)
	cfg := seedConfig(t, nil)
	l := newLimiter(t, cfg, Options{Keys: keys, Sink: sink})
	h := l.Handler(http.NotFoundHandler(), verifierSecret)
	const ip = `{"ip":"203.0.113.7"}`
	pad := func(body string, n int) string { return body + strings.Repeat(" ", n-len(body)) }
	// post returns the status, the decision's reason, and the message of
	// an error or the subject the issued token verifies for.
	post := func(body string) string {
		r := httptest.NewRequest("POST", cfg.Challenge.Endpoint, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+verifierSecret)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		var resp struct{ Token, Message string }
		json.Unmarshal(rec.Body.Bytes(), &resp)
		got := resp.Message
		if rec.Code == 200 {
			got = "no subject"
			for _, sub := range []string{"ip:203.0.113.7", "ip:198.51.100.66", "user:u_1"} {
				if _, err := keys.Verify(resp.Token, sub, time.Now()); err == nil {
					got = sub
				}
			}
		}
		return fmt.Sprintf("%d %s: %s", rec.Code, sink.ds[len(sink.ds)-1].Reason, got)
	}
	for _, c := range []struct{ name, body, want string }{
		{"plain", ip, "200 token endpoint: token issued: ip:203.0.113.7"},
		{"4096 bytes", pad(ip, 4096), "200 token endpoint: token issued: ip:203.0.113.7"},
		{"wrong case", `{"IP":"203.0.113.7"}`, `400 token endpoint: bad request: body: unknown field "IP" (names are case-sensitive)`},
		{"folded name", `{"uſer":"u_1"}`, `400 token endpoint: bad request: body: unknown field "uſer" (names are case-sensitive)`},
		{"name twice", `{"ip":"203.0.113.7","ip":"198.51.100.66"}`, `400 token endpoint: bad request: body: jsontext: duplicate object member name "ip"`},
		{"name twice, escaped", `{"ip":"203.0.113.7","\u0069p":"198.51.100.66"}`, `400 token endpoint: bad request: body: jsontext: duplicate object member name "ip"`},
		{"second object", ip + `{"ip":"198.51.100.66"}`, `400 token endpoint: bad request: body: jsontext: invalid character '{' after top-level value after offset 20`},
		{"trailing garbage", ip + ` garbage`, `400 token endpoint: bad request: body: jsontext: invalid character 'g' after top-level value after offset 21`},
		{"4097 bytes", pad(ip, 4097), "400 token endpoint: bad request: body: larger than 4096 bytes"},
		{"user", `{"user":"u_1"}`, "200 token endpoint: token issued: user:u_1"},
		{"user too long", `{"user":"` + strings.Repeat("u", 257) + `"}`, "400 token endpoint: bad request: user: user id of 257 bytes, at most 256"},
		{"user with a control character", `{"user":"u_1\u0007"}`, "400 token endpoint: bad request: user: user id with a control character at byte 4; want printable text"},
		{"user with leading space", `{"user":" u_1"}`, "400 token endpoint: bad request: user: user id with white space at its start or end"},
		{"unknown field", `{"ip":"203.0.113.7","admin":true}`, `400 token endpoint: bad request: body: unknown field "admin" (names are case-sensitive)`},
	} {
		if got := post(c.body); got != c.want {
			t.Errorf("%s: %s\nwant %s", c.name, got, c.want)
		}
	}
}
