package kinesis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/stream"
	"github.com/ratewarden/ratewarden/internal/awserr"
	"github.com/ratewarden/ratewarden/internal/backoff"
)

// StreamAPI is the part of the Kinesis client a Source reads with.
// *kinesis.Client satisfies it.
type StreamAPI interface {
	ListShards(ctx context.Context, in *kinesis.ListShardsInput, opts ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error)
	GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, opts ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error)
}

var _ StreamAPI = (*kinesis.Client)(nil)

// wholeRecord is the Sub of a position past every event of its record,
// however many it holds. A Kinesis position is a stream.Position: after
// the first Sub events of the record whose sequence number is Seq; Seq ""
// is the shard's start, ShardEnd past its end.
const wholeRecord = math.MaxInt64

// StartAt says where a shard never read before is read from.
type StartAt uint8

// The starting positions.
const (
	TrimHorizon StartAt = iota // the oldest record the stream keeps
	Latest                     // records put after the shard is first read
)

// DefaultPoll is SourceOptions.Poll's default: a caught-up shard is read
// about twice a second, so that a record is read within half a second of
// its put (the aggregator's windows close within window + 2 s,
// BENCHMARKS.md, Freshness on Kinesis) while a consumer group takes at
// most two of the five reads a second Kinesis allows a shard, leaving the
// rest to another group or a Lambda (which reads once a second).
const DefaultPoll = 500 * time.Millisecond

// SourceOptions configure a Source. Zero fields take their defaults.
type SourceOptions struct {
	Stream string // stream name; required
	Table  string // lease and checkpoint table, see LeaseTableSpec; required
	// Group names the consumer group: workers of one group share the
	// shards; another group reads the stream independently. Default
	// "ratewarden".
	Group string
	// Worker identifies this worker in the lease table; default
	// host-pid-random.
	Worker string
	// LeaseDuration is how long a lease whose counter does not move is
	// held by a live worker; past it others take the shard. Default 10s.
	LeaseDuration time.Duration
	// Discover is how often the stream's shards are listed; default 30s.
	Discover time.Duration
	// Poll is how long a consumer waits after a read that found the shard
	// caught up; default DefaultPoll. Reads are at least 200 ms apart per
	// shard, within Kinesis's five reads per second per shard.
	Poll time.Duration
	// Records bounds the records one GetRecords call returns; default
	// 1000, at most 10000.
	Records int32
	// MaxBatch bounds the events of one Batch; default 10000. A record
	// holding more is handed over in several batches whose positions
	// fall inside it.
	MaxBatch int
	// Rows makes batches carry their records undecoded
	// (stream.Batch.Records), for a handler that reads their rows, columns
	// rather than events, with Batch.Rows: a batch is then the records of
	// one read, MaxBatch aside, and a record that cannot be decoded is
	// counted and reported when Batch.Rows meets it (Batch.Corrupt).
	// Otherwise batches carry decoded Events.
	Rows bool
	// StartAt is where a shard without a checkpoint is read from.
	StartAt StartAt
	// Checkpoint is the least time between two checkpoints of a shard;
	// 0, the default, checkpoints after every batch. A longer interval
	// saves DynamoDB writes at the cost of more batches handled again
	// after a change of hands; the position handled is checkpointed
	// anyway when the consumer stops and when the shard ends.
	Checkpoint time.Duration
	// Now is the clock for lease expiry; default time.Now.
	Now func() time.Time
}

