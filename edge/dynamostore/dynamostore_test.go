package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ratewarden/ratewarden/decisions/awstest"
	"github.com/ratewarden/ratewarden/edge/dynamostore"
	"github.com/ratewarden/ratewarden/edge/limit"
	"github.com/ratewarden/ratewarden/edge/limit/limittest"
	"github.com/ratewarden/ratewarden/edge/memstore"
)

var _ limittest.Store = (*dynamostore.Store)(nil)

// base is a fixed instant at a UTC midnight.
var base = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// newClient returns a client of its own for dynalite.
func newClient(t testing.TB) *dynamodb.Client {
	t.Helper()
	ep := awstest.Endpoint(t, awstest.DynamoDBEnv)
	return dynamodb.NewFromConfig(awstest.Config(t), func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(ep) })
}

// newTable creates a table of a fresh name from TableSpec and deletes it
// when the test ends.
func newTable(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("dynamostore-%016x", rand.Uint64())
	awstest.CreateTable(t, newClient(t), dynamostore.TableSpec(name))
	return name
}

// allOld stands in for a DynamoDB that honours
// ReturnValuesOnConditionCheckFailure, which dynalite ignores: after a
// failed condition it reads the item into the error. The read is not atomic
// with the update, which the store must cope with anyway (it plans from the
// item and conditions what it writes).
type allOld struct{ *dynamodb.Client }

func (a allOld) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := a.Client.UpdateItem(ctx, in, optFns...)
	ccf, ok := errors.AsType[*types.ConditionalCheckFailedException](err)
	if !ok || in.ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld {
		return out, err
	}
	got, gerr := a.Client.GetItem(ctx, &dynamodb.GetItemInput{TableName: in.TableName, Key: in.Key, ConsistentRead: aws.Bool(true)})
	if gerr != nil {
		return nil, gerr
	}
	ccf.Item = got.Item
	return out, err
}

// mode is how a store learns the item after a failed condition.
type mode struct {
	name string
	opts func(t testing.TB) dynamostore.Options
}

var modes = []mode{
	{"all_old", func(t testing.TB) dynamostore.Options {
		return dynamostore.Options{Client: allOld{newClient(t)}}
	}},
	{"read_after_failure", func(t testing.TB) dynamostore.Options {
		return dynamostore.Options{Client: newClient(t), ReadAfterConditionFailure: true}
	}},
	{"all_old_no_hints", func(t testing.TB) dynamostore.Options {
		return dynamostore.Options{Client: allOld{newClient(t)}, Hints: -1}
	}},
}

func newStore(t testing.TB, table string, opts dynamostore.Options) *dynamostore.Store {
	t.Helper()
	opts.Table = table
	s, err := dynamostore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	table := newTable(t)
	// Without hints the store takes other first guesses; TestMatchesMemstore
	// covers them, so the long concurrent checks run twice, not three times.
	for _, m := range modes[:2] {
		t.Run(m.name, func(t *testing.T) {
			limittest.Run(t, func(t *testing.T) limittest.Store { return newStore(t, table, m.opts(t)) })
		})
	}
}

