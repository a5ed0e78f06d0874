package kinesis

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ratewarden/ratewarden/decisions/stream"
	"github.com/ratewarden/ratewarden/internal/hashmix"
)

// LambdaStats count what a LambdaHandler did.
type LambdaStats struct {
	Invocations uint64 // events (invocations) handled
	Records     uint64 // records read
	Events      uint64 // decision events the handler read (stream.Batch.Rows)
	Corrupt     uint64 // records that could not be decoded, and log events of CloudWatch Logs records that are not decisions: skipped
	Failed      uint64 // invocations that reported a batch item failure
}

// LambdaOptions configure a LambdaHandler.
type LambdaOptions struct {
	// CommitRecords is how many consecutive records make one batch (a
	// commit group), on average: a record after an invocation's first
	// begins a new group where StartsCommitGroup says so, so that groups
	// fall at the same records whatever record an invocation begins
	// with. 1 makes every record a group; 0, the default, makes the
	// whole invocation one.
	CommitRecords int
}

// LambdaHandler serves a Kinesis event-source mapping in AWS Lambda: it
// hands an invocation's records, undecoded, to a stream.Handler as
// batches of about CommitRecords consecutive records, in order, each
// {Partition: the shard, From: its first record's position, To: the
// position after its last, Records}. The handler reads them with
// Batch.Rows; a record that cannot be decoded is skipped, counted and
// reported (Batch.Corrupt), so a poison record does not hold up its shard.
//
// When Handle fails, the invocation answers with a partial batch failure
// naming the batch's first record, or the record a RetryFrom error names
// (configure the mapping with FunctionResponseTypes
// ReportBatchItemFailures): Lambda then retries from that record on, and
// the records before it, committed by their nil return, are not
// delivered again. A retry begins at that record but may end elsewhere
// than the failed invocation did (a batch split in halves, records
// arrived since): its batches are cut at the same records as this
// invocation's were (StartsCommitGroup), but the last may hold fewer or
// more records. A handler that keys its outputs by a batch's range is
// therefore not idempotent across retries; one that keys them by where
// they begin can be (see aggregator.KinesisLambda).
//
// The handler is opened on the invocation's shard with the first record's
// position, and is handed the records from the position Open returns when
// it names one of them; it is closed, not ended, after the invocation:
// Lambda keeps the shard's position. Idle is never called. A
// LambdaHandler is safe for concurrent use if its handler is.
type LambdaHandler struct {
	h    stream.Handler
	opts LambdaOptions

	mu       sync.Mutex
	problems []error

	invocations, records, events, corrupt, failed atomic.Uint64
}

// NewLambdaHandler returns a LambdaHandler handing batches to h.
func NewLambdaHandler(h stream.Handler, o LambdaOptions) *LambdaHandler {
	return &LambdaHandler{h: h, opts: o}
}

// Handle handles one invocation. Its error is nil: a failure is reported
// as a batch item failure.
func (l *LambdaHandler) Handle(ctx context.Context, ev events.KinesisEvent) (events.KinesisEventResponse, error) {
	l.invocations.Add(1)
	if len(ev.Records) == 0 {
		return events.KinesisEventResponse{}, nil
	}
	shard := eventShard(ev.Records[0].EventID)
	corrupt := func(rec *stream.Record, lost int, err error) {
		l.corrupt.Add(uint64(lost))
		l.mu.Lock()
		if len(l.problems) < maxProblems {
			l.problems = append(l.problems, fmt.Errorf("%s record %.140q: %w", shard, rec.Pos.Seq, err))
		}
		l.mu.Unlock()
	}
	// What Lambda never sends is skipped and counted, never retried (a
	// retry would hold the shard for good), and never reaches a file
	// name: a shard or sequence number is part of the outputs' names.
	if !validShard(shard) {
		for i := range ev.Records {
			corrupt(&stream.Record{Pos: stream.Position{Seq: ev.Records[i].Kinesis.SequenceNumber}}, 1,
				fmt.Errorf("event id %.140q names no shard", ev.Records[0].EventID))
		}
		return events.KinesisEventResponse{}, nil
	}
	recs := validRecords(ev.Records, func(i int, err error) {
		corrupt(&stream.Record{Pos: stream.Position{Seq: ev.Records[i].Kinesis.SequenceNumber}}, 1, err)
	})
	if len(recs) == 0 {
		return events.KinesisEventResponse{}, nil
	}
	from := stream.Position{Seq: recs[0].Kinesis.SequenceNumber}
	at, err := l.h.Open(ctx, shard, from)
	if err != nil {
		return l.fail(recs[0].Kinesis.SequenceNumber), nil
	}
	defer l.h.Close(context.WithoutCancel(ctx), shard, false)
	for i := range recs {
		if recs[i].Kinesis.SequenceNumber == at.Seq {
			recs = recs[i:] // the records before it are the handler's already
			break
		}
	}
	if recs[0].Kinesis.SequenceNumber != at.Seq {
		at = stream.Position{Seq: recs[0].Kinesis.SequenceNumber}
	}
	all := make([]stream.Record, len(recs))
	for i := range recs {
		all[i] = stream.Record{Pos: stream.Position{Seq: recs[i].Kinesis.SequenceNumber}, Data: recs[i].Kinesis.Data,
			Arrived: recs[i].Kinesis.ApproximateArrivalTimestamp.Time}
	}
	for i := 0; i < len(all); {
		j := i + 1
		for j < len(all) && !StartsCommitGroup(all[j].Pos.Seq, l.opts.CommitRecords) {
			j++
		}
		g := all[i:j:j]
		b := stream.Batch{Partition: shard, From: g[0].Pos,
			To: stream.Position{Seq: g[len(g)-1].Pos.Seq, Sub: wholeRecord}, Records: g, Corrupt: corrupt}
		if i == 0 {
			b.From = at
		}
		l.records.Add(uint64(len(g)))
		err := l.h.Handle(ctx, &b)
		l.events.Add(b.Handed())
		if err != nil {
			seq := g[0].Pos.Seq
			var from *RetryFrom
			if errors.As(err, &from) && slices.ContainsFunc(g, func(r stream.Record) bool { return r.Pos.Seq == from.Seq }) {
				seq = from.Seq
			}
			return l.fail(seq), nil
		}
		i = j
	}
	return events.KinesisEventResponse{}, nil
}