func (o *SourceOptions) setDefaults() {
	if o.Group == "" {
		o.Group = "ratewarden"
	}
	if o.Worker == "" {
		host, _ := os.Hostname()
		o.Worker = fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), rand.Uint32()&0xffff)
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = 10 * time.Second
	}
	if o.Discover == 0 {
		o.Discover = 30 * time.Second
	}
	if o.Poll == 0 {
		o.Poll = DefaultPoll
	}
	if o.Records == 0 {
		o.Records = 1000
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = 10000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Validate checks the options after the defaults are filled in.
func (o *SourceOptions) Validate() error {
	switch {
	case o.Stream == "":
		return errors.New("Stream: want the stream's name")
	case o.Table == "":
		return errors.New("Table: want the lease table's name")
	case o.LeaseDuration < 100*time.Millisecond:
		return fmt.Errorf("LeaseDuration: got %v, want at least 100ms", o.LeaseDuration)
	case o.Records < 1 || o.Records > 10000:
		return fmt.Errorf("Records: got %d, want 1 to 10000", o.Records)
	case o.MaxBatch < 1:
		return fmt.Errorf("MaxBatch: got %d, want at least 1", o.MaxBatch)
	case o.Poll < 0 || o.Discover < 0:
		return errors.New("Poll, Discover: want positive durations")
	case o.Checkpoint < 0:
		return fmt.Errorf("Checkpoint: got %v, want 0 or more", o.Checkpoint)
	}
	return nil
}

// SourceStats count what a Source did.
type SourceStats struct {
	Records     uint64 // records read
	Events      uint64 // events handed to the handler, redeliveries included
	Batches     uint64 // batches handled
	Corrupt     uint64 // records that could not be decoded, and log events of CloudWatch Logs records that are not decisions: skipped
	Checkpoints uint64 // checkpoints written
	Taken       uint64 // leases taken: free, expired or stolen
	Lost        uint64 // leases lost to another worker or to failed renewals
	Throttled   uint64 // reads refused for throughput
	Retries     uint64 // handler calls, reads and checkpoints made again after an error
	Cleaned     uint64 // leases of ended shards deleted once their children started
	// Reopened counts the shards opened again because the handler's
	// state moved under it (stream.ErrReopen) while the lease was held.
	Reopened uint64
	Held     int64 // leases held now
}

// maxProblems bounds the corrupt records a Source keeps the errors of.
const maxProblems = 100

// Source reads decision events from a Kinesis stream for a group of
// workers that share its shards through leases in DynamoDB. Each worker
// takes about its share of the shards, takes over the shards of a worker
// whose leases stop moving for LeaseDuration, and steals a shard from a
// worker holding more than its share. A shard's children are read only
// once the shard itself (and, after a merge, its adjacent parent) is read
// to its end, so each identity's events keep their order across a
// reshard. After the handler takes a batch the position is checkpointed,
// inside a record if the batch ended inside one; a worker that takes a
// shard over starts from there, or from the position the handler's Open
// returns (a handler that keeps its own durable position). A Source is
// safe for concurrent use.
type Source struct {
	api    StreamAPI
	leases leases
	opts   SourceOptions

	mu       sync.Mutex
	held     map[string]*consumer
	seen     map[string]observed
	problems []error

	records, events, batches, corrupt, checkpoints, taken, lost, throttled, retries, cleaned, reopened atomic.Uint64
}

// observed is a lease's counter and when, by this worker's clock, it was
// seen to change.
type observed struct {
	counter int64
	at      time.Time
}

// consumer is a held shard and, once its parents are read, the read of
// it. cancel and done are nil until the read starts.
type consumer struct {
	shard  string
	cancel context.CancelFunc
	done   chan struct{}
	ended  atomic.Bool // read to its end and checkpointed so
	lost   atomic.Bool // the lease is gone: a checkpoint found it so, or renew
	// leaving says the lease is lost and the read stopped: the consumer
	// stays in held until its handler call in progress returns (see
	// leave), neither renewed nor counted as held. Guarded by Source.mu.
	leaving   bool
	renewedAt time.Time
	behind    atomic.Int64 // MillisBehindLatest of the last read, -1 before one
	// notBefore, for a lease stolen from a live worker, is when the read
	// may start (see stealWait).
	notBefore time.Time
	// fromOther says the lease was another worker's (stolen, or expired):
	// Open is told that worker may still be handling the shard.
	fromOther bool
}

// stealWait is how long, in lease durations, a worker that stole a lease
// waits before it reads the shard: the worker it stole from renews every
// third of a lease duration, and stops reading at the first renewal that
// fails, once its batch is handled, its state saved and its checkpoint
// written. Starting at once, the two read the shard side by side until
// then, and both delivered the outputs of the windows that closed
// meanwhile; the thief then opens the shard where the victim left it.
// A batch of a backlog, which closes many windows, can take the victim
// longer to deliver: the thief's Open is told (stream.TakenOver) that the
// victim may go on for up to one more lease duration, and one more after
// each progress the victim reports (stream.Progress, graceLeases).
const stealWait = 2.0 / 3

// NewSource returns a Source reading opts.Stream through api, with leases
// in opts.Table through db.
func NewSource(api StreamAPI, db DynamoAPI, opts SourceOptions) (*Source, error) {
	if api == nil || db == nil {
		return nil, errors.New("new kinesis source: nil client")
	}
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("new kinesis source: %w", err)
	}
	return &Source{
		api: api, opts: opts,
		leases: leases{api: db, table: opts.Table, group: opts.Group + "/" + opts.Stream},
		held:   map[string]*consumer{}, seen: map[string]observed{},
	}, nil
}

// Worker returns the worker's id in the lease table.
func (s *Source) Worker() string { return s.opts.Worker }

// Stats returns the counters.
func (s *Source) Stats() SourceStats {
	held := len(s.consumers(false))
	return SourceStats{
		Records: s.records.Load(), Events: s.events.Load(), Batches: s.batches.Load(), Corrupt: s.corrupt.Load(),
		Checkpoints: s.checkpoints.Load(), Taken: s.taken.Load(), Lost: s.lost.Load(), Throttled: s.throttled.Load(),
		Retries: s.retries.Load(), Cleaned: s.cleaned.Load(), Reopened: s.reopened.Load(), Held: int64(held),
	}
}

// Problems returns the errors of the first corrupt records skipped.
func (s *Source) Problems() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.problems)
}

// Held returns the shards the worker holds, sorted.
func (s *Source) Held() []string {
	held := s.consumers(false)
	out := make([]string, 0, len(held))
	for _, c := range held {
		out = append(out, c.shard)
	}
	slices.Sort(out)
	return out
}

// ShardLag is how far the reading of a held shard is behind the tip of
// the stream.
type ShardLag struct {
	Shard string
	// Behind is the MillisBehindLatest of the shard's last read: how far
	// the records it returned are behind the newest record of the
	// shard. Read says whether a read has returned yet.
	Behind time.Duration
	Read   bool
}

