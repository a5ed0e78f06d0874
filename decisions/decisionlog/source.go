package decisionlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/seglog"
	"github.com/ratewarden/ratewarden/decisions/stream"
)

// SourceOptions configure a Source. The zero value reads the whole log
// once, as partition "log", in batches of DefaultBatchEvents events.
type SourceOptions struct {
	Partition string // the partition's name handed to the handler; default "log"
	Follow    bool   // at the end of the log, wait for more until the context is done
	Since     time.Time
	Until     time.Time // events before Since or at or after Until are skipped (counted); zero: no bound
	// Consumer, if set, is the name under which the source commits the
	// handler's position as the log's consumer offset
	// (seglog.CommitReaderOffset), once the first read from the position
	// the handler opens the partition at succeeds (a position past the
	// log's end is an error, committed nowhere) and after each batch it
	// handles, so that the log's retention reports the segments it
	// removes before this consumer read them. The
	// committed offset is also what the handler's Open is offered (the
	// log's start when it cannot be read, which is reported through
	// Problem). A commit that fails is reported once through Problem and
	// does not stop the run.
	Consumer string
	// BatchEvents is how many events a batch holds at least, unless the
	// end of what is written comes first (and, when following, Linger has
	// passed): a batch is whole consecutive records, never a part of one
	// (but for the first record read, when the handler resumes inside it).
	// Default DefaultBatchEvents.
	BatchEvents int
	// BatchBytes bounds the payload bytes of a batch's records: a batch
	// ends before a record that would take it past them (a record larger
	// than that is a batch of its own), so that what a batch holds is
	// bounded whatever its events carry (such as the long paths of the
	// edge's clients). Default DefaultBatchBytes.
	BatchBytes int
	// Linger is how long a following source, caught up with the log's
	// end, holds a batch that is not yet BatchEvents long for more
	// records, from when it read the batch's first record: a busy tail is
	// handed in batches at most about every Linger (a handler that saves
	// its state per batch saves it that often), a quiet one within Linger
	// of its first record. Shutdown hands what is held at once. Default
	// DefaultLinger; without Follow it does not apply.
	Linger time.Duration
	// Tick is how often, at the end of a followed log, the handler's Idle
	// is called while nothing new is written; default 200 ms.
	Tick time.Duration
	// Problem, if set, is called with each problem of the log as the
	// source meets it: a corrupt region or a missing segment (a
	// seglog.Problem, which names the segment file and byte offset), a
	// record that could not be decoded, or events removed from the log
	// before this partition read them (an error wrapping
	// seglog.ErrMissing). Beyond the first 1000 corrupt regions and 100
	// undecodable records it is not called; Stats and Loss count them all.
	// It is called from the goroutine of Run, during Handle for a record
	// that cannot be decoded.
	Problem func(error)
	// Log, if set, is the process's own writer of the log in the
	// directory: the source then reads through it (Log.Reader), and a
	// following source wakes at once when it appends rather than at the
	// next look at the files (Options.FollowPoll of the Log).
	Log *seglog.Log
}

// DefaultBatchEvents is the events a Source's batch holds at least by
// default while it reads a backlog. A handler that saves its state per
// batch (the aggregator) pays the save once per 65,536 events: about a
// tenth of a second of reading, and a few MB of records held
// (BENCHMARKS.md, the read seam).
const DefaultBatchEvents = 64 << 10

// DefaultBatchBytes is the payload bytes a Source's batch holds at most by
// default (SourceOptions.BatchBytes): 65,536 events of the edge's usual
// traffic are a few MB of records (about 40 bytes an event in Arrow, 600
// in JSON lines), but 65,536 events that carry 8 KiB paths are hundreds
// of MB.
const DefaultBatchBytes = 32 << 20

// DefaultLinger is a following Source's default Linger: at most about five
// batches a second from a busy tail.
const DefaultLinger = 200 * time.Millisecond

