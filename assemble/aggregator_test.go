package assemble

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/config"
)

// TestAggregatorRollup: every rollup setting of AggregatorOptions reaches
// aggregator.Options, and a value out of range is an error naming its
// flag and what is allowed.
func TestAggregatorRollup(t *testing.T) {
	o := DefaultAggregatorOptions()
	o.Window, o.Lateness, o.Late, o.MaxSkew, o.Idle, o.TopK, o.MaxKeys = 10*time.Second, 2*time.Second, "drop", 30*time.Second, 250*time.Millisecond, 7, 64
	o.MaxAhead, o.MaxCorrections = 3, 5
	got, err := o.Rollup()
	want := aggregator.Options{Window: 10 * time.Second, Lateness: 2 * time.Second, Late: aggregator.LateDrop, MaxSkew: 30 * time.Second,
		Idle: 250 * time.Millisecond, TopK: 7, MaxKeys: 64, MaxAhead: 3, MaxCorrections: 5}
	if err != nil || got != want {
		t.Fatalf("Rollup() = %+v, %v; want %+v", got, err, want)
	}
	bad := func(change func(*AggregatorOptions), msg string) {
		t.Helper()
		o := DefaultAggregatorOptions()
		change(&o)
		if _, err := o.Rollup(); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("Rollup() error %v, want %q", err, msg)
		}
	}
	bad(func(o *AggregatorOptions) { o.Idle = 99 * time.Millisecond }, "--idle 99ms: want 100ms to 1h")
	bad(func(o *AggregatorOptions) { o.Idle = time.Hour + time.Second }, "--idle 1h0m1s: want 100ms to 1h")
	bad(func(o *AggregatorOptions) { o.Idle = 0 }, "--idle 0s")
	bad(func(o *AggregatorOptions) { o.Window = 7 * time.Second }, "--window 7s")
	bad(func(o *AggregatorOptions) { o.Late = "keep" }, `--late "keep"`)
	bad(func(o *AggregatorOptions) { o.TopK = 0 }, "--top-k 0")
	bad(func(o *AggregatorOptions) { o.MaxSkew = time.Millisecond }, "--max-skew 1ms")
	bad(func(o *AggregatorOptions) { o.Lateness = 11 * time.Minute }, "--lateness 11m0s")
	bad(func(o *AggregatorOptions) { o.MaxKeys = 0 }, "--max-names 0: want 1 to 65536")
	bad(func(o *AggregatorOptions) { o.MaxKeys = MaxMaxKeys + 1 }, "--max-names 65537: want 1 to 65536")
	bad(func(o *AggregatorOptions) { o.MaxAhead = 0 }, "--max-ahead 0: want 1 to 16384")
	bad(func(o *AggregatorOptions) { o.MaxAhead = MaxMaxAhead + 1 }, "--max-ahead 16385: want 1 to 16384")
	bad(func(o *AggregatorOptions) { o.MaxCorrections = 0 }, "--max-corrections 0: want 1 to 16384")
	bad(func(o *AggregatorOptions) { o.MaxCorrections = MaxMaxCorrections + 1 }, "--max-corrections 16385: want 1 to 16384")
	bad(func(o *AggregatorOptions) { o.RuleBudget = 0 }, "--rule-budget 0: want 1 to 65536")
	bad(func(o *AggregatorOptions) { o.RuleBudget = -3 }, "--rule-budget -3: want 1 to 65536")
	bad(func(o *AggregatorOptions) { o.RuleBudget = MaxRuleBudget + 1 }, "--rule-budget 65537: want 1 to 65536")
	bad(func(o *AggregatorOptions) { o.EMFTimeout = 99 * time.Millisecond }, "--emf-timeout 99ms: want 0 (each sink's own) or 100ms to 10m")
	bad(func(o *AggregatorOptions) { o.EMFTimeout = MaxEMFTimeout + time.Second }, "--emf-timeout 10m1s: want 0 (each sink's own) or 100ms to 10m")
	bad(func(o *AggregatorOptions) { o.EMFTimeout = time.Second }, `--emf-timeout 1s: only --emf agent:ADDR, logs:GROUP and metrics wait for a flush; --emf is ""`)
	bad(func(o *AggregatorOptions) { o.EMF, o.EMFTimeout = "file:emf.log", time.Second }, `--emf is "file:emf.log"`)
	bad(func(o *AggregatorOptions) { o.EMF = "bogus" }, `--emf "bogus": want stdout | file:PATH`)
	bad(func(o *AggregatorOptions) { o.EMF = "agent:" }, `--emf "agent:": want stdout`)
	bad(func(o *AggregatorOptions) { o.Partials = "partials" }, `--partials "partials": want dir:PATH or dynamodb:TABLE`)
	for _, spec := range []string{"agent:tcp://127.0.0.1:25888", "logs:ratewarden", "metrics"} {
		o := DefaultAggregatorOptions()
		o.EMF, o.EMFTimeout = spec, time.Second
		if _, err := o.Rollup(); err != nil {
			t.Errorf("--emf %s --emf-timeout 1s: %v", spec, err)
		}
	}

	// The defaults are the aggregator's.
	if ro, err := DefaultAggregatorOptions().Rollup(); err != nil || ro.MaxKeys != aggregator.DefaultMaxKeys || ro.MaxAhead != aggregator.DefaultMaxAhead ||
		ro.MaxCorrections != aggregator.DefaultMaxCorrections {
		t.Errorf("default rollup %+v, %v", ro, err)
	}
}

