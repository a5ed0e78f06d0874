package assemble

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/config"
	emf "github.com/ratewarden/ratewarden/embedded-metrics"
)

// AggregatorOptions are the aggregator's settings as every command that
// runs it (aggregate, replay, serve, lambda --aggregate) takes them from
// its flags and configuration: the rollup, the EMF documents and the
// sinks. Start from DefaultAggregatorOptions; Rollup checks the ranges.
type AggregatorOptions struct {
	// The rollup (aggregator.Options): window length, lateness, what
	// happens to later events ("correct" or "drop"; "" is correct), max
	// skew, idle time, top-K list length, distinct names per window
	// (--max-names), windows open ahead of the latest event (--max-ahead)
	// and pending corrections (--max-corrections).
	Window, Lateness         time.Duration
	Late                     string
	MaxSkew, Idle            time.Duration
	TopK, MaxKeys            int
	MaxAhead, MaxCorrections int
	// IPv6Prefix is the length of the prefix the rollup counts an IPv6
	// client under in its top-K lists and distinct clients: the edges'
	// identity.ipv6_prefix, read from their configuration file (0: its
	// default, 64).
	IPv6Prefix int

	// The EMF documents (aggregator.EMFOptions): namespace, the rule
	// budget and the configured rules' ids, which replace the budget.
	Namespace  string
	RuleBudget int
	Rules      []string

	// Partials is where each window's partials are stored (a Partials
	// spec, "" for nowhere); EMF is the EMF sink (an EMFSink spec, "" for
	// none). Archive writes EMF for windows of any age (a replay, or a
	// backlog older than CloudWatch's 14 days).
	Partials, EMF string
	Archive       bool
	// EMFTimeout bounds a flush or close of the EMF sink (--emf-timeout,
	// the sink's FlushTimeout): 0 for each sink's own default, else
	// MinEMFTimeout to MaxEMFTimeout.
	EMFTimeout time.Duration
}

// EMF sink timeout bounds (--emf-timeout), when not 0: shorter drops a
// healthy agent's or API's documents at every flush; longer holds the
// checkpoint and Ctrl-C for as long.
const (
	MinEMFTimeout   = 100 * time.Millisecond
	MaxEMFTimeout   = 10 * time.Minute
	EMFTimeoutRange = "100ms to 10m"
)

// The ranges of --window, --lateness and --max-skew, as their errors and
// usage lines say them.
const (
	WindowRange   = "1s to 24h, dividing an hour or a multiple of one"
	LatenessRange = "0 to ten windows"
	MaxSkewRange  = "1s to 24h"
)

// Idle time bounds (--idle): how long a quiet partition waits before its
// watermark follows the clock.
const (
	MinIdle   = 100 * time.Millisecond
	MaxIdle   = time.Hour
	IdleRange = "100ms to 1h"
)

// The caps' upper bounds (--max-names, --max-ahead, --max-corrections):
// each name of a window, window ahead and pending correction holds
// sketches and top-K lists until its window leaves, so the bounds keep a
// filled cap within memory (see aggregator.DefaultMaxKeys and
// DefaultMaxAhead); the lower bound is 1.
const (
	MaxMaxKeys        = 65_536
	MaxMaxAhead       = 16_384
	MaxMaxCorrections = 16_384
)

// MaxRuleBudget bounds --rule-budget: a window keeps at most --max-names
// rules apart, each of one tier, so no window has more (tier, rule) pairs
// than that to keep. The lower bound is 1: the EMF sink took 0 or less
// for its default of 50, so --rule-budget 0 kept 50, silently.
const MaxRuleBudget = MaxMaxKeys

// DefaultAggregatorOptions returns the defaults of the aggregator's flags.
func DefaultAggregatorOptions() AggregatorOptions {
	return AggregatorOptions{Window: time.Minute, Lateness: 500 * time.Millisecond, Late: "correct", MaxSkew: aggregator.DefaultMaxSkew,
		Idle: time.Second, TopK: 100, MaxKeys: aggregator.DefaultMaxKeys, MaxAhead: aggregator.DefaultMaxAhead,
		MaxCorrections: aggregator.DefaultMaxCorrections, Namespace: "Ratewarden", RuleBudget: 50}
}

// CheckWindow refuses a window length (--window) the aggregator does not
// roll up, naming the flag and the lengths it takes: windows start on
// multiples of their length, so a length that neither divides an hour nor
// is a multiple of one would start windows at other minutes every hour.
// Every command that takes --window (aggregate, replay, report, serve,
// lambda, alerts) checks it here, so that alerts refuses the lengths the
// aggregator would never have stored.
func CheckWindow(w time.Duration) error {
	if w < time.Second || w > 24*time.Hour || time.Hour%w != 0 && w%time.Hour != 0 {
		return fmt.Errorf("--window %v: want %s", w, WindowRange)
	}
	return nil
}

