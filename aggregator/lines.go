package aggregator

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/stream"
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
	Lines   int           // lines read: Blank, Skipped and the events rolled up (Rollup.Events) add up to them
	Blank   int           // lines empty or of white space alone, passed over (not problems)
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
	// Now reads the wall clock, for the idle watermark and as the bound of
	// the events read (see RunOptions.Now); default time.Now.
	Now func() time.Time
	// Tick is how often, while no line arrives, the idle watermark is
	// advanced and closed windows flushed; default 200 ms.
	Tick time.Duration
	// Problem, if set, is called with each skipped line as it is met (the
	// first 100 are kept in LinesStats.First; all are counted).
	Problem func(LineProblem)
	// Grace bounds the last delivery once ctx is done; default
	// DefaultGrace (LinesSource.Grace).
	Grace time.Duration
}

// RunLines is (&Lines{Rollup: o, Sinks: sinks}).Run(ctx, r).
func RunLines(ctx context.Context, r io.Reader, o Options, sinks []Sink) (LinesStats, error) {
	return (&Lines{Rollup: o, Sinks: sinks}).Run(ctx, r)
}

// LinesPartition is the partition of decisions read as JSON lines.
const LinesPartition = "stdin"

// DefaultLinesBatchBytes is a LinesSource's default BatchBytes: 4,096
// lines of the edge's decisions are about 2.5 MB.
const DefaultLinesBatchBytes = 4 << 20

// DefaultGrace is how long decisions read as lines are still delivered
// after the run's context ends (Ctrl-C), by default: what was read and
// the open windows go out, unless a sink holds them up that long.
const DefaultGrace = 30 * time.Second

// LinesSource serves decisions read as JSON lines to a stream.Handler, as
// partition LinesPartition, whose positions are line numbers (the first
// line is 1). A batch's Events hold one decision per line, from From;
// those of lines that are blank (empty or of JSON's white space alone),
// not decisions or longer than MaxLine are zero and left out by the
// batch's Filter; the source counts the first as Blank, and counts, keeps
// and reports the others as LineProblems. A batch is valid until
// Handle returns. The zero value is not usable: R is required.
//
// A LinesSource is not safe for concurrent use; Stats may be called from
// the handler's methods during Run, and after it.
type LinesSource struct {
	R io.Reader
	// BatchLines is how many lines a batch holds at most: a batch goes
	// when it holds that many, when no more input is buffered (a live
	// source hands over what it has), before each Idle and at the end;
	// default 4096.
	BatchLines int
	// BatchBytes bounds the bytes of a batch's lines: a batch goes before
	// a line that would take it past them (a longer line is a batch of
	// its own), and the lines read ahead of the batches are bounded
	// alike, so that lines up to MaxLine long cannot make a batch of
	// BatchLines hold gigabytes. Default DefaultLinesBatchBytes.
	BatchBytes int
	// Tick is how often the handler's Idle is called, so that its
	// watermark follows the clock while the input is quiet; default
	// 200 ms.
	Tick time.Duration
	// Problem, if set, is called with each skipped line as it is met (the
	// first 100 are kept in LinesStats.First; all are counted).
	Problem func(LineProblem)
	// Grace is how long, once ctx is done, what was read and the open
	// windows are still handed over; the handler's context then ends, so
	// that a sink that cannot deliver (a hung network peer) does not keep
	// the run from ending. Default DefaultGrace.
	Grace time.Duration

	stats  LinesStats
	events []decisions.Decision
	skip   []bool
	bytes  int // of the lines of events
}

// Stats returns what the source read so far: Lines, Blank, Skipped,
// TooLong and First (Rollup and Outputs are the handler's).
func (s *LinesSource) Stats() LinesStats { return s.stats }

