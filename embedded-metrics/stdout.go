package emf

import (
	"context"
	"fmt"
	"io"
	"sync"
)

// StdoutSink writes each document as one line to an io.Writer, normally
// os.Stdout, from which Lambda and the CloudWatch agent read EMF. Each
// document goes out in a single Write call, so lines never interleave. It
// is safe for concurrent use.
type StdoutSink struct {
	name string

	mu      sync.Mutex
	w       io.Writer
	line    []byte
	closed  bool
	written uint64
	dropped uint64
	errors  uint64
}

var _ Sink = (*StdoutSink)(nil)

// NewStdoutSink returns a sink writing to w. If w has a Flush() error
// method (a *bufio.Writer), Flush calls it.
func NewStdoutSink(w io.Writer) *StdoutSink {
	return &StdoutSink{name: "stdout", w: w}
}

// Write writes doc and a newline.
func (s *StdoutSink) Write(_ context.Context, doc []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.dropped++
		return fmt.Errorf("write document: %w", ErrSinkClosed)
	}
	s.line = append(append(s.line[:0], doc...), '\n')
	if _, err := s.w.Write(s.line); err != nil {
		s.dropped++
		s.errors++
		return fmt.Errorf("write document: %w", err)
	}
	s.written++
	return nil
}

// Flush flushes the writer if it buffers.
func (s *StdoutSink) Flush(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flushLocked()
}

func (s *StdoutSink) flushLocked() error {
	if f, ok := s.w.(interface{ Flush() error }); ok {
		if err := f.Flush(); err != nil {
			s.errors++
			return fmt.Errorf("flush stdout: %w", err)
		}
	}
	return nil
}

// Close flushes; it does not close the writer, which the sink does not own.
func (s *StdoutSink) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.flushLocked()
}

// Stats reports the documents written and dropped.
func (s *StdoutSink) Stats() SinkStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SinkStats{Sink: s.name, Written: s.written, Dropped: s.dropped, Errors: s.errors}
}
