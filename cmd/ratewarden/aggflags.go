package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
	emf "github.com/ratewarden/ratewarden/embedded-metrics"
)

// aggregatorFlags are the aggregator's flags of a command that runs it
// (aggregate, replay, report, serve, lambda --aggregate): each adds the
// ones that apply to it, by the same names, into one
// assemble.AggregatorOptions, checked there.
type aggregatorFlags struct {
	o              assemble.AggregatorOptions
	prefix         string // before each usage line, such as "with --aggregate: "
	cfgPath, rules *string
}

func newAggregatorFlags(prefix string) *aggregatorFlags {
	return &aggregatorFlags{o: assemble.DefaultAggregatorOptions(), prefix: prefix}
}

// rollupFlags adds the window flags that aggregate, replay and report share.
func rollupFlags(fs *flag.FlagSet) *aggregatorFlags {
	f := newAggregatorFlags("")
	fs.DurationVar(&f.o.Window, "window", f.o.Window, "window length in event time (`duration`: 1s, 10s, 1m, ...; "+assemble.WindowRange+")")
	fs.DurationVar(&f.o.Lateness, "lateness", f.o.Lateness, "how far behind the latest event an event may be and still join its window (`duration`, "+assemble.LatenessRange+")")
	fs.StringVar(&f.o.Late, "late", f.o.Late, "events later than that (`correct|drop`): \"correct\" (a correction of their window) or \"drop\" (counted)")
	f.topKFlag(fs)
	fs.DurationVar(&f.o.MaxSkew, "max-skew", f.o.MaxSkew, "how far ahead of the latest event an event may be and still move the watermark at once; events further ahead are counted as future and wait for a quorum, and events further past the time their record arrived on Kinesis or was read never move it (`duration`, "+assemble.MaxSkewRange+")")
	f.capFlags(fs)
	return f
}

// capFlags adds the rollup's memory caps: --max-names, --max-ahead and
// --max-corrections.
func (f *aggregatorFlags) capFlags(fs *flag.FlagSet) {
	f.caps(fs, "windows a partition holds open ahead of its latest event; an event that would open one more is dropped and counted",
		"corrections of emitted windows a partition holds pending; a late event that would open one more is dropped and counted")
}

// lambdaCapFlags adds the caps of lambda --aggregate, which holds every
// window of a commit group until the group is written: --max-ahead and
// --max-corrections are a record's reach after and before the first
// window of its epoch (max-ahead/2 windows; a backlog in time order is cut
// where a record begins another); a record with events out of its reach
// ends its group, and a new group begins at the next record (see
// aggregator.KinesisLambda).
func (f *aggregatorFlags) lambdaCapFlags(fs *flag.FlagSet) {
	f.caps(fs, "windows after the first of a record's epoch (n/2 windows; a backlog is cut where a record begins another) that its events may reach; a record with events past them ends its commit group, which is written, nothing dropped",
		"windows before the first of a record's epoch that its events may reach; a record with events before them ends its commit group, which is written, nothing dropped")
}

// caps adds --max-names, and --max-ahead and --max-corrections with the
// usage of what they cap.
func (f *aggregatorFlags) caps(fs *flag.FlagSet, ahead, corrections string) {
	fs.IntVar(&f.o.MaxKeys, "max-names", f.o.MaxKeys, f.prefix+"distinct tiers, rules, nodes and reasons a window keeps apart, each; the rest are counted under __other__ (`n`, 1 to "+strconv.Itoa(assemble.MaxMaxKeys)+")")
	fs.IntVar(&f.o.MaxAhead, "max-ahead", f.o.MaxAhead, f.prefix+ahead+" (`n`, 1 to "+strconv.Itoa(assemble.MaxMaxAhead)+")")
	fs.IntVar(&f.o.MaxCorrections, "max-corrections", f.o.MaxCorrections, f.prefix+corrections+" (`n`, 1 to "+strconv.Itoa(assemble.MaxMaxCorrections)+")")
}

