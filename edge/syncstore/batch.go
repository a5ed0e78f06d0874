package syncstore

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/edge/limit"
)

// delta is a count of pending hits on its way to the store.
type delta struct {
	n   int64
	at  int64 // unix ns the hits are stamped with: the latest of them
	win int64 // the window they were admitted in
}

// takeBatched takes n hits under a rule with slack s: locally while the
// key is far from its limit, at the store near it.
func (s *Store) takeBatched(ctx context.Context, key limit.Key, rule *limit.Rule, now time.Time, n, slack int64) (limit.Result, bool, error) {
	ns := s.storeNow(now)
	w := int64(rule.Window)
	sh := s.shardFor(&key)
	mk := mapKey{key, rule.Algorithm}

	sh.mu.Lock()
	if s.closed.Load() {
		// Checked under the lock, so that Close's last Flush, which takes
		// every shard's lock after closing, sees every local admission.
		sh.mu.Unlock()
		return s.takeExact(ctx, key, rule, now, n)
	}
	e := s.entryFor(sh, mk, rule, ns)
	if e == nil {
		sh.mu.Unlock()
		s.untracked.Add(1)
		return s.takeExact(ctx, key, rule, now, n)
	}
	if res, ok := e.cached(rule, ns, n); ok {
		sh.mu.Unlock()
		sh.cacheHits.Add(1)
		return res, false, nil
	}
	idx := ns / w
	if idx == e.win-1 {
		// As at the store: a hit stamped in the window before counts in
		// the current one.
		idx = e.win
	}
	if idx < e.win {
		// A clock far behind the others': the store decides.
		sh.mu.Unlock()
		res, err := s.call(ctx, key, *rule, now, n)
		return res, true, err
	}
	var old, pend delta
	if idx > e.win {
		// The window rolled: send its pending hits, stamped in it, and
		// learn the new window's count from the store.
		old = e.take(e.win)
		e.win, e.hasKnown, e.lost, e.failures = idx, false, 0, 0
		sh.expires(e, windowEnd(rule, idx))
	}
	u := e.pending + e.inflight + e.lost
	if e.hasKnown && u+n <= slack && e.known+u+n <= rule.Limit-s.nodes*slack {
		prior := e.known + u
		e.pending += n
		e.stamp = max(e.stamp, ns)
		if e.pending >= slack {
			pend = e.take(idx)
		}
		sh.mu.Unlock()
		sh.localAdmits.Add(1)
		s.send(ctx, sh, e, key, rule, old)
		s.send(ctx, sh, e, key, rule, pend)
		return localResult(rule, idx, prior, ns, n), false, nil
	}
	pend = e.take(idx)
	sh.mu.Unlock()

	s.send(ctx, sh, e, key, rule, old)
	if err := s.send(ctx, sh, e, key, rule, pend); err != nil {
		return limit.Result{}, true, err
	}
	res, err := s.call(ctx, key, *rule, now, n)
	if err != nil {
		return res, true, err
	}
	sh.mu.Lock()
	e.learn(sh, rule, res, s.storeNow(now), n)
	sh.mu.Unlock()
	return res, true, nil
}

// take moves the pending hits into flight and returns them as a delta of
// window win; the shard's lock is held.
func (e *entry) take(win int64) delta {
	if e.pending == 0 {
		return delta{}
	}
	d := delta{n: e.pending, at: e.stamp, win: win}
	e.inflight += e.pending
	e.pending = 0
	return d
}

// learn records the store's answer res to n hits at ns; the shard's lock is
// held.
func (e *entry) learn(sh *shard, rule *limit.Rule, res limit.Result, ns, n int64) {
	if e.rule != *rule {
		return
	}
	if resultWindow(rule, res) == e.win {
		if e.hasKnown {
			e.known = max(e.known, res.Count)
		} else {
			e.known, e.hasKnown = res.Count, true
		}
	}
	if f, ok := freeze(rule, res, ns, n); ok {
		e.f = f
		sh.expires(e, f.until)
	}
}

