package alerts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/internal/atomicfile"
)

// StateFile is the name of the alerts' state file in a state directory.
const StateFile = "alerts.json"

// RunnerOptions configure a Runner.
type RunnerOptions struct {
	Engine Options
	// StateDir keeps the engine's state (StateFile), saved after every
	// window; "" keeps none.
	StateDir string
	Sinks    []Sink
	Policies *Policies // nil: no feedback
	Actions  ActionLog // where action records go; nil: none
	// Report, if set, is told of a sink that failed; the other sinks and
	// the run go on.
	Report func(error)
}

// Runner is where alerts run: it feeds complete windows to an Engine,
// hands the alerts to the sinks and the feedback policies, and saves the
// engine's state after each window, so that a restart neither repeats
// nor misses an alert. It is an aggregator.Sink for a single-partition
// run (`ratewarden aggregate` on the local log), where each output is a
// whole window; with several partitions (Kinesis) the windows are whole
// only once every partition's partials are merged, and `ratewarden
// alerts` reads them from the partials directory (Follow). It is safe for
// concurrent use.
type Runner struct {
	o      RunnerOptions
	mu     sync.Mutex
	e      *Engine
	stats  RunnerStats
	before Stats // the engine's Stats as the state held them at NewRunner
	closed bool
}

// RunnerStats count what a Runner did. The engine's Stats are kept in its
// state and go on across restarts (Total); Run is their share of this
// Runner alone, so that a rerun over the same windows says it raised
// nothing, not what the runs before it raised. The other counts are this
// Runner's.
type RunnerStats struct {
	Run, Total  Stats
	Open        int    // alerts firing now (the state's, whichever run raised them)
	Corrections uint64 // outputs correcting a window already given to the engine: not re-run
	SinkErrors  uint64
	Actions     uint64 // actions recorded
	Applied     uint64 // of those, entries applied
}

var _ aggregator.Sink = (*Runner)(nil)

// NewRunner returns a Runner resuming from the state in o.StateDir, whose
// holder the caller is (aggregator.LockStateDir): it removes the
// temporary file a save cut short by a crash left there.
func NewRunner(o RunnerOptions) (*Runner, error) {
	if o.StateDir != "" {
		if _, err := atomicfile.RemoveTemps(filepath.Join(o.StateDir, StateFile)); err != nil {
			return nil, fmt.Errorf("alerts state: %w", err)
		}
	}
	st, err := LoadState(o.StateDir)
	if err != nil {
		return nil, err
	}
	e, err := NewEngine(o.Engine, st)
	if err != nil {
		return nil, err
	}
	return &Runner{o: o, e: e, before: e.st.Stats}, nil
}

// LoadState reads the state kept in dir; nil (a fresh start) when there is
// none or dir is "".
func LoadState(dir string) (*State, error) {
	if dir == "" {
		return nil, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load alerts state: %w", err)
	}
	st := &State{}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("load alerts state: %s: %w", filepath.Join(dir, StateFile), err)
	}
	return st, nil
}

// Write runs the window of o; a correction of a window already run is
// counted and left out (alerts are raised on what a window held when it
// closed).
func (r *Runner) Write(ctx context.Context, _ string, o aggregator.Output) error {
	if o.Correction {
		r.mu.Lock()
		r.stats.Corrections++
		r.mu.Unlock()
		return nil
	}
	return r.Window(ctx, o.Partial)
}

// Flush does nothing: every window's state is saved when it is run.
func (r *Runner) Flush(context.Context) error { return nil }

// Last returns the start of the last window run (zero: none).
func (r *Runner) Last() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.e.st.Last
}

// Stats returns the counts so far.
func (r *Runner) Stats() RunnerStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Total = r.e.st.Stats
	s.Run = s.Total.sub(r.before)
	s.Open = len(r.e.st.Open)
	return s
}

