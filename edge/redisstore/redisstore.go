// Package redisstore is the Redis counter store: edges that share one Redis
// (a server, a replicated primary, or a Redis Cluster) share their limits.
//
// Every Take is one round trip: EVALSHA of one Lua script per algorithm,
// which reads the key's state, applies the arithmetic of package limit and
// writes the state back atomically. After SCRIPT FLUSH, a restart or a
// failover a server answers NOSCRIPT once, and the store sends the
// script itself with EVAL (a second round trip), which loads it again.
// Stats counts both.
//
// A script touches one key, named Prefix, then a hash tag in braces
// holding the algorithm, the rule id and the identity, so that on Redis
// Cluster the counters of one rule spread over the slots by identity:
//
//	rw:{fw:14:anonymous./api:4:192.0.2.1}
//
// The rule id is preceded by its length, the identity by its kind (u for
// a user, 4 or 6 for an address, - for none), and '%' and '}' in rule ids
// and identities are written %25 and %7D, so two keys share a counter only
// if they are the same key (an IPv4 address and the IPv4-mapped IPv6
// address differ, as in the memory store).
//
// A key expires (PX, rounded up to the millisecond) when its
// limit.Result.Expires passes, under CallerTime Options.ClockSkew later,
// and a key whose state is the zero State is deleted. Concurrency counters with hits in flight never expire, as in
// package limit: a hit an edge never releases stays counted.
//
// The scripts compute with Lua numbers, which are exact integers below
// 2⁵³, so they never hold a unix time in nanoseconds, and they divide
// wider products a digit at a time; see scripts.go. The results are
// package limit's, which the tests check against the memory store, with
// one bound: a token bucket's backlog must stay below 2⁵³ emission
// intervals, which a rule with a MaxCount below 2⁵³ (every rule the edge
// compiles) never records past.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/internal/limitspec"
)

// Clock chooses whose clock a Store counts by: ServerTime, the default,
// counts by the Redis server's clock (the scripts call TIME), so that edges
// whose clocks disagree still share windows exactly, and Take ignores its
// now argument; CallerTime counts by the now passed to Take. It is declared
// in the leaf limitspec, so that the configuration can decode it without
// importing the store.
type Clock = limitspec.Clock

// The clocks.
const (
	ServerTime = limitspec.ServerTime
	CallerTime = limitspec.CallerTime
)

// DefaultPrefix starts every key when Options.Prefix is empty.
const DefaultPrefix = "rw:"

// Client is what a Store needs of a Redis client. *redis.Client,
// *redis.ClusterClient, *redis.Ring and redis.UniversalClient have these
// methods.
type Client interface {
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd
	Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd
}

// Options configure a Store.
type Options struct {
	// Client sends the commands; required. A go-redis client must have
	// ContextTimeoutEnabled set, so that the deadline of the context the
	// edge passes to Take bounds the call (otherwise go-redis waits for
	// its ReadTimeout, 3 s by default, on a stalled server).
	Client Client
	// Prefix starts every key, so that several deployments can share a
	// server; default DefaultPrefix. It may not contain '{' or '}', which
	// would move the hash tag.
	Prefix string
	// Clock is whose clock counts; default ServerTime.
	Clock Clock
	// ClockSkew is, under CallerTime, how far the edges' clocks may lag
	// the server's: a key lives this long past its Result.Expires, so
	// that a hit stamped by a clock behind still finds the state it
	// counts in. The algorithms age a state out by themselves, so the
	// allowance costs memory, never a different result. Default
	// DefaultClockSkew; at most MaxClockSkew. Under ServerTime keys
	// expire at their Expires, rounded up to the millisecond.
	ClockSkew time.Duration
}

// ClockSkew bounds.
const (
	DefaultClockSkew = time.Second
	MaxClockSkew     = time.Hour
)

// Store is the Redis counter store. It is safe for concurrent use. It
// starts no goroutine and owns nothing to close: the client is the
// caller's. The zero Store is not usable; create one with New.
type Store struct {
	client Client
	prefix string
	server bool
	skew   int64 // ns a key outlives its Expires

	takes   atomic.Uint64
	calls   atomic.Uint64
	errs    atomic.Uint64
	reloads atomic.Uint64
}

