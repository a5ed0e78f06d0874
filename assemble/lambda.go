package assemble

import (
	"context"

	"github.com/ratewarden/ratewarden/edge/lambda"
)

var _ lambda.Flusher = (*Edge)(nil)

// Lambda is the edge as an AWS Lambda handler (`ratewarden lambda`): API
// Gateway and ALB events through Handler, and every invocation's decisions
// written and flushed before it returns, since Lambda freezes the process
// between invocations and sends no SIGTERM without an extension. o's
// OnError (flush errors) and OnNoAddress may be nil; its Flush is e.
func (e *Edge) Lambda(o lambda.Options) *lambda.Handler {
	o.Flush = e
	return lambda.New(e.Handler(), o)
}

// Flush writes every decision recorded so far to the configured sinks and
// flushes them, or waits for ctx. Without sinks it does nothing.
func (e *Edge) Flush(ctx context.Context) error {
	if e.Sinks.Emitter == nil {
		return nil
	}
	return e.Sinks.Emitter.Flush(ctx)
}
