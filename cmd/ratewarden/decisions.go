package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	dkinesis "github.com/ratewarden/ratewarden/decisions/kinesis"
	"github.com/ratewarden/ratewarden/decisions/stream"
	"github.com/ratewarden/ratewarden/internal/atomicfile"
	"github.com/ratewarden/ratewarden/internal/texttable"
	"github.com/ratewarden/ratewarden/internal/visible"
)

const decisionsUsage = `Usage:
  ratewarden decisions cat --dir DIR [--since T] [--until T] [--from OFFSET] [--format json|table] [--follow]
  ratewarden decisions cat --kinesis-stream NAME [--since T] [--until T] [--format json|table] [--follow]
  ratewarden decisions stats --dir DIR
  ratewarden decisions export --dir DIR --out FILE.parquet [--since T] [--until T]

T is an RFC 3339 time (2026-11-30T03:00:00Z) or a duration before now (15m).
`

func runDecisions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, decisionsUsage)
		return errUsage
	}
	switch args[0] {
	case "cat":
		return runDecisionsCat(ctx, args[1:], stdout, stderr)
	case "stats":
		return runDecisionsStats(ctx, args[1:], stdout, stderr)
	case "export":
		return runDecisionsExport(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, decisionsUsage)
		return nil
	}
	fmt.Fprintf(stderr, "ratewarden decisions: unknown command %q\n\n%s", args[0], decisionsUsage)
	return errUsage
}

// timeFlag parses an RFC 3339 time or a duration before now.
type timeFlag struct {
	t   time.Time
	now func() time.Time
}