// Source serves the log in a directory to a stream.Handler as one
// partition, whose positions are log offsets (stream.Offset). The
// handler's nil return from Handle commits the batch: the source then
// reads on and, with a Consumer, commits the batch's end as the log's
// consumer offset. An error from Handle ends Run: the process restarts,
// and the handler's Open says where to resume.
//
// A Source is not safe for concurrent use. Stats and Loss may be called
// from the handler's methods during Run, and after it.
type Source struct {
	dir string
	o   SourceOptions
	rd  reading
	// resumed: the read started from a position the handler returned,
	// not the log's start.
	resumed bool
	pending *seglog.Record // read while waiting for more, or past a batch's BatchBytes: not yet batched
	seen    lossSeen
}

// lossSeen is what of the reader's problems and of the consumer offset a
// Source has passed on.
type lossSeen struct {
	corrupt     int  // seglog problems passed, of Reader.Problems
	corruptFull bool // Reader.Problems keeps no more: stop copying it
	problems    uint64
	removed     bool
	committed   uint64 // the position last committed as a consumer offset
	commitOK    bool   // committed is set
	commitErr   bool   // a commit failed and was reported
}

// NewSource returns a Source of the log in dir. The log is opened by Run.
func NewSource(dir string, o SourceOptions) *Source {
	if o.Partition == "" {
		o.Partition = "log"
	}
	if o.BatchEvents <= 0 {
		o.BatchEvents = DefaultBatchEvents
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = DefaultBatchBytes
	}
	if o.Tick <= 0 {
		o.Tick = 200 * time.Millisecond
	}
	if o.Linger <= 0 {
		o.Linger = DefaultLinger
	}
	return &Source{dir: dir, o: o}
}

// Run opens the partition with h (offering the committed consumer offset,
// or the log's start), reads the log from the position h.Open returns and
// hands it to h.Handle in batches. Without Follow it stops at the end of
// the log, calls h.Close with ended true and returns its error. With
// Follow it calls h.Idle about every Tick while nothing new is written,
// and when ctx is done calls h.Close with ended true, with a context that
// is not done (the log has one reader: a clean shutdown emits what is
// open), and returns its error. An error from the handler is returned as
// it is; a Source runs once. A position past the end of the log (one kept
// from a log since removed, replaced or cut short) ends Run with an error
// wrapping seglog.ErrPastEnd when the source first reaches the log's end,
// before it hands, closes or commits anything.
func (s *Source) Run(ctx context.Context, h stream.Handler) error {
	if s.rd.r != nil {
		return errors.New("read log: the source has already run")
	}
	var from stream.Position
	if s.o.Consumer != "" {
		// An offset that cannot be read is the log's start to the handler,
		// and the next commit replaces it.
		off, ok, err := seglog.ReadOffset(s.dir, s.o.Consumer)
		if err != nil && s.o.Problem != nil {
			s.o.Problem(fmt.Errorf("%w (offering partition %s the log's start)", err, s.o.Partition))
		}
		if ok {
			from = stream.Offset(off)
		}
	}
	pos, err := h.Open(ctx, s.o.Partition, from)
	if err != nil {
		return err
	}
	start := pos.Offset()
	pos = stream.Offset(start)
	var r *seglog.Reader
	if s.o.Log != nil {
		r, err = s.o.Log.Reader(start)
	} else {
		r, err = seglog.OpenReader(s.dir, start, seglog.Options{})
	}
	if err != nil {
		return fmt.Errorf("read log: %w", err)
	}
	defer r.Close()
	s.rd = reading{r: r, filter: Filter{From: start, Since: s.o.Since, Until: s.o.Until}}
	s.resumed = start > 0
	for {
		b, end, err := s.batch(ctx, pos)
		if err == nil {
			// The log holds the start (its first read came back): commit
			// it, once; a later pos was committed with its batch.
			s.commit(pos.Offset())
		}
		hctx := ctx
		if err != nil {
			if !s.shutdown(ctx, err) {
				return s.stop(ctx, h, err)
			}
			// What was read goes in before the open windows go out.
			hctx = context.WithoutCancel(ctx)
		}
		if b != nil {
			if err := h.Handle(hctx, b); err != nil {
				return err
			}
			pos = b.To
			s.commit(pos.Offset())
		}
		if err != nil {
			return s.stop(ctx, h, err)
		}
		if !end {
			continue
		}
		if !s.o.Follow {
			return h.Close(ctx, s.o.Partition, true)
		}
		if err := s.wait(ctx, h); err != nil {
			return s.stop(ctx, h, err)
		}
	}
}

