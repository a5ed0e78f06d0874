// Package dynamostore is the DynamoDB counter store: the edge's counters in
// one table shared by every edge node, counted with conditional UpdateItem
// requests so that no hit is lost and none is admitted over a limit, however
// many nodes take hits on one key at once. It implements exactly the
// arithmetic of package limit, and runs the limittest conformance suite.
//
// # Table and items
//
// The table has a binary hash key, KeyAttribute, and no sort key; TableSpec
// and TimeToLiveSpec describe it. A key is the algorithm's tag, the
// configured region and the rule id (each behind its length), the kind of
// identity, then the user id or the address; a fixed-window key ends with
// the window's index, so each window is an item of its own, as in the seed
// design. Keys longer than 1 KiB are replaced by their SHA-256. An item
// holds, besides its key:
//
//	fixed window:   c (count) and TTLAttribute
//	sliding window: w (window index), p (previous window's count), c (current count) and TTLAttribute
//	token bucket:   t (theoretical arrival time, unix ns) and TTLAttribute
//	concurrency:    c (in flight), and for each Store that holds slots its
//	                count h<holder> and the end of its lease l<holder>;
//	                TTLAttribute a lease after the last lease ends
//
// Slots in flight do not expire while their holder uses the key: each
// acquire and release renews the holder's lease (Options.Lease). A holder
// is one Store, so one edge process: an edge that crashes holding slots
// never releases them, and once its lease has passed, an acquire those
// slots would refuse takes them back (one more UpdateItem, conditioned on
// the holding being what was read) and tries again. A slot held longer
// than the lease without another acquire or release of the key by its
// holder may be taken back while it is in use.
//
// TTLAttribute is in epoch seconds and never earlier than the
// limit.Result.Expires of the last hit that wrote the item, so DynamoDB's
// time to live deletes items only once they count for nothing. It is
// garbage collection only: DynamoDB deletes expired items up to days late,
// and the store reads a stale item as the zero State, as package limit does.
//
// Results are those limit.Rule.Take computes on the item's state, with one
// difference, for clocks that disagree: a hit that records nothing (n = 0, a
// hit refused beyond MaxCount, a refund of nothing) writes nothing, so it
// does not carry a sliding window's item into its window, nor move an idle
// bucket's arrival time up to its now, as Rule.Take moves its State; and a
// fixed window's hit counts in the item of the window its now falls in. So
// a later hit stamped by a clock behind, in the window before the newest
// hit's, counts where the last recorded hit left the item, or in its own
// fixed window, not in the newer window as in package limit. No hit is
// lost either way; with clocks that only move forward the results are
// identical.
//
// # Round trips
//
// Each Take is one UpdateItem in the common case; the condition that makes
// it exact may fail, and a failed condition returns the item as it was
// (ReturnValuesOnConditionCheckFailure ALL_OLD), from which the store either
// knows the result (a refused hit that is not recorded: still one round
// trip) or sends the update that fits the state it now knows:
//
//   - Fixed window: ADD c :n SET ttl = if_not_exists(ttl, :ttl), with the
//     condition c <= MaxCount-n when MaxCount is set: one UpdateItem; a
//     refund is ADD c :n with c >= -n, and SET c = 0 when it refunds more
//     than the count, two.
//   - Concurrency: ADD c :n and the holder's count, renewing its lease,
//     with the condition c <= Limit-n; a release is ADD c :n and the
//     holder's count with the holder's count >= -n, and gives back what
//     the holder has when it holds fewer. One UpdateItem; two for an
//     over-release, and two more when a refused acquire takes back the
//     slots of holders whose lease has passed (see lease.go).
//   - Token bucket: SET t = now+n×interval if the bucket is idle (no t, or
//     t <= now), else ADD t n×interval with the condition now < t <=
//     now+(MaxCount-n)×interval. Which one is tried first is guessed from the
//     state this store last saw of the key (see hints.go): one UpdateItem
//     when the guess is right, two when the bucket changed between idle and
//     busy since.
//   - Sliding window: ADD c :n conditioned on the window index, the previous
//     count and c <= the bound that keeps the weighted count within
//     MaxCount; SET p = c, c = :n, w = :w to roll over into the next window;
//     SET w, p = 0, c for a key not seen for two windows. One UpdateItem
//     while the store's guess of the window and previous count holds; up to
//     two on the first hit of a window at this store.
//
// n = 0, and hits that could not be recorded whatever the state (n above
// MaxCount or above a concurrency limit), are one consistent GetItem. Under
// contention a conditional update may fail because another node changed the
// item in between; each failure returns the newer item, and a Take gives up
// with an error after Options.MaxAttempts updates. Refunds (n < 0 outside
// concurrency limits) and counts past 2³²-1 fall back to compare-and-set on
// the whole item, which may take more round trips under contention.
//
// The worst case is therefore Options.MaxAttempts UpdateItems, plus a
// GetItem per failure with Options.ReadAfterConditionFailure. In the tests
// that hammer one key from 256 goroutines over four stores that have not
// seen it before, a Take sends on average 1.0 UpdateItems for a fixed
// window, 1.2 to 1.5 for a token bucket and 1.4 for a sliding window
// across a rollover.
//
// # Clocks
//
// DynamoDB has no clock a condition can read, so every Take counts at the
// now it is given: each edge node's clock decides which window a hit falls
// in and how far a bucket has drained. Edge clocks must be synchronised
// (NTP keeps them within milliseconds). A node whose clock is ahead by δ
// opens fixed and sliding windows δ early and sees token buckets δ/interval
// hits emptier than they are; a node behind by δ less than one window
// counts its hits in the window the item is in (or, for fixed windows, in
// the item of its own window); a node behind by more than a window resets
// sliding-window items. With windows of a second or more and NTP the error
// is a fraction of a hit.
//
// # Regions and Global Tables
//
// Counts are per region: each edge node's client talks to its own region's
// replica of a Global Table, and conditions see only that replica.
// Replication between regions resolves concurrent writes to one item by
// last writer wins, so regions must not share items: set Options.Region to
// the region's name and each region counts in items of its own, which the
// other replicas hold but never write. A client spread over k regions can
// then be admitted up to k times a limit.
//
// # dynalite
//
// dynalite 4.0, the stand-in the tests run against, ignores
// ReturnValuesOnConditionCheckFailure; with Options.ReadAfterConditionFailure
// the store follows a failed condition with a consistent GetItem instead,
// one more round trip. The results are the same but for one case under
// contention: when a fixed-window or concurrency count that refused a hit
// has dropped by the time it is read, the refused result counts from the
// least count that refuses the hit, not from the one that did.
package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratewarden/ratewarden/edge/limit"
)

