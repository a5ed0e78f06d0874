// Package stream is the one shape in which every source of decisions hands
// them to a consumer: the local decision log, a Kinesis stream read by a
// long-running worker, the records of a Kinesis event-source mapping in
// AWS Lambda, and JSON lines. A source hands a Handler a Batch: one
// partition's consecutive decisions, the position range they cover, and
// their rows, undecoded until the handler reads them (Batch.Rows), so a
// consumer that reads columns never makes a decisions.Decision per event.
//
// A Handler's nil return from Handle is the commit: the source may then
// record Batch.To as the partition's position (a seglog consumer offset, a
// Kinesis lease checkpoint, a Lambda batch that does not report the
// records as failed). A handler that makes its outputs durable before it
// returns, and resumes from its own durable position (Open), gets each
// event into its outputs exactly once however the source is stopped.
package stream

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
)

// Position is a place in a partition: before the event it names. In a
// Kinesis shard it is after the first Sub events of the record whose
// sequence number is Seq (a record is an Arrow batch of many events, so a
// position may fall inside one; Seq "" is the shard's start). In the
// decision log and in JSON lines, Seq is "" and Sub is the offset (the
// line number) of the event.
type Position struct {
	Seq string
	Sub int64
}

// Offset is the position of the event at offset off of a log.
func Offset(off uint64) Position { return Position{Sub: int64(min(off, math.MaxInt64))} }

// Offset returns the log offset of a log position.
func (p Position) Offset() uint64 { return uint64(max(p.Sub, 0)) }

// String returns "seq.sub", or the offset alone when Seq is "".
func (p Position) String() string {
	if p.Seq == "" {
		return strconv.FormatInt(p.Sub, 10)
	}
	return p.Seq + "." + strconv.FormatInt(p.Sub, 10)
}

// Record is a record of a Batch, as the transport carried it.
type Record struct {
	Pos Position // the position of the record's first event
	// Codec is the codec of a log record's payload (seglog.Record.Codec);
	// 0 for data that starts with its codec byte (a Kinesis record).
	Codec columnar.Codec
	Data  []byte
	// Count is the number of events the record holds when the transport
	// says so (a log record), else 0. It counts the events lost with a
	// record that cannot be decoded.
	Count int
	// Arrived is when the transport took the record in, by its own clock
	// (a Kinesis record's ApproximateArrivalTimestamp), or zero when it
	// does not say (a log record). Its events were decided before it.
	Arrived time.Time
}

// Batch is a run of consecutive events of one partition. Partition, From
// and To identify it: a source that hands a batch again (after a handler
// error, or to the partition's next holder) hands the same events from
// the same From, or a superset starting there, so a handler can be
// idempotent.
type Batch struct {
	Partition string   // the log's partition name, a shard id, "stdin"
	From      Position // the first event
	To        Position // the position after the batch, committed by Handle's nil return

	// Records are the batch's records undecoded; the first is read from
	// event From.Sub - Records[0].Pos.Sub on (a Kinesis position inside a
	// record), the others whole. A source of decoded decisions (JSON
	// lines) sets Events instead.
	Records []Record
	Events  []decisions.Decision

	// Filter, if set, is the source's filter on events (a time range):
	// it returns which rows of a record batch, the first at position
	// first, are left out (nil: none). Rows hands the result over as
	// Rows.Skip. The source counts what it leaves out.
	Filter func(rows columnar.Rows, first Position) []bool
	// Corrupt, if set, is called by Rows once for each record it cannot
	// decode (or decodes only in part), the first time it meets it, with
	// the number of events lost. The source counts and reports them.
	Corrupt func(rec *Record, lost int, err error)

	seen   int    // Rows has reported the corrupt records of Records[:seen]
	handed uint64 // the rows the last (or current) call of Rows handed over
}

