package assemble_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator/report"
	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/seglog"
	"github.com/ratewarden/ratewarden/edge"
	"github.com/ratewarden/ratewarden/edge/challenge"
	"github.com/ratewarden/ratewarden/internal/golden"
)

// whatifKeys sign the base edge's challenge tokens.
const whatifKeys = "k1:dGVzdC1vbmx5LWtleS13aGF0aWYtMDEyMzQ1Njc4OWFi"

// whatifConfig is the base configuration with the limits of /api/search
// (anonymous) and /api/export (authenticated) set.
func whatifConfig(search, export int) string {
	return fmt.Sprintf(`
edge: {upstream: ORIGIN, node: n1}
identity:
  trusted_proxies: [127.0.0.1]
challenge: {enabled: true, factor: 2}
tiers:
  anonymous:
    global: {limit: 100, window: 1m}
    paths:
      /api/search: {limit: %d, window: 1m}
  authenticated:
    global: {limit: 100, window: 1m}
    paths:
      /api/export: {limit: %d, window: 1m}
`, search, export)
}

var whatifT0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

// whatifLog serves a known traffic through the real edge assembled from
// the base configuration (search 5, export 3, challenges at up to twice
// the limit) into a decision log, at fixed event times within one minute:
//
//	203.0.113.1  12 × /api/search: 5 allow, 5 challenge, 2 block
//	203.0.113.2   3 × /api/search: 3 allow
//	203.0.113.3   7 × /api/search: 5 allow, 1 challenge, the 7th with a token: token_pass
//	user alice    8 × /api/export (plan free, through the trusted proxy): 3 allow, 3 challenge, 2 block
//	203.0.113.4   2 × /other: 2 allow
func whatifLog(t *testing.T) string {
	t.Helper()
	logDir := filepath.Join(t.TempDir(), "log")
	cfg := loadConfig(t, whatifConfig(5, 3)+"decisions: {dir: "+logDir+", linger: 1ms}\n")
	getenv := func(k string) string {
		if k == "RATEWARDEN_CHALLENGE_KEYS" {
			return whatifKeys
		}
		return ""
	}
	e, err := assemble.NewEdge(context.Background(), cfg, assemble.Options{Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := challenge.ParseKeys(whatifKeys)
	if err != nil {
		t.Fatal(err)
	}
	type req struct {
		peer, path string
		h          http.Header
	}
	var reqs []req
	add := func(n int, peer, path string, h func(i int) http.Header) {
		for i := range n {
			reqs = append(reqs, req{peer, path, h(i)})
		}
	}
	none := func(int) http.Header { return http.Header{} }
	add(12, "203.0.113.1:4000", "/api/search", none)
	add(3, "203.0.113.2:4000", "/api/search", none)
	add(7, "203.0.113.3:4000", "/api/search", func(i int) http.Header {
		h := http.Header{}
		if i == 6 {
			h.Set("X-Ratewarden-Token", keys.Issue("ip:203.0.113.3", whatifT0, time.Hour))
		}
		return h
	})
	add(8, "127.0.0.1:4000", "/api/export", func(int) http.Header {
		return http.Header{"X-User-Id": {"alice"}, "X-User-Plan": {"free"}, "X-Forwarded-For": {"198.51.100.9"}}
	})
	add(2, "203.0.113.4:4000", "/other", none)
	var got []string
	var v edge.Verdict
	for i, r := range reqs {
		now := whatifT0.Add(time.Duration(i) * 100 * time.Millisecond)
		e.Limiter.Decide(context.Background(), now, &edge.Request{RemoteAddr: r.peer, Method: "GET", Host: "api.example", Path: r.path, URI: r.path, Header: r.h}, &v)
		got = append(got, v.Outcome.String())
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := strings.Fields(strings.Repeat("allow ", 5) + strings.Repeat("challenge ", 5) + "block block " +
		"allow allow allow " + strings.Repeat("allow ", 5) + "challenge token_pass " +
		"allow allow allow challenge challenge challenge block block allow allow")
	if !slices.Equal(got, want) {
		t.Fatalf("the base edge decided\n%v\nwant\n%v", got, want)
	}
	return logDir
}

func runWhatIf(t *testing.T, logDir string, search, export int) *report.WhatIf {
	t.Helper()
	w, err := assemble.WhatIf(context.Background(), assemble.WhatIfOptions{Config: loadConfig(t, whatifConfig(search, export)),
		DecisionsDir: logDir, From: whatifT0, To: whatifT0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func transitions(w *report.WhatIf) string {
	var s []string
	for _, t := range w.Transitions {
		s = append(s, fmt.Sprintf("%s>%s %d/%d", t.From, t.To, t.Requests, t.Identities))
	}
	return strings.Join(s, " ")
}

func identities(w *report.WhatIf) string {
	var s []string
	for _, i := range w.Identities {
		s = append(s, fmt.Sprintf("%s %s>%s %d", i.Identity, i.From, i.To, i.Requests))
	}
	slices.Sort(s)
	return strings.Join(s, "\n")
}

// TestWhatIfSameConfigChangesNothing: the base configuration replayed over
// its own log decides every request as logged, token pass and challenges
// included; so a difference under a candidate is the candidate's.
func TestWhatIfSameConfigChangesNothing(t *testing.T) {
	w := runWhatIf(t, whatifLog(t), 5, 3)
	if w.Replayed != 32 || w.Changed != 0 || len(w.Identities) != 0 {
		t.Fatalf("replayed %d changed %d: %s", w.Replayed, w.Changed, identities(w))
	}
}

// TestWhatIfFromInsideAWindow: a range starting inside the windows its
// requests were counted in (after 203.0.113.1's first ten requests, its
// last two logged refused) changes nothing under the configuration the
// edge ran: the counters were filled by the requests before the range,
// which are not reported. They started empty, and reported
// 203.0.113.1's refusals as allowed.
func TestWhatIfFromInsideAWindow(t *testing.T) {
	from := whatifT0.Add(1050 * time.Millisecond)
	w, err := assemble.WhatIf(context.Background(), assemble.WhatIfOptions{Config: loadConfig(t, whatifConfig(5, 3)),
		DecisionsDir: whatifLog(t), From: from, To: whatifT0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if w.Replayed != 21 || w.Changed != 0 || len(w.Identities) != 0 {
		t.Fatalf("from %v: replayed %d changed %d (want 21 and 0): %s", from, w.Replayed, w.Changed, identities(w))
	}
}

// TestWhatIfTightened: /api/search down from 5 to 2 (challenges up to 4).
func TestWhatIfTightened(t *testing.T) {
	w := runWhatIf(t, whatifLog(t), 2, 3)
	if w.Replayed != 32 || w.Changed != 14 {
		t.Errorf("replayed %d changed %d, want 32 and 14", w.Replayed, w.Changed)
	}
	if got, want := transitions(w), "challenged>refused 6/2 allowed>challenged 5/3 allowed>refused 3/2"; got != want {
		t.Errorf("transitions %s\nwant %s", got, want)
	}
	want := strings.Join([]string{
		"203.0.113.1 allowed>challenged 2",
		"203.0.113.1 allowed>refused 1",
		"203.0.113.1 challenged>refused 5",
		"203.0.113.2 allowed>challenged 1",
		"203.0.113.3 allowed>challenged 2",
		"203.0.113.3 allowed>refused 2",
		"203.0.113.3 challenged>refused 1",
	}, "\n")
	if got := identities(w); got != want {
		t.Errorf("identities:\n%s\nwant:\n%s", got, want)
	}
	for _, r := range w.Rules {
		if r.LoggedRule != "anonymous:/api/search" || r.CandidateRule != "anonymous:/api/search" {
			t.Errorf("rule change %+v: want only anonymous:/api/search", r)
		}
	}
}

// TestWhatIfLoosened: /api/search up to 6 and /api/export up to 10: the
// requests no longer refused or challenged. 203.0.113.3's token pass stays
// a pass (its token is replayed).
func TestWhatIfLoosened(t *testing.T) {
	w := runWhatIf(t, whatifLog(t), 6, 10)
	if got, want := transitions(w), "challenged>allowed 5/3 refused>allowed 2/1 refused>challenged 2/1"; got != want {
		t.Errorf("transitions %s\nwant %s", got, want)
	}
	want := strings.Join([]string{
		"203.0.113.1 challenged>allowed 1",
		"203.0.113.1 refused>challenged 2",
		"203.0.113.3 challenged>allowed 1",
		"user:alice challenged>allowed 3",
		"user:alice refused>allowed 2",
	}, "\n")
	if got := identities(w); got != want {
		t.Errorf("identities:\n%s\nwant:\n%s", got, want)
	}
	for _, i := range w.Identities {
		if i.Identity == "user:alice" && i.Tier != "authenticated" {
			t.Errorf("alice's tier under the candidate: %q", i.Tier)
		}
	}
	// Rendered through the report package, in every format, against
	// golden files (the log's directory and the configuration's file name
	// vary between runs; the rest does not).
	w.Config = "candidate.yaml"
	for _, f := range []report.Format{report.Markdown, report.HTML, report.JSON, report.CSV} {
		var b bytes.Buffer
		if err := w.Render(&b, f); err != nil {
			t.Fatal(err)
		}
		golden.Check(t, "whatif."+f.String(), b.Bytes())
	}
}

// TestWhatIfRangeError: --from after --to is refused.
func TestWhatIfRangeError(t *testing.T) {
	_, err := assemble.WhatIf(context.Background(), assemble.WhatIfOptions{Config: loadConfig(t, whatifConfig(5, 3)),
		DecisionsDir: t.TempDir(), From: whatifT0.Add(time.Hour), To: whatifT0})
	if err == nil || !strings.Contains(err.Error(), "not before") {
		t.Fatalf("err = %v", err)
	}
}

// TestWhatIfConcurrencyOutOfOrder: a concurrency rule (one slot) on
// /api/upload. The edge writes a decision when its response ends, so the
// log holds the refusal of the second request (decided at 1 s, ended at
// once) and another client's request (1.5 s) before the first request
// (decided at 0, ended at 2 s), and the third (3 s) after them. The replay decides in decision time and holds each
// slot for the logged upstream latency: replaying the base configuration
// changes nothing; two slots let the second request through.
func TestWhatIfConcurrencyOutOfOrder(t *testing.T) {
	logDir := filepath.Join(t.TempDir(), "log")
	yaml := func(slots int) string {
		return fmt.Sprintf(`
edge: {upstream: ORIGIN, node: n1}
tiers:
  anonymous:
    global: {limit: 100, window: 1m}
    paths:
      /api/upload: {limit: %d, algorithm: concurrency}
`, slots)
	}
	e, err := assemble.NewEdge(context.Background(), loadConfig(t, yaml(1)+"decisions: {dir: "+logDir+", linger: 1ms}\n"), assemble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	req := func() *edge.Request {
		return &edge.Request{RemoteAddr: "203.0.113.7:4000", Method: "POST", Host: "api.example", Path: "/api/upload", URI: "/api/upload", Header: http.Header{}}
	}
	ctx := context.Background()
	at := func(s float64) time.Time { return whatifT0.Add(time.Duration(s * float64(time.Second))) }
	var v1, v2, v3, other edge.Verdict
	e.Limiter.Begin(ctx, at(0), req(), &v1)
	e.Limiter.Begin(ctx, at(1), req(), &v2)
	e.Limiter.End(ctx, at(1), &v2)
	// Another client's request, logged between the refusal and the first.
	o := req()
	o.RemoteAddr, o.Path, o.URI = "198.51.100.1:4000", "/other", "/other"
	e.Limiter.Begin(ctx, at(1.5), o, &other)
	e.Limiter.End(ctx, at(1.5), &other)
	v1.UpstreamLatency = 2 * time.Second
	e.Limiter.End(ctx, at(2), &v1)
	e.Limiter.Begin(ctx, at(3), req(), &v3)
	e.Limiter.End(ctx, at(3), &v3)
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := []string{v1.Outcome.String(), v2.Outcome.String(), v3.Outcome.String()}; !slices.Equal(got, []string{"allow", "block", "allow"}) {
		t.Fatalf("the base edge decided %v", got)
	}
	run := func(slots int) *report.WhatIf {
		w, err := assemble.WhatIf(ctx, assemble.WhatIfOptions{Config: loadConfig(t, yaml(slots)), DecisionsDir: logDir, From: whatifT0, To: whatifT0.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	if w := run(1); w.Replayed != 4 || w.Changed != 0 || w.OutOfOrder != 0 {
		t.Errorf("the base configuration: replayed %d, changed %d (%s), out of order %d", w.Replayed, w.Changed, identities(w), w.OutOfOrder)
	}
	if w := run(2); identities(w) != "203.0.113.7 refused>allowed 1" {
		t.Errorf("two slots: %s", identities(w))
	}
}

// TestWhatIfKeepsListDecisions: requests a list decided are kept as logged,
// not replayed (the edge did not count them), whatever the candidate.
func TestWhatIfKeepsListDecisions(t *testing.T) {
	logDir := filepath.Join(t.TempDir(), "log")
	l, err := seglog.Open(logDir, seglog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr("203.0.113.9")
	ds := []decisions.Decision{
		{Time: whatifT0, ClientIP: ip, Tier: "anonymous", Path: "/api/search", Outcome: decisions.AllowListed, Reason: "allow list"},
		{Time: whatifT0, ClientIP: ip, Tier: "anonymous", Path: "/api/search", Outcome: decisions.DenyListed, Reason: "deny list"},
		{Time: whatifT0, ClientIP: ip, Tier: "anonymous", Path: "/api/search", Outcome: decisions.Challenge, Reason: edge.ReasonChallengeListed},
		{Time: whatifT0, ClientIP: ip, Tier: "anonymous", Path: "/api/search", Rule: "anonymous:/api/search", Outcome: decisions.Allow, Reason: "within the limit"},
	}
	if err := decisionlog.NewWriter(l, decisionlog.WriterOptions{}).WriteBatch(ds); err != nil {
		t.Fatal(err)
	}
	l.Close()
	w, err := assemble.WhatIf(context.Background(), assemble.WhatIfOptions{Config: loadConfig(t, whatifConfig(5, 3)), DecisionsDir: logDir, From: whatifT0, To: whatifT0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if w.Kept != 3 || w.Replayed != 1 || w.Changed != 0 {
		t.Errorf("kept %d replayed %d changed %d: want 3, 1, 0", w.Kept, w.Replayed, w.Changed)
	}
}
