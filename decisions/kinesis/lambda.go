package kinesis

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
)

// LambdaStats count what a LambdaHandler did.
type LambdaStats struct {
	Invocations uint64 // events (invocations) handled
	Records     uint64 // records read
	Events      uint64 // decision events handed to the handler
	Corrupt     uint64 // records that could not be decoded, and log events of CloudWatch Logs records that are not decisions: skipped
	Failed      uint64 // invocations that reported a batch item failure
}

// LambdaHandler serves a Kinesis event-source mapping in AWS Lambda: it
// decodes each record with columnar.DecodeRecord and hands its events to a Handler (or
// its rows to a RowsHandler) as a
// Batch, in order. A record that cannot be decoded is skipped and counted,
// so a poison record does not hold up its shard. When the handler fails,
// the invocation answers with a partial batch failure naming that record's
// sequence number (configure the mapping with FunctionResponseTypes
// ReportBatchItemFailures): Lambda then retries from that record on, and
// the records before it are not delivered again.
//
// Each record is one batch, its events a whole Arrow batch or one JSON
// decision, so a failing batch names exactly one record. A LambdaHandler is
// safe for concurrent use.
type LambdaHandler struct {
	h    Handler
	rows RowsHandler // instead of h

	mu       sync.Mutex
	problems []error

	invocations, records, events, corrupt, failed atomic.Uint64
}

// NewLambdaHandler returns a LambdaHandler handing batches to h.
func NewLambdaHandler(h Handler) *LambdaHandler { return &LambdaHandler{h: h} }

// Rows are the rows of one record (or of one of its record batches) as
// columnar.Decoder.DecodeRecordRows hands them over: an Arrow batch's
// columns, without an event made of each row, or JSON decisions. Shard,
// From and To are a Batch's.
type Rows struct {
	Shard    string
	From, To Position
	columnar.Rows
}

// RowsHandler handles a record's rows, valid until it returns.
type RowsHandler func(ctx context.Context, r *Rows) error

// NewLambdaRowsHandler returns a LambdaHandler handing each record's rows
// to h rather than its events, for consumers that read columns (the
// aggregator). Records are read, skipped and failed as NewLambdaHandler's
// are.
func NewLambdaRowsHandler(h RowsHandler) *LambdaHandler { return &LambdaHandler{rows: h} }

// Handle handles one invocation.
func (l *LambdaHandler) Handle(ctx context.Context, ev events.KinesisEvent) (events.KinesisEventResponse, error) {
	l.invocations.Add(1)
	var (
		b   Batch
		buf []decisions.Decision
		dec = columnar.NewDecoder()
	)
	for i := range ev.Records {
		r := &ev.Records[i]
		seq := r.Kinesis.SequenceNumber
		l.records.Add(1)
		shard := eventShard(r.EventID)
		var (
			n    int
			herr error
			err  error
		)
		if l.rows != nil {
			err = dec.DecodeRecordRows(r.Kinesis.Data, func(rows columnar.Rows) error {
				n += rows.Len()
				herr = l.rows(ctx, &Rows{Shard: shard, From: Position{Seq: seq}, To: Position{Seq: seq, Sub: wholeRecord}, Rows: rows})
				return herr
			})
		} else {
			buf, err = dec.DecodeRecord(r.Kinesis.Data, buf[:0])
			if _, partial := columnar.IsCorruptEvents(err); err == nil || partial && len(buf) > 0 {
				n = len(buf)
				b = Batch{Shard: shard, From: Position{Seq: seq}, To: Position{Seq: seq, Sub: wholeRecord}, Events: buf}
				herr = l.h(ctx, &b)
			}
		}
		if herr != nil {
			l.failed.Add(1)
			return events.KinesisEventResponse{BatchItemFailures: []events.KinesisBatchItemFailure{{ItemIdentifier: seq}}}, nil
		}
		if err != nil {
			// A CloudWatch Logs record counts its log events that are not
			// decisions and keeps the others; any other failure, the record.
			bad, partial := columnar.IsCorruptEvents(err)
			if !partial {
				bad = 1
			}
			l.corrupt.Add(uint64(bad))
			l.mu.Lock()
			if len(l.problems) < maxProblems {
				l.problems = append(l.problems, fmt.Errorf("%s record %s: %w", shard, seq, err))
			}
			l.mu.Unlock()
			if !partial {
				continue
			}
		}
		l.events.Add(uint64(n))
	}
	return events.KinesisEventResponse{}, nil
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
