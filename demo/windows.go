package demo

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/internal/visible"
)

// Windows prints one line per aggregated window: its time, the decisions
// by outcome and the client refused most (escaped: visible.Escape). It is an aggregator.Sink and is
// safe for concurrent use.
type Windows struct {
	W  io.Writer
	mu sync.Mutex
}

var _ aggregator.Sink = (*Windows)(nil)

// Write prints o's line.
func (p *Windows) Write(_ context.Context, _ string, o aggregator.Output) error {
	part := o.Partial
	var allow, chal, block, other uint64
	for oc, n := range part.Counts.ByOutcome() {
		switch decisions.Outcome(oc) {
		case decisions.Allow:
			allow += n
		case decisions.Challenge:
			chal += n
		case decisions.Block:
			block += n
		default:
			other += n
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s  decisions %5d  allowed %5d  challenged %4d  blocked %5d  other %4d",
		part.Start.UTC().Format(time.TimeOnly), allow+chal+block+other, allow, chal, block, other)
	if part.Offenders != nil {
		if top := part.Offenders.Refusals.Top(1); len(top) > 0 {
			fmt.Fprintf(&b, "  most refused %s (%d)", visible.Escape(top[0].Client.String()), top[0].Count)
		}
	}
	if o.Correction {
		b.WriteString("  (late events)")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := fmt.Fprintln(p.W, b.String())
	return err
}

// Flush does nothing.
func (p *Windows) Flush(context.Context) error { return nil }