func (f *timeFlag) String() string {
	if f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

// Set parses an RFC 3339 time, "now", or a duration before now written
// either way: "15m" and "-15m" both mean fifteen minutes ago.
func (f *timeFlag) Set(s string) error {
	if s == "now" {
		f.t = f.now()
		return nil
	}
	if d, err := time.ParseDuration(strings.TrimPrefix(s, "-")); err == nil && !strings.HasPrefix(s, "--") {
		f.t = f.now().Add(-d)
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("want an RFC 3339 time, now, or a duration before now, such as 15m or -24h")
	}
	f.t = t
	return nil
}

// onceNow returns a clock that reads time.Now once, at its first call,
// and returns that time from then on: the time flags of one command share
// it, so that "now" is one time in all of them (--from now --to now is an
// empty range, refused, rather than a few nanoseconds).
func onceNow() func() time.Time { return sync.OnceValue(time.Now) }

// timeRangeFlags adds --since and --until to fs.
func timeRangeFlags(fs *flag.FlagSet) (since, until *timeFlag) {
	now := onceNow()
	since, until = &timeFlag{now: now}, &timeFlag{now: now}
	fs.Var(since, "since", "only events at or after `T`")
	fs.Var(until, "until", "only events before `T`")
	return since, until
}

func runDecisionsCat(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("decisions cat", "decisions cat --dir DIR | --kinesis-stream NAME [flags]", stderr)
	dir := fs.String("dir", "", "decision log `directory`")
	stream := fs.String("kinesis-stream", "", "read the Kinesis stream `name` instead, every shard from its oldest record (AWS SDK credentials, region and endpoints)")
	since, until := timeRangeFlags(fs)
	from := fs.Uint64("from", 0, "start at `offset` (--dir only: a stream has no offsets)")
	format := fs.String("format", "json", "output `format`: json (one object per line) or table")
	follow := fs.Bool("follow", false, "wait for new events (until interrupted)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *dir != "" && *stream != "":
		return badFlag(errors.New("--dir and --kinesis-stream: give one source, not both"))
	case *dir == "" && *stream == "" || fs.NArg() > 0:
		fs.Usage()
		return errUsage
	case *format != "json" && *format != "table":
		return badFlag(fmt.Errorf("--format %q: want json or table", *format))
	}
	if *stream != "" && flagSet(fs, "from") {
		fmt.Fprintln(stderr, "ratewarden decisions cat: --from is an offset in a decision log (--dir); a Kinesis stream is read from its oldest record, use --since")
		return errUsage
	}
	if err := checkRange("since", since.t, "until", until.t); err != nil {
		return err
	}
	p := newEventPrinter(stdout, *format, *follow, *stream != "")
	defer p.flush()
	if *stream != "" {
		return catStream(ctx, p, *stream, since.t, until.t, *follow, stderr)
	}
	r, err := decisionlog.Open(*dir, decisionlog.Filter{From: *from, Since: since.t, Until: until.t})
	if err != nil {
		return err
	}
	defer r.Close()
	for {
		d, off, err := r.Next(ctx, *follow)
		if err != nil {
			p.flush()
			reportProblems(stderr, r)
			if decisionlog.IsEnd(err) || (*follow && errors.Is(err, context.Canceled)) {
				return nil
			}
			return err
		}
		p.print(strconv.FormatUint(off, 10), &d)
	}
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// catStream prints a Kinesis stream's events; the position column is the
// shard.
func catStream(ctx context.Context, p *eventPrinter, name string, since, until time.Time, follow bool, stderr io.Writer) error {
	acfg, err := assemble.AWS(ctx, "")
	if err != nil {
		return err
	}
	corrupt := 0
	err = dkinesis.Scan(ctx, kinesis.NewFromConfig(acfg), name, dkinesis.ScanOptions{Follow: follow,
		Corrupt: func(shard, seq string, err error) {
			if n, partial := columnar.IsCorruptEvents(err); partial {
				corrupt += n
				fmt.Fprintf(stderr, "ratewarden: %s: shard %s record %s: %d log events skipped: %v\n", name, shard, seq, n, err)
				return
			}
			corrupt++
			fmt.Fprintf(stderr, "ratewarden: %s: shard %s record %s skipped: %v\n", name, shard, seq, err)
		}},
		stream.HandleFunc(func(_ context.Context, b *stream.Batch) error {
			ds := b.Events
			for i := range ds {
				if (!since.IsZero() && ds[i].Time.Before(since)) || (!until.IsZero() && !ds[i].Time.Before(until)) {
					continue
				}
				p.print(b.Partition, &ds[i])
			}
			return nil
		}))
	p.flush()
	if corrupt > 0 {
		fmt.Fprintf(stderr, "ratewarden: %s: %d corrupt records or log events skipped\n", name, corrupt)
	}
	if err != nil && !(follow && errors.Is(err, context.Canceled)) {
		return err
	}
	return nil
}

// tableBlock is how many rows of a table the printer holds at most before
// it writes them: a table is lined up a block at a time (texttable keeps
// the widths of the blocks before), not held whole in memory.
const tableBlock = 1024

// eventPrinter prints events as JSON lines or a table. A JSON line has
// the format characters and line separators of the client's strings (a
// user id, a request id) as \u escapes (visible.AppendJSON), as lists
// show --json does: on a terminal "ad\u200bmin" would read "admin".
type eventPrinter struct {
	w      *bufio.Writer
	tw     *texttable.Writer
	follow bool
	rows   int // of the table, printed
	js     []byte
	buf    []byte
}

func newEventPrinter(out io.Writer, format string, follow, shards bool) *eventPrinter {
	p := &eventPrinter{w: bufio.NewWriterSize(out, 64<<10), follow: follow}
	if format == "table" {
		p.tw = texttable.NewWriter(p.w, 1)
		pos := "OFFSET"
		if shards {
			pos = "SHARD"
		}
		fmt.Fprintln(p.tw, pos+"\tTIME\tNODE\tCLIENT\tUSER\tTIER\tMETHOD\tPATH\tRULE\tCOUNT/LIMIT\tOUTCOME\tREASON")
	}
	return p
}

func (p *eventPrinter) print(pos string, d *decisions.Decision) {
	if p.tw != nil {
		fmt.Fprintf(p.tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", cell(pos), d.Time.UTC().Format("2006-01-02T15:04:05.000Z"),
			cell(d.Node), addrOrDash(*d), cell(d.UserID), cell(d.Tier), cell(d.Method), cell(d.Path), cell(d.Rule), d.Count, d.Limit, cell(kindOutcome(*d)), cell(d.Reason))
		// A follower sees each row as it comes; otherwise a block at a
		// time.
		if p.rows++; p.follow || p.rows%tableBlock == 0 {
			p.tw.Flush()
			if p.follow {
				p.w.Flush()
			}
		}
		return
	}
	p.js = decisions.AppendJSON(p.js[:0], d)
	p.buf = append(visible.AppendJSON(p.buf[:0], p.js), '\n')
	p.w.Write(p.buf)
	if p.follow {
		p.w.Flush()
	}
}

func (p *eventPrinter) flush() {
	if p.tw != nil {
		p.tw.Flush()
	}
	p.w.Flush()
}

func addrOrDash(d decisions.Decision) string {
	if !d.ClientIP.IsValid() {
		return "-"
	}
	return d.ClientIP.String()
}

// cell returns a table's field: "-" when s is empty; s quoted as a Go
// string (strconv.Quote) when it holds a character that is not printable
// or is not valid UTF-8, or when it starts with a double quote, so that a
// quoted field is never taken for another value; s as it is otherwise.
// Not printable (strconv.IsPrint) are control characters (a newline, a
// tab, the ESC of a terminal escape sequence), format characters (U+202E
// reorders what follows it) and every space but ASCII's (a no-break space
// looks like the table's padding). The fields are the client's (a user id,
// a path) or a record's, and what a terminal shows must be the value
// itself: no escape sequence reaches the terminal, and no newline or tab
// starts a row or a column of its own.
func cell(s string) string {
	switch {
	case s == "":
		return "-"
	case s[0] == '"' || !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) >= 0:
		return strconv.Quote(s)
	}
	return s
}

func kindOutcome(d decisions.Decision) string {
	switch d.Kind {
	case decisions.KindFeedback:
		return "feedback:" + d.List + ":" + d.Action + ":" + d.Target
	case decisions.KindDrops:
		return "drops:" + strconv.FormatUint(d.Dropped, 10)
	}
	return d.Outcome.String()
}

// reportProblems prints what the reader skipped, so that nothing is lost
// silently.
func reportProblems(stderr io.Writer, r *decisionlog.Reader) {
	for _, p := range r.Problems() {
		fmt.Fprintln(stderr, "ratewarden: skipped:", p)
	}
	if s := r.Stats(); s.BadBatch > 0 {
		fmt.Fprintf(stderr, "ratewarden: %d records (%d events) could not be decoded\n", s.BadBatch, s.BadEvents)
	}
}

func runDecisionsStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("decisions stats", "decisions stats --dir DIR", stderr)
	dir := fs.String("dir", "", "decision log `directory`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	r, err := decisionlog.Open(*dir, decisionlog.Filter{})
	if err != nil {
		return err
	}
	defer r.Close()
	byOutcome := map[string]uint64{}
	var first, last time.Time
	var n uint64
	for {
		d, _, err := r.Next(ctx, false)
		if err != nil {
			if !decisionlog.IsEnd(err) {
				return err
			}
			break
		}
		n++
		byOutcome[kindKey(d)]++
		if first.IsZero() || d.Time.Before(first) {
			first = d.Time
		}
		if d.Time.After(last) {
			last = d.Time
		}
	}
	st := r.Stats()
	disk, segments, err := dirSize(*dir)
	if err != nil {
		return err
	}
	loss := r.Loss() // every problem, where Corrupt keeps the first 1000
	tw := texttable.NewWriter(stdout, 2)
	fmt.Fprintf(tw, "events\t%d\n", n)
	fmt.Fprintf(tw, "records\t%d\n", st.Records)
	fmt.Fprintf(tw, "segments\t%d\n", segments)
	fmt.Fprintf(tw, "bytes on disk\t%d\n", disk)
	if n > 0 {
		fmt.Fprintf(tw, "bytes per event\t%.1f\n", float64(disk)/float64(n))
		fmt.Fprintf(tw, "first event\t%s\n", first.UTC().Format(time.RFC3339Nano))
		fmt.Fprintf(tw, "last event\t%s\n", last.UTC().Format(time.RFC3339Nano))
	}
	fmt.Fprintf(tw, "corrupt regions\t%d\n", loss.Problems)
	fmt.Fprintf(tw, "corrupt bytes\t%d\n", loss.Bytes)
	fmt.Fprintf(tw, "events lost to corruption\t%d\n", loss.Events+st.BadEvents)
	fmt.Fprintf(tw, "undecodable records\t%d\n", st.BadBatch)
	keys := make([]string, 0, len(byOutcome))
	for k := range byOutcome {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(tw, "  %s\t%d\n", k, byOutcome[k])
	}
	tw.Flush()
	reportProblems(stderr, r)
	return nil
}

func kindKey(d decisions.Decision) string {
	if d.Kind != decisions.KindDecision {
		return d.Kind.String()
	}
	return "outcome " + d.Outcome.String()
}

func dirSize(dir string) (bytes int64, segments int, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("read log directory: %w", err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		if len(e.Name()) > 4 && e.Name()[len(e.Name())-4:] == ".seg" {
			segments++
			bytes += info.Size()
		}
	}
	return bytes, segments, nil
}

func runDecisionsExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("decisions export", "decisions export --dir DIR --out FILE.parquet [flags]", stderr)
	dir := fs.String("dir", "", "decision log `directory`")
	out := fs.String("out", "", "Parquet `file` to write")
	since, until := timeRangeFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" || *out == "" || fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	if err := errors.Join(checkRange("since", since.t, "until", until.t), outsideLog(*out, *dir)); err != nil {
		return err
	}
	r, err := decisionlog.Open(*dir, decisionlog.Filter{Since: since.t, Until: until.t})
	if err != nil {
		return err
	}
	defer r.Close()
	var n int
	var readErr error
	batches := func(yield func([]decisions.Decision) bool) {
		batch := make([]decisions.Decision, 0, 8192)
		for {
			d, _, err := r.Next(ctx, false)
			if err != nil {
				if !decisionlog.IsEnd(err) {
					readErr = err
				}
				break
			}
			batch = append(batch, d)
			if len(batch) == cap(batch) {
				n += len(batch)
				if !yield(batch) {
					return
				}
				batch = batch[:0]
			}
		}
		if len(batch) > 0 {
			n += len(batch)
			yield(batch)
		}
	}
	// Written aside and renamed over --out when whole: an export that
	// fails or is interrupted leaves a file already there as it was.
	err = atomicfile.WriteFrom(*out, 0o644, func(w io.Writer) error {
		return errors.Join(columnar.WriteParquet(w, batches), readErr)
	})
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	reportProblems(stderr, r)
	fmt.Fprintf(stdout, "%s: %d events\n", *out, n)
	return nil
}

// outsideLog refuses an output path inside the decision log's directory
// dir: a file written there is read as a segment (or replaces one), so an
// export named after a segment would destroy the events it exports.
func outsideLog(out, dir string) error {
	o, err1 := filepath.Abs(out)
	d, err2 := filepath.Abs(dir)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	if rd, err := filepath.EvalSymlinks(d); err == nil {
		d = rd
	}
	if ro, err := filepath.EvalSymlinks(filepath.Dir(o)); err == nil {
		o = filepath.Join(ro, filepath.Base(o))
	}
	if rel, err := filepath.Rel(d, o); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return badFlag(fmt.Errorf("--out %s is inside the decision log %s: write it elsewhere", out, dir))
	}
	return nil
}