// topKFlag adds --top-k.
func (f *aggregatorFlags) topKFlag(fs *flag.FlagSet) {
	fs.IntVar(&f.o.TopK, "top-k", f.o.TopK, f.prefix+"clients held by each top-offenders list (`n`, 1 to 100000)")
}

// idleFlag adds --idle, for the commands that follow a live source.
func (f *aggregatorFlags) idleFlag(fs *flag.FlagSet) {
	fs.DurationVar(&f.o.Idle, "idle", f.o.Idle, f.prefix+"how long a partition may see no event before its watermark follows the clock, so that the last window of a quiet period is emitted on time (`duration`, "+assemble.IdleRange+")")
}

// namespaceFlag adds --namespace.
func (f *aggregatorFlags) namespaceFlag(fs *flag.FlagSet) {
	fs.StringVar(&f.o.Namespace, "namespace", f.o.Namespace, f.prefix+"CloudWatch `namespace` of the EMF metrics")
}

// ruleBudgetFlag adds --rule-budget.
func (f *aggregatorFlags) ruleBudgetFlag(fs *flag.FlagSet) {
	fs.IntVar(&f.o.RuleBudget, "rule-budget", f.o.RuleBudget, f.prefix+"(tier, rule) pairs per window with EMF documents of their own; the rest are folded into __other__ (`n`, 1 to "+strconv.Itoa(assemble.MaxRuleBudget)+")")
}

// emfTimeoutFlag adds --emf-timeout, for the commands whose --emf may name
// the CloudWatch agent or API.
func (f *aggregatorFlags) emfTimeoutFlag(fs *flag.FlagSet) {
	fs.DurationVar(&f.o.EMFTimeout, "emf-timeout", 0, f.prefix+"how long a flush or close of the EMF sink may wait for the CloudWatch agent or API before what it holds is dropped and counted (`duration`: 0 or "+
		assemble.EMFTimeoutRange+"; 0 is each sink's own, agent "+emf.DefaultAgentFlushTimeout.String()+
		", logs and metrics "+emf.DefaultAWSFlushTimeout.String()+"; stdout and file do not wait)")
}

// ruleFlags adds --config and --rules to the flags of a command that
// writes the aggregator's EMF: the rules whose [Tier, Rule] documents are
// never folded into __other__ (aggregator.EMFOptions.Rules); none means
// the busiest of each output (--rule-budget).
func (f *aggregatorFlags) ruleFlags(fs *flag.FlagSet) {
	f.rulesFlag(fs, fs.String("config", "", "the edges' configuration `file`: an IPv6 client is counted in the top-K lists and distinct clients by its identity.ipv6_prefix (without it or --alerts, by its /64), and each of its rules gets [Tier, Rule] EMF documents of its own in every window and partition, and rules it does not have are folded into __other__ (without it or --rules, each partition keeps its --rule-budget busiest, which may differ between shards)"))
}

// rulesFlag adds --rules beside cfgPath, the value of a --config flag the
// command already has (lambda's, whose file is also the edge's).
func (f *aggregatorFlags) rulesFlag(fs *flag.FlagSet, cfgPath *string) {
	f.cfgPath = cfgPath
	f.rules = fs.String("rules", "", f.prefix+"rule ids kept as --config keeps its rules (comma-separated `list`, such as anonymous:global,pro:/api/search)")
}