// Window runs one complete window: detectors, sinks, policies, then the
// state is saved. A sink's failure is reported and counted, not returned:
// one failing sink must not stop the others nor the aggregator; a state
// that cannot be saved is returned.
func (r *Runner) Window(ctx context.Context, p *aggregator.Partial) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("alerts: runner closed")
	}
	alerts, err := r.e.Window(p)
	if err != nil {
		return err
	}
	raised := map[string]bool{}
	for _, a := range alerts {
		for _, s := range r.o.Sinks {
			if err := s.Alert(ctx, a); err != nil {
				r.fail(err)
			}
		}
		if r.o.Policies == nil {
			continue
		}
		acts := r.o.Policies.Act(ctx, a, &r.e.st.Applied)
		r.record(ctx, acts)
		if o := r.e.st.Open[a.Key]; o != nil && a.State == Firing {
			o.Deferred, raised[a.Key] = heldBack(acts), true
		}
	}
	// An alert that stays open is not raised again: what the cap or the
	// store held back when it was is taken now, or the client it names
	// would never be listed while it goes on.
	if r.o.Policies != nil {
		for _, k := range sortedKeys(r.e.st.Open) {
			o := r.e.st.Open[k]
			if raised[k] || len(o.Deferred) == 0 {
				continue
			}
			if acts := r.o.Policies.Retry(ctx, o.Alert, o.Deferred, p.End(), &r.e.st.Applied); acts != nil {
				r.record(ctx, acts)
				o.Deferred = heldBack(acts)
			}
		}
	}
	return r.save()
}

// record counts acts and writes them to the action log.
func (r *Runner) record(ctx context.Context, acts []Action) {
	for _, act := range acts {
		r.stats.Actions++
		if act.Applied {
			r.stats.Applied++
		}
		if r.o.Actions != nil {
			if err := r.o.Actions.Action(ctx, act); err != nil {
				r.fail(err)
			}
		}
	}
}

func (r *Runner) fail(err error) {
	r.stats.SinkErrors++
	if r.o.Report != nil {
		r.o.Report(err)
	}
}

// save writes the engine's state.
func (r *Runner) save() error {
	if r.o.StateDir == "" {
		return nil
	}
	b, err := json.Marshal(r.e.st)
	if err != nil {
		return fmt.Errorf("save alerts state: %w", err)
	}
	if err := os.MkdirAll(r.o.StateDir, 0o755); err != nil {
		return fmt.Errorf("save alerts state: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(r.o.StateDir, StateFile), b, 0o644); err != nil {
		return fmt.Errorf("save alerts state: %w", err)
	}
	return nil
}

// Close closes the sinks, within ctx.
func (r *Runner) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	var errs []error
	for _, s := range r.o.Sinks {
		errs = append(errs, s.Close(ctx))
	}
	return errors.Join(errs...)
}

// PartialsReader merges the stored partials of a time range by window
// start (aggregator.MergePartials); aggregator.PartialsDir and
// PartialsTable are ones.
type PartialsReader interface {
	Read(ctx context.Context, size time.Duration, from, to time.Time) (map[time.Time]*aggregator.Partial, []aggregator.ReadProblem, error)
}

var (
	_ PartialsReader = (*aggregator.PartialsDir)(nil)
	_ PartialsReader = (*aggregator.PartialsTable)(nil)
)

// FollowOptions configure Follow.
type FollowOptions struct {
	// Partials is the store of partials to read: an
	// aggregator.PartialsDir or PartialsTable.
	Partials PartialsReader
	// Follow keeps polling for new windows; otherwise Follow returns once
	// every window found has been run.
	Follow bool
	// Settle is how many windows after a window's end its partials may
	// still arrive (partitions lag one another): while following, a window
	// runs once a partial of a window at least Settle windows later
	// exists. Default 2.
	Settle int
	Poll   time.Duration // how often to look; default 1s
	// Problems is told of partial files that could not be read (skipped).
	Problems func([]aggregator.ReadProblem)
}

// Follow runs the windows stored in a partials store (every
// partition's partials of a window merged, as PartialsDir.Read merges
// them), in order, from the one after the last run. Whether a window is
// complete is decided in event time, by the windows stored after it, so
// that the same store gives the same alerts. It returns when ctx ends
// or, not following, when the stored windows are run.
func (r *Runner) Follow(ctx context.Context, o FollowOptions) error {
	if o.Settle <= 0 {
		o.Settle = 2
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	size := r.o.Engine.Window
	for {
		from := time.Unix(0, 0).UTC()
		if last := r.Last(); !last.IsZero() {
			from = last.Add(size)
		}
		windows, problems, err := o.Partials.Read(ctx, size, from, time.Unix(1<<62/int64(time.Second), 0))
		if err != nil {
			return err
		}
		if len(problems) > 0 && o.Problems != nil {
			o.Problems(problems)
		}
		starts := make([]time.Time, 0, len(windows))
		for t := range windows {
			starts = append(starts, t)
		}
		slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
		for _, t := range starts {
			if o.Follow && starts[len(starts)-1].Before(t.Add(time.Duration(o.Settle)*size)) {
				break
			}
			if err := r.Window(ctx, windows[t]); err != nil {
				return err
			}
		}
		if !o.Follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.Poll):
		}
	}
}
