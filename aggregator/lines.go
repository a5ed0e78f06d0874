package aggregator

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/ratewarden/ratewarden/decisions"
)

// maxLine bounds one JSON line; a decision is well under 2 KiB.
const maxLine = 1 << 20

// LineProblem is a line RunLines skipped.
type LineProblem struct {
	Line int
	Err  error
}

// LinesStats are what RunLines did.
type LinesStats struct {
	Rollup  RollupStats
	Lines   int           // lines read
	Skipped int           // lines that were not decisions, skipped
	First   []LineProblem // the first 100 of them
	Outputs uint64
}

// RunLines rolls up decisions read as JSON lines from r (as `ratewarden
// decisions cat` and edge.decisions_file write them) and delivers every
// window to sinks at the end of the input. A line that is not a decision is
// skipped, counted and reported with its number; the rest is read. Lines
// carry no position a restart could resume from, so RunLines keeps no
// state: outputs are keyed by line numbers (partition "stdin").
func RunLines(ctx context.Context, r io.Reader, o Options, sinks []Sink) (LinesStats, error) {
	const partition = "stdin"
	ro := NewRollup(o)
	var st LinesStats
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		st.Lines++
		if len(sc.Bytes()) == 0 {
			continue
		}
		d, _, err := decisions.ParseJSON(sc.Bytes())
		if err != nil {
			st.Skipped++
			if len(st.First) < 100 {
				st.First = append(st.First, LineProblem{st.Lines, err})
			}
			continue
		}
		ro.Add(&d, uint64(st.Lines))
		if st.Lines%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return st, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return st, fmt.Errorf("read lines: line %d: %w", st.Lines+1, err)
	}
	var errs []error
	ro.Flush(true, func(out Output) error {
		for _, s := range sinks {
			errs = append(errs, s.Write(ctx, partition, out))
		}
		st.Outputs++
		return nil
	})
	for _, s := range sinks {
		errs = append(errs, s.Flush(ctx))
	}
	st.Rollup = ro.Stats()
	return st, errors.Join(errs...)
}