// TestMatchesMemstore plays random hits, refunds and looks on keys under
// every algorithm, with and without MaxCount, at instants that move on by
// random shares of the window, and compares every result with the memory
// store's.
func TestMatchesMemstore(t *testing.T) {
	table := newTable(t)
	rules := []limit.Rule{
		{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Second, MaxCount: 8},
		{Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute},
		{Algorithm: limit.SlidingWindow, Limit: 5, Window: time.Second, MaxCount: 7},
		{Algorithm: limit.SlidingWindow, Limit: 10, Window: time.Minute},
		{Algorithm: limit.SlidingWindow, Limit: 4, Window: 7 * time.Second, MaxCount: 4},
		{Algorithm: limit.TokenBucket, Limit: 5, Window: time.Second, Burst: 3, MaxCount: 6},
		{Algorithm: limit.TokenBucket, Limit: 2, Window: time.Minute},
		{Algorithm: limit.TokenBucket, Limit: 7, Window: 3 * time.Second, MaxCount: 7},
		{Algorithm: limit.Concurrency, Limit: 3},
	}
	ns := []int64{-3, -1, 0, 1, 1, 1, 1, 2, 4, 9}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			seed := rand.Uint64()
			if s := os.Getenv("RATEWARDEN_TEST_SEED"); s != "" { // to replay a failure
				seed, _ = strconv.ParseUint(s, 10, 64)
			}
			rng := rand.New(rand.NewPCG(seed, 0))
			ds := newStore(t, table, m.opts(t))
			ms := memstore.New(memstore.Options{SweepEvery: -1})
			prefix := fmt.Sprintf("matches-%s-%016x/", m.name, seed)
			for i, r := range rules {
				w := max(r.Window, time.Second)
				steps := []time.Duration{0, 0, w / 97, w / 10, w / 3, w, 5 * w / 2}
				// A clock that goes back a little, after a recorded hit; see
				// the package documentation for what differs after a hit
				// that recorded nothing, and for fixed windows.
				back := []time.Duration{-w / 10, -w / 3}
				k := limit.Key{Rule: fmt.Sprint(prefix, i), Addr: netip.MustParseAddr("192.0.2.1")}
				at := base.Add(time.Duration(rng.Int64N(int64(w))))
				latest, recorded := at, false
				for step := range 200 {
					if recorded && r.Algorithm != limit.FixedWindow && rng.IntN(4) == 0 {
						at = at.Add(back[rng.IntN(len(back))])
					} else {
						at = at.Add(steps[rng.IntN(len(steps))])
					}
					n := ns[rng.IntN(len(ns))]
					want, _ := ms.Take(context.Background(), k, r, at, n)
					// Every rule's MaxCount is 0 or at least its capacity:
					// an allowed hit is recorded.
					recorded = n > 0 && r.Allowed(want)
					got, err := ds.Take(context.Background(), k, r, at, n)
					if err != nil {
						t.Fatalf("seed %d, %v step %d: Take(+%v, %d): %v", seed, r.Algorithm, step, at.Sub(base), n, err)
					}
					if got != want {
						t.Fatalf("seed %d, rule %d (%v) step %d: Take(+%v, %d) = %+v, the memory store %+v",
							seed, i, r.Algorithm, step, at.Sub(base), n, got, want)
					}
					if at.Before(latest) && !recorded {
						// A hit stamped behind the newest that records
						// nothing leaves the item where it was, where
						// package limit moves the state into the hit's
						// window (the documented difference): the stores
						// agree on this answer, not on the next ones. Go
						// on with a new key.
						k.Addr = k.Addr.Next()
						latest, recorded = at, false
					}
					if at.After(latest) {
						latest = at
					}
				}
			}
		})
	}
}

// TestExactAcrossStores hammers one key from four stores, each with its
// own client, as four edge nodes would: exactly the capacity is admitted.
func TestExactAcrossStores(t *testing.T) {
	const stores, perStore, hits = 4, 64, 2
	table := newTable(t)
	ss := make([]*dynamostore.Store, stores)
	for i := range ss {
		ss[i] = newStore(t, table, modes[0].opts(t))
	}
	prefix := fmt.Sprintf("exact-%016x/", rand.Uint64())
	// phase is a burst of hits at one instant and how many it must admit.
	type phase struct {
		at      time.Duration
		allowed int64
	}
	cases := []struct {
		name   string
		rule   limit.Rule
		phases []phase
	}{
		{"fixed_window", limit.Rule{Algorithm: limit.FixedWindow, Limit: 200, Window: time.Minute},
			[]phase{{10 * time.Second, 200}, {70 * time.Second, 200}}},
		{"fixed_window_max_count", limit.Rule{Algorithm: limit.FixedWindow, Limit: 200, Window: time.Minute, MaxCount: 200},
			[]phase{{10 * time.Second, 200}, {20 * time.Second, 0}}},
		// 200 a minute: an interval of 300ms, so 30 s refill 100.
		{"token_bucket", limit.Rule{Algorithm: limit.TokenBucket, Limit: 200, Window: time.Minute, MaxCount: 200},
			[]phase{{10 * time.Second, 200}, {40 * time.Second, 100}}},
		{"token_bucket_unbounded", limit.Rule{Algorithm: limit.TokenBucket, Limit: 200, Window: time.Minute},
			[]phase{{10 * time.Second, 200}}},
		// Half a window into the next, the 200 weigh 100.
		{"sliding_window", limit.Rule{Algorithm: limit.SlidingWindow, Limit: 200, Window: time.Minute, MaxCount: 200},
			[]phase{{30 * time.Second, 200}, {90 * time.Second, 100}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := limit.Key{Rule: prefix + c.name, User: "alice"}
			before := sum(ss)
			for _, p := range c.phases {
				var allowed, failed atomic.Int64
				var wg sync.WaitGroup
				for g := range stores * perStore {
					s := ss[g%stores]
					wg.Go(func() {
						for range hits {
							res, err := s.Take(context.Background(), k, c.rule, base.Add(p.at), 1)
							switch {
							case err != nil:
								failed.Add(1)
								t.Errorf("Take: %v", err)
							case c.rule.Allowed(res):
								allowed.Add(1)
							}
						}
					})
				}
				wg.Wait()
				if got := allowed.Load(); got != p.allowed || failed.Load() != 0 {
					t.Errorf("at base+%v: %d of %d hits allowed, %d failed; want %d allowed",
						p.at, got, stores*perStore*hits, failed.Load(), p.allowed)
				}
			}
			st := diff(sum(ss), before)
			t.Logf("%+v: %.2f updates a take", st, float64(st.Updates)/float64(st.Takes))
		})
	}
}

