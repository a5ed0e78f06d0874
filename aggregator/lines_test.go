package aggregator

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/stream"
)

// TestRunLines: JSON lines with corrupt ones roll up into the same
// partials as the decisions themselves; the corrupt lines (not JSON, a bad
// time, a time past 2262 that would wrap into 1816, a user id of 400 KB)
// are skipped, counted and named.
func TestRunLines(t *testing.T) {
	ds := decisiontest.NewGenerator(13, t0).Batch(2000)
	var in bytes.Buffer
	for i := range ds {
		if i == 10 {
			in.WriteString("{not json\n")
		}
		in.Write(decisions.AppendJSON(nil, &ds[i]))
		in.WriteByte('\n')
	}
	in.WriteString(`{"v":1,"time":"yesterday"}` + "\n")
	in.WriteString(`{"v":2,"time":"9999-12-31T23:59:59Z","outcome":"allow"}` + "\n")
	in.WriteString(`{"v":2,"time":"2026-12-01T03:00:00Z","outcome":"allow","user_id":"` + strings.Repeat("u", 400<<10) + `"}` + "\n")
	dir := t.TempDir()
	st, err := RunLines(context.Background(), &in, Options{Window: time.Second}, []Sink{&PartialsDir{Dir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped != 4 || len(st.First) != 4 || st.First[0].Line != 11 || st.First[1].Line != 2002 ||
		st.First[2].Line != 2003 || st.First[3].Line != 2004 {
		t.Fatalf("skipped %d: %+v", st.Skipped, st.First)
	}
	if e, _ := totals(t, dir, time.Second); e != uint64(len(ds)) {
		t.Fatalf("partials hold %d events, want %d", e, len(ds))
	}
}

// TestRunLinesLongLine: a 2 MiB line between valid ones is skipped,
// counted and named, and every other event is kept, the events before it
// included.
func TestRunLinesLongLine(t *testing.T) {
	ds := decisiontest.NewGenerator(14, t0).Batch(100)
	var in bytes.Buffer
	for i := range ds {
		if i == 50 {
			in.WriteString(`{"v":1,"path":"` + strings.Repeat("a", 2<<20) + "\"}\n")
		}
		in.Write(decisions.AppendJSON(nil, &ds[i]))
		in.WriteByte('\n')
	}
	dir := t.TempDir()
	var met []LineProblem
	l := &Lines{Rollup: Options{Window: time.Second}, Sinks: []Sink{&PartialsDir{Dir: dir}}, Now: standing,
		Problem: func(p LineProblem) { met = append(met, p) }}
	st, err := l.Run(context.Background(), &in)
	if err != nil {
		t.Fatal(err)
	}
	if st.Lines != 101 || st.Skipped != 1 || st.TooLong != 1 || len(st.First) != 1 || st.First[0].Line != 51 ||
		!errors.Is(st.First[0], ErrLineTooLong) || len(met) != 1 || met[0] != st.First[0] {
		t.Fatalf("lines %d, skipped %d (too long %d): %v; met %v", st.Lines, st.Skipped, st.TooLong, st.First, met)
	}
	if e, _ := totals(t, dir, time.Second); e != uint64(len(ds)) || st.Rollup.Events != uint64(len(ds)) {
		t.Fatalf("partials hold %d events, rolled up %d, want %d", e, st.Rollup.Events, len(ds))
	}
}

// TestRunLinesFlushesClosedWindows: windows the watermark closed leave
// before the end of the input, every FlushEvery lines while lines come,
// and on the clock's tick when the input is quiet, as from `tail -f`.
func TestRunLinesFlushesClosedWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pr, pw := io.Pipe()
		defer func() { pw.Close(); synctest.Wait() }() // ends Run on failure too
		s := &chanSink{outs: make(chan Output, 100)}
		l := &Lines{Rollup: Options{Window: time.Second, Lateness: 100 * time.Millisecond, Idle: time.Second}, Sinks: []Sink{s},
			FlushEvery: 10, Now: time.Now}
		done := startLines(l, pr)
		// Events of seconds 0 to 2 close the windows of seconds 0 and 1
		// (the watermark is 2.9 s less 100 ms).
		start := time.Now().Truncate(time.Second)
		for i := range 30 {
			d := decisionAt(0, "192.0.2.1")
			d.Time = start.Add(time.Duration(i) * 100 * time.Millisecond)
			pw.Write(append(decisions.AppendJSON(nil, &d), '\n'))
		}
		synctest.Wait()
		got := drain(s.outs)
		if len(got) != 2 || !got[0].Partial.Start.Equal(start) || !got[1].Partial.Start.Equal(start.Add(time.Second)) {
			t.Fatalf("before the end of the input, outputs %v; want the windows of seconds 0 and 1", starts(got))
		}
		// Quiet input: the watermark follows the clock, an Idle behind it,
		// and passes the end of second 2 at 4.1 s: its window leaves,
		// still before the end of the input.
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := drain(s.outs); len(got) != 1 || !got[0].Partial.Start.Equal(start.Add(2*time.Second)) {
			t.Fatalf("after a quiet spell, outputs %v; want the window of second 2", starts(got))
		}
		pw.Close()
		r := <-done
		if r.err != nil || r.st.Outputs != 3 || r.st.Rollup.Events != 30 {
			t.Fatalf("outputs %d, events %d, %v", r.st.Outputs, r.st.Rollup.Events, r.err)
		}
	})
}

