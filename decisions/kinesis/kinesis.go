// Package kinesis is the Kinesis transport of the decision log: a
// decisions.BatchWriter that puts batches of decision events on an Amazon
// Kinesis data stream, and Decode, which turns one record's payload back
// into events.
//
// Each record's payload starts with a one-byte codec id (the codec ids of
// package decisionlog): 1 for an Arrow IPC stream holding many events, 2
// for one JSON decision. An Arrow record is compressed as the decision
// log's are (columnar.CompressionFor): in one zstd frame with the
// dictionary below columnar.PerBufferFrom events, per buffer from it, so
// that a reader of a column subset decompresses only those columns.
//
// # Shards
//
// An event's partition is chosen by its identity (the user, else the client
// address): fnv(identity) % Partitions. Each partition has a fixed place
// in the stream's hash-key range, the middle of its 1/Partitions slice,
// sent as the record's explicit hash key (the partition key, the
// partition's number, then only names it). So the partitions spread evenly
// over the shards of a stream split evenly (aws init, UpdateShardCount),
// whatever the partition keys would hash to, and one identity's records
// all go to the one shard that holds its partition's hash key: in order,
// per shard. After a split the hash key lies in exactly one child, which
// takes the identity's later records; a consumer reads the parent to its
// end first (Source does). Use a multiple of the shard count, so that every
// shard gets partitions; more partitions than shards leave room to split,
// at the price of smaller records.
package kinesis

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/internal/awserr"
	"github.com/ratewarden/ratewarden/internal/backoff"
)

// API limits of PutRecords.
const (
	maxRecordBytes = 1 << 20 // data plus partition key of one record
	maxCallBytes   = 5 << 20 // data plus partition keys of one call
	maxCallRecords = 500
)

// API is the part of the Kinesis client a Sink uses. *kinesis.Client
// satisfies it.
type API interface {
	PutRecords(ctx context.Context, in *kinesis.PutRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.PutRecordsOutput, error)
}

var _ API = (*kinesis.Client)(nil)

// Options configure a Sink. Zero fields take their defaults.
type Options struct {
	Stream string // stream name; required
	// Partitions is how many partitions are used, default 4: an event goes
	// to partition fnv(identity) % Partitions, and a partition to a fixed
	// hash key (see the package documentation), so one identity's events
	// stay in order on one shard. A batch makes a record per partition, so
	// more partitions mean smaller records. Use a multiple of the stream's
	// shard count.
	Partitions int
	MaxRetries int           // retries of a record before it is given up; 0 means the default, 8
	BaseDelay  time.Duration // first backoff bound (full jitter); default 50ms
	MaxDelay   time.Duration // largest backoff bound; default 5s
	Timeout    time.Duration // deadline of one PutRecords call; default 5s
	// Sleep waits between retries; default a timer honouring ctx. Tests
	// inject one that returns at once.
	Sleep func(context.Context, time.Duration) error
	// JSON selects the compatibility mode: one JSON decision per record
	// instead of Arrow batches.
	JSON bool
}

func (o *Options) setDefaults() {
	if o.Partitions == 0 {
		o.Partitions = 4
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = 8
	}
	if o.BaseDelay == 0 {
		o.BaseDelay = 50 * time.Millisecond
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = 5 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Sleep == nil {
		o.Sleep = backoff.Sleep
	}
}

// Validate reports the first option out of range.
func (o *Options) Validate() error {
	switch {
	case o.Stream == "":
		return errors.New("kinesis.stream: empty, want a stream name")
	case o.Partitions < 1 || o.Partitions > 1<<16:
		return fmt.Errorf("kinesis.partitions: %d, want 1 to 65536", o.Partitions)
	case o.MaxRetries < 0:
		return fmt.Errorf("kinesis.max_retries: %d, want 0 or more", o.MaxRetries)
	case o.BaseDelay < 0 || o.MaxDelay < o.BaseDelay:
		return fmt.Errorf("kinesis.base_delay, max_delay: %v, %v, want 0 <= base_delay <= max_delay", o.BaseDelay, o.MaxDelay)
	case o.Timeout < 0:
		return fmt.Errorf("kinesis.timeout: %v, want more than 0", o.Timeout)
	}
	return nil
}

// Stats are a Sink's counters.
type Stats struct {
	Records   uint64 // records delivered
	Events    uint64 // events delivered
	Calls     uint64 // PutRecords calls made
	Retried   uint64 // records sent again after a failure
	Throttled uint64 // throttled responses: whole calls and single records
	Failed    uint64 // events given up after MaxRetries or a permanent error
	Bytes     uint64 // payload bytes delivered, partition keys included
}

// Sink is a decisions.BatchWriter putting decisions on a Kinesis stream.
// WriteBatch is synchronous: it returns once every record is delivered or
// given up. A Sink is not safe for concurrent use (an Emitter serialises
// its calls), except Stats. It does its own retries: the client's retryer
// is turned off for its calls, so that a record is retried only here.
type Sink struct {
	api    API
	opts   Options
	enc    encoder // Arrow records: a columnar.SizedEncoder
	rng    *rand.Rand
	groups [][]decisions.Decision // by partition; reused
	order  []int                  // partitions in order of first appearance
	keys   []string               // partition keys, by partition
	hashes []string               // explicit hash keys, by partition
	buf    []byte

	n *counters // shared with the Sink's clones
}

// encoder encodes the Sink's Arrow records: a columnar.SizedEncoder, so
// that a record of a few events at a low rate is one zstd frame with the
// dictionary rather than mostly its schema, and a record of
// columnar.PerBufferFrom events or more is compressed per buffer, as the
// decision log's are (or, in tests, an Encoder of one compression).
type encoder interface {
	Encode(dst []byte, ds []decisions.Decision) ([]byte, error)
}

// counters are a Sink's Stats, shared by its clones.
type counters struct {
	records, events, calls, retried, throttled, failed, bytes atomic.Uint64
}

var _ decisions.BatchWriter = (*Sink)(nil)

// New returns a Sink putting records on opts.Stream through api.
func New(api API, opts Options) (*Sink, error) {
	if api == nil {
		return nil, errors.New("new kinesis sink: nil API")
	}
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("new kinesis sink: %w", err)
	}
	return newSink(api, opts, &counters{}), nil
}