// TestRefusedByCondition checks the results of hits whose condition fails
// and that are not recorded, and that each costs one UpdateItem when the
// service returns the item with the failure.
func TestRefusedByCondition(t *testing.T) {
	table := newTable(t)
	prefix := fmt.Sprintf("refused-%016x/", rand.Uint64())
	at := base.Add(10 * time.Second)
	cases := []struct {
		name  string
		rule  limit.Rule
		fill  int64 // hits taken first
		n     int64
		want  limit.Result
		after int64 // the count a look sees afterwards
	}{
		{"fixed_window_max_count", limit.Rule{Algorithm: limit.FixedWindow, Limit: 2, Window: time.Minute, MaxCount: 3}, 3, 1,
			limit.Result{Count: 4, Remaining: 0, Reset: 50 * time.Second, Expires: base.Add(time.Minute).UnixNano()}, 3},
		{"concurrency", limit.Rule{Algorithm: limit.Concurrency, Limit: 3}, 3, 1,
			limit.Result{Count: 4, Remaining: 0, Expires: 1<<63 - 1}, 3},
		// One hit a second, a bucket of 2 and a count bounded at 3: three
		// seconds of refill recorded, and a fourth refused.
		{"token_bucket_max_count", limit.Rule{Algorithm: limit.TokenBucket, Limit: 60, Window: time.Minute, Burst: 2, MaxCount: 3}, 3, 1,
			limit.Result{Count: 4, Remaining: 0, Reset: 3 * time.Second, Expires: at.Add(3 * time.Second).UnixNano()}, 3},
		{"sliding_window_max_count", limit.Rule{Algorithm: limit.SlidingWindow, Limit: 2, Window: time.Minute, MaxCount: 3}, 3, 1,
			limit.Result{Count: 4, Remaining: 0, Reset: 50 * time.Second, Expires: base.Add(2 * time.Minute).UnixNano()}, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t, table, modes[0].opts(t))
			k := limit.Key{Rule: prefix + c.name, Addr: netip.MustParseAddr("2001:db8::1")}
			if _, err := s.Take(context.Background(), k, c.rule, at, c.fill); err != nil {
				t.Fatal(err)
			}
			before := s.Stats()
			got, err := s.Take(context.Background(), k, c.rule, at, c.n)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("refused hit: %+v, want %+v", got, c.want)
			}
			after := s.Stats()
			if d := (dynamostore.Stats{Takes: 1, Updates: 1, ConditionFailures: 1}); diff(after, before) != d {
				t.Errorf("refused hit: stats moved by %+v, want %+v", diff(after, before), d)
			}
			look, err := s.Take(context.Background(), k, c.rule, at, 0)
			if err != nil {
				t.Fatal(err)
			}
			if look.Count != c.after {
				t.Errorf("after the refused hit the count is %d, want %d", look.Count, c.after)
			}
		})
	}
}

// sum adds up the stores' stats.
func sum(ss []*dynamostore.Store) dynamostore.Stats {
	var st dynamostore.Stats
	for _, s := range ss {
		x := s.Stats()
		st.Takes += x.Takes
		st.Updates += x.Updates
		st.Reads += x.Reads
		st.ConditionFailures += x.ConditionFailures
		st.Errors += x.Errors
	}
	return st
}