// send sends a delta of pending hits to the store. A failed delta of the
// current window goes back to pending, to be sent again, up to maxAttempts
// times; then, or if its window has passed, it is dropped and counted. A
// delta the store refused whole because it would pass MaxCount is recorded
// as far as it fits, as the hits one by one would have been.
func (s *Store) send(ctx context.Context, sh *shard, e *entry, key limit.Key, rule *limit.Rule, d delta) error {
	if d.n == 0 {
		return nil
	}
	// The hits are stamped on the store's clock; the store is given the
	// caller's, as for every call.
	at := s.callerTime(d.at)
	left, sent := d.n, int64(0)
	var res limit.Result
	var err error
	for range maxFill {
		res, err = s.call(ctx, key, *rule, at, left)
		if err != nil || rule.MaxCount <= 0 || res.Count <= rule.MaxCount || left == 1 {
			break
		}
		// Not recorded: at most MaxCount - (Count - left) more fit.
		fit := rule.MaxCount - (res.Count - left)
		if fit <= 0 {
			break
		}
		left = fit
	}
	if err == nil && (rule.MaxCount <= 0 || res.Count <= rule.MaxCount) {
		sent = left
	}

	sh.mu.Lock()
	defer sh.mu.Unlock()
	e.inflight -= d.n
	if err != nil {
		if d.win != e.win {
			s.dropped.Add(uint64(d.n))
			return err
		}
		if e.failures++; e.failures >= maxAttempts {
			e.failures = 0
			e.lost += d.n
			s.dropped.Add(uint64(d.n))
			return err
		}
		e.pending += d.n
		e.stamp = max(e.stamp, d.at)
		return err
	}
	e.failures = 0
	s.flushes.Add(1)
	s.flushedHits.Add(uint64(sent))
	if sent < d.n {
		s.dropped.Add(uint64(d.n - sent))
	}
	if d.win == e.win {
		e.learn(sh, rule, res, d.at, left)
	}
	return nil
}

// Flush sends every pending count to the store, stamped in its window, and
// deletes expired keys that hold no count. The background flusher calls it
// every FlushInterval with time.Now; tests call it with fixed instants. It
// makes at most flushWorkers store calls at once and returns the first
// error, having counted all of them in Stats.
func (s *Store) Flush(ctx context.Context, now time.Time) error {
	ns := s.storeNow(now)
	type job struct {
		sh   *shard
		e    *entry
		key  limit.Key
		rule limit.Rule
		d    delta
	}
	var jobs []job
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for mk, e := range sh.m {
			if e.pending > 0 {
				jobs = append(jobs, job{sh, e, mk.key, e.rule, e.take(e.win)})
			}
		}
		if ns >= sh.minExp {
			s.sweep(sh, ns)
		}
		sh.mu.Unlock()
	}
	if len(jobs) == 0 {
		return nil
	}
	var (
		mu       sync.Mutex
		first    error
		failures int
		wg       sync.WaitGroup
		next     = make(chan int)
	)
	for range min(flushWorkers, len(jobs)) {
		wg.Go(func() {
			for i := range next {
				j := &jobs[i]
				if err := s.send(ctx, j.sh, j.e, j.key, &j.rule, j.d); err != nil {
					mu.Lock()
					failures++
					first = cmp.Or(first, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		return fmt.Errorf("flush %d of %d deltas: %w", failures, len(jobs), first)
	}
	return nil
}

// windowEnd is when the window idx of the rule's counts ends for the store.
func windowEnd(rule *limit.Rule, idx int64) int64 {
	w := int64(rule.Window)
	if rule.Algorithm == limit.SlidingWindow {
		return (idx + 2) * w // the window's count weighs on the next one
	}
	return (idx + 1) * w
}

// resultWindow is the window the store counted a window rule's hits in.
func resultWindow(rule *limit.Rule, res limit.Result) int64 {
	w := int64(rule.Window)
	if rule.Algorithm == limit.SlidingWindow {
		return res.Expires/w - 2
	}
	return res.Expires/w - 1
}

// localResult is the Result of n hits admitted locally in window idx after
// prior hits: what the store would answer with that count.
func localResult(rule *limit.Rule, idx, prior, ns, n int64) limit.Result {
	st := limit.State{A: idx, B: min(prior, lo32)}
	return rule.Take(&st, ns, n)
}