func newSink(api API, opts Options, n *counters) *Sink {
	s := &Sink{
		api:    api,
		opts:   opts,
		rng:    rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x6b696e657369)),
		groups: make([][]decisions.Decision, opts.Partitions),
		keys:   make([]string, opts.Partitions),
		hashes: hashKeys(opts.Partitions),
		n:      n,
	}
	if !opts.JSON {
		s.enc = &columnar.SizedEncoder{}
	}
	for i := range s.keys {
		s.keys[i] = strconv.Itoa(i)
	}
	return s
}

// clone returns a Sink of the same stream and options, with scratch of
// its own and the same counters, for a second goroutine (a Spill's
// drainer) to deliver through without sharing a lock with the first.
func (s *Sink) clone() *Sink { return newSink(s.api, s.opts, s.n) }

// hashKeys returns the explicit hash key of each of n partitions: the
// middle of the partition's 1/n of the 128-bit hash-key range, in decimal.
func hashKeys(n int) []string {
	out := make([]string, n)
	top := new(big.Int).Lsh(big.NewInt(1), 128)
	for p := range out {
		k := new(big.Int).Mul(top, big.NewInt(int64(2*p+1)))
		out[p] = k.Div(k, big.NewInt(int64(2*n))).String()
	}
	return out
}

// partition returns d's partition: by user, else client address; events
// with neither go to partition 0.
func partition(d *decisions.Decision, n int) int {
	h, ok := identity(d)
	if !ok {
		return 0
	}
	return int(h % uint32(n))
}

// identity returns a hash of d's identity, the user, else the client
// address, and false for an event with neither. The hash is FNV-1a,
// inline so that it does not allocate.
func identity(d *decisions.Decision) (uint32, bool) {
	const offset, prime = 2166136261, 16777619
	h := uint32(offset)
	switch {
	case d.UserID != "":
		h = (h ^ 'u') * prime
		for i := 0; i < len(d.UserID); i++ {
			h = (h ^ uint32(d.UserID[i])) * prime
		}
	case d.ClientIP.IsValid():
		h = (h ^ 'a') * prime
		a := d.ClientIP.Unmap().AsSlice()
		for _, c := range a {
			h = (h ^ uint32(c)) * prime
		}
	default:
		return 0, false
	}
	return h, true
}

// entry is one record awaiting delivery.
type entry struct {
	key      string // partition key
	hash     string // explicit hash key
	order    uint64 // entries of one order key are delivered in order
	data     []byte
	events   int
	attempts int // failed attempts so far
}

func (e *entry) size() int { return len(e.data) + len(e.key) }

// Stats returns the counters. It is safe for concurrent use.
func (s *Sink) Stats() Stats {
	return Stats{
		Records: s.n.records.Load(), Events: s.n.events.Load(), Calls: s.n.calls.Load(), Retried: s.n.retried.Load(),
		Throttled: s.n.throttled.Load(), Failed: s.n.failed.Load(), Bytes: s.n.bytes.Load(),
	}
}

// Flush does nothing: WriteBatch is synchronous.
func (s *Sink) Flush() error { return nil }

