package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/ratewarden/ratewarden/aggregator/report"
	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/internal/atomicfile"
)

// reportFlags are the source and output flags report and whatif share.
type reportFlags struct {
	from, to *timeFlag
	format   *string
	out      *string
	title    *string
	top      *int
}

func addReportFlags(fs *flag.FlagSet, title string) *reportFlags {
	now := onceNow()
	f := &reportFlags{from: &timeFlag{now: now}, to: &timeFlag{now: now}}
	fs.Var(f.from, "from", "start of the range: `T` as RFC 3339, \"now\", or a duration before now (24h or -24h)")
	fs.Var(f.to, "to", "end of the range (excluded), `T` as --from; default now")
	f.format = fs.String("format", "md", "output `format`: md, html, json or csv")
	f.out = fs.String("out", "", "write to `file` (replaced whole when complete; untouched on error) instead of standard output")
	f.title = fs.String("title", title, "the report's `title`")
	f.top = fs.Int("top", 10, "rows of each top table (`n`; 0: every row)")
	return f
}

// write writes b to --out atomically, or to stdout.
func (f *reportFlags) write(stdout io.Writer, b []byte) error {
	if *f.out == "" {
		_, err := stdout.Write(b)
		return err
	}
	return atomicfile.Write(*f.out, b, 0o644)
}

// checkOut refuses an --out that names a directory: the report would be
// made, then fail to replace it.
func (f *reportFlags) checkOut() error {
	if *f.out == "" {
		return nil
	}
	if fi, err := os.Stat(*f.out); err == nil && fi.IsDir() {
		return badFlag(fmt.Errorf("--out %s is a directory: want the report's file, such as %s", *f.out, filepath.Join(*f.out, "report."+*f.format)))
	}
	return nil
}

// rangeOrDefault returns the range, --to defaulting to now, and refuses
// one whose --from is missing or not before --to.
func (f *reportFlags) rangeOrDefault() (time.Time, time.Time, error) {
	to := f.to.t
	if to.IsZero() {
		to = f.to.now()
	}
	if f.from.t.IsZero() {
		return time.Time{}, time.Time{}, badFlag(fmt.Errorf("--from is required"))
	}
	if err := checkRange("from", f.from.t, "to", to); err != nil {
		return time.Time{}, time.Time{}, err
	}
	return f.from.t, to, nil
}

// rows returns --top as the reports take it, 0 meaning every row
// (report.AllRows), and refuses a negative one.
func (f *reportFlags) rows() (int, error) {
	switch {
	case *f.top < 0:
		return 0, badFlag(fmt.Errorf("--top %d: want 0 (every row) or more", *f.top))
	case *f.top == 0:
		return report.AllRows, nil
	}
	return *f.top, nil
}

// checkRange refuses a range whose start, the flag named startFlag, is not
// before its end, endFlag, as bad flags (badFlag) naming both and their
// values: such a range holds nothing, and reading it would say so only as
// an empty result. A zero time is an end not given, and fits any range.
func checkRange(startFlag string, start time.Time, endFlag string, end time.Time) error {
	if start.IsZero() || end.IsZero() || start.Before(end) {
		return nil
	}
	return badFlag(fmt.Errorf("--%s %s is not before --%s %s", startFlag, start.UTC().Format(time.RFC3339Nano), endFlag, end.UTC().Format(time.RFC3339Nano)))
}