// diff is a - b.
func diff(a, b dynamostore.Stats) dynamostore.Stats {
	return dynamostore.Stats{Takes: a.Takes - b.Takes, Updates: a.Updates - b.Updates, Reads: a.Reads - b.Reads,
		ConditionFailures: a.ConditionFailures - b.ConditionFailures, Errors: a.Errors - b.Errors}
}

// TestRoundTrips checks the requests a hot key's hits cost once the store
// has seen the key, for a service that returns the item on a failed
// condition.
func TestRoundTrips(t *testing.T) {
	table := newTable(t)
	prefix := fmt.Sprintf("trips-%016x/", rand.Uint64())
	big := int64(1 << 30)
	cases := []struct {
		name string
		rule limit.Rule
		warm int64         // hits taken first
		step time.Duration // between hits
		n    int64
		want dynamostore.Stats // for 10 hits after the first
	}{
		{"fixed_window", limit.Rule{Algorithm: limit.FixedWindow, Limit: big, Window: time.Hour, MaxCount: big}, 1, time.Millisecond, 1,
			dynamostore.Stats{Takes: 10, Updates: 10}},
		{"sliding_window", limit.Rule{Algorithm: limit.SlidingWindow, Limit: big, Window: time.Hour, MaxCount: big}, 1, time.Millisecond, 1,
			dynamostore.Stats{Takes: 10, Updates: 10}},
		{"sliding_window_unbounded", limit.Rule{Algorithm: limit.SlidingWindow, Limit: big, Window: time.Hour}, 1, time.Millisecond, 1,
			dynamostore.Stats{Takes: 10, Updates: 10}},
		// An interval of 1s: hits 1ms apart keep the bucket busy, hits 2s
		// apart find it idle.
		{"token_bucket_busy", limit.Rule{Algorithm: limit.TokenBucket, Limit: 3600, Window: time.Hour, MaxCount: big}, 1, time.Millisecond, 1,
			dynamostore.Stats{Takes: 10, Updates: 10}},
		{"token_bucket_idle", limit.Rule{Algorithm: limit.TokenBucket, Limit: 3600, Window: time.Hour, MaxCount: big}, 1, 2 * time.Second, 1,
			dynamostore.Stats{Takes: 10, Updates: 10}},
		{"concurrency_release", limit.Rule{Algorithm: limit.Concurrency, Limit: big}, 20, 0, -1,
			dynamostore.Stats{Takes: 10, Updates: 10}},
		{"look", limit.Rule{Algorithm: limit.SlidingWindow, Limit: 10, Window: time.Hour}, 1, 0, 0,
			dynamostore.Stats{Takes: 10, Reads: 10}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t, table, modes[0].opts(t))
			k := limit.Key{Rule: prefix + c.name, User: "bob"}
			at := base.Add(time.Minute)
			if _, err := s.Take(context.Background(), k, c.rule, at, c.warm); err != nil {
				t.Fatal(err)
			}
			before := s.Stats()
			for range 10 {
				at = at.Add(c.step)
				if _, err := s.Take(context.Background(), k, c.rule, at, c.n); err != nil {
					t.Fatal(err)
				}
			}
			if got := diff(s.Stats(), before); got != c.want {
				t.Errorf("10 hits: %+v, want %+v", got, c.want)
			}
		})
	}
}

// blocking is an API whose requests wait for their context to be done.
type blocking struct{ started chan struct{} }

func (b blocking) UpdateItem(ctx context.Context, _ *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	b.started <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (b blocking) GetItem(ctx context.Context, _ *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	b.started <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestCancelWhileWaiting cancels Takes whose request is in flight: each
// returns the context's error and counts it.
func TestCancelWhileWaiting(t *testing.T) {
	api := blocking{started: make(chan struct{})}
	s, err := dynamostore.New(dynamostore.Options{Client: api, Table: "t"})
	if err != nil {
		t.Fatal(err)
	}
	k := limit.Key{Rule: "r", User: "alice"}
	rules := []limit.Rule{
		{Algorithm: limit.FixedWindow, Limit: 1, Window: time.Minute},
		{Algorithm: limit.SlidingWindow, Limit: 1, Window: time.Minute},
		{Algorithm: limit.TokenBucket, Limit: 1, Window: time.Minute},
		{Algorithm: limit.Concurrency, Limit: 1},
	}
	for i, r := range rules {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := s.Take(ctx, k, r, base, 1)
			errc <- err
		}()
		<-api.started
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("%v: Take cancelled in flight: %v, want context.Canceled", r.Algorithm, err)
		}
		if got := s.Stats().Errors; got != uint64(i+1) {
			t.Errorf("%v: %d errors counted, want %d", r.Algorithm, got, i+1)
		}
	}
}

