package tests

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// TestEdgeStoreOutage crashes the edge's Redis under the running binary,
// under each edge.server, and starts it again: while it is down, fail_closed
// paths are refused with 503 and the others pass, failing open; once it
// is back, both pass again; every request is one decision that says so.
func TestEdgeStoreOutage(t *testing.T) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		redis := redisServer(t)
		origin := newRecordingOrigin(t)
		store := fmt.Sprintf("store:\n  type: redis\n  timeout: 100ms\n  breaker: {failures: 3, cooldown: 500ms}\n  redis:\n    addrs: [%s]\n", redis.addr)
		cfg := seedWith(t, "", "store:\n  type: memory\n", store)
		decisionsFile := filepath.Join(t.TempDir(), "decisions.jsonl")
		base, _ := startEdge(t, bin, nil, "--server", server, "--config", cfg, "--upstream", origin.URL, "--decisions-file", decisionsFile)
		sent := 0
		get := func(path string, client int) int {
			sent++
			return rawGet(t, base, "127.0.0.1", path, fmt.Sprintf("X-Forwarded-For: 203.0.113.%d", client))
		}
		if s, a := get("/api/search", 1), get("/api/admin/users", 1); s != 200 || a != 200 {
			t.Fatalf("store up: /api/search %d, /api/admin/users %d", s, a)
		}
		redis.crash()
		for i := range 5 {
			if s := get("/api/search", 10+i); s != 200 {
				t.Errorf("store down: /api/search %d, want 200 (fail open)", s)
			}
			if s := get("/api/admin/users", 10+i); s != 503 {
				t.Errorf("store down: /api/admin/users %d, want 503 (fail closed)", s)
			}
		}
		redis.start()
		deadline := time.Now().Add(15 * time.Second)
		for get("/api/admin/users", 30) != 200 {
			if time.Now().After(deadline) {
				t.Fatal("/api/admin/users still refused 15s after the store came back")
			}
			time.Sleep(100 * time.Millisecond)
		}
		stops[t.Name()]()
		ds := readDecisions(t, decisionsFile)
		if len(ds) != sent {
			t.Fatalf("%d decisions for %d requests", len(ds), sent)
		}
		outcomes := map[decisions.Outcome]int{}
		for _, d := range ds {
			outcomes[d.Outcome]++
			want := 200
			if d.Outcome == decisions.FailClosed {
				want = 503
			}
			if d.Status != want {
				t.Errorf("%s %s: status %d, want %d", d.Outcome, d.Path, d.Status, want)
			}
		}
		if outcomes[decisions.FailOpen] != 5 || outcomes[decisions.FailClosed] < 5 || outcomes[decisions.Allow] < 3 {
			t.Errorf("outcomes %v: want 5 fail_open, 5 or more fail_closed, and allowed before and after", outcomes)
		}
		if got := len(origin.take()); got != sent-outcomes[decisions.FailClosed] {
			t.Errorf("the origin got %d requests, want the %d passed", got, sent-outcomes[decisions.FailClosed])
		}
	})
}