// Rollup returns the rollup options, or an error naming the flag whose
// value is out of range (the EMF's --rule-budget and --emf-timeout too:
// every command that has them checks its flags here; --namespace, which
// CheckNamespace checks; and the forms of --emf and --partials).
func (o AggregatorOptions) Rollup() (aggregator.Options, error) {
	p, ok := aggregator.ParseLatePolicy(o.Late)
	if err := CheckNamespace(o.Namespace); err != nil {
		return aggregator.Options{}, err
	}
	windowErr := CheckWindow(o.Window)
	switch {
	case !ok:
		return aggregator.Options{}, fmt.Errorf("--late %q: want correct or drop", o.Late)
	case windowErr != nil:
		return aggregator.Options{}, windowErr
	case o.Lateness < 0 || o.Lateness > o.Window*10:
		return aggregator.Options{}, fmt.Errorf("--lateness %v: want %s", o.Lateness, LatenessRange)
	case o.TopK < 1 || o.TopK > 100_000:
		return aggregator.Options{}, fmt.Errorf("--top-k %d: want 1 to 100000", o.TopK)
	case o.MaxSkew < time.Second || o.MaxSkew > 24*time.Hour:
		return aggregator.Options{}, fmt.Errorf("--max-skew %v: want %s", o.MaxSkew, MaxSkewRange)
	case o.Idle < MinIdle || o.Idle > MaxIdle:
		return aggregator.Options{}, fmt.Errorf("--idle %v: want %s", o.Idle, IdleRange)
	case o.MaxKeys < 1 || o.MaxKeys > MaxMaxKeys:
		return aggregator.Options{}, fmt.Errorf("--max-names %d: want 1 to %d", o.MaxKeys, MaxMaxKeys)
	case o.MaxAhead < 1 || o.MaxAhead > MaxMaxAhead:
		return aggregator.Options{}, fmt.Errorf("--max-ahead %d: want 1 to %d", o.MaxAhead, MaxMaxAhead)
	case o.MaxCorrections < 1 || o.MaxCorrections > MaxMaxCorrections:
		return aggregator.Options{}, fmt.Errorf("--max-corrections %d: want 1 to %d", o.MaxCorrections, MaxMaxCorrections)
	case o.RuleBudget < 1 || o.RuleBudget > MaxRuleBudget:
		return aggregator.Options{}, fmt.Errorf("--rule-budget %d: want 1 to %d", o.RuleBudget, MaxRuleBudget)
	case o.IPv6Prefix < 0 || o.IPv6Prefix > 128:
		return aggregator.Options{}, fmt.Errorf("identity.ipv6_prefix %d: want 1 to 128", o.IPv6Prefix)
	case o.EMFTimeout != 0 && (o.EMFTimeout < MinEMFTimeout || o.EMFTimeout > MaxEMFTimeout):
		return aggregator.Options{}, fmt.Errorf("--emf-timeout %v: want 0 (each sink's own) or %s", o.EMFTimeout, EMFTimeoutRange)
	case o.EMFTimeout != 0 && !emfSinkWaits(o.EMF):
		// Given and ignored, it would promise a bound that nothing keeps.
		return aggregator.Options{}, fmt.Errorf("--emf-timeout %v: only --emf agent:ADDR, logs:GROUP and metrics wait for a flush; --emf is %q", o.EMFTimeout, o.EMF)
	case o.EMF != "":
		if err := checkEMFSpec(o.EMF); err != nil {
			return aggregator.Options{}, err
		}
	}
	if o.Partials != "" {
		if err := CheckPartialsSpec(o.Partials); err != nil {
			return aggregator.Options{}, err
		}
	}
	return aggregator.Options{Window: o.Window, Lateness: o.Lateness, Late: p, Idle: o.Idle, MaxSkew: o.MaxSkew, TopK: o.TopK, MaxKeys: o.MaxKeys,
		MaxAhead: o.MaxAhead, MaxCorrections: o.MaxCorrections, IPv6Prefix: o.IPv6Prefix}, nil
}

// CheckNamespace checks the value of a --namespace flag with
// emf.CheckNamespace, the rule CloudWatch and every EMF document hold
// it to: an error names the flag, what is wrong and the rule, so that a
// namespace CloudWatch would refuse stops the command at the start
// (aggregate, serve, lambda --aggregate, dashboards), where it made
// every document invalid.
func CheckNamespace(ns string) error {
	var inv *emf.InvalidError
	if err := emf.CheckNamespace(ns); errors.As(err, &inv) {
		return fmt.Errorf("--namespace %q %s: want %s", ns, inv.Problem, inv.Allowed)
	}
	return nil
}

// EMFOptions returns the EMF options of the documents of source (the
// idempotency key's source, such as "log" or a stream name).
func (o AggregatorOptions) EMFOptions(source string) aggregator.EMFOptions {
	return aggregator.EMFOptions{Namespace: o.Namespace, Source: source, RuleBudget: o.RuleBudget, Rules: o.Rules}
}

// ConfiguredRules returns the rule ids of the configuration file path
// followed by those of list (comma-separated, as --rules takes them): the
// rules whose [Tier, Rule] EMF documents are never folded into __other__.
// Both empty is none.
func ConfiguredRules(path string, list string) ([]string, error) {
	var ids []string
	if path != "" {
		cfg, err := config.Load(path)
		if err != nil {
			return nil, err
		}
		ids = cfg.RuleIDs()
	}
	return appendRuleList(ids, list)
}