// runReport makes the abuse report of a time range (package report).
func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("report", "report --from T [--to T] (--partials dir:PATH|dynamodb:TABLE | --decisions-dir DIR) [--alerts FILE] [--format md|html|json|csv] [--out FILE] [flags]", stderr)
	partials := fs.String("partials", "", "read the stored partial aggregates from `store`: "+assemble.PartialsSpecs+" (as aggregate --partials wrote them)")
	dir := fs.String("decisions-dir", "", "or roll the decision log `directory` up on the fly, in memory, with the aggregator's own code")
	alertsFile := fs.String("alerts", "", "JSON lines `file` of alerts and feedback actions to include")
	rf := addReportFlags(fs, "Abuse report")
	opts := rollupFlags(fs)
	opts.cfgPath = fs.String("config", "", "with --decisions-dir: the edges' configuration `file`, whose identity.ipv6_prefix an IPv6 client is counted by, as the edge counts it (without it, by its /64)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if (*partials == "") == (*dir == "") || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	if *partials != "" && *opts.cfgPath != "" {
		return badFlag(errors.New("report: --config with --partials: the stored partials hold their clients as they were rolled up; --config is for --decisions-dir"))
	}
	format, err := report.ParseFormat(*rf.format)
	if err != nil {
		return badFlag(fmt.Errorf("--%w", err))
	}
	if err := rf.checkOut(); err != nil {
		return err
	}
	_, ro, err := opts.options()
	if err != nil {
		return err
	}
	if *partials != "" {
		if err := assemble.CheckPartialsSpec(*partials); err != nil {
			return badFlag(err)
		}
	}
	from, to, err := rf.rangeOrDefault()
	if err != nil {
		return err
	}
	top, err := rf.rows()
	if err != nil {
		return err
	}
	job := &report.Job{DecisionsDir: *dir, Rollup: ro, AlertsFile: *alertsFile, Format: format,
		Options: report.Options{From: from, To: to, Title: *rf.title, Top: top}}
	if *partials != "" {
		s, err := assemble.Partials(ctx, *partials)
		if err != nil {
			return err
		}
		job.Partials = s
		job.Options.Source = "partials " + *partials
	} else {
		job.Options.Source = "decision log " + *dir
	}
	bar, done := reportBar(stderr, "report")
	job.Progress = bar
	if *dir != "" {
		total := logBytes(*dir)
		job.Progress = func(read, _ uint64) { bar(read, total) }
	}
	r, b, err := job.Run(ctx)
	done()
	if err != nil {
		return err
	}
	if err := rf.write(stdout, b); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	c := r.Coverage
	state := "complete"
	if !c.Complete {
		state = "partial"
	}
	fmt.Fprintf(stderr, "report: %s to %s, windows %s, unreadable %d, alert lines skipped %d: %s\n",
		r.From.Format(time.RFC3339), r.To.Format(time.RFC3339), c.WindowsRead(), len(c.Unreadable), c.AlertSkipN, state)
	return nil
}

// reportBar returns a progress function that draws a bar on a terminal
// (nothing elsewhere), and done, which ends the bar's line.
func reportBar(stderr io.Writer, label string) (progress func(done, total uint64), done func()) {
	var bar *progressBar
	tried := false
	progress = func(n, total uint64) {
		if !tried {
			tried = true
			bar = newBar(stderr, label, total)
		}
		bar.draw(time.Now(), n, false, func() string { return "" })
	}
	return progress, func() { bar.draw(time.Now(), 0, true, func() string { return "" }) }
}

// runWhatIf replays the logged requests of a range through a candidate
// configuration and reports what would change (assemble.WhatIf).
func runWhatIf(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("whatif", "whatif --config candidate.yaml --decisions-dir DIR --from T [--to T] [--format md|html|json|csv] [--out FILE]", stderr)
	cfgPath := fs.String("config", "", "the candidate configuration `file`")
	dir := fs.String("decisions-dir", "", "the decision log `directory` to replay")
	reorder := fs.Duration("reorder", 30*time.Second, "how far out of decision-time order the log may hold requests (a decision is written when its response ends): the replay puts them back in order within this horizon (`duration`, more than 0)")
	rf := addReportFlags(fs, "What-if")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *cfgPath == "" || *dir == "" || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	format, err := report.ParseFormat(*rf.format)
	if err != nil {
		return badFlag(fmt.Errorf("--%w", err))
	}
	if err := rf.checkOut(); err != nil {
		return err
	}
	from, to, err := rf.rangeOrDefault()
	if err != nil {
		return err
	}
	top, err := rf.rows()
	if err != nil {
		return err
	}
	// WhatIf takes a horizon of 0 for its default; here it would be a
	// horizon given and silently replaced.
	if *reorder <= 0 {
		return badFlag(fmt.Errorf("--reorder %v: want more than 0", *reorder))
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	bar, done := reportBar(stderr, "whatif")
	total := logBytes(*dir)
	w, err := assemble.WhatIf(ctx, assemble.WhatIfOptions{Config: cfg, DecisionsDir: *dir, From: from, To: to,
		Top: top, Title: *rf.title, Source: "decision log " + *dir, Reorder: *reorder,
		Progress: func(read uint64) { bar(read, total) }})
	done()
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := w.Render(&b, format); err != nil {
		return err
	}
	if err := rf.write(stdout, b.Bytes()); err != nil {
		return fmt.Errorf("whatif: %w", err)
	}
	fmt.Fprintf(stderr, "whatif: replayed %d requests, %d would change, %d kept as logged, %d out of order, %d problems\n", w.Replayed, w.Changed, w.Kept, w.OutOfOrder, len(w.Problems))
	return nil
}