// TestAggregatorLambda: `lambda --aggregate` keeps o.Rules (ConfiguredRules
// of its --config and --rules), so that its EMF keeps those rules in every
// invocation instead of ranking a rule budget per invocation, and its
// window, top-K and caps; the stored partials come before the EMF; a cap
// out of range is refused.
func TestAggregatorLambda(t *testing.T) {
	seed := filepath.Join("..", "examples", "seed.yaml")
	cfg, err := config.Load(seed)
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultAggregatorOptions()
	o.Window, o.Partials, o.Namespace = 10*time.Second, "dir:"+t.TempDir(), "Edge"
	o.MaxKeys, o.MaxAhead, o.MaxCorrections = 12, 13, 14
	var stdout bytes.Buffer
	if o.Rules, err = ConfiguredRules(seed, ""); err != nil {
		t.Fatal(err)
	}
	kl, sinks, err := o.Lambda(context.Background(), &stdout)
	defer sinks.Close(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if kl.Window != 10*time.Second || kl.TopK != 100 || len(kl.Sinks) != 2 || kl.MaxKeys != 12 || kl.MaxAhead != 13 || kl.MaxCorrections != 14 {
		t.Fatalf("lambda: window %v, top-k %d, %d sinks, caps %d %d %d", kl.Window, kl.TopK, len(kl.Sinks), kl.MaxKeys, kl.MaxAhead, kl.MaxCorrections)
	}
	if _, ok := kl.Sinks[0].(*aggregator.PartialsDir); !ok {
		t.Errorf("first sink %T, want the stored partials", kl.Sinks[0])
	}
	es, ok := kl.Sinks[1].(*aggregator.EMFSink)
	if !ok || sinks.EMF == nil || es.W != sinks.EMF {
		t.Fatalf("second sink %T, want the EMF writer", kl.Sinks[1])
	}
	want := aggregator.EMFOptions{Namespace: "Edge", Source: "kinesis", RuleBudget: 50, Rules: cfg.RuleIDs()}
	if len(want.Rules) == 0 || es.Opts.Namespace != want.Namespace || es.Opts.Source != want.Source || !slices.Equal(es.Opts.Rules, want.Rules) {
		t.Errorf("EMF options %+v, want %+v", es.Opts, want)
	}

	// Without a configuration, the rule budget.
	o.Rules = nil
	kl, sinks2, err := o.Lambda(context.Background(), &stdout)
	defer sinks2.Close(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if es := kl.Sinks[1].(*aggregator.EMFSink); es.Opts.Rules != nil || es.Opts.RuleBudget != 50 {
		t.Errorf("no configuration: EMF options %+v, want the rule budget only", es.Opts)
	}
	if _, err := ConfiguredRules("no-such.yaml", ""); err == nil || !strings.Contains(err.Error(), "no-such.yaml") {
		t.Errorf("missing configuration: error %v", err)
	}
	o.MaxAhead = 0
	if _, _, err := o.Lambda(context.Background(), &stdout); err == nil || !strings.Contains(err.Error(), "--max-ahead 0: want 1 to 16384") {
		t.Errorf("bad --max-ahead: error %v", err)
	}
	o.Window = 7 * time.Second
	if _, _, err := o.Lambda(context.Background(), &stdout); err == nil || !strings.Contains(err.Error(), "--window 7s") {
		t.Errorf("bad window: error %v", err)
	}
}

// TestConfiguredRules: --config's rules, then --rules; a malformed id
// names itself and the allowed forms.
func TestConfiguredRules(t *testing.T) {
	got, err := ConfiguredRules("", " anonymous:global, ,pro:/api/search")
	if want := []string{"anonymous:global", "pro:/api/search"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("ConfiguredRules = %q, %v; want %q", got, err, want)
	}
	if _, err := ConfiguredRules("", "anonymous:global,global"); err == nil || !strings.Contains(err.Error(), `--rules "global": want rule ids`) {
		t.Errorf("bad id: error %v", err)
	}
}

// TestServeAggregator: serve's aggregator takes the serve section's
// window, lateness and top-K, the configuration's rules and the prefix its
// edge counts an IPv6 client under (identity.ipv6_prefix), and the flags'
// idle time and namespace.
func TestServeAggregator(t *testing.T) {
	cfg, err := config.Load(filepath.Join("..", "examples", "seed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Serve.Window, cfg.Serve.Lateness, cfg.Serve.TopK, cfg.Identity.IPv6Prefix = 10*time.Second, 3*time.Second, 9, 56
	flags := DefaultAggregatorOptions()
	flags.Idle, flags.Namespace, flags.MaxKeys, flags.MaxAhead, flags.MaxCorrections = 5*time.Second, "NS", 9, 10, 11
	ao := ServeAggregator(cfg, &flags)
	ro, err := ao.Rollup()
	if err != nil {
		t.Fatal(err)
	}
	want := aggregator.Options{Window: 10 * time.Second, Lateness: 3 * time.Second, Late: aggregator.LateCorrect, Idle: 5 * time.Second,
		MaxSkew: aggregator.DefaultMaxSkew, TopK: 9, MaxKeys: 9, MaxAhead: 10, MaxCorrections: 11, IPv6Prefix: 56}
	if ro != want {
		t.Errorf("rollup %+v, want %+v", ro, want)
	}
	if e := ao.EMFOptions("log"); e.Namespace != "NS" || len(e.Rules) == 0 || !slices.Equal(e.Rules, cfg.RuleIDs()) {
		t.Errorf("EMF options %+v, want the configuration's rules %q", e, cfg.RuleIDs())
	}
	if d := ServeAggregator(cfg, nil); d.Idle != time.Second || d.Namespace != "Ratewarden" {
		t.Errorf("no flags: %+v, want the defaults", d)
	}
}