// Rows are the rows of one record batch as Batch.Rows hands them over:
// an Arrow batch's columns, without an event made of each row, or
// decisions. Valid until the function they are handed to returns.
type Rows struct {
	columnar.Rows
	Pos  Position // the position of row 0
	Lo   int      // rows before Lo are before the batch's From: not the batch's
	Skip []bool   // when not nil, Skip[i] says the source's filter leaves row i out
	// Arrived is the record's (Record.Arrived); zero for decoded events.
	Arrived time.Time
}

// Handler consumes batches. A source calls a partition's methods from one
// goroutine, in the order Open, then Handle and Idle any number of times,
// then Close; different partitions may be called concurrently.
type Handler interface {
	// Open is called before a partition's first batch with the
	// position the source would resume from (its committed position; a
	// zero Position at the partition's start). It returns the position
	// to read from: a handler that keeps its own durable position
	// returns it, and the source reads from there.
	Open(ctx context.Context, partition string, from Position) (Position, error)
	// Handle handles a batch. A nil return commits b.To. An error makes
	// the source hand the batch again (a long-running source, after a
	// backoff) or report it as failed (Lambda); the source's
	// documentation says which.
	Handle(ctx context.Context, b *Batch) error
	// Idle is called when a live partition is caught up and quiet,
	// about every poll interval, so that a handler can advance an idle
	// watermark.
	Idle(ctx context.Context, partition string) error
	// Close is called when the source stops reading a partition. ended
	// says the partition was read to its end, or that its only reader is
	// shutting down cleanly (a local log): a handler emits what it holds.
	// Otherwise the partition goes to another reader (a Kinesis lease lost
	// or released) and the handler forgets it.
	Close(ctx context.Context, partition string, ended bool) error
}

// ErrReopen, wrapped in an error of a Handler's Handle, Idle or
// Close(ended), says that the handler's durable state of the partition
// moved under it (another reader saved it: two readers overlapped while
// a lease changed hands): a long-running source that still holds the
// partition drops what it gathered and calls Open again, then reads from
// the position Open returns, as a new holder would. A source that no
// longer holds it stops reading it. Other sources treat it as any error.
var ErrReopen = errors.New("the partition's state moved: open it again")

// TakenOver returns ctx for a Handler's Open of a partition taken over
// from a reader that may still be handling a batch of it (a Kinesis lease
// stolen from a live worker), and may go on doing so for up to d, and for
// up to d after each progress it reports (Progress), up to
// MaxProgressWaits times d in all. A handler that would deliver again
// what that reader left pending in its durable state may wait for the
// reader to deliver it, as long as that reader shows progress at least
// every d, so that the outputs are not made by both.
func TakenOver(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, takenOverKey{}, d)
}

// TakenOverFor returns how long the partition's previous reader may go on
// handling it, as TakenOver set in ctx; 0 when it did not.
func TakenOverFor(ctx context.Context) time.Duration {
	d, _ := ctx.Value(takenOverKey{}).(time.Duration)
	return max(d, 0)
}

type takenOverKey struct{}

// Progress is what a source that lets a handler call in progress end
// what it started once the partition is lost (a Kinesis lease taken by
// another worker), for a while, tells the call (WithProgress). A call that
// would need longer (the aggregator delivering the many outputs a
// backlog's batch closed) shows the partition's next reader that it is
// still at work, about every Every once Stopped says the source stopped
// reading the partition, where that reader looks (the aggregator writes
// its durable state again; TakenOver), and Reports it: the while is
// extended from then. Report returns false once it no longer extends it
// (MaxProgressWaits): the call then stops showing progress, so that the
// next reader stops waiting before the call's while ends.
type Progress struct {
	Every   time.Duration
	Stopped func() bool
	Report  func() bool
}

// WithProgress returns ctx for a Handler's calls with p.
func WithProgress(ctx context.Context, p Progress) context.Context {
	return context.WithValue(ctx, progressKey{}, p)
}

// ProgressOf returns the Progress WithProgress set in ctx, and whether it
// did.
func ProgressOf(ctx context.Context) (Progress, bool) {
	p, ok := ctx.Value(progressKey{}).(Progress)
	return p, ok && p.Every > 0 && p.Stopped != nil && p.Report != nil
}