// Lags returns the lag of each shard held, by shard id. It is safe for
// concurrent use.
func (s *Source) Lags() []ShardLag {
	held := s.consumers(false)
	out := make([]ShardLag, 0, len(held))
	for _, c := range held {
		ms := c.behind.Load()
		out = append(out, ShardLag{Shard: c.shard, Behind: time.Duration(max(ms, 0)) * time.Millisecond, Read: ms >= 0})
	}
	slices.SortFunc(out, func(a, b ShardLag) int { return compareShardIDs(a.Shard, b.Shard) })
	return out
}

// Run takes leases and reads the shards it holds, handing batches to h,
// until ctx is done; then it stops its consumers, which checkpoint what
// they handled, and releases its leases so that others take them at once.
// A first discovery of the shards that is refused (no such stream or lease
// table, access denied) ends Run with its error; one that may succeed if
// made again (throttling, a network error) is made again.
//
// A shard's partition is its shard id. h is called from one goroutine per
// shard: Open when the worker starts reading a shard it took, with the
// shard's checkpoint (the shard is read from the position Open returns:
// AT_SEQUENCE_NUMBER, its first Sub events skipped), Handle with each
// batch, Idle after each read that found the shard caught up (about every
// Poll while it is quiet), and Close when the consumer stops: ended once
// the shard is read to its end (its checkpoint becomes ShardEnd once Close
// returns nil, and no batch of it comes again), otherwise when the worker
// lost or released the shard (the error is then ignored). An error from
// Open, Handle, Idle or Close(ended) makes the Source call it again, with
// the same batch, after a backoff, until it succeeds or the worker stops
// holding the shard: delivery is at least once, and a batch that always
// fails holds up its shard. A consumer that stops, its lease lost or ctx
// done, makes no call again, but the call in progress keeps its context
// for up to 5/3 of a lease duration more, and as long after each
// progress the call reports (stream.Progress, asked for every third
// of a lease duration; see graceLeases); Run's shutdown waits for it.
func (s *Source) Run(ctx context.Context, h stream.Handler) error {
	if h == nil {
		return errors.New("run kinesis source: nil handler")
	}
	every := s.opts.LeaseDuration / 3
	tick := time.NewTicker(every)
	defer tick.Stop()
	var discovered time.Time
	for {
		now := s.opts.Now()
		if discovered.IsZero() || now.Sub(discovered) >= s.opts.Discover {
			err := s.discover(ctx)
			switch {
			case err == nil:
				discovered = now
			case discovered.IsZero() && refusedForGood(err) && ctx.Err() == nil:
				// Refused before any discovery (no such stream or lease
				// table, access denied): tried again, it would read
				// nothing and say nothing until stopped.
				return fmt.Errorf("run kinesis source: %w", err)
			}
		}
		s.step(ctx, h, now)
		select {
		case <-ctx.Done():
			s.shutdown()
			return nil
		case <-tick.C:
		}
	}
}

// discover lists the stream's shards and adds a lease for each new one,
// but for a shard whose child has a lease already: that shard was read to
// its end and its lease cleaned (see clean).
// refusedForGood reports whether a discovery's error will be the same if
// it is made again: not one retryable says may succeed, nor a stream not
// yet ACTIVE (ListShards answers ResourceInUseException while a stream is
// being created, as when the aggregator starts beside aws init).
func refusedForGood(err error) bool { return !awserr.Retryable(err, discoverRetryCodes...) }

// discoverRetryCodes are kinesisRetryCodes and ResourceInUseException.
var discoverRetryCodes = append(slices.Clip(kinesisRetryCodes), "ResourceInUseException")

