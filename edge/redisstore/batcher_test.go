package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/limit/limittest"
	"github.com/ratewarden/ratewarden/edge/redisstore"
)

// newBatched returns a store whose calls go through a Batcher on c.
func newBatched(t testing.TB, c *redis.Client) (*redisstore.Store, *redisstore.Batcher) {
	t.Helper()
	b := redisstore.NewBatcher(c, redisstore.BatcherOptions{})
	t.Cleanup(func() { b.Close() })
	prefix := fmt.Sprintf("rwtest-%016x:", rand.Uint64())
	s, err := redisstore.New(redisstore.Options{Client: b, Prefix: prefix, Clock: redisstore.CallerTime})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePrefix(t, c, prefix) })
	return s, b
}

func TestBatcherConformance(t *testing.T) {
	c := newClient(t)
	limittest.Run(t, func(t *testing.T) limittest.Store { s, _ := newBatched(t, c); return s })
}

// TestBatcherConcurrent: concurrent takes through one Batcher count
// exactly, and share pipelines.
func TestBatcherConcurrent(t *testing.T) {
	s, b := newBatched(t, newClient(t))
	const workers, hits = 64, 50
	r := limit.Rule{Algorithm: limit.FixedWindow, Limit: 1 << 20, Window: time.Minute}
	k := limit.Key{Rule: "r", User: "u"}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range hits {
				if _, err := s.Take(context.Background(), k, r, base, 1); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	res, err := s.Take(context.Background(), k, r, base, 0)
	if err != nil || res.Count != workers*hits {
		t.Fatalf("count %d %v, want %d", res.Count, err, workers*hits)
	}
	st := b.Stats()
	if st.Calls != workers*hits+1 || st.Pipelines >= st.Calls {
		t.Errorf("stats %+v: want %d calls in fewer pipelines", st, workers*hits+1)
	}
}

// TestBatcherScriptFlushAndClose: a flushed script is loaded again through
// the pipeline; an ended context and a closed Batcher fail the call.
func TestBatcherScriptFlushAndClose(t *testing.T) {
	c := newClient(t)
	s, b := newBatched(t, c)
	r := limit.Rule{Algorithm: limit.SlidingWindow, Limit: 5, Window: time.Minute}
	k := limit.Key{Rule: "r", User: "alice"}
	ctx := context.Background()
	if _, err := s.Take(ctx, k, r, base, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Take(ctx, k, r, base, 1); err != nil || res.Count != 2 {
		t.Fatalf("after SCRIPT FLUSH: %+v %v", res, err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Take(ended, k, r, base, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("ended context: %v", err)
	}
	b.Close()
	if _, err := s.Take(ctx, k, r, base, 1); !errors.Is(err, redisstore.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}