// AggregatorSinks are the sinks AggregatorOptions name, opened.
type AggregatorSinks struct {
	// Sinks are the stored partials first, then the EMF: the EMF of an
	// output is written only once its partials are stored, so a retry
	// after a store failure does not emit it twice.
	Sinks []aggregator.Sink
	EMF   *emf.Writer // nil without an EMF sink
	// EMFSink writes through EMF (nil without one): what it rejected,
	// and its Warn, which the command sets before the run.
	EMFSink *aggregator.EMFSink
}

// EMFRejected returns what the EMF sink rejected so far (none without
// one).
func (s *AggregatorSinks) EMFRejected() aggregator.EMFRejected {
	if s == nil || s.EMFSink == nil {
		return aggregator.EMFRejected{}
	}
	return s.EMFSink.Rejected()
}

// Close flushes and closes the EMF writer, if any.
func (s *AggregatorSinks) Close(ctx context.Context) error {
	if s.EMF == nil {
		return nil
	}
	return s.EMF.Close(ctx)
}

// OpenSinks opens the partials store and the EMF sink o names (stdout is
// the EMF sink "stdout"), the EMF documents marked with source. Close the
// result even on a later error.
func (o AggregatorOptions) OpenSinks(ctx context.Context, stdout io.Writer, source string) (*AggregatorSinks, error) {
	s := &AggregatorSinks{}
	if o.Partials != "" {
		store, err := Partials(ctx, o.Partials)
		if err != nil {
			return s, err
		}
		s.Sinks = append(s.Sinks, store)
	}
	if o.EMF != "" {
		sink, err := EMFSink(ctx, o.EMF, stdout, o.EMFTimeout)
		if err != nil {
			return s, err
		}
		// Between two outputs the aggregator can wait for a full sink
		// rather than lose an output's documents to it.
		w, err := emf.NewWriter(emf.WriterOptions{IgnoreTimestampWindow: o.Archive, WaitForRoom: true}, sink)
		if err != nil {
			return s, err
		}
		s.EMF, s.EMFSink = w, &aggregator.EMFSink{W: w, Opts: o.EMFOptions(source)}
		s.Sinks = append(s.Sinks, s.EMFSink)
	}
	return s, nil
}

// AggregatorKinesis fills in the AWS clients of a Kinesis aggregator (the
// SDK's configuration the standard way) and its state store: the
// directory stateDir, or the DynamoDB table stateTable under "<consumer
// group>/<stream>".
func AggregatorKinesis(ctx context.Context, o *aggregator.KinesisOptions, stateDir, stateTable string) error {
	cfg, err := AWS(ctx, "")
	if err != nil {
		return err
	}
	dc := dynamodb.NewFromConfig(cfg)
	o.Stream, o.Leases = kinesis.NewFromConfig(cfg), dc
	o.Store = &aggregator.StateDir{Dir: stateDir}
	if stateTable != "" {
		o.Store = &aggregator.StateTable{API: dc, Table: stateTable, Prefix: o.Source.Group + "/" + o.Source.Stream}
	}
	return nil
}

// appendRuleList appends the rule ids of list (comma-separated, such as
// anonymous:global,pro:/api/search) to ids.
func appendRuleList(ids []string, list string) ([]string, error) {
	for id := range strings.SplitSeq(list, ",") {
		if id = strings.TrimSpace(id); id == "" {
			continue
		}
		if tier, rest, ok := strings.Cut(id, ":"); !ok || tier == "" || rest == "" {
			return nil, fmt.Errorf("--rules %q: want rule ids <tier>:global or <tier>:<path prefix>, such as anonymous:global", id)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// LambdaEMF is the EMF sink of `lambda --aggregate`: stdout, which
// CloudWatch Logs reads.
const LambdaEMF = "stdout"

// Lambda returns the aggregator of `lambda --aggregate`: a
// KinesisLambda writing the stored partials (o.Partials, when given) and
// then the EMF documents on stdout (LambdaEMF), o.Rules (ConfiguredRules
// of its --config and --rules) with documents of their own, the rollup's
// window, top-K length and caps (MaxKeys, MaxAhead, MaxCorrections, on
// the windows of a commit group). Close the sinks even on an error.
func (o AggregatorOptions) Lambda(ctx context.Context, stdout io.Writer) (*aggregator.KinesisLambda, *AggregatorSinks, error) {
	ro, err := o.Rollup()
	if err != nil {
		return nil, &AggregatorSinks{}, err
	}
	o.EMF = LambdaEMF
	sinks, err := o.OpenSinks(ctx, stdout, "kinesis")
	if err != nil {
		return nil, sinks, err
	}
	return &aggregator.KinesisLambda{Window: ro.Window, TopK: ro.TopK, MaxKeys: ro.MaxKeys, MaxAhead: ro.MaxAhead,
		MaxCorrections: ro.MaxCorrections, IPv6Prefix: ro.IPv6Prefix, Sinks: sinks.Sinks}, sinks, nil
}