func TestCancelledContextAgainstDynalite(t *testing.T) {
	table := newTable(t)
	s := newStore(t, table, modes[0].opts(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := limit.Rule{Algorithm: limit.TokenBucket, Limit: 1, Window: time.Minute}
	if _, err := s.Take(ctx, limit.Key{Rule: "r", User: "alice"}, r, base, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Take with a cancelled context: %v, want context.Canceled", err)
	}
	if st := s.Stats(); st.Errors != 1 {
		t.Errorf("Stats() = %+v, want 1 error", st)
	}
}

func TestNewRejects(t *testing.T) {
	cases := []struct {
		name string
		opts dynamostore.Options
	}{
		{"no_client", dynamostore.Options{Table: "t"}},
		{"no_table", dynamostore.Options{Client: blocking{}}},
		{"negative_attempts", dynamostore.Options{Client: blocking{}, Table: "t", MaxAttempts: -1}},
	}
	for _, c := range cases {
		if s, err := dynamostore.New(c.opts); err == nil {
			t.Errorf("%s: New(%+v) = %v, no error", c.name, c.opts, s)
		}
	}
}

// TestRejectsInvalidRules checks the rules that would make the arithmetic
// divide by zero; they fail before any request.
func TestRejectsInvalidRules(t *testing.T) {
	s, err := dynamostore.New(dynamostore.Options{Client: blocking{}, Table: "t"})
	if err != nil {
		t.Fatal(err)
	}
	rules := []limit.Rule{
		{Algorithm: limit.FixedWindow, Limit: 1},
		{Algorithm: limit.SlidingWindow, Limit: 1},
		{Algorithm: limit.TokenBucket, Limit: 1, Window: -time.Second},
		{Algorithm: 0, Limit: 1, Window: time.Second},
		{Algorithm: 9, Limit: 1, Window: time.Second},
	}
	for _, r := range rules {
		if res, err := s.Take(context.Background(), limit.Key{Rule: "r"}, r, base, 1); err == nil {
			t.Errorf("Take under %+v: %+v, no error", r, res)
		}
	}
}

func TestTableSpec(t *testing.T) {
	spec := dynamostore.TableSpec("counters")
	if *spec.TableName != "counters" || spec.BillingMode != types.BillingModePayPerRequest ||
		len(spec.KeySchema) != 1 || *spec.KeySchema[0].AttributeName != dynamostore.KeyAttribute || spec.KeySchema[0].KeyType != types.KeyTypeHash ||
		len(spec.AttributeDefinitions) != 1 || spec.AttributeDefinitions[0].AttributeType != types.ScalarAttributeTypeB {
		t.Errorf("TableSpec: %+v", spec)
	}
	ttl := dynamostore.TimeToLiveSpec("counters")
	if *ttl.TableName != "counters" || *ttl.TimeToLiveSpecification.AttributeName != dynamostore.TTLAttribute || !*ttl.TimeToLiveSpecification.Enabled {
		t.Errorf("TimeToLiveSpec: %+v", ttl.TimeToLiveSpecification)
	}
}

// keyRecorder remembers the key of the last UpdateItem.
type keyRecorder struct {
	allOld
	key map[string]types.AttributeValue
}

func (r *keyRecorder) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	r.key = in.Key
	return r.allOld.UpdateItem(ctx, in, optFns...)
}

// TestTTLCoversExpires checks that DynamoDB's time to live never deletes an
// item before the state it holds expires. It checks allowed hits: with a
// MaxCount of 0 or at least the capacity, an allowed hit is recorded, so it
// wrote the item.
func TestTTLCoversExpires(t *testing.T) {
	table := newTable(t)
	prefix := fmt.Sprintf("ttl-%016x/", rand.Uint64())
	rules := []limit.Rule{
		{Algorithm: limit.FixedWindow, Limit: 3, Window: 1500 * time.Millisecond},
		{Algorithm: limit.SlidingWindow, Limit: 3, Window: 1500 * time.Millisecond, MaxCount: 6},
		{Algorithm: limit.SlidingWindow, Limit: 3, Window: 1500 * time.Millisecond},
		{Algorithm: limit.TokenBucket, Limit: 3, Window: 1500 * time.Millisecond, MaxCount: 6},
		{Algorithm: limit.TokenBucket, Limit: 3, Window: 1500 * time.Millisecond},
	}
	for i, r := range rules {
		rec := &keyRecorder{allOld: allOld{newClient(t)}}
		s := newStore(t, table, dynamostore.Options{Client: rec})
		k := limit.Key{Rule: fmt.Sprint(prefix, i), User: "carol"}
		at := base.Add(100 * time.Millisecond)
		for _, step := range []time.Duration{0, 0, 10 * time.Millisecond, 300 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second} {
			at = at.Add(step)
			res, err := s.Take(context.Background(), k, r, at, 2)
			if err != nil {
				t.Fatal(err)
			}
			out, err := rec.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), Key: rec.key, ConsistentRead: aws.Bool(true)})
			if err != nil {
				t.Fatal(err)
			}
			v, ok := out.Item[dynamostore.TTLAttribute].(*types.AttributeValueMemberN)
			if !ok {
				t.Fatalf("%v at +%v: item %v has no TTL", r.Algorithm, at.Sub(base), out.Item)
			}
			ttl, err := time.ParseDuration(v.Value + "s")
			if err != nil {
				t.Fatal(err)
			}
			// A hit that records nothing writes nothing; the item, last
			// written earlier, counts for nothing from that write's
			// Expires on.
			if exp := time.Duration(res.Expires); r.Allowed(res) && ttl < exp {
				t.Errorf("%v at +%v: TTL %v is before the state expires, %v", r.Algorithm, at.Sub(base), ttl, exp)
			}
		}
	}
}