// StartsCommitGroup reports whether the record of sequence number seq
// begins a commit group of about n records (LambdaOptions.CommitRecords)
// when it is not an invocation's first: always for n 1, never for n 0 or
// less, else where a hash of seq is 0 modulo n (FNV-1a, whose low bits
// follow the last bytes, mixed by hashmix.Fmix64). The groups depend on
// the records alone, not on where an invocation begins: Lambda retries a
// function error from the batch's first record in halves
// (BisectBatchOnFunctionError), and a half that begins inside a group
// then cuts the groups after it where the failed invocation did.
func StartsCommitGroup(seq string, n int) bool {
	if n <= 1 {
		return n == 1
	}
	h := fnv.New64a()
	io.WriteString(h, seq)
	return hashmix.Fmix64(h.Sum64())%uint64(n) == 0
}

// RetryFrom is the error of a handler of a LambdaHandler whose batch
// failed at record Seq, one of the batch's: the records before it are
// done, their outputs durable, so the invocation names Seq as its batch
// item failure rather than the batch's first record, and Lambda retries
// from Seq.
type RetryFrom struct {
	Seq string
	Err error
}

func (e *RetryFrom) Error() string { return e.Err.Error() }
func (e *RetryFrom) Unwrap() error { return e.Err }

// fail answers with a batch item failure at seq.
func (l *LambdaHandler) fail(seq string) events.KinesisEventResponse {
	l.failed.Add(1)
	return events.KinesisEventResponse{BatchItemFailures: []events.KinesisBatchItemFailure{{ItemIdentifier: seq}}}
}

// validShard reports whether id is a shard id Kinesis gives
// ("shardId-000000000000"): 1 to 128 letters, digits, '-' and '_'.
func validShard(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// validSeq reports whether seq is a sequence number Kinesis gives: 0, or
// up to 129 decimal digits without a leading 0.
func validSeq(seq string) bool {
	if seq == "0" {
		return true
	}
	if seq == "" || len(seq) > 129 || seq[0] == '0' {
		return false
	}
	for _, c := range []byte(seq) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// validRecords returns recs less those whose sequence number is not one
// Kinesis gives, or is one an earlier record of recs has (Kinesis gives
// each record its own: two outputs of one would overwrite each other),
// each of which it hands to skip with its index and why.
func validRecords(recs []events.KinesisEventRecord, skip func(i int, err error)) []events.KinesisEventRecord {
	out := make([]events.KinesisEventRecord, 0, len(recs))
	seen := make(map[string]bool, len(recs))
	for i := range recs {
		seq := recs[i].Kinesis.SequenceNumber
		var err error
		switch {
		case !validSeq(seq):
			err = errors.New("not a sequence number (0, or up to 129 decimal digits)")
		case seen[seq]:
			err = errors.New("the sequence number of an earlier record of the batch")
		}
		if err != nil {
			skip(i, err)
			continue
		}
		seen[seq] = true
		out = append(out, recs[i])
	}
	return out
}

// eventShard returns the shard id of a record's event id,
// "shardId-000000000000:49590338271490256608559692538361571095921575989136588898".
func eventShard(eventID string) string {
	shard, _, _ := strings.Cut(eventID, ":")
	return shard
}

// Stats returns the counters.
func (l *LambdaHandler) Stats() LambdaStats {
	return LambdaStats{Invocations: l.invocations.Load(), Records: l.records.Load(), Events: l.events.Load(),
		Corrupt: l.corrupt.Load(), Failed: l.failed.Load()}
}

// Problems returns the errors of the first corrupt records skipped.
func (l *LambdaHandler) Problems() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.problems...)
}