// TestRunLinesSlowInputNotIdle: lines of an hour ago that keep coming,
// a line about every third of a second in writes that end inside a line (a
// slow pipe: `ssh host cat decisions.jsonl |`), are handed as each one
// is whole: the input is never a second without a line, so the
// watermark does not follow the clock, the window does not leave before
// its events, and none is late. Before, the lines read waited for the
// 512th or for a read that ended at a line's end, the input looked idle,
// and every event after the first was late.
func TestRunLinesSlowInputNotIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pr, pw := io.Pipe()
		defer func() { pw.Close(); synctest.Wait() }() // ends Run on failure too
		l := &Lines{Rollup: Options{Window: time.Minute, Idle: time.Second}, Sinks: []Sink{&countingSink{}}, Now: time.Now}
		done := startLines(l, pr)
		start := time.Now().Add(-time.Hour).Truncate(time.Minute)
		var in []byte
		for i := range 20 {
			d := decisionAt(0, "192.0.2.1")
			d.Time = start.Add(time.Duration(i) * time.Millisecond)
			in = append(decisions.AppendJSON(in, &d), '\n')
		}
		first := bytes.IndexByte(in, '\n') + 1
		pw.Write(in[:first])
		for rest := in[first:]; len(rest) > 0; {
			time.Sleep(100 * time.Millisecond)
			n := min(len(rest), 150)
			pw.Write(rest[:n])
			rest = rest[n:]
		}
		pw.Close()
		r := <-done
		if r.err != nil || r.st.Rollup.Events != 20 || r.st.Rollup.Late != 0 || r.st.Outputs != 1 {
			t.Fatalf("events %d, late %d, outputs %d, %v; want 20 events, none late, one output", r.st.Rollup.Events, r.st.Rollup.Late, r.st.Outputs, r.err)
		}
	})
}

// linesResult is what Lines.Run returned.
type linesResult struct {
	st  LinesStats
	err error
}

// startLines runs l over r and hands over what Run returns.
func startLines(l *Lines, r io.Reader) <-chan linesResult {
	done := make(chan linesResult, 1)
	go func() {
		st, err := l.Run(context.Background(), r)
		done <- linesResult{st, err}
	}()
	return done
}

// chanSink hands the outputs written to it over on a channel.
type chanSink struct{ outs chan Output }

func (s *chanSink) Write(_ context.Context, _ string, o Output) error { s.outs <- o; return nil }
func (s *chanSink) Flush(context.Context) error                       { return nil }