func (s *Source) discover(ctx context.Context) error {
	shards, err := listShards(ctx, s.api, s.opts.Stream)
	if err != nil {
		return err
	}
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	all, err := s.leases.list(c)
	cancel()
	if err != nil {
		return err
	}
	leased := make(map[string]bool, len(all))
	for _, le := range all {
		leased[le.shard] = true
	}
	hasLeasedChild := map[string]bool{}
	for _, sh := range shards {
		for _, p := range shardParents(sh) {
			hasLeasedChild[p] = hasLeasedChild[p] || leased[aws.ToString(sh.ShardId)]
		}
	}
	for _, sh := range lineage(shards) {
		id := aws.ToString(sh.ShardId)
		s.mu.Lock()
		_, known := s.seen[id]
		s.mu.Unlock()
		if known || leased[id] || hasLeasedChild[id] {
			continue
		}
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.leases.create(c, id, shardParents(sh))
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// shardParents returns a shard's parent and adjacent parent, if any.
func shardParents(sh types.Shard) []string {
	var parents []string
	for _, p := range []*string{sh.ParentShardId, sh.AdjacentParentShardId} {
		if p != nil && *p != "" {
			parents = append(parents, *p)
		}
	}
	return parents
}

// listShards returns every shard of a stream, a page per call with a
// deadline each.
func listShards(ctx context.Context, api StreamAPI, stream string) ([]types.Shard, error) {
	var shards []types.Shard
	in := &kinesis.ListShardsInput{StreamName: aws.String(stream)}
	for {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := api.ListShards(c, in)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("list shards %s: %w", stream, err)
		}
		shards = append(shards, out.Shards...)
		if out.NextToken == nil {
			return shards, nil
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
}

// step renews the leases held, reaps finished consumers, takes the share
// of leases due, and starts consumers on held shards that are ready.
func (s *Source) step(ctx context.Context, h stream.Handler, now time.Time) {
	s.renew(ctx, now)
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	all, err := s.leases.list(c)
	cancel()
	if err != nil {
		return
	}
	byShard := make(map[string]*lease, len(all))
	for i := range all {
		byShard[all[i].shard] = &all[i]
	}
	s.observe(all, now)
	s.clean(ctx, all)
	s.balance(ctx, all, now)
	s.start(ctx, h, byShard, now)
}

// clean deletes the leases of shards read to their end once every child
// has a checkpoint of its own: the ended shard's lease has then nothing
// left to say (a child whose parent is gone from the table is ready), and
// discover does not make it again while a child's lease stands.
func (s *Source) clean(ctx context.Context, all []lease) {
	children := map[string][]*lease{}
	for i := range all {
		for _, p := range all[i].parents {
			children[p] = append(children[p], &all[i])
		}
	}
	for _, le := range all {
		kids := children[le.shard]
		if le.seq != ShardEnd || len(kids) == 0 || slices.ContainsFunc(kids, func(k *lease) bool { return k.seq == "" }) {
			continue
		}
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		if s.leases.remove(c, le.shard) == nil {
			s.cleaned.Add(1)
		}
		cancel()
	}
}

// renew bumps the counter of every lease held. A lease another worker took
// is dropped at once; one that could not be renewed for two thirds of the
// lease duration is dropped too, before others may take it.
func (s *Source) renew(ctx context.Context, now time.Time) {
	for _, c := range s.consumers(false) {
		if c.ended.Load() {
			s.stop(c)
			rc, cancel := context.WithTimeout(ctx, 10*time.Second)
			s.leases.release(rc, c.shard, s.opts.Worker)
			cancel()
			continue
		}
		if c.lost.Load() {
			s.leave(c)
			continue
		}
		rc, cancel := context.WithTimeout(ctx, s.opts.LeaseDuration/3)
		err := s.leases.renew(rc, c.shard, s.opts.Worker)
		cancel()
		switch {
		case err == nil:
			c.renewedAt = now
		case errors.Is(err, errLeaseLost) || now.Sub(c.renewedAt) >= s.opts.LeaseDuration*2/3:
			s.leave(c)
		}
	}
}

// consumers returns the consumers of the leases held, and with leaving
// those still finishing a handler call after their lease was lost.
func (s *Source) consumers(leaving bool) []*consumer {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := make([]*consumer, 0, len(s.held))
	for _, c := range s.held {
		if leaving || !c.leaving {
			held = append(held, c)
		}
	}
	return held
}

// leave stops a consumer whose lease is lost without waiting for it: its
// read stops at once, but a handler call in progress keeps its context
// for up to graceLeases more lease durations, and the consumer is
// forgotten once it returns. Waiting here held up the renewal of every
// other lease for as long as that call took (a batch of a backlog can
// close many windows to deliver), and cancelling the call cut short a
// delivery that the worker which took the shard waits for (see
// stream.TakenOver): it then delivered all of it again.
func (s *Source) leave(c *consumer) {
	s.lost.Add(1)
	c.lost.Store(true)
	s.mu.Lock()
	c.leaving = true
	s.mu.Unlock()
	if c.cancel == nil {
		s.forget(c)
		return
	}
	c.cancel()
	go func() {
		<-c.done
		s.forget(c)
	}()
}

// stop cancels a consumer, waits for it, and forgets it.
func (s *Source) stop(c *consumer) {
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
	s.forget(c)
}

// forget removes c from the consumers held.
func (s *Source) forget(c *consumer) {
	s.mu.Lock()
	if s.held[c.shard] == c {
		delete(s.held, c.shard)
	}
	s.mu.Unlock()
}

// observe notes which lease counters moved.
func (s *Source) observe(all []lease, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, le := range all {
		if o, ok := s.seen[le.shard]; !ok || o.counter != le.counter {
			s.seen[le.shard] = observed{counter: le.counter, at: now}
		}
	}
}

// balance takes free and expired leases up to this worker's share, and
// failing those steals one from the worker holding the most.
func (s *Source) balance(ctx context.Context, all []lease, now time.Time) {
	me := s.opts.Worker
	s.mu.Lock()
	load := map[string][]*lease{me: nil}
	var takeable []*lease
	open := 0
	for i := range all {
		le := &all[i]
		if le.seq == ShardEnd {
			continue
		}
		open++
		expired := le.owner != "" && le.owner != me && now.Sub(s.seen[le.shard].at) >= s.opts.LeaseDuration
		switch {
		case le.owner == "" || expired:
			takeable = append(takeable, le)
		case le.owner == me && s.held[le.shard] == nil:
			// Held in the table but not here (a restart under the same
			// worker id): take it back.
			takeable = append(takeable, le)
		default:
			load[le.owner] = append(load[le.owner], le)
		}
	}
	s.mu.Unlock()
	if open == 0 {
		return
	}
	target := (open + len(load) - 1) / len(load)
	need := target - len(load[me])
	// Parents first: their children cannot be read before them.
	slices.SortFunc(takeable, func(a, b *lease) int {
		if d := len(a.parents) - len(b.parents); d != 0 {
			return d
		}
		return compareShardIDs(a.shard, b.shard)
	})
	for _, le := range takeable {
		if need <= 0 {
			break
		}
		if s.takeLease(ctx, le, now, time.Time{}) {
			need--
		}
	}
	if need <= 0 || len(takeable) > 0 {
		return
	}
	// Steal one lease from the most loaded worker, if above the share.
	var victim string
	for w, ls := range load {
		if w != me && len(ls) > target && (victim == "" || len(ls) > len(load[victim]) ||
			len(ls) == len(load[victim]) && w < victim) {
			victim = w
		}
	}
	if victim != "" {
		ls := load[victim]
		slices.SortFunc(ls, func(a, b *lease) int { return compareShardIDs(a.shard, b.shard) })
		s.takeLease(ctx, ls[len(ls)-1], now, now.Add(time.Duration(float64(s.opts.LeaseDuration)*stealWait)))
	}
}

// compareShardIDs orders shard ids, which are zero-padded numbers.
func compareShardIDs(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// takeLease takes le if its counter has not moved since it was listed.
// A consumer it makes starts reading no sooner than notBefore (a stolen
// lease's: see stealWait; zero for others).
func (s *Source) takeLease(ctx context.Context, le *lease, now, notBefore time.Time) bool {
	// Another worker's, stolen or expired: one that has not renewed it
	// for a lease duration may be slow rather than gone, and still
	// handling a batch of the shard.
	fromOther := le.owner != "" && le.owner != s.opts.Worker
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := s.leases.take(c, le.shard, s.opts.Worker, le.counter)
	cancel()
	if err != nil {
		return false
	}
	s.taken.Add(1)
	le.owner = s.opts.Worker
	le.counter++
	s.mu.Lock()
	s.seen[le.shard] = observed{counter: le.counter, at: now}
	if s.held[le.shard] == nil {
		c := &consumer{shard: le.shard, renewedAt: now, notBefore: notBefore, fromOther: fromOther}
		c.behind.Store(-1)
		s.held[le.shard] = c
	}
	s.mu.Unlock()
	return true
}

// start runs a consumer on every lease held whose parents are read, once
// a stolen one's wait is over (stealWait).
func (s *Source) start(ctx context.Context, h stream.Handler, byShard map[string]*lease, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for shard, c := range s.held {
		le := byShard[shard]
		if c.cancel != nil || le == nil || le.owner != s.opts.Worker || !parentsDone(le, byShard) || now.Before(c.notBefore) {
			continue
		}
		cctx, cancel := context.WithCancel(ctx)
		c.cancel, c.done = cancel, make(chan struct{})
		from := stream.Position{Seq: le.seq, Sub: le.sub}
		go func() {
			defer close(c.done)
			hctx, hcancel := handlerGrace(cctx, s.opts.LeaseDuration)
			defer hcancel()
			s.consume(cctx, hctx, c, from, h)
		}()
	}
}

// parentsDone reports whether le's parents are read to their ends, or gone
// from the table.
func parentsDone(le *lease, byShard map[string]*lease) bool {
	for _, p := range le.parents {
		if pl, ok := byShard[p]; ok && pl.seq != ShardEnd {
			return false
		}
	}
	return true
}

// graceLeases is how long, in lease durations, a handler call in progress
// keeps its context once its consumer stopped (handlerGrace), and after
// each progress the call reports: until the worker that stole the lease,
// which reads stealWait after its steal and then waits up to a lease
// duration for what the call delivers, and a lease duration after each
// progress it sees (stream.TakenOver), stops waiting. The steal came
// before this worker saw it, and a progress is reported once it is
// saved, before the thief can see it: the call never gives up while the
// thief still waits for it.
const graceLeases = stealWait + 1

// handlerGrace returns the context of a consumer's handler calls, for
// leases of lease: ctx's values, done graceLeases lease durations after
// ctx is (or when the returned cancel is called), or as long after the
// call's last progress report (stream.Progress, asked for every third of
// a lease duration once ctx is done), whichever is later. Reports stop
// extending it stream.MaxProgressWaits lease durations after ctx is done:
// the call stops reporting (stream.Progress), and the worker that stole
// the lease, which waits a lease duration after the last report it saw,
// stops waiting before the grace ends. A call
// in progress when the consumer stops, on a lease lost or at shutdown,
// ends what it started (the aggregator delivers the outputs its batch
// closed) as long as it reports progress; the consumer reads and retries
// nothing more meanwhile. At shutdown the lease is released only after
// the call, and no longer renewed: a call longer than a lease duration
// lets another worker take the lease as expired, and that one waits for
// it as for a stolen lease's.
func handlerGrace(ctx context.Context, lease time.Duration) (context.Context, context.CancelFunc) {
	d, every := time.Duration(float64(lease)*graceLeases), lease/3
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var (
		mu    sync.Mutex
		timer *time.Timer // set once ctx is done
		until time.Time   // the last report that extends the grace
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		timer = time.AfterFunc(d, cancel)
		until = time.Now().Add(stream.MaxProgressWaits * lease)
		mu.Unlock()
	})
	report := func() bool {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case hctx.Err() != nil:
			return false
		case timer == nil: // ctx is not done, or its AfterFunc has yet to run
			return true
		case !time.Now().Before(until):
			return false
		}
		timer.Reset(d)
		return true
	}
	stopped := func() bool { return ctx.Err() != nil }
	return stream.WithProgress(hctx, stream.Progress{Every: every, Stopped: stopped, Report: report}), func() {
		stop()
		cancel()
	}
}

// shutdown stops every consumer, those leaving too, and releases the
// leases still held.
func (s *Source) shutdown() {
	for _, c := range s.consumers(true) {
		s.stop(c)
		if !c.lost.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s.leases.release(ctx, c.shard, s.opts.Worker)
			cancel()
		}
	}
}

// errStopped ends a consumer whose context is done or whose lease is gone.
var errStopped = errors.New("consumer stopped")

// consume reads one shard from from, or from where h's Open says, hands
// its events to h in batches and checkpoints after them, until the shard
// ends or ctx is done; h's calls get hctx (see handlerGrace).
func (s *Source) consume(ctx, hctx context.Context, c *consumer, from stream.Position, h stream.Handler) {
	if from.Seq == ShardEnd {
		c.ended.Store(true)
		return
	}
	r := shardReader{s: s, c: c, h: h, hctx: hctx, saved: from}
	var at stream.Position
	octx := hctx
	if c.fromOther {
		// Taken from a worker that may still be delivering what its last
		// batch closed (see stealWait).
		octx = stream.TakenOver(hctx, s.opts.LeaseDuration)
	}
	if r.retry(ctx, func() (err error) { at, err = h.Open(octx, c.shard, from); return err }) != nil {
		return
	}
	r.pos, r.handled, r.resume, r.skip = at, at, at.Seq, at.Sub
	var err error
	if at.Seq == ShardEnd {
		// The handler has read the shard to its end already.
		err = r.end(ctx)
	} else {
		err = r.run(ctx)
	}
	if err == nil {
		c.ended.Store(true)
		return
	}
	// Stopped: what was handled since the last checkpoint is written
	// down if the lease is still ours, with a context of its own.
	if r.handled != r.saved && !c.lost.Load() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if s.leases.checkpoint(cctx, c.shard, s.opts.Worker, r.handled) == nil {
			s.checkpoints.Add(1)
		}
		cancel()
	}
	h.Close(context.WithoutCancel(ctx), c.shard, false)
}