// New returns a store that sends its commands through opts.Client. It
// makes no call to the server.
func New(opts Options) (*Store, error) {
	if opts.Client == nil {
		return nil, errors.New("new redis store: no client")
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(opts.Prefix, "{}") {
		return nil, fmt.Errorf("new redis store: prefix %q: want no '{' or '}', which would move the cluster hash tag", opts.Prefix)
	}
	if opts.Clock != ServerTime && opts.Clock != CallerTime {
		return nil, fmt.Errorf("new redis store: clock %d: want ServerTime or CallerTime", opts.Clock)
	}
	if !contextTimeouts(opts.Client) {
		return nil, errors.New("new redis store: the client ignores context deadlines: set ContextTimeoutEnabled in its options")
	}
	if opts.ClockSkew == 0 {
		opts.ClockSkew = DefaultClockSkew
	}
	if opts.ClockSkew < 0 || opts.ClockSkew > MaxClockSkew {
		return nil, fmt.Errorf("new redis store: clock skew %v: want 0 to %v", opts.ClockSkew, MaxClockSkew)
	}
	s := &Store{client: opts.Client, prefix: opts.Prefix, server: opts.Clock == ServerTime}
	if !s.server {
		s.skew = int64(opts.ClockSkew)
	}
	return s, nil
}

// contextTimeouts reports whether c is known to honour context deadlines,
// or is not a go-redis client whose options tell.
func contextTimeouts(c Client) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// Stats are a store's counters.
type Stats struct {
	Takes   uint64 // calls of Take
	Calls   uint64 // round trips to the server: EVALSHA, and EVAL after NOSCRIPT
	Errors  uint64 // calls of Take that returned an error
	Reloads uint64 // NOSCRIPT answers, each followed by an EVAL
}

// Stats returns the store's counters; under concurrent Takes each field
// is current but they are not a snapshot together.
func (s *Store) Stats() Stats {
	return Stats{Takes: s.takes.Load(), Calls: s.calls.Load(), Errors: s.errs.Load(), Reloads: s.reloads.Load()}
}

// Take records n hits of key under rule (n < 0 releases concurrency hits
// and refunds others) and returns what they saw, computed as package limit
// computes it. Under ServerTime it ignores now and counts at the server's
// time, and the Result's Expires is in the server's clock. It fails when
// the server does or ctx ends, and for a rule no configuration allows; the
// hits of a call that failed may or may not have been recorded.
func (s *Store) Take(ctx context.Context, key limit.Key, rule limit.Rule, now time.Time, n int64) (limit.Result, error) {
	s.takes.Add(1)
	res, err := s.take(ctx, &key, &rule, now.UnixNano(), n)
	if err != nil {
		s.errs.Add(1)
		return limit.Result{}, fmt.Errorf("redis take %s: %w", key.Rule, err)
	}
	return res, nil
}

func (s *Store) take(ctx context.Context, key *limit.Key, rule *limit.Rule, now, n int64) (limit.Result, error) {
	w := int64(rule.Window)
	switch rule.Algorithm {
	case limit.FixedWindow, limit.SlidingWindow:
		if w <= 0 {
			return limit.Result{}, fmt.Errorf("window %v: want a positive window", rule.Window)
		}
		var idx, el any = "", ""
		if s.server {
			if w%1000 != 0 {
				return limit.Result{}, fmt.Errorf("window %v: want whole microseconds under the server clock", rule.Window)
			}
		} else {
			// As limit.Rule.window computes them.
			i := now / w
			idx, el = i, max(now-i*w, 0)
		}
		sc, extra := &fixedScript, int64(0)
		if rule.Algorithm == limit.SlidingWindow {
			sc, extra = &slidingScript, w // Expires is a window later
		}
		v, err := s.run(ctx, sc, key, rule.Algorithm, idx, el, w, n, rule.MaxCount, s.skew)
		if err != nil {
			return limit.Result{}, err
		}
		eff, count, us := v[0], v[1], v[4]
		if s.server {
			now = us * 1000
		}
		end := (eff + 1) * w
		return limit.Result{Count: count, Remaining: max(rule.Limit-count, 0), Reset: time.Duration(end - now), Expires: end + extra}, nil

	case limit.TokenBucket:
		if w <= 0 {
			return limit.Result{}, fmt.Errorf("window %v: want a positive window", rule.Window)
		}
		var sec, nsec any = "", ""
		if !s.server {
			q, r := now/1e9, now%1e9
			if r < 0 {
				q, r = q-1, r+1e9
			}
			sec, nsec = q, r
		}
		t := max(w/max(rule.Limit, 1), 1) // limit.Rule.interval
		v, err := s.run(ctx, &gcraScript, key, rule.Algorithm, sec, nsec, t, n, rule.MaxCount, s.skew)
		if err != nil {
			return limit.Result{}, err
		}
		if s.server {
			now = v[4] * 1000
		}
		return rule.TokenBucketResult(unixNano(v[0], v[1]), unixNano(v[2], v[3]), now, n), nil

	case limit.Concurrency:
		clock := ""
		if s.server {
			clock = "s"
		}
		v, err := s.run(ctx, &concurrencyScript, key, rule.Algorithm, rule.Limit, n, clock)
		if err != nil {
			return limit.Result{}, err
		}
		count, held, us := v[0], v[1], v[4]
		exp := int64(math.MaxInt64)
		if held == 0 {
			exp = now
			if s.server {
				exp = us * 1000
			}
		}
		return limit.Result{Count: count, Remaining: max(rule.Limit-max(count, held), 0), Expires: exp}, nil
	}
	return limit.Result{}, fmt.Errorf("algorithm %v: want one of %s", rule.Algorithm, strings.Join(limit.Algorithms, ", "))
}

// run runs sc on key's counter and returns the integers it returns: 5,
// or 3 and then the last is moved to v[4], so that v[4] is always the
// server time.
func (s *Store) run(ctx context.Context, sc *script, key *limit.Key, alg limit.Algorithm, args ...any) (v [5]int64, err error) {
	keys := []string{s.appendKey(make([]byte, 0, 64), key, alg)}
	s.calls.Add(1)
	cmd := s.client.EvalSha(ctx, sc.sha, keys, args...)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		s.reloads.Add(1)
		s.calls.Add(1)
		cmd = s.client.Eval(ctx, sc.src, keys, args...)
	}
	reply, err := cmd.Slice()
	if err != nil {
		return v, err
	}
	if len(reply) != 3 && len(reply) != 5 {
		return v, fmt.Errorf("script reply %v: want 3 or 5 integers", reply)
	}
	for i, x := range reply {
		n, ok := x.(int64)
		if !ok {
			return v, fmt.Errorf("script reply %v: want integers", reply)
		}
		v[i] = n
	}
	if len(reply) == 3 {
		v[2], v[4] = 0, v[2]
	}
	return v, nil
}

