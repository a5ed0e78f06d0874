package aggregator

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// MaxLine bounds one JSON line. A decision's line is a few KiB at most: the
// edge bounds what it records (a canonical path is at most 8 KiB,
// canonpath.MaxLen, and request headers are bounded), so a longer line is
// not one the edge wrote; it is skipped, counted and named, and the lines
// after it are read.
const MaxLine = 1 << 20

// ErrLineTooLong is the error of a line longer than MaxLine.
var ErrLineTooLong = fmt.Errorf("line longer than %d bytes", MaxLine)

// LineProblem is a line RunLines skipped.
type LineProblem struct {
	Line int
	Err  error
}

// Error names the line and says what was wrong with it.
func (p LineProblem) Error() string { return fmt.Sprintf("line %d: %v", p.Line, p.Err) }

// Unwrap returns p.Err.
func (p LineProblem) Unwrap() error { return p.Err }

// LinesStats are what RunLines did.
type LinesStats struct {
	Rollup  RollupStats
	Lines   int           // lines read
	Skipped int           // lines that were not decisions, skipped
	TooLong int           // of them, lines longer than MaxLine
	First   []LineProblem // the first 100 of them
	Outputs uint64
}

// Lines rolls up decisions read as JSON lines (as `ratewarden decisions
// cat` and edge.decisions_file write them), a live source: closed windows
// leave every FlushEvery lines, and when the input is quiet the watermark
// follows the clock (Rollup.Advance), so that `tail -f` of a decisions
// file is emitted window by window. The zero value is not usable: Sinks
// are required.
type Lines struct {
	Rollup Options
	Sinks  []Sink
	// FlushEvery is how many lines are read between flushes of the
	// windows the watermark closed; default 4096.
	FlushEvery int
	// Now reads the wall clock, for the idle watermark only; default
	// time.Now.
	Now func() time.Time
	// Tick is how often, while no line arrives, the idle watermark is
	// advanced and closed windows flushed; default 200 ms.
	Tick time.Duration
	// Problem, if set, is called with each skipped line as it is met (the
	// first 100 are kept in LinesStats.First; all are counted).
	Problem func(LineProblem)
}

// RunLines is (&Lines{Rollup: o, Sinks: sinks}).Run(ctx, r).
func RunLines(ctx context.Context, r io.Reader, o Options, sinks []Sink) (LinesStats, error) {
	return (&Lines{Rollup: o, Sinks: sinks}).Run(ctx, r)
}

// lineBatch is lines read in one go: line first+i is data[ends[i-1]:ends[i]],
// or too long when tooLong[i].
type lineBatch struct {
	first   int
	data    []byte
	ends    []int
	tooLong []bool
	err     error // the read's end (io.EOF) or failure, after the lines
}

// maxBatch bounds the lines of a lineBatch.
const maxBatch = 512

// Run reads r to its end and delivers every window. A line that is not a
// decision, or is longer than MaxLine, is skipped, counted and reported
// with its number; the rest is read. Lines carry no position a restart
// could resume from, so Run keeps no state: outputs are keyed by line
// numbers (partition "stdin"). When ctx is done Run delivers the open
// windows and returns, as at the end of the input; a read of r that blocks is left behind
// (r is standard input, which the process's exit closes).
func (l *Lines) Run(ctx context.Context, r io.Reader) (LinesStats, error) {
	const partition = "stdin"
	every, tick, now := l.FlushEvery, l.Tick, l.Now
	if every <= 0 {
		every = 4096
	}
	if tick <= 0 {
		tick = 200 * time.Millisecond
	}
	if now == nil {
		now = time.Now
	}
	ro := NewRollup(l.Rollup)
	var st LinesStats
	var errs []error
	flush := func(ctx context.Context, final bool) {
		ro.Flush(final, func(out Output) error {
			for _, s := range l.Sinks {
				errs = append(errs, s.Write(ctx, partition, out))
			}
			st.Outputs++
			return nil
		})
		for _, s := range l.Sinks {
			errs = append(errs, s.Flush(ctx))
		}
	}
	skip := func(p LineProblem) {
		st.Skipped++
		if len(st.First) < 100 {
			st.First = append(st.First, p)
		}
		if l.Problem != nil {
			l.Problem(p)
		}
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	batches := make(chan *lineBatch, 1)
	go readLines(rctx, r, batches)
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	var rerr error
	sinceFlush := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-ticker.C:
			ro.Advance(now())
			flush(ctx, false)
		case b := <-batches:
			start := 0
			for i, end := range b.ends {
				line := b.data[start:end]
				start = end
				st.Lines = b.first + i
				switch {
				case b.tooLong[i]:
					st.TooLong++
					skip(LineProblem{st.Lines, ErrLineTooLong})
					continue
				case len(line) == 0:
					continue
				}
				d, _, err := decisions.ParseJSON(line)
				if err != nil {
					skip(LineProblem{st.Lines, err})
					continue
				}
				ro.Add(&d, uint64(st.Lines))
			}
			if sinceFlush += len(b.ends); sinceFlush >= every {
				sinceFlush = 0
				flush(ctx, false)
			}
			if b.err != nil {
				if !errors.Is(b.err, io.EOF) {
					rerr = fmt.Errorf("read lines: line %d: %w", st.Lines+1, b.err)
				}
				break loop
			}
		}
	}
	// What was read is delivered, whatever ended the input: a clean
	// shutdown delivers with the context that is not done.
	flush(context.WithoutCancel(ctx), true)
	st.Rollup = ro.Stats()
	return st, errors.Join(append(errs, rerr)...)
}

// readLines reads r's lines into batches, sent on out, until the end of r
// or a read error, which ends the last batch, or until ctx is done. A
// batch goes as soon as no more input is buffered, so that a quiet live
// source hands over what it has.
func readLines(ctx context.Context, r io.Reader, out chan<- *lineBatch) {
	br := bufio.NewReaderSize(r, MaxLine+1)
	line := 1
	for {
		b := &lineBatch{first: line}
		for len(b.ends) < maxBatch {
			s, err := br.ReadSlice('\n')
			long := false
			for errors.Is(err, bufio.ErrBufferFull) {
				long = true // skip the rest of the line
				s, err = br.ReadSlice('\n')
			}
			if len(s) > 0 || long {
				if long {
					s = nil
				}
				s = trimEOL(s)
				b.data = append(b.data, s...)
				b.ends = append(b.ends, len(b.data))
				b.tooLong = append(b.tooLong, long)
				line++
			}
			if err != nil {
				b.err = err
				break
			}
			if br.Buffered() == 0 {
				break
			}
		}
		select {
		case out <- b:
		case <-ctx.Done():
			return
		}
		if b.err != nil {
			return
		}
	}
}

// trimEOL returns s without its line end ("\n" or "\r\n").
func trimEOL(s []byte) []byte {
	if n := len(s); n > 0 && s[n-1] == '\n' {
		s = s[:n-1]
		if n := len(s); n > 0 && s[n-1] == '\r' {
			s = s[:n-1]
		}
	}
	return s
}