// shardReader is the state of one consumer.
type shardReader struct {
	s       *Source
	c       *consumer
	h       stream.Handler
	hctx    context.Context // h's calls' (see handlerGrace)
	pos     stream.Position // checkpointed or to be: after the events read
	handled stream.Position // after the events the handler took
	resume  string          // the record to resume inside, and skip its first events
	skip    int64
	iter    *string
	saved   stream.Position // the last checkpoint written
	savedAt time.Time
	from    stream.Position      // the first event of the batch being gathered
	events  []decisions.Decision // the batch being gathered, decoded
	recs    []stream.Record      // or undecoded (SourceOptions.Rows)
	buf     []decisions.Decision
	fails   int
}

// retry calls f until it succeeds, backing off between calls; it returns
// errStopped once the consumer should stop.
func (r *shardReader) retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			r.fails = 0
			return nil
		}
		if err := r.pause(ctx, err); err != nil {
			return err
		}
	}
}

// errReopened says the reader opened its partition again (reopen): what
// it was reading is dropped, and it reads on from the position Open gave.
var errReopened = errors.New("partition opened again")

// call calls f, a handler's Handle, Idle or Close(ended), until it
// succeeds, as retry does; an error that asks for the partition to be
// opened again (stream.ErrReopen) makes the reader do so (reopen) and
// returns errReopened, or errStopped once the consumer should stop.
func (r *shardReader) call(ctx context.Context, f func() error) error {
	again := false
	if err := r.retry(ctx, func() error {
		err := f()
		if again = errors.Is(err, stream.ErrReopen); again {
			return nil
		}
		return err
	}); err != nil || !again {
		return err
	}
	if err := r.reopen(ctx); err != nil {
		return err
	}
	return errReopened
}