// TestRunLinesBlankAndLong: blank lines (empty, or white space alone) are
// counted apart, so that lines are blank, skipped and events; a line of
// MaxLine bytes is read whatever its line end, and one byte more is too
// long.
func TestRunLinesBlankAndLong(t *testing.T) {
	d := decisionAt(0, "192.0.2.1")
	line := decisions.AppendJSON(nil, &d)
	// A decision padded with white space inside its object to n bytes.
	padded := func(n int) string {
		return "{" + strings.Repeat(" ", n-len(line)) + string(line[1:])
	}
	var in strings.Builder
	for _, l := range []string{
		string(line) + "\n",
		"\n", "   \n", "\t\r\n", "\r\n", // blank
		padded(MaxLine) + "\r\n",   // read
		padded(MaxLine) + "\n",     // read
		padded(MaxLine+1) + "\n",   // too long
		padded(MaxLine+1) + "\r\n", // too long
		"x\n",                      // skipped
		string(line),               // the last, without its line end
	} {
		in.WriteString(l)
	}
	st, err := (&Lines{Sinks: []Sink{&countingSink{}}, Now: standing}).Run(context.Background(), strings.NewReader(in.String()))
	if err != nil {
		t.Fatal(err)
	}
	if st.Lines != 11 || st.Blank != 4 || st.Skipped != 3 || st.TooLong != 2 || st.Rollup.Events != 4 {
		t.Fatalf("lines %d (want 11), blank %d (4), skipped %d (3), too long %d (2), events %d (4): %v",
			st.Lines, st.Blank, st.Skipped, st.TooLong, st.Rollup.Events, st.First)
	}
	for i, want := range []int{8, 9, 10} {
		if st.First[i].Line != want {
			t.Errorf("problem %d at line %d, want %d", i, st.First[i].Line, want)
		}
	}
}

func drain(c chan Output) []Output {
	var out []Output
	for {
		select {
		case o := <-c:
			out = append(out, o)
		default:
			return out
		}
	}
}

func starts(outs []Output) []time.Time {
	var ts []time.Time
	for _, o := range outs {
		ts = append(ts, o.Partial.Start)
	}
	return ts
}

// FuzzRunLines: any input is read to its end without a panic; every line
// is counted once, as an event, a skipped line or an empty one, and every
// event reaches the sink.
func FuzzRunLines(f *testing.F) {
	d := decisionAt(0, "192.0.2.1")
	line := decisions.AppendJSON(nil, &d)
	f.Add(append(append([]byte{}, line...), '\n'))
	f.Add([]byte("{not json\r\n\n" + string(line)))
	f.Add([]byte("\n\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		s := &countingSink{}
		st, err := (&Lines{Sinks: []Sink{s}, Now: standing}).Run(context.Background(), bytes.NewReader(in))
		if err != nil {
			t.Fatal(err)
		}
		lines := bytes.Count(in, []byte("\n"))
		if len(in) > 0 && in[len(in)-1] != '\n' {
			lines++
		}
		blank := 0
		for l := range bytes.Lines(in) {
			if l := trimEOL(l); len(l) <= MaxLine && isBlank(l) {
				blank++
			}
		}
		if st.Lines != lines || st.Blank != blank || uint64(st.Skipped)+st.Rollup.Events+uint64(st.Blank) != uint64(lines) || s.events.Load() != st.Rollup.Events {
			t.Fatalf("lines %d (want %d), skipped %d, events %d, blank %d (want %d), sink %d", st.Lines, lines, st.Skipped, st.Rollup.Events, st.Blank, blank, s.events.Load())
		}
	})
}

// linesRecorder is a stream.Handler that records the batches of a
// LinesSource: the position of every decision handed over.
type linesRecorder struct {
	resume stream.Position
	spans  [][2]int64 // From, To
	at     map[int64]decisions.Decision
	closes []bool
	ctxErr error // of Close
}

