package emf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// WriterOptions configures a Writer. The zero value writes documents of
// at most DefaultMaxDocumentSize bytes, unvalidated. It is a plain value.
type WriterOptions struct {
	// MaxDocumentSize is the largest document written; zero means
	// DefaultMaxDocumentSize, at most MaxDocumentSize. Larger documents are
	// split.
	MaxDocumentSize ByteSize
	// ValidateDocuments runs Validate on every document before it is
	// written and withholds invalid ones. It costs time; tests turn it on.
	ValidateDocuments bool
	// IgnoreTimestampWindow accepts documents stamped any time, for
	// replaying old windows into a file; CloudWatch refuses them.
	IgnoreTimestampWindow bool
	// WaitForRoom makes Write wait, before it hands a document to a
	// buffering sink (the agent, Logs and metrics sinks) whose buffer
	// cannot take it, until the sink has delivered enough, or until its
	// FlushTimeout passes and it drops what it holds (ErrSinkBehind in the
	// error). It is for a caller that may wait, such as the aggregator
	// between two outputs, which then goes at the sink's pace instead of
	// losing documents to ErrSinkFull. A Logger never waits.
	WaitForRoom bool
}

// roomMaker is a buffering sink that can wait for room for a document in
// its buffer (WriterOptions.WaitForRoom).
type roomMaker interface {
	makeRoom(ctx context.Context, doc []byte) error
}

var (
	_ roomMaker = (*AgentSink)(nil)
	_ roomMaker = (*LogsSink)(nil)
	_ roomMaker = (*MetricDataSink)(nil)
)

// Writer encodes Documents with AppendDocuments and hands each resulting
// document to every sink, counting what it built, split, refused and what
// each sink accepted, as a Logger does. It is the back end of a Logger,
// and the front door for a caller, such as the aggregator, that builds
// whole documents itself. It is safe for concurrent use; the pieces of one
// Write reach each sink in order, but concurrent Writes may interleave.
// Create one with NewWriter.
type Writer struct {
	opts  WriterOptions
	sinks []*sinkState

	documents atomic.Uint64
	split     atomic.Uint64
	rejected  atomic.Uint64
}

type sinkState struct {
	sink                                    Sink
	written, split, rejected, dropped, held atomic.Uint64
}

// holds reports whether the sink is a Holder that holds doc already; one
// that cannot tell does not.
func (s *sinkState) holds(doc []byte) bool {
	h, ok := s.sink.(Holder)
	if !ok {
		return false
	}
	held, err := h.Holds(doc)
	return err == nil && held
}

// NewWriter returns a Writer that writes to sinks. It returns an error
// only for a MaxDocumentSize out of range.
func NewWriter(opts WriterOptions, sinks ...Sink) (*Writer, error) {
	if opts.MaxDocumentSize == 0 {
		opts.MaxDocumentSize = DefaultMaxDocumentSize
	}
	if opts.MaxDocumentSize < 0 || opts.MaxDocumentSize > MaxDocumentSize {
		return nil, fmt.Errorf("configure emf writer: max document size %d is not allowed; use 1 to %d bytes", opts.MaxDocumentSize, MaxDocumentSize)
	}
	w := &Writer{opts: opts}
	for _, s := range sinks {
		w.sinks = append(w.sinks, &sinkState{sink: s})
	}
	return w, nil
}

// Write encodes doc as CloudWatch reads it at now and writes every
// resulting document to every sink. The error joins what AppendDocuments
// refused (counted as rejected) and what sinks refused (counted per sink);
// a document one sink refuses still goes to the others.
func (w *Writer) Write(ctx context.Context, doc *Document, now time.Time) error {
	return w.write(ctx, doc, now, false)
}

// WriteAgain is Write of a document that a sink may hold already: one
// written before a crash, delivered again on restart. A sink that is a
// Holder and holds a resulting document byte for byte does not get it
// again (counted in SinkReport.Held); every other sink does. If a Holder
// cannot tell, the document is written.
func (w *Writer) WriteAgain(ctx context.Context, doc *Document, now time.Time) error {
	return w.write(ctx, doc, now, true)
}

func (w *Writer) write(ctx context.Context, doc *Document, now time.Time, again bool) error {
	e := encoderPool.Get().(*encoder)
	defer e.release()
	var (
		docs, rejected int
		err            error
	)
	e.buf, docs, rejected, err = e.encode(e.buf[:0], doc, w.limits(now))
	w.count(docs, rejected)
	return errors.Join(err, w.writeLines(ctx, e.buf, now, again))
}

func (w *Writer) limits(now time.Time) Limits {
	return Limits{MaxSize: w.opts.MaxDocumentSize, Now: now, IgnoreTimestampWindow: w.opts.IgnoreTimestampWindow}
}

// count records the documents one encoding built and what it refused.
func (w *Writer) count(docs, rejected int) {
	if docs > 0 {
		w.documents.Add(uint64(docs))
		w.split.Add(uint64(docs - 1))
	}
	if rejected > 0 {
		w.rejected.Add(uint64(rejected))
	}
}