// shutdown reports whether err, from reading or waiting, is a following
// source's clean shutdown: ctx is done.
func (s *Source) shutdown(ctx context.Context, err error) bool {
	return s.o.Follow && ctx.Err() != nil && errors.Is(err, ctx.Err())
}

// stop ends Run on an error err from reading or waiting: on a clean
// shutdown the partition is closed as ended, with a context that is not
// done; when ctx is done without Follow it is closed as not ended.
func (s *Source) stop(ctx context.Context, h stream.Handler, err error) error {
	switch {
	case s.shutdown(ctx, err):
		return h.Close(context.WithoutCancel(ctx), s.o.Partition, true)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return errors.Join(err, h.Close(context.WithoutCancel(ctx), s.o.Partition, false))
	}
	return err
}

// batch reads the next batch from pos: whole records until it holds
// BatchEvents events, or the end of what is written (end), and no more
// than BatchBytes bytes of them unless one record is more; when following,
// at the end it waits for more until Linger has passed since the batch's
// first record. It is nil when nothing was read. On a read error (or
// shutdown while lingering) it returns the batch read so far with the
// error.
func (s *Source) batch(ctx context.Context, pos stream.Position) (b *stream.Batch, end bool, err error) {
	next := pos.Offset()
	var recs []stream.Record
	events, bytes := 0, 0
	var lctx context.Context // following: done when Linger has passed
	if s.o.Follow {
		// A batch starts when its first record is there (after wait, or
		// straight on in a backlog): the linger runs from here.
		var cancel context.CancelFunc
		lctx, cancel = context.WithTimeout(ctx, s.o.Linger)
		defer cancel()
	}
	for events < s.o.BatchEvents {
		rec, err := s.next(ctx, lctx, next > pos.Offset())
		if errors.Is(err, io.EOF) {
			end = true
			break
		}
		if err != nil {
			// The reader's errors name the log ("read log: ...", "log DIR:
			// ...") or are the context's.
			return s.batchOf(pos, next, recs), false, err
		}
		if len(recs) > 0 && bytes+len(rec.Payload) > s.o.BatchBytes {
			s.pending = &rec // the next batch's first
			break
		}
		next = max(next, rec.FirstOffset+uint64(rec.Count))
		if !s.rd.keep(&rec, s.o.Follow) {
			continue
		}
		recs = append(recs, stream.Record{Pos: stream.Offset(rec.FirstOffset), Codec: columnar.Codec(rec.Codec), Data: rec.Payload, Count: int(rec.Count)})
		events += int(rec.Count) - int(min(pos.Offset()-min(pos.Offset(), rec.FirstOffset), uint64(rec.Count)))
		bytes += len(rec.Payload)
	}
	return s.batchOf(pos, next, recs), end, nil
}

// batchOf returns the batch of recs from pos to next, nil if empty.
func (s *Source) batchOf(pos stream.Position, next uint64, recs []stream.Record) *stream.Batch {
	if next <= pos.Offset() {
		return nil
	}
	if recs == nil {
		// Records skipped whole: the handler moves past them.
		recs = []stream.Record{}
	}
	return &stream.Batch{
		Partition: s.o.Partition,
		From:      pos,
		To:        stream.Offset(next),
		Records:   recs,
		Filter:    s.filter,
		Corrupt:   s.corrupt,
	}
}

// next returns the next record, io.EOF at the end of what is written.
// When held (the batch holds records) and lctx is set (following), at the
// end it waits for a record until lctx is done, then returns io.EOF; ctx
// done returns ctx's error. Another error of the wait (the process's Log
// closed) returns io.EOF too, so that the batch held is handed first: the
// wait that follows meets the error again.
func (s *Source) next(ctx, lctx context.Context, held bool) (seglog.Record, error) {
	if p := s.pending; p != nil {
		s.pending = nil
		return *p, nil
	}
	rec, err := s.rd.r.Next(ctx)
	if errors.Is(err, io.EOF) && held && lctx != nil && ctx.Err() == nil && lctx.Err() == nil {
		rec, err = s.rd.r.Follow(lctx)
		if err != nil && ctx.Err() == nil {
			err = io.EOF
		}
	}
	s.noteLoss(&rec, err)
	return rec, err
}

