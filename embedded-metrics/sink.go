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

// A Holder is a Sink that can tell whether it already holds a document,
// byte for byte: a file, which can be read back. Writer.WriteAgain asks it
// before it writes a document delivered again after a crash, so that the
// document is not summed twice. Sinks that hand documents on (the agent,
// CloudWatch) cannot tell, and are not Holders.
type Holder interface {
	Holds(doc []byte) (bool, error)
}

// SinkStats is a sink's self-report, a plain value. Every document handed
// to Write ends in exactly one of Written or Dropped, or is still
// Buffered: at any moment Written+Dropped+Buffered is the number of Write
// calls.
//
// Errors counts failures, the same way in every sink: each failed
// delivery attempt (a call, a write, a dial, a refused datagram), whether
// it is retried or not, and each document dropped for a failure rather
// than for the sink's state: a document no call can carry (too big, not
// readable), a document the service refused, a document dropped because
// the circuit breaker is open. Documents dropped because the buffer is
// full, the sink is closed or Close ran out of time count in Dropped only.
// It is safe for concurrent use.
type SinkStats struct {
	Sink     string // the sink's kind and target, e.g. "agent tcp://127.0.0.1:25888"
	Written  uint64 // documents delivered
	Dropped  uint64 // documents given up on: buffer full, retries exhausted, refused, closed
	Buffered uint64 // documents accepted and not yet delivered
	// Unconfirmed counts, of Dropped, the documents the sink had sent
	// whole when it gave up on them, and whose arrival it could not
	// confirm: they may have been delivered. AgentSink over TCP on Linux
	// (sent, not acknowledged) and the AWS sinks (a call sent whole that
	// went unanswered) tell them apart; elsewhere they are in Dropped
	// alone.
	Unconfirmed uint64
	Retries     uint64 // delivery attempts repeated after an error
	Errors      uint64 // failures seen, as described above
}
