// Package decisionlog is the local decision log: decision events encoded in
// batches (Arrow record batches in a zstd frame with the columnar
// package's dictionary by default, zstd per buffer for records of
// PerBufferFrom events or more, or JSON lines) and
// appended to a segmented log (package seglog), and read back as events.
//
// The log is the source of truth of the pipeline. Reading it twice gives
// the same events in the same order; a corrupt record loses only its own
// events, which are counted and reported with the segment and byte offset.
package decisionlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/seglog"
)

// Writer is a decisions.BatchWriter appending each batch as one record. It
// is not safe for concurrent use; an Emitter serialises its calls.
type Writer struct {
	log   *seglog.Log
	codec columnar.Codec
	// enc: not Arrow's body compression below PerBufferFrom events, which
	// leaves each record's schema as it is, so that a record of a few
	// events would be mostly schema; the dictionary makes small records
	// small.
	enc columnar.SizedEncoder
	buf []byte
}

// PerBufferFrom is the number of events from which a record is written
// with Arrow's body compression (columnar.Zstd, zstd per buffer) rather
// than in one zstd frame with the dictionary (columnar.ZstdDict):
// columnar.PerBufferFrom, which the Kinesis sink's records follow too.
const PerBufferFrom = columnar.PerBufferFrom

// Compression is how the Writer compresses an Arrow record of n events
// (columnar.CompressionFor).
func Compression(n int) columnar.Compression { return columnar.CompressionFor(n) }

var _ decisions.BatchWriter = (*Writer)(nil)

// WriterOptions configure a Writer.
type WriterOptions struct {
	Codec columnar.Codec // columnar.CodecArrow (default) or columnar.CodecJSON
}

// NewWriter returns a Writer appending to log. The Writer does not own the
// log: close the log after the emitter that feeds the writer.
func NewWriter(log *seglog.Log, opts WriterOptions) *Writer {
	w := &Writer{log: log, codec: opts.Codec}
	if w.codec == 0 {
		w.codec = columnar.CodecArrow
	}
	return w
}

// WriteBatch encodes ds and appends it as one record.
func (w *Writer) WriteBatch(ds []decisions.Decision) error {
	if len(ds) == 0 {
		return nil
	}
	lo, hi := ds[0].Time, ds[0].Time
	for i := range ds {
		if t := ds[i].Time; t.Before(lo) {
			lo = t
		} else if t.After(hi) {
			hi = t
		}
	}
	var err error
	switch w.codec {
	case columnar.CodecArrow:
		w.buf, err = w.enc.Encode(w.buf[:0], ds)
	default:
		w.buf = w.buf[:0]
		for i := range ds {
			w.buf = decisions.AppendJSON(w.buf, &ds[i])
			w.buf = append(w.buf, '\n')
		}
	}
	if err != nil {
		return fmt.Errorf("encode decisions: %w", err)
	}
	if _, err := w.log.Append(seglog.Record{Count: uint32(len(ds)), MinTime: lo, MaxTime: hi, Codec: uint8(w.codec), Payload: w.buf}); err != nil {
		return fmt.Errorf("append decisions: %w", err)
	}
	return nil
}

// Flush does nothing: the log's sync policy decides when appended records
// are durable, and closing the log syncs.
func (w *Writer) Flush() error { return nil }

// Filter selects events when reading.
type Filter struct {
	From  uint64    // first offset
	Since time.Time // zero: from the start
	Until time.Time // zero: to the end; events at or after Until are skipped
}

// Reader reads events back from a log directory. It is not safe for
// concurrent use.
type Reader struct {
	reading
	dec    *columnar.Decoder
	batch  []decisions.Decision
	next   int
	offset uint64 // offset of batch[next]
	rows   Rows   // NextRows'
}