// TestCrashedHolderSlotsExpire: an edge that crashes holding concurrency
// slots never releases them. Once its lease has passed, another edge whose
// acquire the slots would refuse takes them back; slots whose holder keeps
// using the key stay counted, and a release that comes after its slots
// were taken back gives back nothing of the others'.
func TestCrashedHolderSlotsExpire(t *testing.T) {
	table := newTable(t)
	r := limit.Rule{Algorithm: limit.Concurrency, Limit: 2}
	for _, m := range modes[:2] {
		t.Run(m.name, func(t *testing.T) {
			k := limit.Key{Rule: fmt.Sprintf("lease-%016x", rand.Uint64()), User: "dave"}
			crashed, a, b, c := newStore(t, table, m.opts(t)), newStore(t, table, m.opts(t)), newStore(t, table, m.opts(t)), newStore(t, table, m.opts(t))
			take := func(s *dynamostore.Store, at time.Duration, n int64) limit.Result {
				t.Helper()
				res, err := s.Take(context.Background(), k, r, base.Add(at), n)
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			f := func(s *dynamostore.Store, at time.Duration, n, wantCount int64, wantAllowed bool) {
				t.Helper()
				if res := take(s, at, n); res.Count != wantCount || r.Allowed(res) != wantAllowed {
					t.Errorf("Take(+%v, %d) = %+v, want count %d, allowed %v", at, n, res, wantCount, wantAllowed)
				}
			}
			f(crashed, 0, 1, 1, true)
			f(crashed, time.Second, 1, 2, true)
			// The edge crashes holding both slots.
			f(a, time.Minute, 1, 3, false)
			// A day later its lease has long passed: a's acquire takes the
			// slots back, and b shares the limit with a.
			day := 24 * time.Hour
			f(a, day, 1, 1, true)
			f(b, day+time.Second, 1, 2, true)
			f(b, day+2*time.Second, 1, 3, false)
			// The crashed holder's late release gives back nothing of a's
			// or b's.
			f(crashed, day+3*time.Second, -1, 2, true)
			f(a, day+4*time.Second, 0, 2, true)
			// a and b keep their slots, past the first lease (the default,
			// 10 minutes), while they use the key.
			for i := range 4 {
				at := day + time.Duration(i+1)*5*time.Minute
				f(a, at, -1, 1, true)
				f(a, at, 1, 2, true)
				f(b, at, -1, 1, true)
				f(b, at, 1, 2, true)
				f(c, at, 1, 3, false)
			}
		})
	}
}
