package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pipeliner is what a Batcher needs of a Redis client: *redis.Client,
// *redis.ClusterClient, *redis.Ring and redis.UniversalClient have it.
type Pipeliner interface {
	Pipeline() redis.Pipeliner
}

var _ Client = (*Batcher)(nil)

// Batcher is a Client that sends the calls made at the same time to Redis
// in one pipeline: a call never waits for others to arrive, but the calls
// that arrive while every pipeline is in flight leave together in the
// next, so under concurrency one round trip (one write and one read on
// each side) carries many calls, and the CPU the system calls cost is
// shared among them. The store's scripts are independent calls on their
// own keys, so pipelining them changes no result.
//
// It is safe for concurrent use. Close stops its goroutines; calls after
// Close fail with ErrClosed.
type Batcher struct {
	client  Pipeliner
	queue   chan *batchCall
	max     int
	stop    chan struct{}
	wg      sync.WaitGroup
	closing sync.Once
	mu      sync.RWMutex // read: queueing a call; write: closing
	closed  bool

	calls     atomic.Uint64
	pipelines atomic.Uint64
}

// BatcherOptions configure a Batcher; the zero value is usable.
type BatcherOptions struct {
	// Pipelines is how many pipelines may be in flight at once; default 4.
	Pipelines int
	// MaxBatch bounds the calls of one pipeline; default 128.
	MaxBatch int
	// Queue bounds the calls waiting for a pipeline; a call that finds it
	// full waits for room (or its context). Default 4096.
	Queue int
}

// ErrClosed is the error of a call made after Close.
var ErrClosed = errors.New("redis batcher closed")

// NewBatcher starts a Batcher in front of client. The client must have
// ContextTimeoutEnabled set, as New requires of a client: the pipeline's
// deadline is the latest of its calls' deadlines.
func NewBatcher(client Pipeliner, o BatcherOptions) *Batcher {
	if o.Pipelines <= 0 {
		o.Pipelines = 4
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 128
	}
	if o.Queue <= 0 {
		o.Queue = 4096
	}
	b := &Batcher{client: client, queue: make(chan *batchCall, o.Queue), max: o.MaxBatch, stop: make(chan struct{})}
	b.wg.Add(o.Pipelines)
	for range o.Pipelines {
		go b.run()
	}
	return b
}

// batchCall is one call waiting for its pipeline.
type batchCall struct {
	ctx  context.Context
	cmd  *redis.Cmd
	done chan struct{}
}

var callPool = sync.Pool{New: func() any { return &batchCall{done: make(chan struct{}, 1)} }}

// EvalSha runs the script sha1 in the next pipeline.
func (b *Batcher) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return b.do(ctx, "evalsha", sha1, keys, args)
}

// Eval runs script in the next pipeline.
func (b *Batcher) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return b.do(ctx, "eval", script, keys, args)
}

func (b *Batcher) do(ctx context.Context, op, script string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, op, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	c := callPool.Get().(*batchCall)
	c.ctx, c.cmd = ctx, cmd
	// Under the read lock, so that nothing is queued once Close has begun
	// (the pipeline goroutines fail what is queued as they stop).
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		cmd.SetErr(ErrClosed)
		return cmd
	}
	select {
	case b.queue <- c:
		b.mu.RUnlock()
	case <-ctx.Done():
		b.mu.RUnlock()
		c.ctx, c.cmd = nil, nil
		callPool.Put(c)
		cmd.SetErr(ctx.Err())
		return cmd
	}
	b.calls.Add(1)
	select {
	case <-c.done:
		c.ctx, c.cmd = nil, nil
		callPool.Put(c)
		return cmd
	case <-ctx.Done():
		// The pipeline still owns c and cmd: answer with a command of our
		// own, and leave c to the garbage collector.
		late := redis.NewCmd(ctx, a...)
		late.SetErr(ctx.Err())
		return late
	}
}

// run is one pipeline goroutine: it takes the first waiting call, and
// with it every call waiting behind it up to MaxBatch.
func (b *Batcher) run() {
	defer b.wg.Done()
	batch := make([]*batchCall, 0, b.max)
	for {
		var first *batchCall
		select {
		case first = <-b.queue:
		case <-b.stop:
			b.drain()
			return
		}
		batch = append(batch[:0], first)
	fill:
		for len(batch) < b.max {
			select {
			case c := <-b.queue:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		b.send(batch)
		clear(batch)
	}
}

// send runs batch in one pipeline, under the latest of its deadlines, and
// wakes its callers.
func (b *Batcher) send(batch []*batchCall) {
	var deadline time.Time
	bounded := true
	live := 0
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			// Its caller has stopped waiting: nothing to send.
			c.cmd.SetErr(err)
			c.done <- struct{}{}
			continue
		}
		batch[live] = c
		live++
		d, ok := c.ctx.Deadline()
		bounded = bounded && ok
		if d.After(deadline) {
			deadline = d
		}
	}
	batch = batch[:live]
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if bounded {
		ctx, cancel = context.WithDeadline(ctx, deadline)
	}
	pipe := b.client.Pipeline()
	for _, c := range batch {
		pipe.Process(ctx, c.cmd)
	}
	// Exec's error is each command's: every caller reads its own.
	pipe.Exec(ctx)
	cancel()
	b.pipelines.Add(1)
	for _, c := range batch {
		c.done <- struct{}{}
	}
}

// drain fails the calls still queued when the Batcher closes.
func (b *Batcher) drain() {
	for {
		select {
		case c := <-b.queue:
			c.cmd.SetErr(ErrClosed)
			c.done <- struct{}{}
		default:
			return
		}
	}
}

// BatcherStats are a Batcher's counters.
type BatcherStats struct {
	Calls     uint64 // calls sent
	Pipelines uint64 // pipelines (round trips) that carried them
}

// Stats returns the counters so far.
func (b *Batcher) Stats() BatcherStats {
	return BatcherStats{Calls: b.calls.Load(), Pipelines: b.pipelines.Load()}
}

// Close stops the pipeline goroutines once the pipelines in flight are
// done, and fails the calls still queued. It does not close the client.
func (b *Batcher) Close() error {
	b.closing.Do(func() {
		b.mu.Lock()
		b.closed = true
		b.mu.Unlock()
		close(b.stop)
	})
	b.wg.Wait()
	return nil
}