// WriteBatch puts ds on the stream: grouped by partition, each group in
// records of at most 1 MiB (in JSON mode, a record per event), in calls of
// at most 500 records and 5 MiB. Failed records are retried with backoff
// before anything else is sent, and a call carries at most one record per
// partition (in JSON mode, per identity), so that an identity's events are
// never reordered. It returns an error naming the events given up.
func (s *Sink) WriteBatch(ds []decisions.Decision) error {
	undelivered, err := s.deliver(context.Background(), ds)
	for i := range undelivered {
		s.n.failed.Add(uint64(undelivered[i].events))
	}
	return err
}

// deliver puts ds on the stream and returns the records it gave up on, for
// a caller that keeps them elsewhere; events that could not be encoded are
// counted as failed here. Once ctx is done it gives up what is left.
func (s *Sink) deliver(ctx context.Context, ds []decisions.Decision) ([]entry, error) {
	if len(ds) == 0 {
		return nil, nil
	}
	pending, failed, err := s.build(ds)
	if err != nil {
		s.n.failed.Add(uint64(failed))
	}
	undelivered, sendErr := s.send(ctx, pending)
	return undelivered, errors.Join(err, sendErr)
}

// build turns ds into records, in order.
func (s *Sink) build(ds []decisions.Decision) ([]entry, int, error) {
	var (
		pending []entry
		errs    []error
		lost    int
	)
	if s.opts.JSON {
		pending = make([]entry, 0, len(ds))
		for i := range ds {
			s.buf = append(s.buf[:0], byte(columnar.CodecJSON))
			s.buf = decisions.AppendJSON(s.buf, &ds[i])
			p := partition(&ds[i], s.opts.Partitions)
			if len(s.buf)+len(s.keys[p]) > maxRecordBytes {
				lost++
				errs = append(errs, fmt.Errorf("put decisions: event of %d bytes exceeds the record limit", len(s.buf)))
				continue
			}
			// A record per event: order matters per identity, so records
			// of other identities share a call, and only a second event of
			// one identity waits for the next.
			h, _ := identity(&ds[i])
			pending = append(pending, entry{key: s.keys[p], hash: s.hashes[p], order: uint64(h), data: append([]byte(nil), s.buf...), events: 1})
		}
		return pending, lost, errors.Join(errs...)
	}
	s.order = s.order[:0]
	for i := range ds {
		p := partition(&ds[i], s.opts.Partitions)
		if len(s.groups[p]) == 0 {
			s.order = append(s.order, p)
		}
		s.groups[p] = append(s.groups[p], ds[i])
	}
	for _, p := range s.order {
		var err error
		var n int
		pending, n, err = s.encode(pending, p, s.groups[p])
		lost += n
		errs = append(errs, err)
		clear(s.groups[p]) // drop the strings held
		s.groups[p] = s.groups[p][:0]
	}
	return pending, lost, errors.Join(errs...)
}

// encode appends group as records of at most maxRecordBytes, halving it
// until it fits; it returns how many events could not be encoded.
func (s *Sink) encode(pending []entry, p int, group []decisions.Decision) ([]entry, int, error) {
	var err error
	s.buf, err = s.enc.Encode(append(s.buf[:0], byte(columnar.CodecArrow)), group)
	if err != nil {
		return pending, len(group), fmt.Errorf("encode decisions: %w", err)
	}
	if len(s.buf)+len(s.keys[p]) <= maxRecordBytes {
		e := entry{key: s.keys[p], hash: s.hashes[p], order: uint64(p), data: append([]byte(nil), s.buf...), events: len(group)}
		return append(pending, e), 0, nil
	}
	if len(group) == 1 {
		return pending, 1, fmt.Errorf("put decisions: event of %d encoded bytes exceeds the record limit", len(s.buf))
	}
	h := len(group) / 2
	pending, n1, err1 := s.encode(pending, p, group[:h])
	pending, n2, err2 := s.encode(pending, p, group[h:])
	return pending, n1 + n2, errors.Join(err1, err2)
}