// reading is what a Reader and a Source share: the log reader, the filter,
// and what they count and keep of what they read. It is not safe for
// concurrent use.
type reading struct {
	r       *seglog.Reader
	filter  Filter
	stats   ReadStats
	badRecs []error // undecodable records, the first maxBadRecs
	skip    []bool
	times   []int64
	// last is the time range of the last record read (ok: one was);
	// placed is the log reader's Loss when its problems were last
	// placed, and outside what of it place found outside the filter's
	// time range.
	last    struct{ min, max time.Time }
	lastOK  bool
	placed  seglog.Loss
	outside seglog.Loss
	sides   []problemSide // the problems outside, by number: the first maxBadRecs runs
}

// problemSide says that the log reader's problems from to to-1 are
// outside the filter's time range, on side "before" or "after".
type problemSide struct {
	from, to uint64
	side     string
}

// place places the problems the log reader met since it last read a
// record: all of them lie between that record and rec, the record it
// read next (nil at the end of the log). It counts them Outside, and
// keeps their side ("before" or "after", for problemErr), when they are
// outside the filter's time range. A region is outside when the
// records on either side of it are (at the end, the one before it):
// before Since by their latest event, as a record is skipped whole, or,
// without follow, at or after Until by their earliest.
func (r *reading) place(rec *seglog.Record, follow bool) {
	lo := r.r.Loss()
	d := lo.Less(r.placed)
	r.placed = lo
	f := &r.filter
	side := ""
	switch {
	case d.Problems == 0:
	case !f.Since.IsZero() && rec != nil && rec.MaxTime.Before(f.Since) && (!r.lastOK || r.last.max.Before(f.Since)):
		side = "before"
	case !f.Until.IsZero() && !follow && r.lastOK && !r.last.min.Before(f.Until) && (rec == nil || !rec.MinTime.Before(f.Until)):
		side = "after"
	}
	if side != "" {
		r.outside = r.outside.Plus(d)
		switch n := len(r.sides); {
		case n > 0 && r.sides[n-1].to == lo.Problems-d.Problems && r.sides[n-1].side == side:
			r.sides[n-1].to = lo.Problems
		case n < maxBadRecs:
			r.sides = append(r.sides, problemSide{lo.Problems - d.Problems, lo.Problems, side})
		}
	}
	if rec != nil {
		r.last.min, r.last.max, r.lastOK = rec.MinTime, rec.MaxTime, true
	}
}

// OutsideError is a problem of the log (a corrupt region, a missing
// segment) between records wholly outside a reader's time range: it held
// no event of the range, and is not counted as lost (Reader.Outside).
type OutsideError struct {
	seglog.Problem
	Side string // "before" or "after"
}

func (e *OutsideError) Error() string {
	return e.Problem.Error() + " (" + e.Side + " the time range read: not counted as lost)"
}

func (e *OutsideError) Unwrap() error { return e.Problem }

// problemErr returns p, the log reader's problem number i, as an
// *OutsideError when place found it outside the filter's time range.
func (r *reading) problemErr(i uint64, p seglog.Problem) error {
	for _, s := range r.sides {
		if s.from <= i && i < s.to {
			return &OutsideError{p, s.side}
		}
	}
	return p
}

// loss is the log reader's Loss without what place found outside the
// filter's time range.
func (r *reading) loss() seglog.Loss { return r.r.Loss().Less(r.outside) }

// maxBadRecs bounds the undecodable records a Reader keeps the errors of;
// all of them are counted in ReadStats.
const maxBadRecs = 100

// ReadStats count what a Reader saw.
type ReadStats struct {
	Records   uint64 // records read
	Events    uint64 // events returned
	Skipped   uint64 // events before From or outside Since/Until
	BadBatch  uint64 // records whose payload could not be decoded
	BadEvents uint64 // events in those records
	Bytes     uint64 // payload bytes read
}

// Open opens the log in dir for reading, read-only, from the filter's
// position.
func Open(dir string, f Filter) (*Reader, error) {
	r, err := seglog.OpenReader(dir, f.From, seglog.Options{})
	if err != nil {
		return nil, err
	}
	return &Reader{reading: reading{r: r, filter: f}, dec: columnar.NewDecoder()}, nil
}