type progressKey struct{}

// MaxProgressWaits bounds, in TakenOver's d, how long a reader's progress
// reports keep it going once it lost its partition (Progress.Report), and
// the next reader waiting for it: a call that hangs, however it reports,
// holds up the partition for about that long at most.
const MaxProgressWaits = 10

// Rows decodes the batch's records with dec (Events are handed over as
// they are) and calls f with their rows, one record batch at a time, in
// order. It returns the number of the batch's rows handed over (those at
// or after From, skipped or not). A record that cannot be decoded is
// skipped and reported to Corrupt the first time Rows meets it; an error
// from f stops Rows and is returned as it is.
func (b *Batch) Rows(dec *columnar.Decoder, f func(*Rows) error) (uint64, error) {
	var r Rows
	b.handed = 0
	hand := func(rows columnar.Rows, pos Position, skip int, arrived time.Time) (int, error) {
		lo := min(skip, rows.Len())
		r = Rows{Rows: rows, Pos: pos, Lo: lo, Arrived: arrived}
		if b.Filter != nil {
			r.Skip = b.Filter(rows, pos)
		}
		b.handed += uint64(rows.Len() - lo)
		err := f(&r)
		r = Rows{}
		return lo, err
	}
	if b.Records == nil {
		if len(b.Events) == 0 {
			return 0, nil
		}
		_, err := hand(columnar.Rows{Events: b.Events}, b.From, 0, time.Time{})
		return b.handed, err
	}
	for i := range b.Records {
		rec := &b.Records[i]
		skip := 0
		if i == 0 && b.From.Seq == rec.Pos.Seq {
			// A position read back from a checkpoint is not trusted to be
			// in range.
			skip = int(min(max(b.From.Sub-rec.Pos.Sub, 0), math.MaxInt32))
		}
		pos := rec.Pos
		var ferr error
		decode := func(rows columnar.Rows) error {
			lo, err := hand(rows, pos, skip, rec.Arrived)
			skip -= lo
			pos.Sub += int64(rows.Len())
			ferr = err
			return err
		}
		var derr error
		switch {
		case rec.Codec == 0:
			derr = dec.DecodeRecordRows(rec.Data, decode)
		case rec.Count > 0:
			derr = dec.DecodeCountedRows(rec.Codec, rec.Data, rec.Count, decode)
		default:
			derr = dec.DecodeRows(rec.Codec, rec.Data, decode)
		}
		if ferr != nil {
			return b.handed, ferr
		}
		if derr != nil && i >= b.seen && b.Corrupt != nil {
			lost, partial := columnar.IsCorruptEvents(derr)
			if !partial {
				lost = max(rec.Count-int(pos.Sub-rec.Pos.Sub), 0)
				if rec.Count == 0 {
					lost = 1
				}
			}
			b.Corrupt(rec, lost, derr)
		}
		b.seen = max(b.seen, i+1)
	}
	return b.handed, nil
}

// Handed returns what the last call of Rows returned: the number of the
// batch's rows it handed over. A source that hands records undecoded
// counts the events its handler read with it.
func (b *Batch) Handed() uint64 { return b.handed }

// HandleFunc is a Handler of a function that handles batches and keeps
// no position of its own: Open returns the source's position, Idle and
// Close do nothing.
type HandleFunc func(ctx context.Context, b *Batch) error

var _ Handler = HandleFunc(nil)

// Open returns from.
func (f HandleFunc) Open(_ context.Context, _ string, from Position) (Position, error) {
	return from, nil
}

// Handle calls f.
func (f HandleFunc) Handle(ctx context.Context, b *Batch) error { return f(ctx, b) }

// Idle does nothing.
func (f HandleFunc) Idle(context.Context, string) error { return nil }

// Close does nothing.
func (f HandleFunc) Close(context.Context, string, bool) error { return nil }
