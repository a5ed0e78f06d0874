package assemble_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/edge/lambda"
)

// BenchmarkLambdaInvoke is the cost of one invocation of `ratewarden
// lambda` (Edge.Lambda) on a REST API event from a new client, with the
// built-in origin: decoding the event, the decision, the response, and the
// decision written before Invoke returns to each sink Lambda can have.
// "buffered" is the same handler without the per-invocation flush (what
// Lambda lost), for the difference.
func BenchmarkLambdaInvoke(b *testing.B) {
	dir := b.TempDir()
	for _, c := range []struct {
		name  string
		yaml  string
		flush bool
	}{
		{"buffered/stdout", "edge: {upstream: ORIGIN}\n", false},
		{"flush/stdout", "edge: {upstream: ORIGIN}\n", true},
		{"flush/decisions_file", "edge: {upstream: ORIGIN, decisions_file: " + filepath.Join(dir, "d.jsonl") + "}\n", true},
		{"flush/decision_log_arrow", "decisions: {dir: " + filepath.Join(dir, "log") + "}\nedge: {upstream: ORIGIN}\n", true},
		{"flush/decision_log_json", "decisions: {dir: " + filepath.Join(dir, "log-json") + ", codec: json}\nedge: {upstream: ORIGIN}\n", true},
		{"flush/decision_log_fsync_batch", "decisions: {dir: " + filepath.Join(dir, "log-sync") + ", sync: batch}\nedge: {upstream: ORIGIN}\n", true},
	} {
		b.Run(c.name, func(b *testing.B) {
			// Every client within its limit: each invocation reaches the origin.
			cfg := loadConfig(b, c.yaml+"tiers: {anonymous: {global: {limit: 1000000000}}}\n")
			cfg.Edge.Upstream = assemble.BuiltinUpstream
			// Lambda's stdout is a pipe the runtime reads; a file stands in.
			stdout, err := os.Create(filepath.Join(b.TempDir(), "stdout"))
			if err != nil {
				b.Fatal(err)
			}
			defer stdout.Close()
			e, err := assemble.NewEdge(context.Background(), cfg, assemble.Options{Fallback: stdout})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close(context.Background())
			h := e.Lambda(lambda.Options{OnError: func(err error) { b.Error(err) }})
			if !c.flush {
				h = lambda.New(e.Handler(), lambda.Options{})
			}
			evs := make([][]byte, 1024)
			for i := range evs {
				a := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
				if evs[i], err = json.Marshal(lambdaEvents(a.String())["rest"]); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := h.Invoke(ctx, evs[i%len(evs)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