// Next returns the next event and its offset, io.EOF at the end of the log,
// or, with follow, waits for more until ctx is done.
func (r *Reader) Next(ctx context.Context, follow bool) (decisions.Decision, uint64, error) {
	for {
		for r.next < len(r.batch) {
			d, off := r.batch[r.next], r.offset
			r.next++
			r.offset++
			if r.filter.skipped(off, d.Time) {
				r.stats.Skipped++
				continue
			}
			r.stats.Events++
			return d, off, nil
		}
		rec, ok, err := r.record(ctx, follow)
		if err != nil {
			return decisions.Decision{}, 0, err
		}
		if !ok {
			continue
		}
		r.batch, err = r.dec.DecodeCountedPayload(columnar.Codec(rec.Codec), rec.Payload, int(rec.Count), r.batch[:0])
		if err != nil {
			// A payload of fewer events than its record says keeps them.
			r.undecodable(rec.FirstOffset, int(rec.Count)-len(r.batch), err)
		}
		r.next, r.offset = 0, rec.FirstOffset
	}
}

// record reads the next record; ok is false for one the filter skips
// whole (counted).
func (r *reading) record(ctx context.Context, follow bool) (rec seglog.Record, ok bool, err error) {
	if follow {
		rec, err = r.r.Follow(ctx)
	} else {
		rec, err = r.r.Next(ctx)
	}
	if err != nil {
		r.place(nil, follow)
		return rec, false, err
	}
	r.place(&rec, follow)
	return rec, r.keep(&rec, follow), nil
}

// keep counts a record read and reports whether the filter may keep any
// of its events; the events of one it skips whole are counted as skipped.
func (r *reading) keep(rec *seglog.Record, follow bool) bool {
	r.stats.Records++
	r.stats.Bytes += uint64(len(rec.Payload))
	if !r.filter.Until.IsZero() && !rec.MinTime.Before(r.filter.Until) && !follow {
		// Records are appended in time order per writer; one starting
		// at or after Until ends the read.
		r.stats.Skipped += uint64(rec.Count)
		return false
	}
	if !r.filter.Since.IsZero() && rec.MaxTime.Before(r.filter.Since) {
		r.stats.Skipped += uint64(rec.Count)
		return false
	}
	return true
}

// undecodable counts a record, at offset off, whose payload could not be
// decoded, losing lost events, and returns its error when it is among the
// first maxBadRecs (kept for Undecodable), else nil.
func (r *reading) undecodable(off uint64, lost int, err error) error {
	r.stats.BadBatch++
	r.stats.BadEvents += uint64(lost)
	if len(r.badRecs) >= maxBadRecs {
		return nil
	}
	err = fmt.Errorf("record at offset %d (%d events): %w", off, lost, err)
	r.badRecs = append(r.badRecs, err)
	return err
}

// skipped reports whether the filter leaves out the event at offset off
// of time t.
func (f *Filter) skipped(off uint64, t time.Time) bool {
	return off < f.From || (!f.Since.IsZero() && t.Before(f.Since)) || (!f.Until.IsZero() && !t.Before(f.Until))
}

// Rows are rows of one record as NextRows hands them over: columns of an
// Arrow record batch or events (see columnar.DecodeRows), valid until f
// returns.
type Rows struct {
	columnar.Rows
	Offset uint64 // the log offset of row 0
	// Skip, when not nil, marks the rows the Filter leaves out: Skip[i]
	// for row i. They are counted as skipped; the others as events.
	Skip []bool
}

