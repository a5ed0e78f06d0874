package main

import (
	"flag"
	"io"
	"slices"
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
