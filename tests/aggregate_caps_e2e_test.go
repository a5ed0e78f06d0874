package tests

import (
	"bytes"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// TestAggregatorCapFlags: every command that runs the aggregator
// (aggregate, replay, serve, and lambda --aggregate, on the stand-in of
// the Lambda runtime) refuses an aggregator flag out of range as bad
// flags (exit 2), naming the flag and the allowed range, before it reads,
// serves or polls anything: one table of cases, each run by the commands
// that have its flag.
func TestAggregatorCapFlags(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	const aggregate, replay, serve, lambda = "aggregate", "replay", "serve", "lambda --aggregate"
	commands := map[string][]string{
		aggregate: {"aggregate", "--stdin", "--partials", "dir:" + filepath.Join(dir, "p")},
		replay:    {"replay", "--decisions-dir", filepath.Join(dir, "log"), "--out", filepath.Join(dir, "out")},
		serve:     {"serve", "--listen", "127.0.0.1:0", "--admin-listen", "off", "--dashboard-listen", "off", "--decisions-dir", filepath.Join(dir, "log")},
		lambda:    {"lambda", "--aggregate"},
	}
	rt := newLambdaRuntime(t)
	every := []string{aggregate, replay, serve, lambda}
	cases := []struct {
		flag, value, msg string
		commands         []string // those that have the flag
	}{
		{"--max-names", "0", "--max-names 0: want 1 to 65536", every},
		{"--max-names", "65537", "--max-names 65537: want 1 to 65536", every},
		{"--max-ahead", "0", "--max-ahead 0: want 1 to 16384", every},
		{"--max-ahead", "16385", "--max-ahead 16385: want 1 to 16384", every},
		{"--max-corrections", "-1", "--max-corrections -1: want 1 to 16384", every},
		{"--max-corrections", "16385", "--max-corrections 16385: want 1 to 16384", every},
		{"--top-k", "0", "--top-k 0: want 1 to 100000", []string{aggregate, replay, lambda}},
		{"--top-k", "100001", "--top-k 100001: want 1 to 100000", []string{aggregate, replay, lambda}},
		// Rules are read for an EMF sink, which replay and the Lambda
		// always write.
		{"--rules", "global", `--rules "global": want rule ids`, []string{replay, lambda}},
	}
	for _, c := range cases {
		for _, name := range c.commands {
			cmd := exec.Command(bin, append(slices.Clone(commands[name]), c.flag, c.value)...)
			cmd.Dir = dir
			cmd.Env = append(cmd.Environ(), "AWS_LAMBDA_RUNTIME_API="+strings.TrimPrefix(rt.srv.URL, "http://"))
			out, err := cmd.CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !bytes.Contains(out, []byte(c.msg)) {
				t.Errorf("%s %s %s: %v\n%s\nwant exit 2 (bad flags) and %q", name, c.flag, c.value, err, out, c.msg)
			}
		}
	}
}

// windowRules returns the most rules a window of ps keeps apart, and the
// decisions counted under __other__.
func windowRules(ps map[time.Time]*aggregator.Partial) (most int, other uint64) {
	for _, p := range ps {
		seen := map[string]bool{}
		for c, n := range p.Counts.Cells {
			if c.Rule == aggregator.OtherKey {
				other += n
			} else {
				seen[c.Rule] = true
			}
		}
		most = max(most, len(seen))
	}
	return most, other
}

// TestAggregatorCapsTakeEffect: `aggregate --stdin` with --max-names 2
// keeps two rules apart in each window and counts the other decisions
// under __other__, where the default keeps every rule; with --max-ahead 2,
// of five events each in a window further ahead than --max-skew, the three
// past the cap are dropped and counted, where the default keeps all five.
func TestAggregatorCapsTakeEffect(t *testing.T) {
	bin := buildBinary(t)
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var in bytes.Buffer
	for _, d := range decisiontest.NewGenerator(7, start).Batch(5000) {
		in.Write(append(decisions.AppendJSON(nil, &d), '\n'))
	}
	aggregate := func(input []byte, args ...string) (map[time.Time]*aggregator.Partial, string) {
		t.Helper()
		partials := t.TempDir()
		cmd := exec.Command(bin, append([]string{"aggregate", "--stdin", "--admin-listen", "off", "--partials", "dir:" + partials}, args...)...)
		cmd.Stdin = bytes.NewReader(input)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("aggregate %q: %v\n%s", args, err, out)
		}
		return readPartials(t, partials, time.Minute), string(out)
	}
	ps, out := aggregate(in.Bytes())
	if most, other := windowRules(ps); most <= 2 || other != 0 || !strings.Contains(out, " folded 0,") {
		t.Fatalf("by default: up to %d rules a window, %d decisions under %s; the test wants more than 2 rules and none folded\n%s",
			most, other, aggregator.OtherKey, out)
	}
	ps, out = aggregate(in.Bytes(), "--max-names", "2")
	if most, other := windowRules(ps); most > 2 || other == 0 || strings.Contains(out, " folded 0,") {
		t.Errorf("--max-names 2: up to %d rules a window, %d decisions under %s\n%s", most, other, aggregator.OtherKey, out)
	}

	// Eight events of the present (a partition's first events set its
	// latest event time once eight agree), then five each a window further
	// ahead.
	var ahead bytes.Buffer
	for i := range 13 {
		d := decisions.Decision{Kind: decisions.KindDecision, Time: start.Add(time.Duration(max(i-7, 0)) * 2 * time.Minute), Node: "edge-1",
			Tier: "anonymous", Rule: "anonymous:global", Outcome: decisions.Allow, ClientIP: netip.MustParseAddr("203.0.113.7")}
		ahead.Write(append(decisions.AppendJSON(nil, &d), '\n'))
	}
	f := func(want string, args ...string) {
		t.Helper()
		if _, out := aggregate(ahead.Bytes(), args...); !strings.Contains(out, want) {
			t.Errorf("aggregate %q: want %q in\n%s", args, want, out)
		}
	}
	f("over cap 0", "--max-ahead", "256")
	f("over cap 3", "--max-ahead", "2")
}
