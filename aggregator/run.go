package aggregator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/decisions/decisionlog"
)

// LogOptions configure RunLog.
type LogOptions struct {
	Dir       string // the decision log directory; required
	Partition string // the partition's name in outputs and state; default "log"
	// StateDir keeps the partition's state (snapshot and undelivered
	// outputs); required. A restart resumes from it.
	StateDir string
	Follow   bool      // wait for new events at the end of the log
	Since    time.Time // events before are skipped; zero: from the start
	Until    time.Time // events at or after are skipped; zero: to the end
	Rollup   Options
	Sinks    []Sink
	// Now reads the wall clock, for the idle watermark only; default
	// time.Now.
	Now func() time.Time
	// Tick is how often a following run, at the end of the log, advances
	// an idle watermark and flushes; default 200 ms.
	Tick time.Duration
	// FlushEvery is how many events are added between flushes while
	// reading a backlog; default 4096.
	FlushEvery int
	// Progress, if set, is called after every flush, whether it delivered
	// anything or not: every FlushEvery events while reading a backlog and
	// every Tick at the end of a followed log.
	Progress func(RunStats)
}

// RunStats are what a run did.
type RunStats struct {
	Rollup    RollupStats
	Read      decisionlog.ReadStats
	Outputs   uint64    // outputs delivered
	Redeliver uint64    // outputs of the previous run delivered again on start
	Next      uint64    // the next log offset to read
	Watermark time.Time // the partition's watermark
}

// RunLog rolls the decision log in o.Dir up and delivers the outputs to
// o.Sinks, resuming from the partition's state. Without Follow it stops at
// the end of the log (or at Until) and emits every open window; with
// Follow it runs until ctx is done, then emits the open windows (a clean
// shutdown). Outputs are written to the state before they are delivered,
// so a crash at any point loses nothing: the restart delivers them again,
// byte for byte, and reads the log from where the state says.
func RunLog(ctx context.Context, o LogOptions) (RunStats, error) {
	if o.Dir == "" || o.StateDir == "" {
		return RunStats{}, errors.New("aggregate log: a log directory and a state directory are required")
	}
	if o.Partition == "" {
		o.Partition = "log"
	}
	if strings.ContainsAny(o.Partition, `/\.`) {
		return RunStats{}, fmt.Errorf("aggregate log: partition %q: want a name without '/', '\\' or '.'", o.Partition)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Tick <= 0 {
		o.Tick = 200 * time.Millisecond
	}
	if o.FlushEvery <= 0 {
		o.FlushEvery = 4096
	}
	run := &logRun{o: o, r: NewRollup(o.Rollup)}
	if err := run.resume(ctx); err != nil {
		return run.stats(), err
	}
	rd, err := decisionlog.Open(o.Dir, decisionlog.Filter{From: run.r.Next(), Since: o.Since, Until: o.Until})
	if err != nil {
		return run.stats(), fmt.Errorf("aggregate log: %w", err)
	}
	defer rd.Close()
	run.rd = rd
	err = run.loop(ctx, rd)
	return run.stats(), err
}

type logRun struct {
	o         LogOptions
	r         *Rollup
	rd        *decisionlog.Reader // nil until the log is open
	delivered uint64
	redeliver uint64
}

func (l *logRun) stats() RunStats {
	s := RunStats{Rollup: l.r.Stats(), Outputs: l.delivered, Redeliver: l.redeliver, Next: l.r.Next(), Watermark: l.r.Watermark()}
	if l.rd != nil {
		s.Read = l.rd.Stats()
	}
	return s
}

// resume restores the rollup from the partition's state and delivers again
// the outputs the previous run may not have delivered.
func (l *logRun) resume(ctx context.Context) error {
	st, ok, err := readState(l.o.StateDir, l.o.Partition)
	if err != nil || !ok {
		return err
	}
	if err := l.r.Restore(st.snapshot); err != nil {
		return err
	}
	if len(st.pending) == 0 {
		return nil
	}
	l.redeliver = uint64(len(st.pending))
	return l.deliver(ctx, st)
}

func (l *logRun) loop(ctx context.Context, rd *decisionlog.Reader) error {
	added := 0
	for {
		d, off, err := rd.Next(ctx, false)
		if err == nil {
			l.r.Add(&d, off)
			if added++; added >= l.o.FlushEvery {
				added = 0
				if err := l.flush(ctx, false); err != nil {
					return err
				}
			}
			continue
		}
		if !decisionlog.IsEnd(err) {
			return fmt.Errorf("aggregate log: %w", err)
		}
		added = 0
		if !l.o.Follow {
			return l.flush(ctx, true)
		}
		// At the end of the log: flush what closed, then wait for more
		// for a tick at most.
		l.r.Advance(l.o.Now())
		if err := l.flush(ctx, false); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, l.o.Tick)
		d, off, err = rd.Next(wctx, true)
		cancel()
		switch {
		case err == nil:
			l.r.Add(&d, off)
			added++
		case ctx.Err() != nil:
			// A clean shutdown emits the open windows with the context
			// that is not done.
			return l.flush(context.WithoutCancel(ctx), true)
		case errors.Is(err, context.DeadlineExceeded):
		default:
			return fmt.Errorf("aggregate log: %w", err)
		}
	}
}

// flush takes what the rollup emits, writes it to the state with the
// snapshot after it, delivers it, and records the delivery.
func (l *logRun) flush(ctx context.Context, final bool) error {
	var outs []Output
	l.r.Flush(final, func(o Output) error { outs = append(outs, o); return nil })
	if len(outs) == 0 {
		if l.o.Progress != nil {
			l.o.Progress(l.stats())
		}
		return nil
	}
	snap, err := l.r.AppendSnapshot(nil)
	if err != nil {
		return err
	}
	st := state{snapshot: snap, pending: outs}
	if err := writeState(l.o.StateDir, l.o.Partition, st); err != nil {
		return err
	}
	return l.deliver(ctx, st)
}

func (l *logRun) deliver(ctx context.Context, st state) error {
	for _, o := range st.pending {
		for _, s := range l.o.Sinks {
			if err := s.Write(ctx, l.o.Partition, o); err != nil {
				return fmt.Errorf("aggregate log: deliver: %w", err)
			}
		}
	}
	for _, s := range l.o.Sinks {
		if err := s.Flush(ctx); err != nil {
			return fmt.Errorf("aggregate log: deliver: %w", err)
		}
	}
	l.delivered += uint64(len(st.pending))
	if err := writeState(l.o.StateDir, l.o.Partition, state{snapshot: st.snapshot}); err != nil {
		return err
	}
	if l.o.Progress != nil {
		l.o.Progress(l.stats())
	}
	return nil
}