// reopen opens the partition again once its handler's durable state
// moved under it (stream.ErrReopen: another worker saved it, the two
// having overlapped while the lease changed hands). If the lease is gone
// the consumer stops (errStopped), as renew would have stopped it; if it
// is still held, the handler's Open, which loads the state the other
// worker saved, says where to read from, and what was gathered is
// dropped. Before, the worker that held the lease failed every call on
// the shard until it was restarted, and the shard's last windows waited.
func (r *shardReader) reopen(ctx context.Context) error {
	s := r.s
	for {
		rc, cancel := context.WithTimeout(ctx, s.opts.LeaseDuration/3)
		err := s.leases.renew(rc, r.c.shard, s.opts.Worker)
		cancel()
		if err == nil {
			break
		}
		if errors.Is(err, errLeaseLost) {
			r.c.lost.Store(true)
			return errStopped
		}
		if err := r.pause(ctx, err); err != nil {
			return err
		}
	}
	s.reopened.Add(1)
	var at stream.Position
	// The reader that saved the state is live, and may still be
	// delivering what it saved pending.
	octx := stream.TakenOver(r.hctx, s.opts.LeaseDuration)
	if err := r.retry(ctx, func() (err error) { at, err = r.h.Open(octx, r.c.shard, r.handled); return err }); err != nil {
		return err
	}
	r.pos, r.handled, r.resume, r.skip, r.iter = at, at, at.Seq, at.Sub, nil
	r.dropGathered()
	return nil
}