// send delivers pending, retrying failures first, and returns the records
// it gave up on, in order.
func (s *Sink) send(ctx context.Context, pending []entry) ([]entry, error) {
	var (
		gaveUp  []entry
		lastErr error
		call    []int // indices into pending
		inCall  = make(map[uint64]bool)
		dead    = make(map[uint64]bool)
		in      = kinesis.PutRecordsInput{StreamName: aws.String(s.opts.Stream)}
	)
	for len(pending) > 0 {
		// Take records in order, one per order key, within the call
		// limits: Kinesis does not promise the order of a call's records,
		// and a failed record must not be overtaken by a later one.
		call, attempts, size := call[:0], 0, 0
		clear(inCall)
		in.Records = in.Records[:0]
		for i := range pending {
			e := &pending[i]
			if inCall[e.order] {
				continue
			}
			inCall[e.order] = true // a later record of the key waits even if this one does not fit
			if len(call) == maxCallRecords || size+e.size() > maxCallBytes {
				continue
			}
			call = append(call, i)
			size += e.size()
			attempts = max(attempts, e.attempts)
			in.Records = append(in.Records, types.PutRecordsRequestEntry{Data: e.data, PartitionKey: aws.String(e.key), ExplicitHashKey: aws.String(e.hash)})
		}
		if attempts > 0 {
			if err := s.opts.Sleep(ctx, s.backoff(attempts)); err != nil {
				gaveUp = append(gaveUp, pending...)
				return gaveUp, fmt.Errorf("put decisions: %d events not delivered to stream %s: %w", countEvents(gaveUp), s.opts.Stream, err)
			}
			s.n.retried.Add(uint64(len(call)))
		}
		failed, permanent, err := s.put(ctx, &in, call, pending)
		if err != nil {
			lastErr = err
		}
		// Keep the failed records, in order; give up those out of retries,
		// and the later records of their keys with them, so that whoever
		// keeps what was given up can still deliver each key in order.
		next := pending[:0]
		j := 0
		clear(dead)
		for i := range pending {
			e := pending[i]
			if j < len(call) && call[j] == i {
				ok := !failed[j]
				j++
				if ok {
					continue
				}
				e.attempts++
				if permanent || e.attempts > s.opts.MaxRetries {
					dead[e.order] = true
				}
			}
			if dead[e.order] {
				gaveUp = append(gaveUp, e)
				continue
			}
			next = append(next, e)
		}
		clear(pending[len(next):])
		pending = next
	}
	if len(gaveUp) > 0 {
		return gaveUp, fmt.Errorf("put decisions: %d events not delivered to stream %s: %w", countEvents(gaveUp), s.opts.Stream, lastErr)
	}
	return nil, nil
}

// countEvents counts the events in es.
func countEvents(es []entry) int {
	n := 0
	for i := range es {
		n += es[i].events
	}
	return n
}

// put makes one PutRecords call and reports, by position in call, which
// records failed, and whether the failure is permanent.
func (s *Sink) put(ctx context.Context, in *kinesis.PutRecordsInput, call []int, pending []entry) (failed []bool, permanent bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	s.n.calls.Add(1)
	out, err := s.api.PutRecords(ctx, in, noRetry)
	failed = make([]bool, len(call))
	if err != nil {
		for i := range failed {
			failed[i] = true
		}
		if awserr.IsThrottle(err) {
			s.n.throttled.Add(1)
			return failed, false, fmt.Errorf("put records: %w", err)
		}
		return failed, !retryable(err), fmt.Errorf("put records: %w", err)
	}
	if len(out.Records) != len(call) {
		for i := range failed {
			failed[i] = true
		}
		return failed, false, fmt.Errorf("put records: %d results for %d records", len(out.Records), len(call))
	}
	for i, r := range out.Records {
		if r.ErrorCode != nil {
			failed[i] = true
			if *r.ErrorCode == "ProvisionedThroughputExceededException" {
				s.n.throttled.Add(1)
			}
			err = fmt.Errorf("put records: %s: %s", *r.ErrorCode, aws.ToString(r.ErrorMessage))
			continue
		}
		e := &pending[call[i]]
		s.n.records.Add(1)
		s.n.events.Add(uint64(e.events))
		s.n.bytes.Add(uint64(e.size()))
	}
	return failed, false, err
}

// noRetry turns off the client's retryer: the Sink retries only the
// failed records itself, and a retried call would double the backoff.
func noRetry(o *kinesis.Options) { o.Retryer = aws.NopRetryer{} }

// backoff returns a full-jitter delay after attempts failures, drawn from
// the Sink's own source.
func (s *Sink) backoff(attempts int) time.Duration {
	return backoff.FullJitter(s.opts.BaseDelay, s.opts.MaxDelay, attempts, func(n int64) int64 { return s.rng.Int64N(n + 1) })
}

// kinesisRetryCodes are the codes Kinesis documents as worth another
// call besides those every AWS client retries (awserr.Retryable): the KMS
// key of an encrypted stream throttled or unavailable, answered with 400.
var kinesisRetryCodes = []string{"KMSThrottlingException", "KMSUnavailableException"}

// retryable reports whether a failed call may succeed if made again, by
// awserr.Retryable with Kinesis's own codes: transport errors, throttling
// and server errors may; a refused request (missing stream, bad argument,
// access denied) will not.
func retryable(err error) bool {
	return awserr.Retryable(err, kinesisRetryCodes...)
}

// Decode appends the events of one Kinesis record's data, its codec byte
// then its payload, to dst: columnar.DecodeRecord, kept under this name for
// the package's readers and the Lambda handler's callers.
func Decode(data []byte, dst []decisions.Decision) ([]decisions.Decision, error) {
	return columnar.DecodeRecord(data, dst)
}
