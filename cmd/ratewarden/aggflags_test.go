package main

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
)

// TestAggregatorFlags: the shared flags reach the rollup and the EMF
// options, --rules only with an EMF sink.
func TestAggregatorFlags(t *testing.T) {
	fs := flag.NewFlagSet("aggregate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	af := rollupFlags(fs)
	fs.StringVar(&af.o.EMF, "emf", "", "")
	af.idleFlag(fs)
	af.namespaceFlag(fs)
	af.ruleBudgetFlag(fs)
	af.ruleFlags(fs)
	if err := fs.Parse([]string{"--window", "10s", "--idle", "250ms", "--late", "drop", "--top-k", "5", "--max-skew", "20s", "--lateness", "1s",
		"--max-names", "12", "--max-ahead", "13", "--max-corrections", "14", "--namespace", "NS", "--rule-budget", "9", "--rules", "pro:global", "--emf", "stdout"}); err != nil {
		t.Fatal(err)
	}
	ao, ro, err := af.options()
	if err != nil {
		t.Fatal(err)
	}
	want := aggregator.Options{Window: 10 * time.Second, Lateness: time.Second, Late: aggregator.LateDrop, Idle: 250 * time.Millisecond, MaxSkew: 20 * time.Second, TopK: 5,
		MaxKeys: 12, MaxAhead: 13, MaxCorrections: 14}
	if ro != want {
		t.Errorf("rollup %+v, want %+v", ro, want)
	}
	if e := ao.EMFOptions("log"); e.Namespace != "NS" || e.RuleBudget != 9 || e.Source != "log" || !slices.Equal(e.Rules, []string{"pro:global"}) {
		t.Errorf("EMF options %+v", e)
	}
}

// TestAggregateSourceConflicts: aggregate refuses a source and a state, or
// a source and another source's flags, that do not go together, naming
// both flags (exit 2), where it printed the usage alone or ignored the
// flag (--poll, --linger or --lease-duration of another source), and
// takes the combinations the README gives.
func TestAggregateSourceConflicts(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // "" for none: check passes
	}{
		{[]string{"--stdin", "--decisions-dir", "l"}, "--decisions-dir and --stdin: give one source, not both"},
		{[]string{"--kinesis-stream", "s", "--decisions-dir", "l", "--state-dir", "d"}, "--decisions-dir and --kinesis-stream: give one source, not both"},
		{[]string{"--stdin", "--kinesis-stream", "s"}, "--kinesis-stream and --stdin: give one source, not both"},
		{[]string{"--stdin", "--state-dir", "d"}, "--state-dir with --stdin: standard input has no position to resume from; leave --state-dir out"},
		{[]string{"--stdin", "--state-table", "t"}, "--state-table with --stdin"},
		{[]string{"--stdin", "--linger", "5ms"}, "--linger with --stdin: --linger is for --decisions-dir only"},
		{[]string{"--stdin", "--poll", "1s"}, "--poll with --stdin: --poll is for --kinesis-stream only"},
		{[]string{"--stdin", "--no-follow"}, "--no-follow with --stdin: --no-follow is for --decisions-dir only"},
		{[]string{"--decisions-dir", "l", "--state-dir", "d", "--poll", "1s"}, "--poll with --decisions-dir: --poll is for --kinesis-stream only"},
		{[]string{"--decisions-dir", "l", "--state-dir", "d", "--lease-duration", "5s"}, "--lease-duration with --decisions-dir"},
		{[]string{"--decisions-dir", "l", "--state-dir", "d", "--consumer-group", "g"}, "--consumer-group with --decisions-dir"},
		{[]string{"--decisions-dir", "l", "--state-dir", "d", "--leases-table", "t"}, "--leases-table with --decisions-dir"},
		{[]string{"--decisions-dir", "l", "--state-table", "t"}, "--state-table with --decisions-dir: a state table is for --kinesis-stream; give --state-dir"},
		{[]string{"--decisions-dir", "l"}, "--decisions-dir needs --state-dir DIR, where the aggregator keeps its position and open windows"},
		{[]string{"--kinesis-stream", "s", "--state-dir", "d", "--linger", "5ms"}, "--linger with --kinesis-stream: --linger is for --decisions-dir only"},
		{[]string{"--kinesis-stream", "s", "--state-dir", "d", "--no-follow"}, "--no-follow with --kinesis-stream"},
		{[]string{"--kinesis-stream", "s", "--state-dir", "d", "--state-table", "t"}, "--state-dir and --state-table: give one state, not both"},
		{[]string{"--kinesis-stream", "s"}, "--kinesis-stream needs --state-dir DIR or --state-table NAME"},
		{[]string{"--decisions-dir", "l", "--state-dir", "d", "--no-follow", "--linger", "5ms", "--alerts", "a.yaml"}, ""},
		{[]string{"--kinesis-stream", "s", "--state-table", "t", "--poll", "1s", "--consumer-group", "g", "--leases-table", "x", "--lease-duration", "5s"}, ""},
		{[]string{"--kinesis-stream", "s", "--state-dir", "d"}, ""},
		{[]string{"--stdin", "--stdin=false", "--decisions-dir", "l", "--state-dir", "d"}, ""},
		{[]string{"--stdin", "--idle", "2s"}, ""},
	} {
		code, _, errs := runCLI(t, nil, append([]string{"aggregate", "--admin-listen", "off"}, c.args...)...)
		if c.want != "" {
			if code != 2 || !strings.Contains(errs, "aggregate: "+c.want) {
				t.Errorf("%q: exit %d, want 2; stderr lacks %q:\n%s", c.args, code, c.want, errs)
			}
			continue
		}
		// Past the check, each stops at what it lacks (a sink to write,
		// the --alerts file): an error, exit 1, not bad flags.
		if code != 1 {
			t.Errorf("%q: exit %d, want it past the source check:\n%s", c.args, code, errs)
		}
	}
	// No source at all is the usage.
	if code, _, errs := runCLI(t, nil, "aggregate", "--state-dir", "d"); code != 2 || !strings.Contains(errs, "Usage: ratewarden aggregate") {
		t.Errorf("no source: exit %d\n%s", code, errs)
	}
}
