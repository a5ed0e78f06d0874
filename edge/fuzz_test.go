package edge

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/internal/canonpath"
)

// FuzzDecide feeds the limiter hostile requests: it must never panic, must
// emit exactly one decision per request, and must never pass a request the
// deny list names: it refuses it as deny-listed, or as rejected when its
// path is malformed (a request is read before its client is looked up, as
// an HTTP server answers 400 before any access rule).
func FuzzDecide(f *testing.F) {
	f.Add("203.0.113.7:1", "/api/reports", "", "", "", "")
	f.Add("10.0.0.1:1", "/api/admin/x", "198.51.100.66, 10.0.0.2", "u_1", "pro", "v1.k1.1.AAAA")
	f.Add("garbage", "", ",,,,", "\x00", "\xff", "v1..")
	f.Add("[::1]:80", "/"+string(make([]byte, 300)), "::ffff:1.2.3.4", "", "enterprise", "")
	cfg := seedConfig(f, nil)
	sink := &recordSink{}
	l := newLimiter(f, cfg, Options{Sink: sink, Keys: testKeys(f), Deny: staticList{mustList(f, "198.51.100.66\n")}})
	f.Fuzz(func(t *testing.T, remote, path, xff, user, plan, token string) {
		h := http.Header{}
		if xff != "" {
			h.Set("X-Forwarded-For", xff)
		}
		if user != "" {
			h.Set("X-User-Id", user)
		}
		if plan != "" {
			h.Set("X-User-Plan", plan)
		}
		if token != "" {
			h.Set("X-Ratewarden-Token", token)
			h.Set("Cookie", "rw_challenge="+token)
		}
		sink.mu.Lock()
		before := len(sink.ds)
		sink.mu.Unlock()
		var v Verdict
		l.Decide(context.Background(), t0.Add(time.Duration(len(path))*time.Second), &Request{RemoteAddr: remote, Path: path, URI: path, Header: h}, &v)
		sink.mu.Lock()
		after := len(sink.ds)
		sink.mu.Unlock()
		if after != before+1 {
			t.Fatalf("%d decisions for one request", after-before)
		}
		if v.Outcome == 0 || v.Outcome.String() == "unknown" {
			t.Fatalf("no outcome: %+v", v.Decision)
		}
		if v.ClientIP.String() == "198.51.100.66" && v.Outcome != decisions.DenyListed &&
			(v.Outcome != decisions.Rejected || v.pathErr == nil && v.form != canonpath.Ambiguous) {
			t.Fatalf("deny-listed client got %v", v.Outcome)
		}
		if _, refused := Refusal(&v, "/captcha", "redirect"); refused == v.Outcome.Passed() {
			t.Fatalf("outcome %v: refused %v", v.Outcome, refused)
		}
		SetHeaders(http.Header{}, &v)
	})
}

// FuzzDecodeTokenRequest: a token request body the strict decoder accepts
// is at most 4096 bytes, and encoding/json, which the verifier in front of
// the edge may well use, reads the same request from it: strictness only
// refuses, it never reads a body another way.
func FuzzDecodeTokenRequest(f *testing.F) {
	f.Add(`{"ip":"203.0.113.7"}`)
	f.Add(`{"user":"u_1","ttl":"5m"}` + "\n")
	f.Add(`{"IP":"203.0.113.7"}`)
	f.Add(`{"ip":"203.0.113.7","\u0069p":"198.51.100.66"}`)
	f.Add(`{"ip":"203.0.113.7"} {"ip":"198.51.100.66"}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, body string) {
		got, err := decodeTokenRequest(strings.NewReader(body))
		if err != nil {
			return
		}
		var lenient tokenRequest
		if err := json.Unmarshal([]byte(body), &lenient); err != nil || lenient != got || len(body) > maxTokenBodyBytes {
			t.Fatalf("%q: strict %+v, encoding/json %+v (%v)", body, got, lenient, err)
		}
	})
}
