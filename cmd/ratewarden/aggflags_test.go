package main

import (
	"context"
	"flag"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	emf "github.com/ratewarden/ratewarden/embedded-metrics"
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
	// The combinations past the check run as far as their state
	// directory's lock, made where they name it: here, not in the source.
	t.Chdir(t.TempDir())
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
		// Past the check, each stops at what it lacks: a sink to write
		// (a bad flag, said after the source's) or the --alerts file (an
		// error, exit 1).
		if code != 1 && (code != 2 || !strings.Contains(errs, "aggregate: nothing to write")) {
			t.Errorf("%q: exit %d, want it past the source check:\n%s", c.args, code, errs)
		}
	}
	// No source at all is the usage.
	if code, _, errs := runCLI(t, nil, "aggregate", "--state-dir", "d"); code != 2 || !strings.Contains(errs, "Usage: ratewarden aggregate") {
		t.Errorf("no source: exit %d\n%s", code, errs)
	}
}

// TestNamespaceFlag: a --namespace CloudWatch would refuse (empty, over
// 255 characters, a control character, a leading ':', the "AWS/" of AWS
// services) is a bad flag of
// aggregate, serve, lambda --aggregate and dashboards alike: exit 2 at
// the start, naming the flag, what is wrong and the rule of
// emf.CheckNamespace, where aggregate ran and made every document
// invalid, and dashboards wrote dashboards of metrics that could never
// exist. A namespace CloudWatch takes, a space in it, passes.
func TestNamespaceFlag(t *testing.T) {
	const rule = ": want 1 to 255 printable ASCII characters, not only spaces, not starting with ':' or \"AWS/\" (reserved for AWS services)"
	long := strings.Repeat("n", 256)
	lambdaEnv := map[string]string{"AWS_LAMBDA_RUNTIME_API": "127.0.0.1:1"}
	// Were the flag passed, serve would run until the context ends.
	serve := func() []string {
		dir := t.TempDir()
		return []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "off", "--dashboard-listen", "off",
			"--decisions-dir", filepath.Join(dir, "log"), "--state-dir", filepath.Join(dir, "state"), "--partials-dir", filepath.Join(dir, "partials")}
	}
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"aggregate", "--stdin", "--emf", "stdout", "--namespace", ""}, `--namespace "" is empty` + rule},
		{nil, []string{"aggregate", "--decisions-dir", "l", "--state-dir", "d", "--emf", "stdout", "--namespace", ":Ratewarden"}, `--namespace ":Ratewarden" starts with ':'` + rule},
		{nil, append(serve(), "--namespace", "Rate\twarden"), `--namespace "Rate\twarden" contains '\t' at byte 4` + rule},
		{nil, append(serve(), "--namespace", long), `--namespace "` + long + `" is 256 characters long` + rule},
		{lambdaEnv, []string{"lambda", "--aggregate", "--namespace", "Räte"}, `--namespace "Räte" contains '\u00e4' at byte 1` + rule},
		{nil, []string{"dashboards", "--out", t.TempDir(), "--namespace", "   "}, `dashboards: --namespace "   " has only spaces` + rule},
		{nil, []string{"aggregate", "--stdin", "--emf", "stdout", "--namespace", "AWS/Ratewarden"}, `--namespace "AWS/Ratewarden" starts with "AWS/", which CloudWatch keeps for AWS services` + rule},
		{nil, []string{"dashboards", "--out", t.TempDir(), "--namespace", "AWS/Lambda"}, `dashboards: --namespace "AWS/Lambda" starts with "AWS/", which CloudWatch keeps for AWS services` + rule},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		code, out, errs := runCLIContext(t, ctx, c.env, c.args...)
		cancel()
		if code != 2 || !strings.Contains(out+errs, c.want) {
			t.Errorf("%q: exit %d, want 2; output lacks %q:\n%s%s", c.args, code, c.want, out, errs)
		}
	}
	// The flag's rule is the documents': what it refuses, they would.
	if err := emf.CheckNamespace(":Ratewarden"); err == nil || !strings.HasSuffix(rule, err.(*emf.InvalidError).Allowed) {
		t.Errorf("emf.CheckNamespace: %v, want the rule %q", err, rule)
	}
	dir := t.TempDir()
	if code, out, errs := runCLI(t, nil, "dashboards", "--out", dir, "--namespace", "My Company/Ratewarden"); code != 0 {
		t.Errorf("a namespace CloudWatch takes: exit %d\n%s%s", code, out, errs)
	}
}

// TestAggregateKinesisFlags: --consumer-group "" and a --lease-duration
// under the source's 100ms are bad flags, exit 2. Before, the empty group
// was taken for the source's default, "ratewarden", not the flag's
// "ratewarden-aggregate": another group, with checkpoints of its own, that
// read the stream again from its oldest record; --lease-duration 0s was
// taken for 10s, and 50ms exited 1 as "LeaseDuration: got 50ms". The
// context is done, so that a run that starts stops at once.
func TestAggregateKinesisFlags(t *testing.T) {
	t.Chdir(t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--consumer-group", ""}, `--consumer-group "": want the name of the group`},
		{[]string{"--lease-duration", "0s"}, "--lease-duration 0s: want 100ms or more"},
		{[]string{"--lease-duration", "50ms"}, "--lease-duration 50ms: want 100ms or more"},
	} {
		args := append([]string{"aggregate", "--admin-listen", "off", "--kinesis-stream", "s", "--state-dir", "d", "--partials", "dir:p"}, c.args...)
		code, _, errs := runCLIContext(t, ctx, map[string]string{"AWS_REGION": "us-east-1"}, args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%q: exit %d, want 2 and %q:\n%s", c.args, code, c.want, errs)
		}
	}
}
