// Command ratewarden is the edge rate limiter and its tools.
//
//	ratewarden edge [flags]            run the limiting reverse proxy
//	ratewarden rls [flags]             serve Envoy's rate limit service (gRPC)
//	ratewarden authz [flags]           serve nginx's auth_request decisions
//	ratewarden config check FILE...    validate configuration files
//	ratewarden token issue [flags]     issue a challenge token
//	ratewarden decisions cat|stats|export  read the decision log
//	ratewarden lambda [flags]          serve API Gateway / ALB events in AWS Lambda
//	ratewarden aggregate [flags]       roll decisions up into per-window aggregates
//	ratewarden replay [flags]          rebuild a time range's aggregates from the log
//	ratewarden report [flags]          the abuse report of a time range
//	ratewarden whatif [flags]          what a candidate configuration would have decided
//	ratewarden alerts [flags]          detect anomalies in stored partials, feed the lists back
//	ratewarden aws init [flags]        create the stream and tables on AWS
//	ratewarden lists show|add|remove|approve  read and write the feedback lists
//	ratewarden serve [flags]           edge, decision log, aggregator and dashboard in one process
//	ratewarden dashboards [flags]      write or apply CloudWatch dashboards and alarms
//	ratewarden demo [flags]            serve, a sample origin and simulated abuse
//	ratewarden version                 print the version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/ratewarden/ratewarden/assemble"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// errUsage marks errors whose message is a usage text: exit 2.
var errUsage = errors.New("usage")

// flagError is a bad flag value, or flags that do not go together, with a
// message that names them, what they got and what is allowed: it exits 2,
// as errUsage does, but with its message printed where the usage would
// hide which flag was wrong. Exit 1 is left to errors in what a command
// read or did (README, "From cron").
type flagError struct{ err error }

func (e flagError) Error() string   { return e.err.Error() }
func (e flagError) Unwrap() []error { return []error{e.err, errUsage} }

// badFlag marks err, which names the flag, as a flagError.
func badFlag(err error) error { return flagError{err} }

func main() {
	catchHangups()
	ctx, stop := stopOnSignal(os.Stderr)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// hangups receives a value at each SIGHUP (one held while none reads):
// the commands that read lists (edge, serve, rls, authz) re-read them then
// (assemble.Options.Reload). The others ignore it, as they do a closed
// terminal's: SIGHUP's default action would end them at once, without
// the clean stop that flushes decisions and emits open windows.
var hangups = make(chan struct{}, 1)

// catchHangups makes SIGHUP send to hangups for the rest of the process.
func catchHangups() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			select {
			case hangups <- struct{}{}:
			default: // one is waiting already: it reloads what this one would
			}
		}
	}()
}

// stopOnSignal returns a context done at the first SIGINT or SIGTERM,
// when the commands stop cleanly (the edge drains its connections within
// edge.shutdown_grace and flushes its decisions, the aggregator emits its
// open windows), and a function that stops catching them. The first
// signal says so on stderr and gives the signals their default action
// back: a second one ends the process at once, so that a shutdown that
// hangs (an origin that never answers within a long grace, a sink that
// never returns) does not need SIGKILL.
func stopOnSignal(stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		signal.Stop(sigs)
		fmt.Fprintf(stderr, "ratewarden: %v: stopping cleanly; a second signal stops at once\n", s)
		cancel()
	}()
	return ctx, func() {
		signal.Stop(sigs)
		cancel()
	}
}

func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case err == errUsage: // the usage has been printed
		return 2
	}
	fmt.Fprintln(stderr, "ratewarden:", err)
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

