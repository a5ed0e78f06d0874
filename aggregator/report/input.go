package report

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
)

// Windows are the partials of a time range merged per window, and what
// could not be read.
type Windows struct {
	Size     time.Duration
	Parts    map[time.Time]*aggregator.Partial // by window start
	Problems []Problem                         // unreadable partial files or log records
	// Rolled is true when the windows were rolled up from the log itself
	// (RollLog): every window of the range was aggregated, so one without
	// a partial had no events. Stored partials cannot tell such a window
	// from one that was not aggregated.
	Rolled bool
}

// Problem is one input that could not be read: a partial file, a log
// record, an alerts line. The rest was read.
type Problem struct {
	Source string `json:"source"`
	Error  string `json:"error"`
}

// Align returns [from, to) widened to whole windows of size: from down,
// to up, on the windows the aggregator uses (aligned on the Unix epoch).
func Align(from, to time.Time, size time.Duration) (time.Time, time.Time) {
	f := from.UTC().Truncate(size)
	t := to.UTC().Truncate(size)
	if t.Before(to) {
		t = t.Add(size)
	}
	return f, t
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

// ReadDir reads the partials of windows of length size that start in
// [from, to) from the PartialsDir dir, as ReadPartials does, until ctx is
// done; problems name the files relative to dir.
func ReadDir(ctx context.Context, dir string, size time.Duration, from, to time.Time, progress func(done, total int)) (*Windows, error) {
	if !from.Before(to) {
		return nil, fmt.Errorf("read partials: --from %s is not before --to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("read partials: %w", err)
	}
	w, err := ReadPartials(ctx, &aggregator.PartialsDir{Dir: dir}, size, from, to, progress)
	if err != nil {
		return nil, err
	}
	for i, p := range w.Problems {
		// Paths relative to the directory keep reports of the same
		// store alike wherever it is mounted.
		if rel, err := filepath.Rel(dir, p.Source); err == nil {
			w.Problems[i].Source = filepath.ToSlash(rel)
		}
	}
	return w, nil
}

// ReadPartials reads the partials of windows of length size that start in
// [from, to) from the store r, a day at a time; progress, if not nil, is
// called after each day with the days done and the days in all.
// Unreadable partials are skipped and returned as problems.
func ReadPartials(ctx context.Context, r PartialsReader, size time.Duration, from, to time.Time, progress func(done, total int)) (*Windows, error) {
	if !from.Before(to) {
		return nil, fmt.Errorf("read partials: --from %s is not before --to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	w := &Windows{Size: size, Parts: map[time.Time]*aggregator.Partial{}}
	var days []time.Time
	for d := from.UTC().Truncate(24 * time.Hour); d.Before(to); d = d.Add(24 * time.Hour) {
		days = append(days, d)
	}
	for i, d := range days {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read partials: %w", err)
		}
		lo, hi := maxTime(d, from), minTime(d.Add(24*time.Hour), to)
		ps, problems, err := r.Read(ctx, size, lo, hi)
		if err != nil {
			return nil, err
		}
		for start, p := range ps {
			w.Parts[start] = p
		}
		for _, p := range problems {
			w.Problems = append(w.Problems, Problem{Source: p.Path, Error: p.Err.Error()})
		}
		if progress != nil {
			progress(i+1, len(days))
		}
	}
	return w, nil
}

// LogProgress is what RollLog has read so far.
type LogProgress = decisionlog.ReadStats

// RollLog rolls the events of the decision log in dir whose time is in
// [from, to) up into windows with the aggregator's Rollup, in memory, as
// `ratewarden aggregate` would have stored them; progress, if not nil, is
// called every few thousand events. Corrupt records are skipped and
// returned as problems.
func RollLog(ctx context.Context, dir string, o aggregator.Options, from, to time.Time, progress func(LogProgress)) (*Windows, error) {
	if !from.Before(to) {
		return nil, fmt.Errorf("roll up log: --from %s is not before --to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	rd, err := decisionlog.Open(dir, decisionlog.Filter{Since: from, Until: to})
	if err != nil {
		return nil, fmt.Errorf("roll up log: %w", err)
	}
	defer rd.Close()
	r := aggregator.NewRollup(o)
	w := &Windows{Size: r.Options().Window, Parts: map[time.Time]*aggregator.Partial{}, Rolled: true}
	collect := func(out aggregator.Output) error {
		if acc := w.Parts[out.Partial.Start]; acc != nil {
			return acc.Merge(out.Partial, false)
		}
		w.Parts[out.Partial.Start] = out.Partial
		return nil
	}
	for n := 0; ; n++ {
		d, off, err := rd.Next(ctx, false)
		if decisionlog.IsEnd(err) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("roll up log: %w", err)
		}
		r.Add(&d, off)
		if n%4096 == 4095 {
			if err := r.Flush(false, collect); err != nil {
				return nil, err
			}
			if progress != nil {
				progress(rd.Stats())
			}
		}
	}
	if err := r.Flush(true, collect); err != nil {
		return nil, err
	}
	if progress != nil {
		progress(rd.Stats())
	}
	for _, e := range rd.Problems() {
		if _, outside := errors.AsType[*decisionlog.OutsideError](e); outside {
			continue // no event of the range was there
		}
		w.Problems = append(w.Problems, Problem{Source: dir, Error: e.Error()})
	}
	return w, nil
}

// Alerts are the alert and action records of an alerts file.
type Alerts struct {
	Alerts   []alerts.Alert
	Actions  []alerts.Action
	Lines    int       // lines read
	Skipped  int       // lines that are not an alert or an action
	Problems []Problem // the first few skipped lines, with why
}

// maxProblems bounds the problems kept of one input; the rest are counted.
const maxProblems = 20

// ReadAlerts reads the JSON lines of alerts and actions (alerts.Alert,
// alerts.Action, told apart by "kind") from r, named name in problems.
// A line that is not one of them is skipped and counted; blank lines are
// ignored.
func ReadAlerts(r io.Reader, name string) (*Alerts, error) {
	a := &Alerts{}
	br := bufio.NewReaderSize(r, 64<<10)
	skip := func(err error) {
		a.Skipped++
		if len(a.Problems) < maxProblems {
			a.Problems = append(a.Problems, Problem{Source: name + ":" + strconv.Itoa(a.Lines), Error: err.Error()})
		}
	}
	var long []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: kept up to maxAlertLine,
			// skipped past it.
			if len(long) <= maxAlertLine {
				long = append(long, chunk...)
			}
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return a, fmt.Errorf("read alerts %s: line %d: %w", name, a.Lines+1, err)
		}
		line := chunk
		if long != nil {
			line = append(long, chunk...)
			long = nil
		}
		if len(line) > 0 {
			a.Lines++
			switch line = bytes.TrimSpace(line); {
			case len(line) > maxAlertLine:
				skip(fmt.Errorf("line longer than %d bytes", maxAlertLine))
			case len(line) > 0:
				if perr := a.add(line); perr != nil {
					skip(perr)
				}
			}
		}
		if err != nil {
			return a, nil
		}
	}
}

// maxAlertLine is the longest alerts line read; longer ones are skipped.
const maxAlertLine = 1 << 20

func (a *Alerts) add(line []byte) error {
	var head struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(line, &head); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	// Fields this build does not know are ignored: the records may gain
	// fields before the report learns them.
	strict := func(v any) error { return json.Unmarshal(line, v) }
	switch head.Kind {
	case "alert":
		var al alerts.Alert
		if err := strict(&al); err != nil {
			return fmt.Errorf("alert: %w", err)
		}
		if al.Time.IsZero() || al.Type == "" {
			return errors.New("alert: no time or type")
		}
		a.Alerts = append(a.Alerts, al)
	case "action":
		var ac alerts.Action
		if err := strict(&ac); err != nil {
			return fmt.Errorf("action: %w", err)
		}
		if ac.Time.IsZero() || ac.List == "" || ac.Target == "" {
			return errors.New("action: no time, list or target")
		}
		a.Actions = append(a.Actions, ac)
	default:
		return fmt.Errorf("kind %q: want alert or action", head.Kind)
	}
	return nil
}

// ReadAlertsFile is ReadAlerts of the file at path.
func ReadAlertsFile(path string) (*Alerts, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read alerts: %w", err)
	}
	defer f.Close()
	return ReadAlerts(f, path)
}

func sortedStarts(m map[time.Time]*aggregator.Partial) []time.Time {
	ks := make([]time.Time, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, time.Time.Compare)
	return ks
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
