package assemble

import (
	"context"

	"github.com/ratewarden/ratewarden/edge/lambda"
)

var _ lambda.Flusher = (*Edge)(nil)

// Lambda is the edge as an AWS Lambda handler (`ratewarden lambda`): API
// Gateway and ALB events through Handler, and every invocation's decisions
// written and flushed before it returns, since Lambda freezes the process
// between invocations and sends no SIGTERM without an extension. onError
// receives flush errors; it may be nil.
func (e *Edge) Lambda(onError func(error)) *lambda.Handler {
	return lambda.New(e.Handler(), lambda.Options{Flush: e, OnError: onError})
}

// Flush writes every decision recorded so far to the configured sinks and
// flushes them, or waits for ctx. Without sinks it does nothing.
func (e *Edge) Flush(ctx context.Context) error {
	if e.Sinks.Emitter == nil {
		return nil
	}
	return e.Sinks.Emitter.Flush(ctx)
}
