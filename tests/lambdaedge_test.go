package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/golang-jwt/jwt/v5"

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/edge"
	"github.com/ratewarden/ratewarden/edge/challenge"
	"github.com/ratewarden/ratewarden/edge/dynamostore"
	"github.com/ratewarden/ratewarden/edge/lambdaedge"
	"github.com/ratewarden/ratewarden/edge/limit"
)

var updateVectors = flag.Bool("update-vectors", false, "rewrite edge/lambdaedge/testdata/vectors.json from the Go core")

const (
	vectorsDir  = "../edge/lambdaedge/testdata"
	vectorsFile = vectorsDir + "/vectors.json"
	// The conformance vectors' secrets: test keys, in the repository on
	// purpose, guarding nothing.
	vectorChallengeKeys = "k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	vectorJWTKey        = "conformance-jwt-key-0123456789abcdef"
)

// vectorFile is edge/lambdaedge/testdata/vectors.json: requests, their
// times and the store state they meet, and what the Go core decided.
type vectorFile struct {
	Comment string   `json:"comment"`
	Secrets secrets  `json:"secrets"`
	Vectors []vector `json:"vectors"`
}

type secrets struct {
	ChallengeKeys string `json:"challengeKeys"`
	JWTKey        string `json:"jwtKey"`
}

type vector struct {
	Name  string `json:"name"`
	Group string `json:"group"` // "up": dynalite; "down": a closed port (run in order, breaker included)
	Time  string `json:"time"`  // RFC 3339
	// State seeds counters before the request: count hits of the rule for
	// the address or user, in the request's window.
	State []seed          `json:"state,omitempty"`
	Event json.RawMessage `json:"event"` // CloudFront viewer-request event
	Want  outcome         `json:"want"`
}

type seed struct {
	Rule  string `json:"rule"`
	IP    string `json:"ip,omitempty"`
	User  string `json:"user,omitempty"`
	Count int64  `json:"count"`
}

// outcome is what a vector yields: the decision line and the response,
// either the request forwarded (uri and headers) or the response generated
// (status, description, headers, body); header names in lower case.
type outcome struct {
	Decision string              `json:"decision"`
	Status   string              `json:"status,omitempty"`
	Desc     string              `json:"statusDescription,omitempty"`
	URI      string              `json:"uri,omitempty"`
	Headers  map[string][]string `json:"headers"`
	Body     string              `json:"body,omitempty"`
}

type cfEvent struct {
	Records []struct {
		CF struct {
			Config struct {
				RequestID string `json:"requestId"`
			} `json:"config"`
			Request cfRequest `json:"request"`
		} `json:"cf"`
	} `json:"Records"`
}

type cfRequest struct {
	ClientIP    string                         `json:"clientIp"`
	Method      string                         `json:"method"`
	URI         string                         `json:"uri"`
	QueryString string                         `json:"querystring"`
	Headers     map[string][]map[string]string `json:"headers"`
	Status      string                         `json:"status"`
	Desc        string                         `json:"statusDescription"`
	Body        string                         `json:"body"`
}