// wait calls h.Idle, then again every Tick until a record is written, which
// it keeps for the next batch.
func (s *Source) wait(ctx context.Context, h stream.Handler) error {
	for {
		if err := h.Idle(ctx, s.o.Partition); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, s.o.Tick)
		rec, err := s.rd.r.Follow(wctx)
		cancel()
		s.noteLoss(&rec, err)
		switch {
		case err == nil:
			s.pending = &rec
			return nil
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		default:
			return err
		}
	}
}

// filter is the batches' Filter: the time range, and the events before
// the position the handler resumed from, counted as skipped.
func (s *Source) filter(rows columnar.Rows, first stream.Position) []bool {
	return s.rd.filterRows(rows, first.Offset())
}

// corrupt is the batches' Corrupt.
func (s *Source) corrupt(rec *stream.Record, lost int, err error) {
	if err := s.rd.undecodable(rec.Pos.Offset(), lost, err); err != nil && s.o.Problem != nil {
		s.o.Problem(fmt.Errorf("%s: %w", s.dir, err))
	}
}

// Stats returns what the source read so far. Events and Skipped count the
// rows the handler read (Batch.Rows); BadBatch and BadEvents the records
// it met that could not be decoded.
func (s *Source) Stats() ReadStats { return s.rd.stats }

// Loss totals what the source could not read: every corrupt region and
// missing segment but those outside the time range (Outside), and, when
// the handler resumed from a position, the events from it that the log no
// longer held (a read from the start starts wherever the log starts).
func (s *Source) Loss() seglog.Loss {
	if s.rd.r == nil {
		return seglog.Loss{}
	}
	lo := s.rd.loss()
	if !s.resumed {
		lo.Removed, lo.Start = 0, 0
	}
	return lo
}

// Outside totals the corrupt regions and missing segments that the
// source met outside its time range (SourceOptions.Since and Until): the
// records on either side of them are, so their events are not the range's
// and Loss does not count them. Problem says them so.
func (s *Source) Outside() seglog.Loss { return s.rd.outside }

// noteLoss places the problems the reader met since the last call
// (reading.place), before rec if err is nil, and passes them to Problem.
// It costs two counter reads when there are none.
func (s *Source) noteLoss(rec *seglog.Record, err error) {
	if err != nil {
		rec = nil
	}
	s.rd.place(rec, s.o.Follow)
	if s.o.Problem == nil {
		return
	}
	lo, seen := s.rd.r.Loss(), &s.seen
	if lo.Removed > 0 && s.resumed && !seen.removed {
		seen.removed = true
		s.o.Problem(fmt.Errorf("%s: events at offsets %d to %d were removed from the log before partition %s read them (it resumed at %d; the log now starts at %d): %w",
			s.dir, lo.Start-lo.Removed, lo.Start-1, s.o.Partition, lo.Start-lo.Removed, lo.Start, seglog.ErrMissing))
	}
	if lo.Problems != seen.problems && !seen.corruptFull {
		seen.problems = lo.Problems
		ps := s.rd.r.Problems()
		for i := min(seen.corrupt, len(ps)); i < len(ps); i++ {
			s.o.Problem(s.rd.problemErr(uint64(i), ps[i]))
		}
		seen.corruptFull = len(ps) == seen.corrupt
		seen.corrupt = len(ps)
	}
}

// commit commits next as the consumer offset of Consumer, when it moved.
func (s *Source) commit(next uint64) {
	seen := &s.seen
	if s.o.Consumer == "" || seen.commitOK && next == seen.committed {
		return
	}
	if err := seglog.CommitReaderOffset(s.dir, s.o.Consumer, next); err != nil {
		if !seen.commitErr && s.o.Problem != nil {
			s.o.Problem(fmt.Errorf("%w (retention will not know what partition %s has read)", err, s.o.Partition))
		}
		seen.commitErr = true
		return
	}
	seen.committed, seen.commitOK = next, true
}
