package tests

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/syncstore"
)

// TestServerClockCache runs the store stack assemble.Store builds for
// store.redis.clock server on an edge whose clock is 2 s behind the
// server's: a key the over-limit cache holds is asked of the store again
// as soon as the server's window ends, not 2 s later by the edge's clock.
func TestServerClockCache(t *testing.T) {
	addr := awstest.Endpoint(t, awstest.RedisEnv)
	prefix := fmt.Sprintf("clock-%016x:", rand.Uint64())
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
store:
  type: redis
  redis: {addrs: [%q], clock: server, prefix: %q}
tiers:
  anonymous:
    global: {limit: 3, window: 3s}
`, addr, prefix)), "clock.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	store, closeStore, err := assemble.Store(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeStore(context.Background()) })
	stack := store.(*syncstore.Store)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { admin.Close() })
	serverNow := func() int64 {
		tm, err := admin.Time(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixNano()
	}

	// The rule as the edge compiles it without challenges: counts are
	// recorded up to the limit + 1, and refusals from then on are cached.
	// A window longer than the skew, so that the edge's clock falls in the
	// frozen span; the test waits for one window's end at most.
	r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 3, Window: 3 * time.Second, MaxCount: 4}
	k := limit.Key{Rule: "anonymous:global", Addr: netip.MustParseAddr("203.0.113.7")}
	const behind = 2 * time.Second
	take := func() (limit.Result, bool) {
		t.Helper()
		res, remote, err := stack.TakeRemote(context.Background(), k, r, time.Now().Add(-behind), 1)
		if err != nil {
			t.Fatal(err)
		}
		return res, remote
	}
	// Hit until the cache answers: a window may end on the way.
	var end int64
	for i := 0; end == 0; i++ {
		if i == 100 {
			t.Fatal("the cache never answered")
		}
		if res, remote := take(); !remote {
			if r.Allowed(res) {
				t.Fatalf("the cache allowed a hit: %+v", res)
			}
			end = res.Expires // the server's window end
		}
	}
	// The server's window ends; the edge's clock is still 2 s before that
	// instant. The server's clock cannot be injected: poll it.
	for serverNow() < end {
		time.Sleep(10 * time.Millisecond)
	}
	res, remote := take()
	if !remote || !r.Allowed(res) || res.Count != 1 {
		t.Errorf("first hit of the server's next window: %+v, from the store %v; want count 1 from the store", res, remote)
	}
}
