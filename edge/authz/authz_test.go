package authz_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge"
	"github.com/ratewarden/ratewarden/edge/authz"
	"github.com/ratewarden/ratewarden/edge/lists"
)

type staticList struct{ l *lists.List }

func (s staticList) List() *lists.List { return s.l }

type recorder struct{ got []decisions.Decision }

func (r *recorder) Emit(d decisions.Decision) bool { r.got = append(r.got, d); return true }

func newLimiter(t *testing.T) (*edge.Limiter, *recorder) {
	t.Helper()
	cfg, err := config.Parse([]byte(`
identity: {trusted_proxies: [10.0.0.1]}
challenge: {enabled: true, factor: 2}
fail_closed: [/api/admin/]
tiers:
  anonymous:
    global: {limit: 100}
    paths:
      /api/reports: {limit: 5}
`), "authz.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	deny, err := lists.Parse(strings.NewReader("203.0.113.66\n"), "deny")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	l, err := edge.New(cfg, edge.Options{Sink: rec, Deny: staticList{deny}, Env: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l, rec
}

// ask sends one auth subrequest from peer with the headers kv.
func ask(h http.Handler, peer string, kv ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/.ratewarden/authz", nil)
	r.RemoteAddr = peer
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Set(kv[i], kv[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestAnswers holds the endpoint to what auth_request understands: 204
// to pass, 401 with the client's status to refuse, 403 for the deny list.
func TestAnswers(t *testing.T) {
	l, rec := newLimiter(t)
	h := authz.Handler(l)
	var got []string
	for range 11 {
		w := ask(h, "10.0.0.1:4000", authz.HeaderURI, "/api/reports?x=1", authz.HeaderMethod, "POST", authz.HeaderRealIP, "198.51.100.7")
		got = append(got, w.Result().Status[:3]+"/"+w.Header().Get(authz.HeaderStatus)+"/"+w.Header().Get(authz.HeaderDecision))
	}
	want := strings.TrimSpace(strings.Repeat("204//allow ", 5) + strings.Repeat("401/302/challenge ", 5) + "401/429/block")
	if strings.Join(got, " ") != want {
		t.Errorf("answers\n%v\nwant\n%s", got, want)
	}
	w := ask(h, "10.0.0.1:4000", authz.HeaderURI, "/api/reports", authz.HeaderRealIP, "198.51.100.8")
	for range 5 {
		w = ask(h, "10.0.0.1:4000", authz.HeaderURI, "/api/reports", authz.HeaderRealIP, "198.51.100.8")
	}
	if loc := w.Header().Get(authz.HeaderLocation); loc != "/captcha?redirect=%2Fapi%2Freports" {
		t.Errorf("challenge location %q", loc)
	}
	if w := ask(h, "10.0.0.1:4000", authz.HeaderURI, "/", authz.HeaderRealIP, "203.0.113.66"); w.Code != 403 {
		t.Errorf("deny list: %d", w.Code)
	}
	if w := ask(h, "10.0.0.1:4000", authz.HeaderURI, "/a/../b", authz.HeaderRealIP, "198.51.100.9"); w.Code != 401 || w.Header().Get(authz.HeaderStatus) != "400" {
		t.Errorf("ambiguous path: %d %q", w.Code, w.Header().Get(authz.HeaderStatus))
	}
	d := rec.got[10]
	if d.Method != "POST" || d.Path != "/api/reports" || d.ClientIP.String() != "198.51.100.7" || d.Status != 429 || d.Outcome != decisions.Block {
		t.Errorf("decision %+v", d)
	}
	if len(rec.got) != 19 {
		t.Errorf("%d decisions for 19 calls", len(rec.got))
	}
}

// TestUntrustedPeer: X-Real-IP and X-Forwarded-For from a peer that is not
// a trusted proxy are ignored; the peer is the client.
func TestUntrustedPeer(t *testing.T) {
	l, rec := newLimiter(t)
	h := authz.Handler(l)
	w := ask(h, "198.51.100.20:5000", authz.HeaderURI, "/", authz.HeaderRealIP, "203.0.113.66", "X-Forwarded-For", "203.0.113.66", "X-User-Id", "root")
	if w.Code != 204 {
		t.Errorf("untrusted peer claiming a deny-listed address: %d", w.Code)
	}
	// From the trusted proxy, X-Real-IP wins over X-Forwarded-For.
	w = ask(h, "10.0.0.1:4000", authz.HeaderURI, "/", authz.HeaderRealIP, "198.51.100.21", "X-Forwarded-For", "203.0.113.66")
	if w.Code != 204 {
		t.Errorf("X-Real-IP beside a spoofed X-Forwarded-For: %d", w.Code)
	}
	if a, b := rec.got[0], rec.got[1]; a.ClientIP.String() != "198.51.100.20" || a.UserID != "" || b.ClientIP.String() != "198.51.100.21" {
		t.Errorf("decisions %+v\n%+v", a, b)
	}
}