// conformanceConfig loads testdata/conformance.yaml with its list files
// and the store endpoint and table given.
func conformanceConfig(t *testing.T, endpoint, table string) *config.Config {
	t.Helper()
	cfg, err := config.Load(filepath.Join(vectorsDir, "conformance.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(vectorsDir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Lists.AllowFile, cfg.Lists.DenyFile = filepath.Join(abs, "allow.txt"), filepath.Join(abs, "deny.txt")
	cfg.Store.DynamoDB.Endpoint, cfg.Store.DynamoDB.Table = endpoint, table
	cfg.Edge.Upstream = assemble.BuiltinUpstream
	return cfg
}

func vectorEnv(k string) string {
	switch k {
	case "RW_TEST_CHALLENGE_KEYS":
		return vectorChallengeKeys
	case "RW_TEST_JWT_KEY":
		return vectorJWTKey
	}
	return ""
}

// closedPort returns the address of a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// goCore decides the vectors of one group with the Go Limiter as the
// binary assembles it, in order, seeding the table first.
func goCore(t *testing.T, vs []vector, endpoint, table string) []outcome {
	t.Helper()
	cfg := conformanceConfig(t, endpoint, table)
	ctx := context.Background()
	e, err := assemble.NewEdge(ctx, cfg, assemble.Options{Getenv: vectorEnv})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	var out []outcome
	for _, v := range vs {
		now := vectorTime(t, v)
		var ev cfEvent
		if err := json.Unmarshal(v.Event, &ev); err != nil {
			t.Fatal(err)
		}
		rec := ev.Records[0].CF
		cr := rec.Request
		h := http.Header{}
		for name, list := range cr.Headers {
			for _, kv := range list {
				h.Add(name, kv["value"])
			}
		}
		if id := h.Get(cfg.Edge.RequestIDHeader); id == "" || len(id) > 128 {
			h.Set(cfg.Edge.RequestIDHeader, rec.Config.RequestID)
		}
		uri := cr.URI
		if cr.QueryString != "" {
			uri += "?" + cr.QueryString
		}
		req := edge.Request{RemoteAddr: net.JoinHostPort(cr.ClientIP, "0"), Method: cr.Method, Host: h.Get("Host"),
			Path: cr.URI, URI: uri, Header: h, RequestID: h.Get(cfg.Edge.RequestIDHeader)}
		var vd edge.Verdict
		e.Limiter.Begin(ctx, now, &req, &vd)
		o := outcome{Headers: map[string][]string{}}
		if resp, refused := edge.Refusal(&vd, cfg.Challenge.Page, cfg.Challenge.Param); refused {
			vd.Status = resp.Status
			w := httptest.NewRecorder()
			resp.Write(w, &vd)
			o.Status, o.Desc, o.Body = strconv.Itoa(resp.Status), http.StatusText(resp.Status), w.Body.String()
			for k, vals := range w.Header() {
				if k != "Content-Length" { // CloudFront's to set on a generated response
					o.Headers[strings.ToLower(k)] = vals
				}
			}
		} else {
			r, err := http.NewRequest(cr.Method, "http://origin.invalid/", nil)
			if err != nil {
				t.Fatal(err)
			}
			r.Host = h.Get("Host")
			r.URL.Path, r.URL.RawPath, r.URL.RawQuery = mustUnescape(cr.URI), cr.URI, cr.QueryString
			r.Header, r.RemoteAddr = h.Clone(), req.RemoteAddr
			fr := e.Limiter.Forward(r, &vd)
			o.URI = fr.URL.EscapedPath()
			for k, vals := range fr.Header {
				o.Headers[strings.ToLower(k)] = vals
			}
		}
		e.Limiter.Release(ctx, now, &vd)
		d := vd.Decision
		d.StoreLatency = 0 // measured, so never the same twice: zero on both sides
		o.Decision = string(decisions.AppendJSON(nil, &d))
		out = append(out, o)
	}
	return out
}

func mustUnescape(p string) string {
	if u, err := url.PathUnescape(p); err == nil {
		return u
	}
	return p
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func vectorTime(t *testing.T, v vector) time.Time {
	t.Helper()
	now, err := time.Parse(time.RFC3339Nano, v.Time)
	if err != nil {
		t.Fatalf("%s: time: %v", v.Name, err)
	}
	return now
}

// seedTable writes each vector's store state into table.
func seedTable(t *testing.T, dc *dynamodb.Client, table string, vs []vector) {
	t.Helper()
	cfg := conformanceConfig(t, "", table)
	plan, err := edge.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string]edge.RulePlan{}
	for _, tr := range plan.Tiers {
		rules[tr.Global.ID] = tr.Global
		for _, p := range tr.Paths {
			rules[p.Rule.ID] = p.Rule
		}
	}
	st, err := dynamostore.New(dynamostore.Options{Client: dc, Table: table, Region: "us-east-1", ReadAfterConditionFailure: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		for _, s := range v.State {
			rp, ok := rules[s.Rule]
			if !ok {
				t.Fatalf("%s: no rule %s", v.Name, s.Rule)
			}
			k := limit.Key{Rule: s.Rule, User: s.User}
			if s.IP != "" {
				k.Addr = mustAddr(t, s.IP)
			}
			r := limit.Rule{Algorithm: limit.FixedWindow, Limit: rp.Limit, Window: rp.Window, MaxCount: rp.MaxCount}
			if _, err := st.Take(context.Background(), k, r, vectorTime(t, v), s.Count); err != nil {
				t.Fatalf("%s: seed: %v", v.Name, err)
			}
		}
	}
}

// nodeRun runs the vectors' events through the built function's handler.
func nodeRun(t *testing.T, fnDir string, vs []vector, endpoint string, s secrets) []outcome {
	t.Helper()
	type c struct {
		Time  string          `json:"time"`
		Event json.RawMessage `json:"event"`
	}
	in := map[string]any{"functionDir": fnDir, "secrets": s, "zeroLatency": true,
		"dynamodb": map[string]any{"endpoint": endpoint, "region": "us-east-1", "maxAttempts": 1}}
	var cases []c
	for _, v := range vs {
		cases = append(cases, c{Time: strconv.FormatInt(vectorTime(t, v).UnixNano(), 10), Event: v.Event})
	}
	in["cases"] = cases
	var out []outcome
	for _, line := range runNodeHandler(t, in) {
		var r struct {
			Decision string    `json:"decision"`
			Result   cfRequest `json:"result"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("runner output %q: %v", line, err)
		}
		o := outcome{Decision: r.Decision, Headers: map[string][]string{}}
		if r.Result.Status != "" {
			o.Status, o.Desc, o.Body = r.Result.Status, r.Result.Desc, r.Result.Body
		} else {
			o.URI = r.Result.URI
		}
		for name, list := range r.Result.Headers {
			for _, kv := range list {
				o.Headers[strings.ToLower(name)] = append(o.Headers[strings.ToLower(name)], kv["value"])
			}
		}
		out = append(out, o)
	}
	return out
}

// runNodeHandler runs tests/lambdaedge.mjs with input and returns its
// output lines.
func runNodeHandler(t *testing.T, input any) [][]byte {
	t.Helper()
	b, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(program(t, "node", "Node.js 20"), "--no-warnings", "lambdaedge.mjs")
	cmd.Stdin = bytes.NewReader(b)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node lambdaedge.mjs: %v\n%s", err, stderr.String())
	}
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, slices.Clone(sc.Bytes()))
	}
	return lines
}

// buildFunction builds the viewer-request function for cfg with the
// package the binary uses.
func buildFunction(t *testing.T, cfg *config.Config) string {
	t.Helper()
	res, err := lambdaedge.Build(cfg, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return res.Dir
}

func loadVectors(t *testing.T) vectorFile {
	t.Helper()
	b, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	var vf vectorFile
	if err := json.Unmarshal(b, &vf); err != nil {
		t.Fatal(err)
	}
	return vf
}

func group(vs []vector, g string) []vector {
	var out []vector
	for _, v := range vs {
		if v.Group == g {
			out = append(out, v)
		}
	}
	return out
}

func awsTestEnv(t *testing.T) {
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_MAX_ATTEMPTS", "1") // the function's client sends once too: a refused connection is one error
}

// TestLambdaEdgeConformance runs the conformance vectors through the Go
// Limiter (as the binary assembles it, counting in dynalite) and through
// the built viewer-request function on Node: both must produce the
// vectors' decision lines byte for byte and the same responses.
func TestLambdaEdgeConformance(t *testing.T) {
	endpoint := awstest.Endpoint(t, awstest.DynamoDBEnv)
	awsTestEnv(t)
	vf := loadVectors(t)
	if *updateVectors {
		vf = generateVectors(t)
	}
	dc := dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) { o.BaseEndpoint = &endpoint })
	down := closedPort(t)
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)

	run := func(side string, runGroup func(vs []vector, endpoint, table string) []outcome) map[string]outcome {
		got := map[string]outcome{}
		table := "lambdaedge-" + side + "-" + suffix
		awstest.CreateTable(t, dc, dynamostore.TableSpec(table))
		up := group(vf.Vectors, "up")
		seedTable(t, dc, table, up)
		for i, o := range runGroup(up, endpoint, table) {
			got[up[i].Name] = o
		}
		dn := group(vf.Vectors, "down")
		for i, o := range runGroup(dn, down, table) {
			got[dn[i].Name] = o
		}
		return got
	}
	goGot := run("go", func(vs []vector, ep, table string) []outcome { return goCore(t, vs, ep, table) })
	if *updateVectors {
		for i := range vf.Vectors {
			vf.Vectors[i].Want = goGot[vf.Vectors[i].Name]
		}
		b, err := json.MarshalIndent(vf, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(vectorsFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fnDir := buildFunction(t, conformanceConfig(t, "", "unused"))
	jsGot := run("js", func(vs []vector, ep, table string) []outcome {
		// The function's configuration names its own table; point it at this run's.
		setTable(t, fnDir, table)
		return nodeRun(t, fnDir, vs, ep, vf.Secrets)
	})
	for _, v := range vf.Vectors {
		for side, got := range map[string]outcome{"go": goGot[v.Name], "node": jsGot[v.Name]} {
			if got.Decision != v.Want.Decision {
				t.Errorf("%s (%s): decision\n got %s\nwant %s", v.Name, side, got.Decision, v.Want.Decision)
			}
			g, _ := json.Marshal(withoutDecision(got))
			w, _ := json.Marshal(withoutDecision(v.Want))
			if !bytes.Equal(g, w) {
				t.Errorf("%s (%s): response\n got %s\nwant %s", v.Name, side, g, w)
			}
		}
	}
}

func withoutDecision(o outcome) outcome {
	o.Decision = ""
	return o
}

// setTable rewrites the table of a built function's config.json.
func setTable(t *testing.T, fnDir, table string) {
	t.Helper()
	p := filepath.Join(fnDir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var c lambdaedge.Config
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	c.Store.Table = table
	if b, err = json.Marshal(&c); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// generateVectors makes the vectors' requests (tokens are issued with the
// vectors' keys for the vectors' times); the Go core then fills in Want.
func generateVectors(t *testing.T) vectorFile {
	t.Helper()
	keys, err := challenge.ParseKeys(vectorChallengeKeys)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 3, 1, 12, 0, 30, 250_000_000, time.UTC)
	n := 0
	ev := func(ip, method, uri, query string, headers ...string) json.RawMessage {
		n++
		hs := map[string][]map[string]string{}
		if !slices.ContainsFunc(headers, func(h string) bool { return h == "Host" }) {
			hs["host"] = []map[string]string{{"key": "Host", "value": "shop.example"}}
		}
		for i := 0; i+1 < len(headers); i += 2 {
			name := strings.ToLower(headers[i])
			hs[name] = append(hs[name], map[string]string{"key": headers[i], "value": headers[i+1]})
		}
		e := map[string]any{"Records": []any{map[string]any{"cf": map[string]any{
			"config":  map[string]any{"distributionDomainName": "d111111abcdef8.cloudfront.net", "distributionId": "EDFDVBD6EXAMPLE", "eventType": "viewer-request", "requestId": fmt.Sprintf("vec-%03d", n)},
			"request": map[string]any{"clientIp": ip, "headers": hs, "method": method, "querystring": query, "uri": uri},
		}}}}
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	jwtFor := func(claims jwt.MapClaims, method jwt.SigningMethod, key any) string {
		s, err := jwt.NewWithClaims(method, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	hs := []byte(vectorJWTKey)
	exp := t0.Add(time.Hour).Unix()
	alice := "Bearer " + jwtFor(jwt.MapClaims{"sub": "alice", "exp": exp}, jwt.SigningMethodHS256, hs)
	bobPro := "Bearer " + jwtFor(jwt.MapClaims{"sub": "bob", "plan": "pro", "exp": exp}, jwt.SigningMethodHS256, hs)
	expired := "Bearer " + jwtFor(jwt.MapClaims{"sub": "carol", "exp": t0.Add(-time.Hour).Unix()}, jwt.SigningMethodHS256, hs)
	forgedJWT := "Bearer " + jwtFor(jwt.MapClaims{"sub": "dave", "exp": exp}, jwt.SigningMethodHS256, []byte("another-key-of-thirty-two-bytes!!"))
	none := "Bearer " + jwtFor(jwt.MapClaims{"sub": "erin", "exp": exp}, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType)
	mallory := "Bearer " + jwtFor(jwt.MapClaims{"sub": "mallory", "exp": exp}, jwt.SigningMethodHS256, hs)
	frank := "Bearer " + jwtFor(jwt.MapClaims{"sub": "frank", "exp": exp}, jwt.SigningMethodHS256, hs)
	umlaut := "Bearer " + jwtFor(jwt.MapClaims{"sub": "jürgen", "plan": "plüs", "exp": exp}, jwt.SigningMethodHS256, hs)
	villain := "Bearer " + jwtFor(jwt.MapClaims{"sub": "bösewicht", "exp": exp}, jwt.SigningMethodHS256, hs)
	partner := "Bearer " + jwtFor(jwt.MapClaims{"sub": "partner-bot", "exp": exp}, jwt.SigningMethodHS256, hs)
	tok := func(ip string, ttl time.Duration) string {
		return keys.Issue(challenge.Subject(mustAddr(t, ip), ""), t0, ttl)
	}
	forge := func(s string) string {
		b := []byte(s)
		if b[len(b)-2] == 'A' {
			b[len(b)-2] = 'B'
		} else {
			b[len(b)-2] = 'A'
		}
		return string(b)
	}
	at := func(d time.Duration) string { return t0.Add(d).Format(time.RFC3339Nano) }
	st := func(rule, ip string, count int64) []seed { return []seed{{Rule: rule, IP: ip, Count: count}} }
	const reports = "anonymous:/api/reports"
	vs := []vector{
		{Name: "seed: first hit on /api/reports passes", Event: ev("203.0.113.1", "GET", "/api/reports", "")},
		{Name: "seed: fifth hit passes with nothing left", State: st(reports, "203.0.113.2", 4), Event: ev("203.0.113.2", "GET", "/api/reports", "")},
		{Name: "seed: sixth hit is challenged (302 to /captcha)", State: st(reports, "203.0.113.3", 5), Event: ev("203.0.113.3", "GET", "/api/reports", "x=1&y=a b")},
		{Name: "seed: tenth hit is still challenged", State: st(reports, "203.0.113.4", 9), Event: ev("203.0.113.4", "GET", "/api/reports", "")},
		{Name: "seed: eleventh hit is blocked (429)", State: st(reports, "203.0.113.5", 10), Event: ev("203.0.113.5", "GET", "/api/reports", "")},
		{Name: "seed: the next hit is answered by the over-limit cache", Event: ev("203.0.113.5", "GET", "/api/reports", "")},
		{Name: "token: a valid token in the header passes a challenge", State: st(reports, "203.0.113.6", 7), Event: ev("203.0.113.6", "GET", "/api/reports", "", "X-Ratewarden-Token", tok("203.0.113.6", 30*time.Minute))},
		{Name: "token: a valid token in the cookie passes a challenge", State: st(reports, "203.0.113.7", 7), Event: ev("203.0.113.7", "GET", "/api/reports", "", "Cookie", "theme=dark; rw_challenge="+tok("203.0.113.7", 30*time.Minute))},
		{Name: "token: an expired token does not pass", State: st(reports, "203.0.113.8", 7), Event: ev("203.0.113.8", "GET", "/api/reports", "", "X-Ratewarden-Token", tok("203.0.113.8", -time.Minute))},
		{Name: "token: a forged token does not pass", State: st(reports, "203.0.113.9", 7), Event: ev("203.0.113.9", "GET", "/api/reports", "", "X-Ratewarden-Token", forge(tok("203.0.113.9", 30*time.Minute)))},
		{Name: "token: another client's token does not pass", State: st(reports, "203.0.113.10", 7), Event: ev("203.0.113.10", "GET", "/api/reports", "", "X-Ratewarden-Token", tok("203.0.113.99", 30*time.Minute))},
		{Name: "token: a token does not pass a block", State: st(reports, "203.0.113.11", 10), Event: ev("203.0.113.11", "GET", "/api/reports", "", "X-Ratewarden-Token", tok("203.0.113.11", 30*time.Minute))},
		{Name: "tier: a valid JWT is authenticated", Event: ev("203.0.113.20", "GET", "/api/reports", "", "Authorization", alice)},
		{Name: "tier: a JWT's plan picks its tier", Event: ev("203.0.113.21", "POST", "/api/orders", "", "Authorization", bobPro)},
		{Name: "tier: authenticated users count by user, not address", State: []seed{{Rule: "authenticated:/api/reports", User: "frank", Count: 30}}, Event: ev("203.0.113.22", "GET", "/api/reports", "", "Authorization", frank)},
		{Name: "tier: a plan that names no tier is authenticated, recorded as sent", Event: ev("203.0.113.27", "GET", "/", "", "Authorization", umlaut)},
		{Name: "lists: a denied non-ASCII user gets 403", Event: ev("203.0.113.28", "GET", "/", "", "Authorization", villain)},
		{Name: "jwt: expired is anonymous", Event: ev("203.0.113.23", "GET", "/api/reports", "", "Authorization", expired)},
		{Name: "jwt: forged is anonymous", Event: ev("203.0.113.24", "GET", "/api/reports", "", "Authorization", forgedJWT)},
		{Name: "jwt: alg none is anonymous", Event: ev("203.0.113.25", "GET", "/api/reports", "", "Authorization", none)},
		{Name: "identity: a viewer's user, plan and address headers are not believed and not forwarded", Event: ev("203.0.113.26", "GET", "/api/reports", "",
			"X-User-Id", "admin", "X-User-Plan", "enterprise", "X-Forwarded-For", "1.2.3.4", "True-Client-IP", "1.2.3.4", "Forwarded", "for=1.2.3.4", "X-Ratewarden-Tier", "pro")},
		{Name: "identity: a trusted proxy's forwarding and user headers are believed", Event: ev("10.1.2.3", "GET", "/api/reports", "", "X-Forwarded-For", "198.18.0.1, 10.9.9.9", "X-User-Id", "zoe", "X-User-Plan", "pro")},
		{Name: "lists: a denied address gets 403", Event: ev("192.0.2.66", "GET", "/", "")},
		{Name: "lists: a denied IPv6 prefix gets 403", Event: ev("2001:db8:bad:1::7", "GET", "/", "")},
		{Name: "lists: a denied user gets 403", Event: ev("203.0.113.30", "GET", "/", "", "Authorization", mallory)},
		{Name: "lists: an allowed prefix passes uncounted", State: st(reports, "198.51.100.7", 50), Event: ev("198.51.100.7", "GET", "/api/reports", "")},
		{Name: "lists: an allowed user passes uncounted", Event: ev("203.0.113.31", "GET", "/api/reports", "", "Authorization", partner)},
		{Name: "ipv6: counted by its /64", State: st(reports, "2001:db8:1:2::", 5), Event: ev("2001:db8:1:2:aaaa::1", "GET", "/api/reports", "")},
		{Name: "paths: an encoded unreserved character is decoded and counted", State: st(reports, "203.0.113.40", 5), Event: ev("203.0.113.40", "GET", "/api/%72eports", "")},
		{Name: "paths: case does not escape a rule", State: st(reports, "203.0.113.41", 10), Event: ev("203.0.113.41", "GET", "/API/REPORTS/2026", "")},
		{Name: "paths: a configured upper-case prefix matches folded", State: st("anonymous:/api/Export", "203.0.113.42", 3), Event: ev("203.0.113.42", "GET", "/api/export", "")},
		{Name: "paths: a segment parameter does not escape a rule", State: st(reports, "203.0.113.43", 10), Event: ev("203.0.113.43", "GET", "/api;x=1/reports", "")},
		{Name: "paths: an escaped delimiter does not escape a rule (%3A is :)", State: st("anonymous:/v1/things:batchGet", "203.0.113.46", 4), Event: ev("203.0.113.46", "GET", "/v1/things%3AbatchGet", "")},
		{Name: "paths: a prefix's %2A matches a literal *", State: st("anonymous:/api/x%2A", "203.0.113.47", 4), Event: ev("203.0.113.47", "GET", "/api/x*/y", "")},
		{Name: "paths: a non-ASCII path is encoded", Event: ev("203.0.113.44", "GET", "/café/ü", "")},
		{Name: "paths: an encoded slash is rejected", Event: ev("203.0.113.45", "GET", "/api%2Freports", "")},
		{Name: "paths: an encoded backslash is rejected", Event: ev("203.0.113.45", "GET", "/api%5creports", "")},
		{Name: "paths: dot segments are rejected", Event: ev("203.0.113.45", "GET", "/x/../api/reports", "")},
		{Name: "paths: encoded dot segments are rejected", Event: ev("203.0.113.45", "GET", "/x/%2e%2E/api/reports", "")},
		{Name: "paths: a repeated slash is rejected", Event: ev("203.0.113.45", "GET", "//api/reports", "")},
		{Name: "paths: a backslash is rejected", Event: ev("203.0.113.45", "GET", "/api\\reports", "")},
		{Name: "paths: double encoding is rejected", Event: ev("203.0.113.45", "GET", "/api/%252e%252e/admin", "")},
		{Name: "paths: an overlong UTF-8 form is rejected", Event: ev("203.0.113.45", "GET", "/%c0%ae%c0%ae/admin", "")},
		{Name: "paths: an encoded NUL is rejected", Event: ev("203.0.113.45", "GET", "/api/reports%00.html", "")},
		{Name: "paths: a raw control character is rejected", Event: ev("203.0.113.45", "GET", "/api/\u0001reports", "")},
		{Name: "paths: a parameter on a dot segment is rejected", Event: ev("203.0.113.45", "GET", "/api/..;/admin", "")},
		{Name: "paths: a bad escape is rejected", Event: ev("203.0.113.45", "GET", "/api/%zz", "")},
		{Name: "paths: a path longer than 8 KiB gets 414", Event: ev("203.0.113.45", "GET", "/"+strings.Repeat("a", 8200), "")},
		{Name: "paths: a relative path is rejected", Event: ev("203.0.113.45", "GET", "api/reports", "")},
		{Name: "shadow: a shadow rule records and passes", State: st("anonymous:/api/beta", "203.0.113.50", 1), Event: ev("203.0.113.50", "GET", "/api/beta/x", "")},
		{Name: "escaping: hostile host and request id are written as JSON", Event: ev("203.0.113.51", "GET", "/", "", "Host", "evil\"\\host\u2028\u00e9", "X-Request-Id", "id\t\"quoted\"\u0007")},
		{Name: "admin: over the limit on a fail-closed path blocks without challenge", State: st("anonymous:/api/admin/", "203.0.113.52", 2), Event: ev("203.0.113.52", "DELETE", "/api/admin/users/7", "")},
		{Name: "challenge page: a client over its global limit reaches the page", State: st("anonymous:global", "203.0.113.70", 70), Event: ev("203.0.113.70", "GET", "/captcha", "redirect=%2Fapi%2Fitems")},
		{Name: "challenge page: and what is below it", State: st("anonymous:global", "203.0.113.71", 70), Event: ev("203.0.113.71", "GET", "/Captcha/widget.js", "")},
		{Name: "challenge page: the client's other paths are challenged", State: st("anonymous:global", "203.0.113.72", 70), Event: ev("203.0.113.72", "GET", "/api/items", "")},
		{Name: "challenge page: blocked over the ceiling", State: st("anonymous:global", "203.0.113.73", 120), Event: ev("203.0.113.73", "GET", "/captcha", "")},
		{Name: "nat64: a translated IPv4 client is counted as its IPv4 address", State: st(reports, "203.0.113.80", 5), Event: ev("64:ff9b::203.0.113.80", "GET", "/api/reports", "")},
		{Name: "nat64: another translated client is another client", Event: ev("64:ff9b::cb00:7151", "GET", "/api/reports", "")},
		{Name: "nat64: a translated client on the deny list gets 403", Event: ev("64:ff9b::192.0.2.66", "GET", "/", "")},
		{Name: "nat64: an IPv4-mapped client on the deny list gets 403", Event: ev("::ffff:192.0.2.66", "GET", "/", "")},
		{Name: "nat64: a translated address forwarded by a trusted proxy", Event: ev("10.1.2.3", "GET", "/", "", "X-Forwarded-For", "64:ff9b::198.18.0.9")},
		{Name: "identity: a viewer's headers spelt with _ for - are not forwarded (an origin reading CGI variables takes X_User_Id for X-User-Id)", Event: ev("203.0.113.29", "GET", "/api/reports", "",
			"X_User_Id", "admin", "x_user_plan", "enterprise", "X_Forwarded_For", "1.2.3.4", "X_Real_Ip", "1.2.3.4", "X_Ratewarden_Tier", "pro", "X_Ratewarden-Decision", "allow", "X_Custom", "kept")},
		{Name: "identity: a trusted proxy's headers spelt with _ for - are not forwarded either", Event: ev("10.1.2.4", "GET", "/api/reports", "", "X-Forwarded-For", "198.18.0.2", "X-User-Id", "zoe", "X_User_Id", "admin", "X_Forwarded_For", "1.2.3.4")},
		{Name: "identity: a request with no client address passes uncounted (fail_open)", Event: ev("", "GET", "/api/reports", "")},
		{Name: "identity: a request with no client address on a fail-closed path gets 503 without Retry-After (retrying cannot give it one)", Event: ev("", "GET", "/api/admin/x", "")},
	}
	for i := range vs {
		vs[i].Group, vs[i].Time = "up", at(time.Duration(i)*time.Millisecond)
	}
	// Last of its group, the clock moved on to within a second of the
	// window's end.
	vs = append(vs, vector{Name: "block: in the window's last second, try again in 1 second", Group: "up", Time: at(29_500 * time.Millisecond),
		State: st(reports, "203.0.113.48", 10), Event: ev("203.0.113.48", "GET", "/api/reports", "")})
	// The store is down: the breaker (2 failures, 10 s cooldown) opens
	// and the local fallback limit (5 a minute for /api/reports) counts.
	downs := []vector{
		{Name: "down: a fail-open path passes on a store error", Event: ev("203.0.113.60", "GET", "/api/reports", "")},
		{Name: "down: a fail-closed path gets 503 on a store error (breaker opens)", Event: ev("203.0.113.60", "GET", "/api/admin/x", "")},
		{Name: "down: breaker open, a fail-closed path gets 503 at once", Event: ev("203.0.113.60", "GET", "/api/admin/x", "")},
	}
	for i := 1; i <= 6; i++ {
		downs = append(downs, vector{Name: fmt.Sprintf("down: breaker open, local limit hit %d", i), Event: ev("203.0.113.61", "GET", "/api/reports", "")})
	}
	downs = append(downs, vector{Name: "down: after the cooldown the probe fails and the path fails open", Event: ev("203.0.113.61", "GET", "/api/reports", "")})
	for i := range downs {
		d := time.Duration(i) * time.Millisecond
		if i == len(downs)-1 {
			d = 11 * time.Second
		}
		downs[i].Group, downs[i].Time = "down", at(d)
	}
	return vectorFile{
		Comment: "Conformance vectors of the decision core under testdata/conformance.yaml: the Go Limiter and the viewer-request function must both produce want (decision lines byte for byte; store_latency_us is measured and written 0). Regenerate with: go test ./tests -run TestLambdaEdgeConformance -update-vectors",
		Secrets: secrets{ChallengeKeys: vectorChallengeKeys, JWTKey: vectorJWTKey},
		Vectors: append(vs, downs...),
	}
}