// dropGathered empties the batch being gathered.
func (r *shardReader) dropGathered() {
	clear(r.events)
	r.events = r.events[:0]
	clear(r.recs)
	r.recs = r.recs[:0]
}

// run reads until the shard ends (nil) or the consumer stops (errStopped).
func (r *shardReader) run(ctx context.Context) error {
	s := r.s
	var last time.Time
	for {
		if r.iter == nil {
			if r.pos.Seq == ShardEnd { // opened again where another reader ended it
				return r.end(ctx)
			}
			if err := r.iterator(ctx); err != nil {
				if err := r.pause(ctx, err); err != nil {
					return err
				}
				continue
			}
		}
		if wait := 200*time.Millisecond - time.Since(last); wait > 0 {
			if err := backoff.Sleep(ctx, wait); err != nil {
				return errStopped
			}
		}
		last = time.Now()
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := s.api.GetRecords(c, &kinesis.GetRecordsInput{ShardIterator: r.iter, Limit: aws.Int32(s.opts.Records)})
		cancel()
		if err != nil {
			var expired *types.ExpiredIteratorException
			if errors.As(err, &expired) {
				r.iter = nil
				continue
			}
			if awserr.IsThrottle(err) {
				s.throttled.Add(1)
			}
			if err := r.pause(ctx, err); err != nil {
				return err
			}
			continue
		}
		r.fails = 0
		r.c.behind.Store(aws.ToInt64(out.MillisBehindLatest))
		if err := r.records(ctx, out.Records); errors.Is(err, errReopened) {
			continue // from where Open said, with an iterator there
		} else if err != nil {
			return err
		}
		r.iter = out.NextShardIterator
		if r.iter == nil {
			return r.end(ctx)
		}
		if len(out.Records) == 0 || aws.ToInt64(out.MillisBehindLatest) == 0 {
			if err := r.call(ctx, func() error { return r.h.Idle(r.hctx, r.c.shard) }); errors.Is(err, errReopened) {
				continue
			} else if err != nil {
				return err
			}
			if err := backoff.Sleep(ctx, s.opts.Poll); err != nil {
				return errStopped
			}
		}
	}
}

// end closes the handler's shard as ended and checkpoints ShardEnd.
func (r *shardReader) end(ctx context.Context) error {
	if err := r.call(ctx, func() error { return r.h.Close(r.hctx, r.c.shard, true) }); errors.Is(err, errReopened) {
		return r.run(ctx) // from where Open said: the end again, or before it
	} else if err != nil {
		return err
	}
	r.pos = stream.Position{Seq: ShardEnd}
	return r.checkpoint(ctx)
}

// iterator gets a shard iterator at the position.
func (r *shardReader) iterator(ctx context.Context) error {
	if r.pos.Seq != "" {
		// At the record: the consumer skips the events it handled.
		r.resume, r.skip = r.pos.Seq, r.pos.Sub
	}
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	out, err := r.s.api.GetShardIterator(c, iteratorAt(r.s.opts.Stream, r.c.shard, r.pos, r.s.opts.StartAt))
	cancel()
	if err != nil {
		return fmt.Errorf("get shard iterator %s: %w", r.c.shard, err)
	}
	r.iter = out.ShardIterator
	return nil
}

// iteratorAt is the GetShardIterator input that reads shard of stream
// name from pos: at its record, or, from a shard's start position, where
// startAt says.
func iteratorAt(name, shard string, pos stream.Position, startAt StartAt) *kinesis.GetShardIteratorInput {
	in := &kinesis.GetShardIteratorInput{StreamName: aws.String(name), ShardId: aws.String(shard)}
	switch {
	case pos.Seq != "":
		in.ShardIteratorType = types.ShardIteratorTypeAtSequenceNumber
		in.StartingSequenceNumber = aws.String(pos.Seq)
	case startAt == Latest:
		in.ShardIteratorType = types.ShardIteratorTypeLatest
	default:
		in.ShardIteratorType = types.ShardIteratorTypeTrimHorizon
	}
	return in
}

