package report

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
)

// windowChecker is a store of partials that can say whether it holds
// partials of a window length, naming the lengths it does hold when not
// (aggregator.PartialsDir and PartialsTable): a report of another length
// would otherwise read nothing and say the range was quiet.
type windowChecker interface {
	HasWindow(ctx context.Context, size time.Duration) error
}

// Job is one report to make: its source of partials (stored ones, or the
// decision log rolled up on the fly), its alerts, its range, its format.
// What `ratewarden report` and the scheduled Lambda both run.
type Job struct {
	PartialsDir string // read the partials stored here (PartialsDir); or
	// Partials, the store to read the partials from (an
	// aggregator.PartialsDir or PartialsTable); or
	Partials     PartialsReader
	DecisionsDir string // roll this decision log up on the fly
	// Rollup is the window length (of the stored partials, or to roll up
	// in) and, for a log, the top-K and lateness; zero fields take the
	// aggregator's defaults.
	Rollup     aggregator.Options
	AlertsFile string // optional JSON lines of alerts and actions
	Options    Options
	Format     Format
	// Progress, if set, is told how far reading has got: days of partials
	// done of total, or bytes of the log's payloads read (total 0: the
	// caller knows the log's size better).
	Progress func(done, total uint64)
}

// Run reads the job's inputs and returns the report and its rendering.
func (j *Job) Run(ctx context.Context) (*Report, []byte, error) {
	o := j.Rollup
	if o.Window <= 0 {
		o.Window = time.Minute
	}
	sources := 0
	for _, given := range []bool{j.PartialsDir != "", j.Partials != nil, j.DecisionsDir != ""} {
		if given {
			sources++
		}
	}
	if sources != 1 {
		return nil, nil, errors.New("report: give one source: a partials directory or store, or a decision log")
	}
	from, to := j.Options.From, j.Options.To
	if !from.Before(to) {
		return nil, nil, fmt.Errorf("report: --from %s is not before --to %s", stamp(from), stamp(to))
	}
	from, to = Align(from, to, o.Window)
	var w *Windows
	var err error
	var progress func(done, total int)
	if j.Progress != nil {
		progress = func(done, total int) { j.Progress(uint64(done), uint64(total)) }
	}
	// A directory names the window lengths it holds, and its problems
	// are named relative to it.
	dir := j.PartialsDir
	if d, ok := j.Partials.(*aggregator.PartialsDir); ok {
		dir = d.Dir
	}
	switch {
	case dir != "":
		if err := (&aggregator.PartialsDir{Dir: dir}).HasWindow(ctx, o.Window); err != nil {
			return nil, nil, fmt.Errorf("report: %w", err)
		}
		w, err = ReadDir(ctx, dir, o.Window, from, to, progress)
	case j.Partials != nil:
		if c, ok := j.Partials.(windowChecker); ok {
			if err := c.HasWindow(ctx, o.Window); err != nil {
				return nil, nil, fmt.Errorf("report: %w", err)
			}
		}
		w, err = ReadPartials(ctx, j.Partials, o.Window, from, to, progress)
	default:
		var progress func(LogProgress)
		if j.Progress != nil {
			progress = func(s LogProgress) { j.Progress(s.Bytes, 0) }
		}
		w, err = RollLog(ctx, j.DecisionsDir, o, from, to, progress)
	}
	if err != nil {
		return nil, nil, err
	}
	var al *Alerts
	if j.AlertsFile != "" {
		if al, err = ReadAlertsFile(j.AlertsFile); err != nil {
			return nil, nil, err
		}
	}
	opts := j.Options
	if opts.TopK == 0 {
		opts.TopK = o.TopK
	}
	r := Build(w, al, opts)
	var b bytes.Buffer
	if err := r.Render(&b, j.Format); err != nil {
		return nil, nil, err
	}
	return r, b.Bytes(), nil
}