// NextRows reads the next record, as Next reads events one by one, and
// calls f with its rows, once per record batch, without making an event
// of each Arrow row (columnar.DecodeRows). It returns io.EOF at the end of
// the log, or, with follow, waits for more until ctx is done. A record
// that cannot be decoded is skipped, counted and kept among Undecodable,
// as Next does, and NextRows reads on. An error from f is returned as it
// is. Do not mix NextRows and Next on one Reader.
func (r *Reader) NextRows(ctx context.Context, follow bool, f func(*Rows) error) error {
	for {
		rec, ok, err := r.record(ctx, follow)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		off := rec.FirstOffset
		var ferr error
		err = r.dec.DecodeCountedRows(columnar.Codec(rec.Codec), rec.Payload, int(rec.Count), func(rows columnar.Rows) error {
			b := &r.rows
			*b = Rows{Rows: rows, Offset: off, Skip: r.filterRows(rows, off)}
			off += uint64(rows.Len())
			ferr = f(b)
			*b = Rows{}
			return ferr
		})
		switch {
		case ferr != nil && err == ferr:
			return err
		case err != nil:
			// The rows handed before the error are read.
			r.undecodable(rec.FirstOffset, int(rec.Count)-int(off-rec.FirstOffset), err)
		}
		return nil
	}
}

// filterRows returns the Skip of rows starting at offset off, nil when the
// filter keeps every row, and counts the rows as events or skipped.
func (r *reading) filterRows(rows columnar.Rows, off uint64) []bool {
	n := rows.Len()
	skip := r.skips(rows, off)
	kept := uint64(n)
	for _, s := range skip {
		if s {
			kept--
		}
	}
	r.stats.Events += kept
	r.stats.Skipped += uint64(n) - kept
	return skip
}

// skips returns the Skip of rows starting at offset off, nil when the
// filter keeps every row.
func (r *reading) skips(rows columnar.Rows, off uint64) []bool {
	f := &r.filter
	n := rows.Len()
	if off >= f.From && f.Since.IsZero() && f.Until.IsZero() || n == 0 {
		return nil
	}
	r.skip = slices.Grow(r.skip[:0], n)[:n]
	if rows.Columns != nil {
		r.times = rows.Columns.Times(r.times)
	}
	any := false
	for i := range n {
		var t time.Time
		if rows.Columns != nil {
			t = columnar.TimeOf(r.times[i])
		} else {
			t = rows.Events[i].Time
		}
		r.skip[i] = f.skipped(off+uint64(i), t)
		any = any || r.skip[i]
	}
	if !any {
		return nil
	}
	return r.skip
}

// Stats returns what the reader saw so far.
func (r *Reader) Stats() ReadStats { return r.stats }

// Corrupt returns the corrupt regions of the log the reader skipped, each
// naming its segment and byte offset.
func (r *Reader) Corrupt() []seglog.Problem { return r.r.Problems() }

// Loss totals what the reader could not read: every corrupt region and
// missing segment (Corrupt keeps the first 1000) but those outside the
// filter's time range (Outside), and the events before the log's oldest
// segment that Filter.From asked for.
func (r *Reader) Loss() seglog.Loss { return r.loss() }

// Outside totals the corrupt regions and missing segments the reader met
// between records wholly outside the filter's time range (Filter.Since
// and Until): they held no event of it, and Loss does not count them.
func (r *Reader) Outside() seglog.Loss { return r.outside }

// Undecodable returns the errors of the first records whose payload could
// not be decoded (ReadStats counts all of them).
func (r *Reader) Undecodable() []error { return r.badRecs }

// Problems returns Corrupt and Undecodable together, as errors; a corrupt
// region or missing segment outside the filter's time range (Outside) is
// an *OutsideError.
func (r *Reader) Problems() []error {
	var out []error
	for i, p := range r.r.Problems() {
		out = append(out, r.problemErr(uint64(i), p))
	}
	return append(out, r.badRecs...)
}

// Close closes the reader.
func (r *Reader) Close() error { return r.r.Close() }

// IsEnd reports whether err marks the end of the log.
func IsEnd(err error) bool { return errors.Is(err, io.EOF) }