func (r *linesRecorder) Open(context.Context, string, stream.Position) (stream.Position, error) {
	r.at = map[int64]decisions.Decision{}
	return r.resume, nil
}

func (r *linesRecorder) Handle(_ context.Context, b *stream.Batch) error {
	r.spans = append(r.spans, [2]int64{b.From.Sub, b.To.Sub})
	_, err := b.Rows(nil, func(rows *stream.Rows) error {
		for i := rows.Lo; i < len(rows.Events); i++ {
			if rows.Skip == nil || !rows.Skip[i] {
				r.at[rows.Pos.Sub+int64(i)] = rows.Events[i]
			}
		}
		return nil
	})
	return err
}

func (r *linesRecorder) Idle(context.Context, string) error { return nil }

func (r *linesRecorder) Close(ctx context.Context, _ string, ended bool) error {
	r.closes = append(r.closes, ended)
	r.ctxErr = ctx.Err()
	return nil
}

// failingReader reads r, then fails.
type failingReader struct{ r io.Reader }

var errRead = errors.New("device gone")

func (f failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		err = errRead
	}
	return n, err
}

// TestLinesSource: batches cover consecutive line numbers, at most
// BatchLines lines each; each decision is handed at its line's number, the
// empty, bad and long lines left out by the filter and counted; a read
// error ends the run with the lines before it delivered, the partition
// closed as ended, and the error naming the line.
func TestLinesSource(t *testing.T) {
	ds := decisiontest.NewGenerator(15, t0).Batch(20)
	var in bytes.Buffer
	want := map[int64]decisions.Decision{}
	line := int64(0)
	for i := range ds {
		switch i {
		case 3:
			in.WriteString("\n")
			line++
		case 7:
			in.WriteString("{not json\r\n")
			line++
		case 12:
			in.WriteString(`{"v":1,"path":"` + strings.Repeat("a", MaxLine) + "\"}\n")
			line++
		}
		in.Write(decisions.AppendJSON(nil, &ds[i]))
		in.WriteByte('\n')
		line++
		want[line] = ds[i]
	}
	var met []LineProblem
	src := &LinesSource{R: failingReader{&in}, BatchLines: 5, Problem: func(p LineProblem) { met = append(met, p) }}
	h := &linesRecorder{}
	err := src.Run(context.Background(), h)
	if !errors.Is(err, errRead) || !strings.Contains(err.Error(), "line 24") {
		t.Fatalf("Run: %v, want the read error at line 24", err)
	}
	if len(h.at) != len(want) {
		t.Errorf("%d decisions handed, want %d", len(h.at), len(want))
	}
	for l, d := range want {
		if !decisiontest.Equal(h.at[l], d) {
			t.Errorf("line %d: %s", l, decisiontest.Diff(h.at[l], d))
		}
	}
	next := int64(1)
	for _, s := range h.spans {
		if s[0] != next || s[1]-s[0] > 5 || s[1] <= s[0] {
			t.Errorf("batches %v: want consecutive spans of 1 to 5 lines from 1", h.spans)
			break
		}
		next = s[1]
	}
	if next != 24 {
		t.Errorf("batches end at %d, want 24", next)
	}
	st := src.Stats()
	if st.Lines != 23 || st.Skipped != 2 || st.TooLong != 1 || len(met) != 2 || met[0].Line != 9 || met[1].Line != 15 {
		t.Errorf("stats %+v, problems %v: want 23 lines, lines 9 and 15 skipped", st, met)
	}
	if !slices.Equal(h.closes, []bool{true}) || h.ctxErr != nil {
		t.Errorf("closes %v (%v), want one Close(ended)", h.closes, h.ctxErr)
	}
}