const usage = `ratewarden: an edge rate limiter whose every decision is an event.

Usage:
  ratewarden edge [flags]              run the limiting reverse proxy
  ratewarden rls [flags]               serve Envoy's rate limit service (envoy.service.ratelimit.v3, gRPC)
  ratewarden authz [flags]             serve the decision endpoint of nginx's auth_request
  ratewarden config check FILE...      validate configuration files
  ratewarden token issue [flags]       issue a challenge token
  ratewarden decisions cat|stats|export  read the decision log
  ratewarden lambda [flags]            serve API Gateway / ALB events inside AWS Lambda
  ratewarden lambda-edge build [flags] write the CloudFront viewer-request function (Lambda@Edge)
  ratewarden aggregate [flags]         roll decisions (a log, or a Kinesis stream shared by several) up into per-window partial aggregates
  ratewarden replay [flags]            rebuild the aggregates of a time range from the log
  ratewarden report [flags]            the abuse report of a time range (md, html, json, csv)
  ratewarden whatif [flags]            replay logged requests through a candidate configuration and report what would change
  ratewarden alerts [flags]            run the anomaly detectors and feedback policies over stored partials
  ratewarden emf validate FILE...      validate EMF documents, one per line
  ratewarden aws init [flags]          create the Kinesis stream and DynamoDB tables, if missing
  ratewarden lists show|add|remove|approve [flags]  read and write the allow, deny and challenge lists
  ratewarden serve [flags]             run the edge, the decision log, the aggregator and the live dashboard in one process
  ratewarden dashboards [flags]        write (--out) or apply (--apply) the CloudWatch dashboards and alarms
  ratewarden demo [flags]              serve in front of a sample origin, with simulated users, a scraper and credential stuffing
  ratewarden version                   print the version

Run "ratewarden COMMAND --help" for a command's flags.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	// The AWS SDK's own messages, in the commands' log format (lambda's
	// is JSON: it sets its own).
	ctx = assemble.WithLog(ctx, slog.New(slog.NewTextHandler(stderr, nil)))
	switch args[0] {
	case "edge":
		return runEdge(ctx, args[1:], stdout, stderr, getenv)
	case "rls":
		return runRLS(ctx, args[1:], stderr, getenv)
	case "authz":
		return runAuthz(ctx, args[1:], stderr, getenv)
	case "config":
		return runConfig(args[1:], stdout, stderr, getenv)
	case "decisions":
		return runDecisions(ctx, args[1:], stdout, stderr)
	case "lambda":
		return runLambda(ctx, args[1:], stdout, stderr, getenv)
	case "lambda-edge":
		return runLambdaEdge(args[1:], stdout, stderr)
	case "aggregate":
		return runAggregate(ctx, args[1:], os.Stdin, stdout, stderr)
	case "replay":
		return runReplay(ctx, args[1:], stdout, stderr)
	case "report":
		return runReport(ctx, args[1:], stdout, stderr)
	case "whatif":
		return runWhatIf(ctx, args[1:], stdout, stderr)
	case "alerts":
		return runAlerts(ctx, args[1:], stdout, stderr)
	case "emf":
		return runEmf(args[1:], stdout, stderr)
	case "aws":
		return runAWS(ctx, args[1:], stdout, stderr)
	case "lists":
		return runLists(ctx, args[1:], stdout, stderr, getenv)
	case "dashboards":
		return runDashboards(ctx, args[1:], stdout, stderr)
	case "serve":
		return runServe(ctx, args[1:], stdout, stderr, getenv)
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr, getenv)
	case "token":
		return runToken(args[1:], stdout, stderr, getenv)
	case "version":
		return runVersion(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "ratewarden: unknown command %q\n\n%s", args[0], usage)
	return errUsage
}

// runVersion prints the version; it takes no arguments but --help.
func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", "version", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	fmt.Fprintln(stdout, "ratewarden", version)
	return nil
}

// flagSetMade, when set, is called with every flag set newFlags makes: a
// test collects them, once the command has defined its flags, to hold
// every command's --help to the same placeholders (TestHelpPlaceholders).
var flagSetMade func(*flag.FlagSet)

// newFlags returns a flag set that prints its usage to stderr and returns
// errors instead of exiting.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: ratewarden %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	if flagSetMade != nil {
		flagSetMade(fs)
	}
	return fs
}

// parseFlags parses args, mapping a bad flag to errUsage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		if want := wantOf(fs, err); want != "" {
			fmt.Fprintln(fs.Output(), "ratewarden:", want)
		}
		return errUsage
	}
	return nil
}

// badValue matches the flag package's error for a value it could not
// parse: `invalid value "1x" for flag -window: parse error`, for a
// boolean `invalid boolean value "maybe" for -no-follow: parse error`,
// or for a number past its type `invalid value "99999999999999999999"
// for flag -top-k: value out of range`.
var badValue = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-([a-z0-9-]+): (?:parse error|value out of range)$`)

// wantOf says what the flag whose value err could not parse wants, by the
// kind of its value and the range its usage states (usageRange), after
// the usage the flag package printed with its bare "parse error"; "" for
// another error, or a flag of its own kind (times, lists), whose error
// says it already.
func wantOf(fs *flag.FlagSet, err error) string {
	m := badValue.FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	f := fs.Lookup(m[2])
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return ""
	}
	var want string
	switch g.Get().(type) {
	case time.Duration:
		want = "a duration, such as 500ms, 30s or 1h30m"
	case int, int64, uint, uint64:
		want = "a whole number"
	case float64:
		want = "a number, such as 10 or 2.5"
	case bool:
		want = "true or false"
	default:
		return ""
	}
	if r := usageRange(f.Usage); r != "" {
		want += ", " + r
	}
	return fmt.Sprintf("--%s %s: want %s", m[2], m[1], want)
}

// usageRange returns the range a flag's usage states in the parenthesis
// that names its value, "(`n`, 1 to 100000)" or "(`duration`: 1s, 10s,
// ...; 1s to 24h, dividing an hour or a multiple of one)": its first part
// (between semicolons) that says "A to B"; "" when it states none.
func usageRange(usage string) string {
	_, rest, ok := strings.Cut(usage, "(`")
	if !ok {
		return ""
	}
	if _, rest, ok = strings.Cut(rest, "`"); !ok {
		return ""
	}
	rest, _, _ = strings.Cut(rest, ")")
	rest = strings.TrimLeft(rest, ",: ")
	for part := range strings.SplitSeq(rest, ";") {
		if strings.Contains(part, " to ") {
			return strings.TrimSpace(part)
		}
	}
	return ""
}
