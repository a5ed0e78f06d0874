package assemble_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/edge/lambda"
)

// lambdaEvents are one event of each shape Lambda delivers, from the client
// addr; ALB events carry it as the last X-Forwarded-For hop.
func lambdaEvents(addr string) map[string]any {
	rest := events.APIGatewayProxyRequest{HTTPMethod: "GET", Path: "/x", Headers: map[string]string{"Host": "api.example.com"}}
	rest.RequestContext.Identity.SourceIP = addr
	v2 := events.APIGatewayV2HTTPRequest{Version: "2.0", RawPath: "/x"}
	v2.RequestContext.HTTP.Method = "GET"
	v2.RequestContext.HTTP.SourceIP = addr
	alb := events.ALBTargetGroupRequest{HTTPMethod: "GET", Path: "/x", Headers: map[string]string{"x-forwarded-for": addr}}
	alb.RequestContext.ELB.TargetGroupArn = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:targetgroup/tg/1"
	return map[string]any{"rest": rest, "http api": v2, "alb": alb}
}

// TestLambdaRecordsEveryInvocation serves Lambda events through the event
// adapter and the edge exactly as `ratewarden lambda` assembles them
// (Edge.Lambda), and reads the
// decisions back as soon as each Invoke returns, well before the emitter's
// 200 ms timer would write anything by itself: every decision is written
// before its invocation returns, with the privacy treatment applied, the
// deny and allow lists obeyed and the node recorded. Both sinks are
// checked: the configured decisions file, and Lambda's stdout when nothing
// is configured.
func TestLambdaRecordsEveryInvocation(t *testing.T) {
	dir := t.TempDir()
	allow, deny := filepath.Join(dir, "allow.txt"), filepath.Join(dir, "deny.txt")
	os.WriteFile(allow, []byte("198.51.100.0/24\n"), 0o600)
	os.WriteFile(deny, []byte("192.0.2.66\n"), 0o600)
	env := map[string]string{"RATEWARDEN_PRIVACY_KEY": base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("k"), 32))}
	base := `
  node: fn-eu-1
decisions:
  privacy: {addresses: truncate, users: hmac}
lists: {allow_file: ` + allow + `, deny_file: ` + deny + `}
` + anonymous
	for _, sink := range []struct {
		name string
		yaml string
		read func(t *testing.T, stdout *syncBuffer) []byte
	}{
		{"decisions file", "edge:\n  upstream: ORIGIN\n  decisions_file: " + filepath.Join(dir, "decisions.jsonl") + base,
			func(t *testing.T, _ *syncBuffer) []byte {
				b, err := os.ReadFile(filepath.Join(dir, "decisions.jsonl"))
				if err != nil {
					t.Fatal(err)
				}
				return b
			}},
		{"stdout", "edge:\n  upstream: ORIGIN" + base, func(_ *testing.T, stdout *syncBuffer) []byte { return stdout.Bytes() }},
	} {
		t.Run(sink.name, func(t *testing.T) {
			cfg := loadConfig(t, sink.yaml)
			stdout := &syncBuffer{}
			e, err := assemble.NewEdge(context.Background(), cfg, assemble.Options{Getenv: func(k string) string { return env[k] }, Fallback: stdout})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(context.Background())
			h := e.Lambda(lambda.Options{OnError: func(err error) { t.Error(err) }})
			// The anonymous tier allows 2 a minute: the third request of a
			// client is blocked, whatever the event's shape; the deny list
			// refuses 192.0.2.66; the allow list lets 198.51.100.9 past the
			// limit. Each shape has its own limited client.
			written := 0
			for shape, client := range map[string]string{"rest": "192.0.2.7", "http api": "192.0.2.8", "alb": "192.0.2.9"} {
				for i, c := range []struct{ addr, outcome, ip string }{
					{client, "allow", "192.0.2.0"},
					{client, "allow", "192.0.2.0"},
					{client, "block", "192.0.2.0"},
					{"192.0.2.66", "deny_listed", "192.0.2.0"},
					{"198.51.100.9", "allow_listed", "198.51.100.0"},
					{"198.51.100.9", "allow_listed", "198.51.100.0"},
					{"198.51.100.9", "allow_listed", "198.51.100.0"},
				} {
					raw, err := json.Marshal(lambdaEvents(c.addr)[shape])
					if err != nil {
						t.Fatal(err)
					}
					if _, err := h.Invoke(context.Background(), raw); err != nil {
						t.Fatalf("%s %d: %v", shape, i, err)
					}
					written++
					got := readDecisions(t, sink.read(t, stdout))
					if len(got) != written {
						t.Fatalf("%s invocation %d returned with %d decisions written, want %d", shape, i, len(got), written)
					}
					if d := got[len(got)-1]; d.Outcome.String() != c.outcome || d.ClientIP.String() != c.ip || d.Node != "fn-eu-1" || d.Privacy != "truncate/hmac" {
						t.Errorf("%s invocation %d from %s: %s %s node %q privacy %q, want %s %s node fn-eu-1 privacy truncate/hmac",
							shape, i, c.addr, d.Outcome, d.ClientIP, d.Node, d.Privacy, c.outcome, c.ip)
					}
				}
			}
		})
	}
}

// readDecisions parses JSON lines, keeping the decisions.
func readDecisions(t *testing.T, b []byte) []decisions.Decision {
	t.Helper()
	var out []decisions.Decision
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		d, _, err := decisions.ParseJSON(sc.Bytes())
		if err != nil {
			t.Fatalf("%v: %s", err, sc.Bytes())
		}
		if d.Kind == decisions.KindDecision {
			out = append(out, d)
		}
	}
	return out
}

// syncBuffer is Lambda's stdout: written by the emitter's goroutine, read by
// the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

var (
	_ io.Writer      = (*syncBuffer)(nil)
	_ lambda.Flusher = (*decisions.Emitter)(nil)
)
