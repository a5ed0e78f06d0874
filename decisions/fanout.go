package decisions

import (
	"context"
	"errors"
	"sync"
)

// Lane is one destination of a Fanout: a writer and the options of the
// Emitter that feeds it.
type Lane struct {
	Name    string // names the lane in metrics and logs: "log", "kinesis", "file"
	Writer  BatchWriter
	Options EmitterOptions
}

// Fanout hands every decision to several writers, each through an Emitter
// of its own: its own bounded queue, goroutine and batching. A slow or
// hung writer (a stream that accepts connections and never answers) fills
// and drops from its own queue only, and the other writers lose nothing;
// Tee, by contrast, makes every writer wait for the slowest. Fanout is
// safe for concurrent use.
type Fanout struct {
	names []string
	lanes []*Emitter
}

// NewFanout starts one Emitter per lane. Close it to flush.
func NewFanout(lanes ...Lane) *Fanout {
	f := &Fanout{}
	for _, l := range lanes {
		f.names = append(f.names, l.Name)
		f.lanes = append(f.lanes, NewEmitter(l.Writer, l.Options))
	}
	return f
}

// Emit queues d on every lane. It never blocks on I/O; it reports false
// when any lane dropped d (each lane counts its own drops and reports them
// in its own writer).
func (f *Fanout) Emit(d Decision) bool { return f.EmitRef(&d) }

// EmitRef is Emit by reference, as Emitter.EmitRef: d is not retained.
func (f *Fanout) EmitRef(d *Decision) bool {
	ok := true
	for _, e := range f.lanes {
		ok = e.EmitRef(d) && ok
	}
	return ok
}

// Lanes calls fn with each lane's name and emitter, in the order given to
// NewFanout: for per-lane metrics.
func (f *Fanout) Lanes(fn func(name string, e *Emitter)) {
	for i, e := range f.lanes {
		fn(f.names[i], e)
	}
}

// Flush flushes every lane at once (Emitter.Flush) and waits for them, or
// for ctx: what was emitted before it is written, lingering or not.
func (f *Fanout) Flush(ctx context.Context) error {
	return f.each(func(e *Emitter) error { return e.Flush(ctx) })
}

// Close closes every lane at once, so that a hung writer does not keep
// the others from flushing, and waits for them, or for ctx.
func (f *Fanout) Close(ctx context.Context) error {
	return f.each(func(e *Emitter) error { return e.Close(ctx) })
}

// each calls fn on every lane concurrently and joins the errors.
func (f *Fanout) each(fn func(*Emitter) error) error {
	errs := make([]error, len(f.lanes))
	var wg sync.WaitGroup
	for i, e := range f.lanes {
		wg.Go(func() { errs[i] = fn(e) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