// TestLinesSourceBatchBytes: lines of large decisions (100 KiB paths)
// are handed in batches of at most DefaultLinesBatchBytes of lines, or of
// one line, not held until a batch has 4,096 lines (4 GiB of lines of
// up to MaxLine); every decision is handed once.
func TestLinesSourceBatchBytes(t *testing.T) {
	ds := decisiontest.NewGenerator(17, t0).Batch(200)
	var in bytes.Buffer
	size := []int{0} // size[l]: the bytes of line l
	for i := range ds {
		ds[i].Path = "/" + strings.Repeat("p", 100<<10)
		n := in.Len()
		in.Write(decisions.AppendJSON(nil, &ds[i]))
		in.WriteByte('\n')
		size = append(size, in.Len()-n)
	}
	h := &linesRecorder{}
	if err := (&LinesSource{R: &in}).Run(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	for _, s := range h.spans {
		n := 0
		for l := s[0]; l < s[1]; l++ {
			n += size[l]
		}
		if n > (4<<20) && s[1]-s[0] > 1 {
			t.Errorf("lines %d to %d, %d bytes, in one batch; want at most %d bytes", s[0], s[1]-1, n, DefaultLinesBatchBytes)
		}
	}
	if len(h.at) != len(ds) {
		t.Errorf("%d decisions handed, want %d", len(h.at), len(ds))
	}
}

// TestLinesSourceResume: a position the handler returns from Open leaves
// the lines before it out.
func TestLinesSourceResume(t *testing.T) {
	ds := decisiontest.NewGenerator(16, t0).Batch(10)
	var in bytes.Buffer
	for i := range ds {
		in.Write(decisions.AppendJSON(nil, &ds[i]))
		in.WriteByte('\n')
	}
	h := &linesRecorder{resume: stream.Position{Sub: 7}}
	if err := (&LinesSource{R: &in}).Run(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	if len(h.at) != 4 || !decisiontest.Equal(h.at[7], ds[6]) {
		t.Errorf("handed lines %v, want 7 to 10", slices.Sorted(maps.Keys(h.at)))
	}
}

// TestRunLinesForgedDrops: a drops event claiming more than
// decisions.MaxDropped (2^64-1, which would wrap a window's sum into a
// small one, or the cap plus one) is a corrupt line: skipped, counted and
// named; the cap itself and the other events are counted.
func TestRunLinesForgedDrops(t *testing.T) {
	drops := func(n uint64) string {
		d := decisions.Decision{Kind: decisions.KindDrops, Time: t0, Node: "edge-1", Reason: "decision queue full", Dropped: n}
		return string(decisions.AppendJSON(nil, &d)) + "\n"
	}
	in := strings.NewReader(drops(5) + drops(1<<64-1) + drops(decisions.MaxDropped) + drops(decisions.MaxDropped+1) + drops(7))
	dir := t.TempDir()
	st, err := RunLines(context.Background(), in, Options{Window: time.Second}, []Sink{&PartialsDir{Dir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped != 2 || len(st.First) != 2 || st.First[0].Line != 2 || st.First[1].Line != 4 ||
		!strings.Contains(st.First[0].Error(), "dropped 18446744073709551615, at most 1099511627776") {
		t.Fatalf("skipped %d: %v", st.Skipped, st.First)
	}
	ps, problems, err := (&PartialsDir{Dir: dir}).Read(t.Context(), time.Second, time.Time{}, t0.Add(time.Hour))
	if err != nil || len(problems) > 0 || len(ps) != 1 {
		t.Fatal(err, problems, len(ps))
	}
	if p, want := ps[t0], uint64(decisions.MaxDropped+12); p == nil || p.Counts.Dropped != want || p.Events != 3 {
		t.Errorf("window: %+v; want 3 events, %d dropped", p, want)
	}
}

// TestRunLogForgedDrops: in the log's columnar records, a drops event over
// decisions.MaxDropped makes its record corrupt: skipped, counted as
// undecodable and reported, and the records around it are read.
func TestRunLogForgedDrops(t *testing.T) {
	ds := testEvents(1500)
	ds[700] = decisions.Decision{Kind: decisions.KindDrops, Time: ds[700].Time, Node: "edge-1", Reason: "decision queue full", Dropped: 1<<64 - 1}
	logDir := filepath.Join(t.TempDir(), "log")
	writeLog(t, logDir, ds) // records of 500: the second holds the forged event
	var problems []error
	out := t.TempDir()
	st, err := RunLog(context.Background(), LogOptions{Dir: logDir, StateDir: t.TempDir(),
		Rollup: Options{Window: time.Second, Lateness: 100 * time.Millisecond}, Sinks: []Sink{&PartialsDir{Dir: out}},
		Problem: func(err error) { problems = append(problems, err) }})
	if err != nil {
		t.Fatal(err)
	}
	if st.Read.BadBatch != 1 || st.Read.BadEvents != 500 || st.Rollup.Events != 1000 {
		t.Fatalf("bad records %d, bad events %d, rolled up %d; want 1, 500 and 1000", st.Read.BadBatch, st.Read.BadEvents, st.Rollup.Events)
	}
	if len(problems) != 1 || !strings.Contains(problems[0].Error(), "column dropped: row 200: dropped 18446744073709551615, at most 1099511627776") {
		t.Fatalf("problems %v", problems)
	}
	if e, _ := totals(t, out, time.Second); e != 1000 {
		t.Errorf("partials hold %d events, want 1000", e)
	}
}

// TestAddDroppedSaturates: sums of dropped counts, stored partials merged
// and a batch's drops events, stop at the largest uint64 rather than wrap
// into a small loss.
func TestAddDroppedSaturates(t *testing.T) {
	a, b := &Counts{Dropped: 1<<64 - 10}, &Counts{Dropped: 20}
	if err := a.Merge(b, MergeOverlapping); err != nil || a.Dropped != 1<<64-1 {
		t.Errorf("merge: %d, %v; want %d", a.Dropped, err, uint64(1<<64-1))
	}
	c := &Counts{Dropped: 1<<64 - 3}
	c.Update(&decisions.Decision{Kind: decisions.KindDrops, Dropped: decisions.MaxDropped})
	if c.Dropped != 1<<64-1 {
		t.Errorf("update: %d", c.Dropped)
	}
	ds := []decisions.Decision{{Kind: decisions.KindDrops, Time: t0, Dropped: decisions.MaxDropped}}
	c = &Counts{Dropped: 1<<64 - 3}
	eachBatch(t, ds, 1, func(b *Batch) { c.UpdateColumns(b, 0, b.Len()) })
	if c.Dropped != 1<<64-1 {
		t.Errorf("update columns: %d", c.Dropped)
	}
}

// hungSink is a sink whose writes and flushes wait for their context to
// end: a network peer that is not there.
type hungSink struct{}

func (hungSink) Write(ctx context.Context, _ string, _ Output) error { <-ctx.Done(); return ctx.Err() }
func (hungSink) Flush(ctx context.Context) error                     { <-ctx.Done(); return ctx.Err() }

// TestRunLinesStopGrace: told to stop (Ctrl-C) with a sink that never
// takes the open windows, Run gives up after Grace and says why, where it
// used to wait for ever.
func TestRunLinesStopGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pr, pw := io.Pipe()
		defer pw.Close() // ends the read Run leaves behind
		ctx, cancel := context.WithCancel(context.Background())
		const grace = 3 * time.Second
		l := &Lines{Rollup: Options{Window: time.Second}, Sinks: []Sink{hungSink{}}, Grace: grace, Now: time.Now}
		done := make(chan error, 1)
		go func() {
			_, err := l.Run(ctx, pr)
			done <- err
		}()
		for range 10 {
			d := decisionAt(0, "192.0.2.1")
			d.Time = time.Now()
			pw.Write(append(decisions.AppendJSON(nil, &d), '\n'))
		}
		synctest.Wait()
		start := time.Now()
		cancel()
		err := <-done
		if took := time.Since(start); took != grace {
			t.Errorf("Run returned %v after the stop, want the grace, %v", took, grace)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v, want the sink's error at the end of the grace", err)
		}
	})
}
