package emf

import "context"

// Sink delivers complete EMF documents somewhere: stdout, a file, the
// CloudWatch agent, CloudWatch Logs or CloudWatch metrics. Implementations
// are safe for concurrent use.
type Sink interface {
	// Write hands one document to the sink: a complete JSON object without
	// a trailing newline, already valid and within the size limit. The sink
	// does not retain doc after Write returns. A sink that buffers returns
	// at once; one that cannot keep the document counts it as dropped and
	// returns an error saying why.
	Write(ctx context.Context, doc []byte) error
	// Flush delivers what is buffered, waiting no longer than ctx allows.
	Flush(ctx context.Context) error
	// Close flushes, then releases the sink's resources and goroutines.
	Close(ctx context.Context) error
	// Stats reports what the sink has done so far.
	Stats() SinkStats
}

// SinkStats is a sink's self-report. Every document handed to Write ends in
// exactly one of Written or Dropped, or is still Buffered.
type SinkStats struct {
	Sink     string // the sink's kind and target, e.g. "agent tcp://127.0.0.1:25888"
	Written  uint64 // documents delivered
	Dropped  uint64 // documents given up on: buffer full, retries exhausted, closed
	Buffered uint64 // documents accepted and not yet delivered
	Retries  uint64 // delivery attempts repeated after an error
	Errors   uint64 // delivery errors seen, retried or not
}
