package aggregator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/seglog"
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
	// Problem, if set, is called with each problem of the log as the run
	// meets it: a corrupt region or a missing segment (a seglog.Problem,
	// which names the segment file and byte offset), a record that could
	// not be decoded, or events removed from the log before this partition
	// read them (an error wrapping seglog.ErrMissing). Beyond the first
	// 1000 corrupt regions and 100 undecodable records it is not called;
	// RunStats counts them all.
	Problem func(error)
	// Consumer, if set, is the name under which the run commits its
	// position to the log as a consumer offset (seglog.CommitReaderOffset)
	// after every state save, so that the log's retention reports the
	// segments it removes before this partition read them. A commit that
	// fails is passed to Problem once and does not stop the run.
	Consumer string

	// perEvent makes the run read the log event by event (Reader.Next)
	// rather than by record batch: the reference the tests hold the
	// columnar path to.
	perEvent bool
}

// RunStats are what a run did.
type RunStats struct {
	Rollup    RollupStats
	Read      decisionlog.ReadStats
	Outputs   uint64    // outputs delivered
	Redeliver uint64    // outputs of the previous run delivered again on start
	Next      uint64    // the next log offset to read
	Watermark time.Time // the partition's watermark
	// Shards, of a Kinesis run, are the shards held and their lags; the
	// Watermark is then the least of theirs.
	Shards []ShardStats
	// Lost is what the log reader could not read: corrupt bytes, the
	// events lost in them and in missing segments, and (Removed) the
	// events between the saved position and the log's oldest segment when
	// the run resumed. Read.BadEvents counts the events of records that
	// could not be decoded.
	Lost seglog.Loss
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
	run := &logRun{o: o}
	run.p = partitionRun{name: o.Partition, store: &StateDir{Dir: o.StateDir}, sinks: o.Sinks, r: NewRollup(o.Rollup),
		progress: func() {
			if o.Progress != nil {
				o.Progress(run.stats())
			}
		}}
	if err := run.p.resume(ctx); err != nil {
		return run.stats(), err
	}
	rd, err := decisionlog.Open(o.Dir, decisionlog.Filter{From: run.p.r.Next(), Since: o.Since, Until: o.Until})
	if err != nil {
		return run.stats(), fmt.Errorf("aggregate log: %w", err)
	}
	defer rd.Close()
	run.rd = rd
	run.commit()
	err = run.loop(ctx, rd)
	return run.stats(), err
}

type logRun struct {
	o    LogOptions
	p    partitionRun
	rd   *decisionlog.Reader // nil until the log is open
	seen lossSeen
}

func (l *logRun) stats() RunStats {
	r := l.p.r
	s := RunStats{Rollup: r.Stats(), Outputs: l.p.delivered, Redeliver: l.p.redeliver, Next: r.Next(), Watermark: r.Watermark()}
	if l.rd != nil {
		s.Read = l.rd.Stats()
		s.Lost = l.lost()
	}
	return s
}

func (l *logRun) loop(ctx context.Context, rd *decisionlog.Reader) error {
	r := l.p.r
	flush := func(ctx context.Context, final bool) error {
		outs := r.take(final, nil)
		if len(outs) == 0 {
			l.p.progress()
			return nil
		}
		if err := l.p.save(ctx, outs); err != nil {
			return err
		}
		l.commit()
		return nil
	}
	// read reads a record's rows (an event's, on the per-event path) with
	// rctx and adds them, flushing with ctx after every FlushEvery events
	// added, so that windows close at the same events however the log
	// was read.
	added := 0
	var flushErr error // returned as it is, not as a read error
	read := func(rctx context.Context, follow bool) error {
		room := func(_ *Batch, lo, hi int) int { return lo + l.o.FlushEvery - added }
		added1 := func(n int) error {
			if added += n; added < l.o.FlushEvery {
				return nil
			}
			added = 0
			flushErr = flush(ctx, false)
			return flushErr
		}
		if l.o.perEvent {
			d, off, err := rd.Next(rctx, follow)
			if err != nil {
				return err
			}
			r.Add(&d, off)
			return added1(1)
		}
		return rd.NextRows(rctx, follow, func(rows *decisionlog.Rows) error {
			return r.addDecoded(rows.Rows, 0, rows.Offset, rows.Skip, room, added1)
		})
	}
	for {
		err := read(ctx, false)
		l.noteLoss()
		if err == nil {
			continue
		}
		if flushErr != nil {
			return flushErr
		}
		if !decisionlog.IsEnd(err) {
			return fmt.Errorf("aggregate log: %w", err)
		}
		added = 0
		if !l.o.Follow {
			return flush(ctx, true)
		}
		// At the end of the log: flush what closed, then wait for more
		// for a tick at most.
		r.Advance(l.o.Now())
		if err := flush(ctx, false); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, l.o.Tick)
		err = read(wctx, true)
		cancel()
		l.noteLoss()
		switch {
		case err == nil:
		case flushErr != nil:
			return flushErr
		case ctx.Err() != nil:
			// A clean shutdown emits the open windows with the context
			// that is not done.
			return flush(context.WithoutCancel(ctx), true)
		case errors.Is(err, context.DeadlineExceeded):
		default:
			return fmt.Errorf("aggregate log: %w", err)
		}
	}
}

// partitionRun is one partition's Rollup with its state store and sinks:
// what the log and each Kinesis shard share. It is not safe for concurrent
// use.
type partitionRun struct {
	name      string
	store     StateStore
	sinks     []Sink
	r         *Rollup
	cursor    []byte // saved with every state
	delivered uint64
	redeliver uint64
	resumed   bool   // a state was found
	progress  func() // after every delivery
}

// resume restores the rollup and cursor from the partition's state and
// delivers again the outputs the previous run may not have delivered.
func (p *partitionRun) resume(ctx context.Context) error {
	st, ok, err := p.store.Load(ctx, p.name)
	if err != nil || !ok {
		return err
	}
	if err := p.r.Restore(st.Snapshot); err != nil {
		return err
	}
	p.resumed = true
	p.cursor = st.Cursor
	if len(st.Pending) == 0 {
		return nil
	}
	p.redeliver += uint64(len(st.Pending))
	return p.deliver(ctx, st)
}

// save writes the state with outs, then delivers outs and writes the state
// without them. With no outs it writes the state once.
func (p *partitionRun) save(ctx context.Context, outs []Output) error {
	snap, err := p.r.AppendSnapshot(nil)
	if err != nil {
		return err
	}
	st := State{Snapshot: snap, Pending: outs, Cursor: p.cursor}
	if err := p.store.Save(ctx, p.name, st); err != nil {
		return err
	}
	if len(outs) == 0 {
		return nil
	}
	return p.deliver(ctx, st)
}

func (p *partitionRun) deliver(ctx context.Context, st State) error {
	for _, o := range st.Pending {
		for _, s := range p.sinks {
			if err := s.Write(ctx, p.name, o); err != nil {
				return fmt.Errorf("aggregate %s: deliver: %w", p.name, err)
			}
		}
	}
	for _, s := range p.sinks {
		if err := s.Flush(ctx); err != nil {
			return fmt.Errorf("aggregate %s: deliver: %w", p.name, err)
		}
	}
	p.delivered += uint64(len(st.Pending))
	if err := p.store.Save(ctx, p.name, State{Snapshot: st.Snapshot, Cursor: st.Cursor}); err != nil {
		return err
	}
	if p.progress != nil {
		p.progress()
	}
	return nil
}