// pause backs off after a failed call; it returns errStopped once the
// consumer should stop.
func (r *shardReader) pause(ctx context.Context, _ error) error {
	r.s.retries.Add(1)
	r.fails++
	if err := backoff.Sleep(ctx, backoff.FullJitter(100*time.Millisecond, 5*time.Second, r.fails, backoff.Uniform)); err != nil {
		return errStopped
	}
	return nil
}

// records hands the events of recs over in batches of at most MaxBatch,
// or, with SourceOptions.Rows, the records themselves in one batch.
func (r *shardReader) records(ctx context.Context, recs []types.Record) error {
	s := r.s
	if s.opts.Rows {
		for i := range recs {
			rec := &recs[i]
			seq := aws.ToString(rec.SequenceNumber)
			s.records.Add(1)
			sub := int64(0)
			if seq == r.resume {
				sub, r.resume = r.skip, ""
			}
			r.pos = stream.Position{Seq: seq, Sub: wholeRecord}
			if sub == wholeRecord {
				continue // handled whole: the batch starts after it, as it did
			}
			if len(r.recs) == 0 {
				r.from = stream.Position{Seq: seq, Sub: sub}
			}
			r.recs = append(r.recs, stream.Record{Pos: stream.Position{Seq: seq}, Data: rec.Data, Arrived: aws.ToTime(rec.ApproximateArrivalTimestamp)})
		}
		return r.deliver(ctx)
	}
	for i := range recs {
		rec := &recs[i]
		seq := aws.ToString(rec.SequenceNumber)
		s.records.Add(1)
		var err error
		r.buf, err = Decode(rec.Data, r.buf[:0])
		if err != nil {
			// A CloudWatch Logs record counts its log events that are not
			// decisions and keeps the others; any other failure, the record.
			bad, partial := columnar.IsCorruptEvents(err)
			if !partial {
				bad = 1
				r.buf = r.buf[:0]
			}
			s.corruptRecords(r.c.shard, seq, err, uint64(bad))
		}
		first := int64(0)
		if seq == r.resume {
			first = min(max(r.skip, 0), int64(len(r.buf))) // a checkpoint is not trusted to be in range
			r.resume = ""
		}
		for first < int64(len(r.buf)) {
			if len(r.events) == 0 {
				r.from = stream.Position{Seq: seq, Sub: first}
			}
			n := min(int64(s.opts.MaxBatch-len(r.events)), int64(len(r.buf))-first)
			r.events = append(r.events, r.buf[first:first+n]...)
			first += n
			r.pos = stream.Position{Seq: seq, Sub: first}
			if first == int64(len(r.buf)) {
				r.pos.Sub = wholeRecord
			}
			if len(r.events) == s.opts.MaxBatch {
				if err := r.deliver(ctx); err != nil {
					return err
				}
			}
		}
		if len(r.buf) == 0 {
			r.pos = stream.Position{Seq: seq, Sub: wholeRecord}
		}
	}
	return r.deliver(ctx)
}

// corruptRecords counts n corrupt records (or log events of one record)
// and keeps the error.
func (s *Source) corruptRecords(shard, seq string, err error, n uint64) {
	s.corrupt.Add(n)
	s.mu.Lock()
	if len(s.problems) < maxProblems {
		s.problems = append(s.problems, fmt.Errorf("shard %s record %s: %w", shard, seq, err))
	}
	s.mu.Unlock()
}

// deliver hands the batch gathered to the handler until it takes it, then
// checkpoints.
func (r *shardReader) deliver(ctx context.Context) error {
	s := r.s
	if len(r.events) > 0 || len(r.recs) > 0 {
		b := stream.Batch{Partition: r.c.shard, From: r.from, To: r.pos}
		if s.opts.Rows {
			b.Records = r.recs
			b.Corrupt = func(rec *stream.Record, lost int, err error) {
				s.corruptRecords(r.c.shard, rec.Pos.Seq, err, uint64(lost))
			}
		} else {
			b.Events = r.events
		}
		// The same Batch value is handed again after an error, so that a
		// corrupt record is reported once.
		if err := r.call(ctx, func() error { return r.h.Handle(r.hctx, &b) }); err != nil {
			return err
		}
		s.batches.Add(1)
		n := uint64(len(r.events))
		if s.opts.Rows {
			n = b.Handed() // the records' events, known once the handler read them
		}
		s.events.Add(n)
		r.dropGathered()
	}
	r.handled = r.pos
	if r.pos == r.saved || s.opts.Checkpoint > 0 && time.Since(r.savedAt) < s.opts.Checkpoint {
		return nil
	}
	return r.checkpoint(ctx)
}

// checkpoint writes the position, again until it is written or the
// consumer stops; a lease gone to another worker stops it.
func (r *shardReader) checkpoint(ctx context.Context) error {
	s := r.s
	for {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.leases.checkpoint(c, r.c.shard, s.opts.Worker, r.pos)
		cancel()
		if err == nil {
			s.checkpoints.Add(1)
			r.fails = 0
			r.saved, r.savedAt = r.pos, time.Now()
			return nil
		}
		if errors.Is(err, errLeaseLost) {
			r.c.lost.Store(true)
			return errStopped
		}
		if err := r.pause(ctx, err); err != nil {
			return err
		}
	}
}