// options returns the checked options and their rollup: the prefix an
// IPv6 client is counted under that of --config (identity.ipv6_prefix,
// as the edges count it), and with an EMF sink, the rules of --config and
// --rules read. A flag out of range is a flagError.
func (f *aggregatorFlags) options() (assemble.AggregatorOptions, aggregator.Options, error) {
	ro, err := f.o.Rollup()
	if err != nil {
		return f.o, ro, badFlag(err)
	}
	if f.cfgPath != nil && *f.cfgPath != "" {
		cfg, err := config.Load(*f.cfgPath)
		if err != nil {
			return f.o, ro, err
		}
		f.o.IPv6Prefix = cfg.Identity.IPv6Prefix
		ro.IPv6Prefix = f.o.IPv6Prefix
	}
	if f.cfgPath != nil && f.o.EMF != "" {
		// The list alone first: a bad id is a bad flag, where a bad
		// --config file is an error in what was read.
		if _, err := assemble.ConfiguredRules("", *f.rules); err != nil {
			return f.o, ro, badFlag(err)
		}
		if f.o.Rules, err = assemble.ConfiguredRules(*f.cfgPath, *f.rules); err != nil {
			return f.o, ro, err
		}
	}
	return f.o, ro, nil
}

// aggregateSource is what aggregate reads and where it keeps its state:
// one source (--decisions-dir, --kinesis-stream or --stdin) and the state
// that source takes. Flags of another source, or a state the source has
// no use for, are refused rather than ignored: a user who gave both
// --stdin and --decisions-dir, or --poll to a log, meant something the
// command would not do.
type aggregateSource struct{ fs *flag.FlagSet }

// onlyWith are aggregate's flags that apply to one source alone.
var onlyWith = []struct{ flag, source, why string }{
	{"linger", "decisions-dir", "it paces the reads of a followed log's tail"},
	{"no-follow", "decisions-dir", "a log is read to its end; a stream and standard input have none to stop at"},
	{"alerts", "decisions-dir", "it needs whole windows; with a Kinesis stream, run `ratewarden alerts --partials` over the merged partials"},
	{"poll", "kinesis-stream", "it paces the reads of a stream's shards"},
	{"leases-table", "kinesis-stream", "leases share a stream's shards"},
	{"consumer-group", "kinesis-stream", "a group shares a stream's shards"},
	{"lease-duration", "kinesis-stream", "leases share a stream's shards"},
}

// check refuses sources and states that do not go together, as a
// flagError naming both flags; no source at all is errUsage (the usage
// says what to give).
func (s aggregateSource) check() error {
	fs := s.fs
	// given: on the command line with a value; --stdin=false is not.
	given := func(name string) bool {
		v := fs.Lookup(name).Value.String()
		return flagSet(fs, name) && v != "" && v != "false"
	}
	var sources []string
	for _, name := range []string{"decisions-dir", "kinesis-stream", "stdin"} {
		if given(name) {
			sources = append(sources, name)
		}
	}
	switch len(sources) {
	case 0:
		return errUsage
	case 1:
	default:
		return badFlag(fmt.Errorf("aggregate: --%s and --%s: give one source, not both", sources[0], sources[1]))
	}
	source := sources[0]
	for _, o := range onlyWith {
		if given(o.flag) && source != o.source {
			return badFlag(fmt.Errorf("aggregate: --%s with --%s: --%s is for --%s only (%s)", o.flag, source, o.flag, o.source, o.why))
		}
	}
	switch dir, table := given("state-dir"), given("state-table"); {
	case source == "stdin" && (dir || table):
		state := map[bool]string{true: "state-dir", false: "state-table"}[dir]
		return badFlag(fmt.Errorf("aggregate: --%s with --stdin: standard input has no position to resume from; leave --%s out", state, state))
	case source == "decisions-dir" && table:
		return badFlag(errors.New("aggregate: --state-table with --decisions-dir: a state table is for --kinesis-stream; give --state-dir"))
	case source == "kinesis-stream" && dir && table:
		return badFlag(errors.New("aggregate: --state-dir and --state-table: give one state, not both"))
	case source != "stdin" && !dir && !table:
		want := "--state-dir DIR"
		if source == "kinesis-stream" {
			want += " or --state-table NAME"
		}
		return badFlag(fmt.Errorf("aggregate: --%s needs %s, where the aggregator keeps its position and open windows", source, want))
	}
	return nil
}