// API is what the store needs of a DynamoDB client; *dynamodb.Client has it.
type API interface {
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Attribute names of the table.
const (
	// KeyAttribute is the table's hash key, of type binary.
	KeyAttribute = "k"
	// TTLAttribute is the attribute to enable DynamoDB's time to live on:
	// when an item counts for nothing any more, in epoch seconds.
	TTLAttribute = "ttl"
)

// Defaults.
const (
	DefaultMaxAttempts = 8
	DefaultHints       = 4096
	DefaultLease       = 10 * time.Minute
)

// Options configure a Store.
type Options struct {
	// Client sends the requests; required. Its region's endpoint is the
	// replica the store counts in, and its retryer and the caller's context
	// bound how long a Take may wait.
	Client API
	// Table is the table's name; required.
	Table string
	// Region is part of every key, so that the regions of a Global Table
	// count in items of their own; "" for a table in one region.
	Region string
	// ReadAfterConditionFailure makes the store read the item after a failed
	// condition instead of relying on ReturnValuesOnConditionCheckFailure,
	// for implementations that ignore it (dynalite).
	ReadAfterConditionFailure bool
	// MaxAttempts bounds the UpdateItem requests of one Take; default 8.
	MaxAttempts int
	// Hints is the number of keys whose last state the store remembers to
	// guess the first update right; default 4096 (about 100 KiB), negative
	// for none.
	Hints int
	// Lease is how long the concurrency slots this store holds on a key
	// stay counted after its last acquire or release of the key: once it
	// has passed, another store whose acquire the slots would refuse takes
	// them back, so that an edge that crashed holding slots does not hold
	// them for good. It must be longer than the longest request the edge
	// holds a slot for; default DefaultLease.
	Lease time.Duration
}

// Store is the DynamoDB counter store. It is safe for concurrent use. The
// zero Store is not usable; create one with New.
type Store struct {
	api       API
	table     *string
	region    string
	readAfter bool
	attempts  int
	hints     *hints
	holder    string // this store's id in concurrency items
	lease     int64  // ns

	takes, updates, reads, condFailures, errs atomic.Uint64
}

// New returns a store over opts.Client and opts.Table. It sends nothing.
func New(opts Options) (*Store, error) {
	if opts.Client == nil {
		return nil, errors.New("new dynamodb store: no client")
	}
	if opts.Table == "" {
		return nil, errors.New("new dynamodb store: no table name")
	}
	if opts.MaxAttempts < 0 {
		return nil, fmt.Errorf("new dynamodb store: max attempts %d: want at least 1", opts.MaxAttempts)
	}
	if opts.MaxAttempts == 0 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	if opts.Hints == 0 {
		opts.Hints = DefaultHints
	}
	if opts.Lease < 0 {
		return nil, fmt.Errorf("new dynamodb store: lease %v: want a positive duration, or 0 for %v", opts.Lease, DefaultLease)
	}
	if opts.Lease == 0 {
		opts.Lease = DefaultLease
	}
	return &Store{
		api:       opts.Client,
		table:     aws.String(opts.Table),
		region:    opts.Region,
		readAfter: opts.ReadAfterConditionFailure,
		attempts:  opts.MaxAttempts,
		hints:     newHints(opts.Hints),
		holder:    newHolder(),
		lease:     int64(opts.Lease),
	}, nil
}

// InProcess reports false: Take sends requests, so the edge puts a deadline
// and a circuit breaker around it.
func (s *Store) InProcess() bool { return false }

// Take records n hits of key under rule at now (n < 0 releases concurrency
// hits and refunds others) and returns what they saw, computed as
// limit.Rule.Take computes it. On an error the hits may or may not have been
// recorded.
func (s *Store) Take(ctx context.Context, key limit.Key, rule limit.Rule, now time.Time, n int64) (limit.Result, error) {
	s.takes.Add(1)
	res, err := s.take(ctx, &key, &rule, now.UnixNano(), n)
	if err != nil {
		s.errs.Add(1)
		return limit.Result{}, fmt.Errorf("take %s: %w", key.Rule, err)
	}
	return res, nil
}

func (s *Store) take(ctx context.Context, key *limit.Key, rule *limit.Rule, now, n int64) (limit.Result, error) {
	switch rule.Algorithm {
	case limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket:
		if rule.Window <= 0 {
			return limit.Result{}, fmt.Errorf("window %v: want a positive window", rule.Window)
		}
	case limit.Concurrency:
	default:
		return limit.Result{}, fmt.Errorf("algorithm %d: want one of %v", rule.Algorithm, limit.Algorithms)
	}
	c := call{s: s, rule: rule, now: now, n: n}
	var buf [96]byte
	kb := appendKey(buf[:0], s.region, rule.Algorithm, key)
	switch rule.Algorithm {
	case limit.FixedWindow:
		c.idx = now / int64(rule.Window)
		kb = appendWindow(kb, c.idx)
	case limit.SlidingWindow, limit.TokenBucket:
		c.hint = s.hints.hash(kb)
	}
	c.key = map[string]types.AttributeValue{KeyAttribute: &types.AttributeValueMemberB{Value: kb}}
	if rule.Algorithm == limit.Concurrency {
		return c.slots(ctx)
	}
	return c.run(ctx)
}

// Stats are a store's counters.
type Stats struct {
	Takes             uint64 // Take calls
	Updates           uint64 // UpdateItem requests sent
	Reads             uint64 // GetItem requests sent
	ConditionFailures uint64 // UpdateItem requests whose condition failed
	Errors            uint64 // Takes that returned an error
}

// Stats returns the store's counters; under concurrent Takes each field is
// current but they are not a snapshot together.
func (s *Store) Stats() Stats {
	return Stats{
		Takes:             s.takes.Load(),
		Updates:           s.updates.Load(),
		Reads:             s.reads.Load(),
		ConditionFailures: s.condFailures.Load(),
		Errors:            s.errs.Load(),
	}
}

// TableSpec returns the request that creates the store's table: a binary
// hash key and on-demand capacity. Time to live is enabled separately, by
// TimeToLiveSpec, once the table is active.
func TableSpec(name string) *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(KeyAttribute), AttributeType: types.ScalarAttributeTypeB}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(KeyAttribute), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}
}

// TimeToLiveSpec returns the request that enables time to live on
// TTLAttribute of the table.
func TimeToLiveSpec(name string) *dynamodb.UpdateTimeToLiveInput {
	return &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(TTLAttribute),
			Enabled:       aws.Bool(true),
		},
	}
}