// unixNano returns sec seconds and nsec nanoseconds as unix nanoseconds,
// saturating at math.MaxInt64, as far as a corrupt value could reach.
func unixNano(sec, nsec int64) int64 {
	const maxSec, maxNsec = math.MaxInt64 / int64(time.Second), math.MaxInt64 % int64(time.Second)
	if sec > maxSec || sec == maxSec && nsec > maxNsec {
		return math.MaxInt64
	}
	if sec < math.MinInt64/int64(time.Second) {
		return math.MinInt64
	}
	return sec*int64(time.Second) + nsec
}

// algorithmCodes name the algorithms in keys.
var algorithmCodes = [...]string{
	limit.FixedWindow:   "fw",
	limit.SlidingWindow: "sw",
	limit.TokenBucket:   "tb",
	limit.Concurrency:   "cc",
}

// appendKey appends the Redis key of k's counter under alg to dst and
// returns it as a string.
func (s *Store) appendKey(dst []byte, k *limit.Key, alg limit.Algorithm) string {
	dst = append(dst, s.prefix...)
	dst = append(dst, '{')
	dst = append(dst, algorithmCodes[alg]...)
	dst = append(dst, ':')
	dst = strconv.AppendInt(dst, int64(len(k.Rule)), 10)
	dst = append(dst, ':')
	dst = appendEscaped(dst, k.Rule)
	switch {
	case k.User != "":
		dst = append(dst, ":u:"...)
		dst = appendEscaped(dst, k.User)
	case k.Addr.Is4():
		dst = append(dst, ":4:"...)
		dst = k.Addr.AppendTo(dst)
	case k.Addr.IsValid():
		dst = append(dst, ":6:"...)
		if k.Addr.Zone() == "" {
			dst = k.Addr.AppendTo(dst)
		} else {
			dst = appendEscaped(dst, k.Addr.String())
		}
	default:
		dst = append(dst, ":-:"...)
	}
	dst = append(dst, '}')
	return string(dst)
}

// appendEscaped appends v with '%' and '}' written %25 and %7D: no '}'
// ends the hash tag early, and the escaping is reversible.
func appendEscaped(dst []byte, v string) []byte {
	if !strings.ContainsAny(v, "%}") {
		return append(dst, v...)
	}
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '%':
			dst = append(dst, "%25"...)
		case '}':
			dst = append(dst, "%7D"...)
		default:
			dst = append(dst, v[i])
		}
	}
	return dst
}