// Run reads R to its end and hands its lines to h in batches, then closes
// the partition as ended (h.Close) and returns the error of reading R, if
// any, with Close's. Lines carry no position a restart could resume from:
// a position h.Open returns skips the lines before it. When ctx is done
// Run hands over what it read and closes the partition as ended, with a
// context that is not done (a clean shutdown emits what is open); a read
// of R that blocks is left behind (R is standard input, which the
// process's exit closes). That context ends Grace after ctx does. An
// error from h is returned as it is.
func (s *LinesSource) Run(ctx context.Context, h stream.Handler) error {
	final, cancel := outlive(ctx, cmp.Or(s.Grace, DefaultGrace))
	defer cancel()
	every, tick, size := s.BatchLines, s.Tick, s.BatchBytes
	if every <= 0 {
		every = 4096
	}
	if size <= 0 {
		size = DefaultLinesBatchBytes
	}
	if tick <= 0 {
		tick = 200 * time.Millisecond
	}
	from, err := h.Open(ctx, LinesPartition, stream.Position{})
	if err != nil {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	chunks := make(chan *lineBatch, 1)
	go readLines(rctx, s.R, size, chunks)
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	pos := stream.Position{Sub: 1}
	s.events, s.skip, s.bytes = s.events[:0], s.skip[:0], 0
	hand := func(ctx context.Context) error {
		if len(s.events) == 0 {
			return nil
		}
		b := s.batch(pos, from)
		pos = b.To
		err := h.Handle(ctx, b)
		s.events, s.skip, s.bytes = s.events[:0], s.skip[:0], 0
		return err
	}
	var rerr error
	for {
		select {
		case <-ctx.Done():
			// What was read goes in before the open windows go out.
			ctx = final
			if err := hand(ctx); err != nil {
				return err
			}
			return h.Close(ctx, LinesPartition, true)
		case <-ticker.C:
			if err := hand(ctx); err != nil {
				return err
			}
			if err := h.Idle(ctx, LinesPartition); err != nil {
				return err
			}
		case c := <-chunks:
			if c.err != nil {
				// What was read is delivered, whatever ended the input.
				ctx = final
			}
			if err := s.parse(c, every, size, func() error { return hand(ctx) }); err != nil {
				return err
			}
			if c.err != nil && !errors.Is(c.err, io.EOF) {
				rerr = fmt.Errorf("read lines: line %d: %w", s.stats.Lines+1, c.err)
			}
			if c.more && c.err == nil {
				continue
			}
			if err := hand(ctx); err != nil {
				return err
			}
			if c.err != nil {
				return errors.Join(rerr, h.Close(ctx, LinesPartition, true))
			}
		}
	}
}

// parse adds a chunk's lines to the batch being made, as decisions or as
// lines left out, and calls full whenever the batch holds every lines, or
// before a line that would take its lines past size bytes.
func (s *LinesSource) parse(c *lineBatch, every, size int, full func() error) error {
	start := 0
	for i, end := range c.ends {
		line := c.data[start:end]
		start = end
		if len(s.events) >= every || len(s.events) > 0 && s.bytes+len(line) > size {
			if err := full(); err != nil {
				return err
			}
		}
		s.stats.Lines = c.first + i
		var d decisions.Decision
		var err error
		blank := false
		switch {
		case c.tooLong[i]:
			s.stats.TooLong++
			err = ErrLineTooLong
		case isBlank(line):
			s.stats.Blank++
			blank = true
		default:
			d, _, err = decisions.ParseJSON(line)
		}
		if err != nil {
			s.skipped(LineProblem{s.stats.Lines, err})
		}
		s.events = append(s.events, d)
		s.skip = append(s.skip, err != nil || blank)
		s.bytes += len(line)
	}
	return nil
}

// isBlank reports whether line holds nothing but JSON's white space
// (space, tab, carriage return), as a blank line between JSON lines.
func isBlank(line []byte) bool { return len(bytes.Trim(line, " \t\r")) == 0 }

// skipped counts, keeps and reports a line left out.
func (s *LinesSource) skipped(p LineProblem) {
	s.stats.Skipped++
	if len(s.stats.First) < 100 {
		s.stats.First = append(s.stats.First, p)
	}
	if s.Problem != nil {
		s.Problem(p)
	}
}

// batch returns the batch of the lines read, the first at pos, leaving out
// those before from.
func (s *LinesSource) batch(pos, from stream.Position) *stream.Batch {
	skip := s.skip
	for i := range skip {
		skip[i] = skip[i] || pos.Sub+int64(i) < from.Sub
	}
	if !slices.Contains(skip, true) {
		skip = nil
	}
	b := &stream.Batch{Partition: LinesPartition, From: pos, To: stream.Position{Sub: pos.Sub + int64(len(s.events))}, Events: s.events}
	b.Filter = func(rows columnar.Rows, first stream.Position) []bool {
		if skip == nil {
			return nil
		}
		lo := first.Sub - pos.Sub
		return skip[lo : lo+int64(rows.Len())]
	}
	return b
}

// Run reads r to its end and delivers every window: Run over a
// LinesSource. A line that is not a decision, or is longer than MaxLine,
// is skipped, counted and reported with its number; the rest is read.
// Lines carry no position a restart could resume from, so Run keeps no
// state: outputs are keyed by line numbers (partition LinesPartition).
// When ctx is done Run delivers the open windows and returns, as at the
// end of the input, giving up after Grace; a read of r that blocks is left behind (r is standard
// input, which the process's exit closes). An output a sink fails to take
// does not stop the run, which cannot read its input again: the errors
// are returned at the end.
func (l *Lines) Run(ctx context.Context, r io.Reader) (LinesStats, error) {
	src := &LinesSource{R: r, BatchLines: l.FlushEvery, Tick: l.Tick, Problem: l.Problem, Grace: l.Grace}
	var errs []error
	sinks := make([]Sink, len(l.Sinks))
	for i, s := range l.Sinks {
		sinks[i] = keepGoing{s, &errs}
	}
	h, err := newPartitions(RunOptions{Store: noState{}, Rollup: l.Rollup, Sinks: sinks, Now: l.Now})
	if err != nil {
		return LinesStats{}, err
	}
	run := &onePartition{Handler: h, h: h}
	err = src.Run(ctx, run)
	st, rs := src.Stats(), run.stats()
	st.Rollup, st.Outputs = rs.Rollup, rs.Outputs
	return st, errors.Join(append(errs, err)...)
}

// outlive returns a context that is not done when ctx is, but grace after
// it: the last delivery of a run that is told to stop, bounded.
func outlive(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	octx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	timer := make(chan *time.Timer, 1)
	stop := context.AfterFunc(ctx, func() {
		timer <- time.AfterFunc(grace, func() {
			cancel(fmt.Errorf("the shutdown grace of %v is over: %w", grace, context.DeadlineExceeded))
		})
	})
	return octx, func() {
		if !stop() {
			if t := <-timer; t != nil {
				t.Stop()
			}
		}
		cancel(context.Canceled)
	}
}

// keepGoing is a Sink that keeps the errors of s rather than return them.
type keepGoing struct {
	s    Sink
	errs *[]error
}

func (k keepGoing) Write(ctx context.Context, partition string, o Output) error {
	if err := k.s.Write(ctx, partition, o); err != nil {
		*k.errs = append(*k.errs, err)
	}
	return nil
}

func (k keepGoing) Flush(ctx context.Context) error {
	if err := k.s.Flush(ctx); err != nil {
		*k.errs = append(*k.errs, err)
	}
	return nil
}

// noState is the StateStore of a source that cannot be read again
// (standard input): it keeps nothing, and a partition saves no snapshot
// to it (partitionRun.save).
type noState struct{}

func (noState) Load(context.Context, string) (State, bool, error) { return State{}, false, nil }
func (noState) Save(context.Context, string, State) error         { return nil }

// lineBatch is lines read in one go: line first+i is data[ends[i-1]:ends[i]],
// or too long when tooLong[i].
type lineBatch struct {
	first   int
	data    []byte
	ends    []int
	tooLong []bool
	more    bool  // a whole line more was buffered: the chunk ended at maxBatch lines or its size
	err     error // the read's end (io.EOF) or failure, after the lines
}

// maxBatch bounds the lines of a lineBatch.
const maxBatch = 512

// readLines reads r's lines into batches, sent on out, until the end of r
// or a read error, which ends the last batch, or until ctx is done. A
// batch goes as soon as no whole line is buffered, so that a live source
// hands over what it has before a read that waits for input (one that
// pauses, or a slow pipe whose reads end inside a line), or once it holds
// size bytes or more.
func readLines(ctx context.Context, r io.Reader, size int, out chan<- *lineBatch) {
	br := bufio.NewReaderSize(r, MaxLine+2) // a line of MaxLine bytes and "\r\n"
	line := 1
	for {
		b := &lineBatch{first: line}
		whole := false // br holds a whole line: reading it does not wait
		for len(b.ends) < maxBatch && len(b.data) < size {
			s, err := br.ReadSlice('\n')
			long := false
			for errors.Is(err, bufio.ErrBufferFull) {
				long = true // skip the rest of the line
				s, err = br.ReadSlice('\n')
			}
			if len(s) > 0 || long {
				if s = trimEOL(s); len(s) > MaxLine {
					long = true // a line of MaxLine+1 bytes and "\n" fits the buffer
				}
				if long {
					s = nil
				}
				b.data = append(b.data, s...)
				b.ends = append(b.ends, len(b.data))
				b.tooLong = append(b.tooLong, long)
				line++
			}
			if err != nil {
				b.err = err
				break
			}
			if whole = lineBuffered(br); !whole {
				break // what was read goes before a read that may wait
			}
		}
		b.more = b.err == nil && whole
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

// lineBuffered reports whether br holds a whole line.
func lineBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	return bytes.IndexByte(b, '\n') >= 0
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