// writeLines hands each line of lines, the output of one encoding, to
// every sink, without its newline; again, not to a Holder that holds it.
func (w *Writer) writeLines(ctx context.Context, lines []byte, now time.Time, again bool) error {
	var errs []error
	for i := 0; len(lines) > 0; i++ {
		end := bytes.IndexByte(lines, '\n')
		doc := lines[:end]
		lines = lines[end+1:]
		if w.opts.ValidateDocuments {
			opts := ValidateOptions{MaxSize: w.opts.MaxDocumentSize, IgnoreTimestampWindow: w.opts.IgnoreTimestampWindow}
			if vs := Validate(doc, now, opts); len(vs) > 0 {
				w.rejected.Add(1)
				for _, s := range w.sinks {
					s.rejected.Add(1)
				}
				errs = append(errs, fmt.Errorf("validate document %d: %d violations, first %s", i, len(vs), vs[0]))
				continue
			}
		}
		for _, s := range w.sinks {
			if again && s.holds(doc) {
				s.held.Add(1)
				continue
			}
			if err := w.makeRoom(ctx, s.sink, doc); err != nil && len(errs) < 10 {
				errs = append(errs, err)
			}
			if err := s.sink.Write(ctx, doc); err != nil {
				s.dropped.Add(1)
				if len(errs) < 10 {
					errs = append(errs, fmt.Errorf("write document to %s: %w", s.sink.Stats().Sink, err))
				}
				continue
			}
			s.written.Add(1)
			if i > 0 {
				s.split.Add(1)
			}
		}
	}
	return errors.Join(errs...)
}

// makeRoom waits, with WaitForRoom, until sink can take doc, and returns
// ErrSinkBehind if the sink dropped what it held to make room. The wait is
// for each piece of a split document and each sink apart, before the
// piece is written, rather than a retry of the whole document after
// ErrSinkFull: the sink would then get again the pieces it had taken,
// and the other sinks the whole document, and CloudWatch would count
// them twice. Any other end of the wait (ctx, a closed sink) is left to
// the Write that follows, which says what became of the piece.
func (w *Writer) makeRoom(ctx context.Context, sink Sink, doc []byte) error {
	if !w.opts.WaitForRoom {
		return nil
	}
	r, ok := sink.(roomMaker)
	if !ok {
		return nil
	}
	if err := r.makeRoom(ctx, doc); errors.Is(err, ErrSinkBehind) {
		return err
	}
	return nil
}

// Flush asks every sink to deliver what it buffers.
func (w *Writer) Flush(ctx context.Context) error {
	return w.eachSink("flush", func(s Sink) error { return s.Flush(ctx) })
}

// Close closes every sink, which delivers what it buffers first.
func (w *Writer) Close(ctx context.Context) error {
	return w.eachSink("close", func(s Sink) error { return s.Close(ctx) })
}

// eachSink calls f for every sink and joins the errors, each named by
// verb and the sink.
func (w *Writer) eachSink(verb string, f func(Sink) error) error {
	var errs []error
	for _, s := range w.sinks {
		if err := f(s.sink); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", verb, s.sink.Stats().Sink, err))
		}
	}
	return errors.Join(errs...)
}

// Stats is the self-report of a Logger or a Writer.
// It is a plain value, a snapshot, safe for concurrent use.
type Stats struct {
	Documents uint64       // documents built
	Split     uint64       // of those, extra documents created by splitting
	Rejected  uint64       // calls and documents refused as invalid
	Dropped   uint64       // values refused because the buffer was full or the logger closed
	Sinks     []SinkReport // one per sink, in the order given
}

// SinkReport is what a Logger or a Writer did with one sink.
// It is a plain value, a snapshot, safe for concurrent use.
type SinkReport struct {
	Written  uint64    // documents the sink accepted
	Split    uint64    // of those, extra documents created by splitting
	Rejected uint64    // documents withheld because validation failed
	Dropped  uint64    // documents the sink refused with an error
	Held     uint64    // documents WriteAgain did not write again: the sink held them
	CutTail  int64     // bytes of an unfinished last document a file sink cut off when it opened its file (FileSink.CutTail)
	Sink     SinkStats // the sink's own report
}

// Stats reports what w has done so far.
func (w *Writer) Stats() Stats {
	st := Stats{
		Documents: w.documents.Load(),
		Split:     w.split.Load(),
		Rejected:  w.rejected.Load(),
		Sinks:     make([]SinkReport, len(w.sinks)),
	}
	for i, s := range w.sinks {
		st.Sinks[i] = SinkReport{
			Written:  s.written.Load(),
			Split:    s.split.Load(),
			Rejected: s.rejected.Load(),
			Dropped:  s.dropped.Load(),
			Held:     s.held.Load(),
			Sink:     s.sink.Stats(),
		}
		if c, ok := s.sink.(interface{ CutTail() int64 }); ok {
			st.Sinks[i].CutTail = c.CutTail()
		}
	}
	return st
}
