package aggregator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	emf "github.com/ratewarden/ratewarden/embedded-metrics"
)

// Metric names and dimension keys of the EMF documents the aggregator
// writes: the catalogue dashboards and alarms are built from.
const (
	MetricRequests         = "Requests"
	MetricAllowed          = "Allowed"
	MetricBlocked          = "Blocked"
	MetricChallenged       = "Challenged"
	MetricTokenPassed      = "TokenPassed"
	MetricFailOpen         = "FailOpen"
	MetricFailClosed       = "FailClosed"
	MetricLocalLimit       = "LocalLimit"
	MetricShadowBlocked    = "ShadowBlocked"
	MetricDenyListed       = "DenyListed"
	MetricAllowListed      = "AllowListed"
	MetricRejected         = "Rejected"
	MetricUniqueClients    = "UniqueClients"
	MetricStoreLatency     = "StoreLatency"
	MetricStoreLatencyN    = "StoreLatencyCount"
	MetricDecisionsDropped = "DecisionsDropped"
	MetricOriginErrors     = "OriginErrors"
	MetricOriginTimeouts   = "OriginTimeouts"
	MetricUpstreamLatency  = "UpstreamLatency"
	MetricUpstreamLatencyN = "UpstreamLatencyCount"

	DimTier    = "Tier"
	DimRule    = "Rule"
	DimOutcome = "Outcome"
	DimNode    = "Node"

	// OtherRule is the Rule dimension value of the rules past the
	// cardinality budget, folded together.
	OtherRule = "__other__"
)

// outcomeMetrics names the count metric of each outcome.
var outcomeMetrics = [decisions.NumOutcomes]string{
	decisions.Allow:       MetricAllowed,
	decisions.Block:       MetricBlocked,
	decisions.Challenge:   MetricChallenged,
	decisions.TokenPass:   MetricTokenPassed,
	decisions.FailOpen:    MetricFailOpen,
	decisions.FailClosed:  MetricFailClosed,
	decisions.LocalLimit:  MetricLocalLimit,
	decisions.ShadowBlock: MetricShadowBlocked,
	decisions.DenyListed:  MetricDenyListed,
	decisions.AllowListed: MetricAllowListed,
	decisions.Rejected:    MetricRejected,
}

// latencyValues is how many values StoreLatency carries per document.
const latencyValues = 100

// EMFOptions configure the EMF documents of a partial.
type EMFOptions struct {
	Namespace string // default "Ratewarden"
	Source    string // names the source in the idempotency key, such as "log" or a stream name
	// Rules are the configured rules' ids (config.Config.RuleIDs:
	// "<tier>:global", "<tier>:<path prefix>"). When given, each of them
	// that has traffic gets [Tier, Rule] documents of its own under its own
	// tier, and every other (tier, rule) pair is folded into OtherRule. The
	// kept set is then the same in every partition and window, so
	// CloudWatch's sum of Rule=X over the partitions of a window is X's
	// count, and names the configuration does not have, however many,
	// cannot crowd a configured rule out. RuleBudget is then unused.
	Rules []string
	// RuleBudget, without Rules, is how many (tier, rule) pairs per output
	// get documents of their own, the busiest first; the others are folded
	// into OtherRule. Default 50. The ranking is per output, so per
	// partition: two shards of one window may keep different rules, and a
	// rule's sum over the partitions then misses what the shards that
	// folded it counted (that is in their OtherRule).
	RuleBudget int
}

func (o EMFOptions) withDefaults() EMFOptions {
	if o.Namespace == "" {
		o.Namespace = "Ratewarden"
	}
	if o.RuleBudget <= 0 {
		o.RuleBudget = 50
	}
	return o
}

// Documents returns the EMF documents of one output of partition, in a
// fixed order: service-wide, by tier, by tier and rule, by outcome, by
// node. Every document is stamped with the window's start and carries the
// output's idempotency key: source, partition, window, sequence range, and
// whether it is a correction. The metrics of windows shorter than a minute
// are high-resolution (StorageResolution 1).
func Documents(o EMFOptions, partition string, out Output) []emf.Document {
	o = o.withDefaults()
	p := out.Partial
	props := []emf.Property{
		emf.StringProperty("rw_key", o.Source+"/"+partition+"/"+strconv.FormatInt(p.Start.UnixMilli(), 10)+"/"+out.RangeKey()),
		emf.StringProperty("rw_source", o.Source),
		emf.StringProperty("rw_partition", partition),
		emf.StringProperty("rw_window_start", p.Start.UTC().Format(time.RFC3339Nano)),
		emf.StringProperty("rw_window", p.Size.String()),
		emf.StringProperty("rw_range", out.RangeKey()),
	}
	if out.Correction {
		props = append(props, emf.StringProperty("rw_correction", "true"))
	}
	doc := func(dims []emf.Dimension, ms []emf.Metric) emf.Document {
		var sets [][]emf.Dimension
		if len(dims) > 0 {
			sets = [][]emf.Dimension{dims}
		}
		return emf.Document{Namespace: o.Namespace, Timestamp: p.Start, Dimensions: sets, Properties: props, Metrics: ms}
	}

	var docs []emf.Document
	// Service-wide.
	all := p.Counts.ByOutcome()
	ms := outcomeCountMetrics(all)
	if u := Estimate(p.Clients.All); u > 0 {
		ms = append(ms, countMetric(MetricUniqueClients, u))
	}
	if n := p.Latency.Count(); n > 0 {
		ms = append(ms, emf.Metric{Name: MetricStoreLatency, Unit: emf.Milliseconds, Values: latencyLadder(&p.Latency, latencyValues)},
			countMetric(MetricStoreLatencyN, n))
	}
	if n := p.Upstream.Count(); n > 0 {
		ms = append(ms, emf.Metric{Name: MetricUpstreamLatency, Unit: emf.Milliseconds, Values: latencyLadder(&p.Upstream.Latency, latencyValues)},
			countMetric(MetricUpstreamLatencyN, n))
	}
	if p.Counts.Dropped > 0 {
		ms = append(ms, countMetric(MetricDecisionsDropped, p.Counts.Dropped))
	}
	originErrs := map[tierRule]*[2]uint64{} // errors, timeouts; "" rule: the tier's total
	var allErrs [2]uint64
	for k, n := range p.Counts.Errors {
		if !strings.HasPrefix(k.Error, "upstream_") {
			continue
		}
		i := 0
		if k.Error == decisions.UpstreamTimeout || k.Error == decisions.UpstreamReadTimeout {
			i = 1
		}
		for _, key := range []tierRule{{k.Tier, ""}, {k.Tier, k.Rule}} {
			e := originErrs[key]
			if e == nil {
				e = new([2]uint64)
				originErrs[key] = e
			}
			e[0] += n
			e[i] += n * uint64(i)
		}
		allErrs[0] += n
		allErrs[i] += n * uint64(i)
	}
	ms = append(ms, originMetrics(allErrs)...)
	if len(ms) > 0 {
		docs = append(docs, doc(nil, ms))
	}

	// By tier, and by tier and rule within the budget.
	tiers := map[string]*[decisions.NumOutcomes]uint64{}
	rules := map[tierRule]*[decisions.NumOutcomes]uint64{}
	for k, n := range p.Counts.Cells {
		oc := OutcomeIndex(k.Outcome)
		t := tiers[k.Tier]
		if t == nil {
			t = new([decisions.NumOutcomes]uint64)
			tiers[k.Tier] = t
		}
		t[oc] += n
		if k.Rule == "" {
			continue // lists decide without a rule
		}
		r := rules[tierRule{k.Tier, k.Rule}]
		if r == nil {
			r = new([decisions.NumOutcomes]uint64)
			rules[tierRule{k.Tier, k.Rule}] = r
		}
		r[oc] += n
	}
	for _, tier := range sortedKeys(tiers) {
		ms := outcomeCountMetrics(*tiers[tier])
		if u := Estimate(p.Clients.ByTier[tier]); u > 0 {
			ms = append(ms, countMetric(MetricUniqueClients, u))
		}
		if e := originErrs[tierRule{tier, ""}]; e != nil {
			ms = append(ms, originMetrics(*e)...)
		}
		docs = append(docs, doc([]emf.Dimension{{Name: DimTier, Value: dimValue(tier)}}, ms))
	}
	keep := o.keepRule()
	if keep == nil {
		keep = busiest(rules, o.RuleBudget)
	}
	folded := map[string]*[decisions.NumOutcomes]uint64{}
	kept := make([]tierRule, 0, len(rules))
	for k, c := range rules {
		if keep(k) && dimValue(k.rule) != OtherRule {
			kept = append(kept, k)
			continue
		}
		f := folded[k.tier]
		if f == nil {
			f = new([decisions.NumOutcomes]uint64)
			folded[k.tier] = f
		}
		for j, n := range c {
			f[j] += n
		}
	}
	slices.SortFunc(kept, func(a, b tierRule) int { return cmp.Or(cmp.Compare(a.tier, b.tier), cmp.Compare(a.rule, b.rule)) })
	for _, k := range kept {
		ms := outcomeCountMetrics(*rules[k])
		if e := originErrs[k]; e != nil {
			ms = append(ms, originMetrics(*e)...)
		}
		docs = append(docs, doc([]emf.Dimension{{Name: DimTier, Value: dimValue(k.tier)}, {Name: DimRule, Value: dimValue(k.rule)}}, ms))
	}
	for _, tier := range sortedKeys(folded) {
		docs = append(docs, doc([]emf.Dimension{{Name: DimTier, Value: dimValue(tier)}, {Name: DimRule, Value: OtherRule}},
			outcomeCountMetrics(*folded[tier])))
	}

	// By outcome.
	for oc, n := range all {
		if n > 0 {
			docs = append(docs, doc([]emf.Dimension{{Name: DimOutcome, Value: decisions.Outcome(oc).String()}},
				[]emf.Metric{countMetric(MetricRequests, n)}))
		}
	}
	// By node.
	for _, node := range sortedKeys(p.Counts.ByNode) {
		docs = append(docs, doc([]emf.Dimension{{Name: DimNode, Value: dimValue(node)}}, outcomeCountMetrics(*p.Counts.ByNode[node])))
	}
	// A window shorter than a minute is only worth its length if
	// CloudWatch keeps its datapoints apart: at standard resolution it
	// would sum a minute's windows into one point.
	if res := resolution(p.Size); res != emf.Standard {
		for i := range docs {
			for j := range docs[i].Metrics {
				docs[i].Metrics[j].Resolution = res
			}
		}
	}
	return docs
}

// resolution returns the storage resolution of the metrics of windows of
// length size: High (one second) for windows shorter than a minute, which
// CloudWatch would otherwise fold into one-minute datapoints, Standard
// for the others.
func resolution(size time.Duration) emf.Resolution {
	if size < time.Minute {
		return emf.High
	}
	return emf.Standard
}

// tierRule is a [Tier, Rule] dimension set's pair.
type tierRule struct{ tier, rule string }

// keepRule returns whether a (tier, rule) pair gets documents of its own
// under o.Rules, or nil without them. A pair is kept when its rule is
// configured and is its tier's (the id's part before the colon), so that
// a decision naming another tier cannot add pairs.
func (o EMFOptions) keepRule() func(tierRule) bool {
	if len(o.Rules) == 0 {
		return nil
	}
	known := make(map[string]bool, len(o.Rules))
	for _, id := range o.Rules {
		known[id] = true
	}
	return func(k tierRule) bool {
		tier, _, ok := strings.Cut(k.rule, ":")
		return ok && tier == k.tier && known[k.rule]
	}
}

// busiest returns whether a (tier, rule) pair is among the budget pairs
// of rules with the most decisions (ties by tier, then rule).
func busiest(rules map[tierRule]*[decisions.NumOutcomes]uint64, budget int) func(tierRule) bool {
	total := func(c *[decisions.NumOutcomes]uint64) (s uint64) {
		for _, n := range c {
			s += n
		}
		return s
	}
	ranked := make([]tierRule, 0, len(rules))
	for k := range rules {
		ranked = append(ranked, k)
	}
	slices.SortFunc(ranked, func(a, b tierRule) int {
		return cmp.Or(cmp.Compare(total(rules[b]), total(rules[a])), cmp.Compare(a.tier, b.tier), cmp.Compare(a.rule, b.rule))
	})
	top := make(map[tierRule]bool, min(len(ranked), budget))
	for _, k := range ranked[:min(len(ranked), budget)] {
		top[k] = true
	}
	return func(k tierRule) bool { return top[k] }
}

// dimValue makes a tier, rule or node name a dimension value EMF accepts:
// 1 to 1024 printable ASCII characters, not only spaces. Those names come
// from configurations and edges, not from this aggregator, and a document
// CloudWatch would refuse must not hold the aggregator up: other bytes are
// percent-encoded, "" and blank names become "-", and a long one is cut.
func dimValue(s string) string {
	clean := strings.TrimSpace(s) != ""
	for i := 0; clean && i < len(s); i++ {
		clean = s[i] >= 0x20 && s[i] < 0x7f
	}
	if !clean && strings.TrimSpace(s) != "" {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			if c := s[i]; c >= 0x20 && c < 0x7f {
				b.WriteByte(c)
			} else {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		}
		s, clean = b.String(), true
	}
	if !clean {
		return "-"
	}
	if len(s) > emf.MaxDimensionValueLen {
		s = s[:emf.MaxDimensionValueLen]
	}
	return s
}

func countMetric(name string, n uint64) emf.Metric {
	return emf.Metric{Name: name, Unit: emf.Count, Values: []float64{float64(n)}}
}

// outcomeCountMetrics returns Requests and one metric per outcome, zeros
// included, so that a dashboard's sums and ratios see every window.
// Requests counts the unknown outcomes too (OutcomeIndex), which have no
// metric of their own.
func outcomeCountMetrics(c [decisions.NumOutcomes]uint64) []emf.Metric {
	var total uint64
	ms := make([]emf.Metric, 0, decisions.NumOutcomes)
	ms = append(ms, emf.Metric{})
	for oc, n := range c {
		total += n
		if name := outcomeMetrics[oc]; name != "" {
			ms = append(ms, countMetric(name, n))
		}
	}
	ms[0] = countMetric(MetricRequests, total)
	return ms
}

// originMetrics returns OriginErrors and OriginTimeouts (of e: errors,
// timeouts), when there were any.
func originMetrics(e [2]uint64) []emf.Metric {
	if e[0] == 0 {
		return nil
	}
	return []emf.Metric{countMetric(MetricOriginErrors, e[0]), countMetric(MetricOriginTimeouts, e[1])}
}

// latencyLadder returns up to n values whose distribution is the
// sketch's: every value when there are at most n, else the quantiles at
// (i+0.5)/n. EMF has no counts, so a window's latencies are summarized by
// n evenly spaced quantiles; StoreLatencyCount carries the true count.
func latencyLadder(l *Latency, n int) []float64 {
	if c := l.Count(); c <= uint64(n) {
		var vs []float64
		l.Bins(func(v, c float64) {
			for range int(c + 0.5) {
				vs = append(vs, v)
			}
		})
		return vs
	}
	vs := make([]float64, n)
	for i := range vs {
		vs[i] = l.Quantile((float64(i) + 0.5) / float64(n))
	}
	return vs
}

// EMFSink writes each output's documents through an emf.Writer. A rerun of
// an output writes the same documents with the same rw_key.
type EMFSink struct {
	// W should wait for room in a full sink (emf.WriterOptions.WaitForRoom,
	// as assemble opens it), so that the aggregator goes at the sink's
	// pace; without it, a document a full sink refuses is dropped and
	// counted at once.
	W    *emf.Writer
	Opts EMFOptions
	// Now is when CloudWatch reads the documents (the timestamp check);
	// default time.Now.
	Now func() time.Time
	// Warn, if set, is called the first time documents are rejected for
	// each reason (EMFRejectReasons), with the error of that document, so
	// that a run says once why its documents vanish, not once for each.
	// It is called from Write; set it before the first.
	Warn func(reason string, err error)

	rejected [NumEMFRejects]atomic.Uint64
}

// The reasons an EMFSink rejects a document, indexes of
// EMFRejectReasons, as EMFRejected counts them.
const (
	EMFTooOld     = iota // stamped more than 14 days before now
	EMFTooNew            // more than 2 hours after now
	EMFInvalid           // any other rule of the specification broken
	NumEMFRejects        // how many reasons there are
)

// EMFRejectReasons name the reasons an EMFSink rejects documents, in the
// words of EMFRejected.String and EMFSink.Warn: older than 14 days, over
// 2h ahead, invalid.
var EMFRejectReasons = [NumEMFRejects]string{EMFTooOld: "older than 14 days", EMFTooNew: "over 2h ahead", EMFInvalid: "invalid"}

// EMFRejected counts the documents an EMFSink did not write, or wrote in
// part, because CloudWatch would refuse them: stamped out of the time it
// accepts (a window older than 14 days, as when an old log is read again,
// or more than 2 hours ahead of the clock), or invalid otherwise (a
// metric left out counts its document). A plain value.
type EMFRejected struct {
	TooOld, TooNew, Invalid uint64
}

// Total is the documents rejected for any reason.
func (r EMFRejected) Total() uint64 { return r.TooOld + r.TooNew + r.Invalid }

// String says "emf rejected N (older than 14 days N, over 2h ahead N,
// invalid N)", as the summary lines of the commands print it.
func (r EMFRejected) String() string {
	return fmt.Sprintf("emf rejected %d (%s %d, %s %d, %s %d)", r.Total(), EMFRejectReasons[EMFTooOld], r.TooOld,
		EMFRejectReasons[EMFTooNew], r.TooNew, EMFRejectReasons[EMFInvalid], r.Invalid)
}

// Rejected returns what s has rejected so far. It is safe for concurrent
// use.
func (s *EMFSink) Rejected() EMFRejected {
	return EMFRejected{TooOld: s.rejected[EMFTooOld].Load(), TooNew: s.rejected[EMFTooNew].Load(), Invalid: s.rejected[EMFInvalid].Load()}
}

// reject counts a document refused with err, which holds nothing but
// *emf.InvalidError, and warns the first time for its reason.
func (s *EMFSink) reject(err error) {
	reason := EMFInvalid
	if te := (*emf.TimestampError)(nil); errors.As(err, &te) {
		reason = EMFTooOld
		if te.Ahead {
			reason = EMFTooNew
		}
	}
	if s.rejected[reason].Add(1) == 1 && s.Warn != nil {
		s.Warn(EMFRejectReasons[reason], err)
	}
}

var _ Sink = (*EMFSink)(nil)

// Write writes o's documents.
func (s *EMFSink) Write(ctx context.Context, partition string, o Output) error {
	return s.write(ctx, partition, o, s.W.Write)
}

// WriteAgain writes o's documents, delivered again after a crash, except
// to a sink that holds them already (emf.Writer.WriteAgain): a file
// written before the crash is not given them twice.
func (s *EMFSink) WriteAgain(ctx context.Context, partition string, o Output) error {
	return s.write(ctx, partition, o, s.W.WriteAgain)
}

func (s *EMFSink) write(ctx context.Context, partition string, o Output, write func(context.Context, *emf.Document, time.Time) error) error {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	t := now()
	for _, d := range Documents(s.Opts, partition, o) {
		// A document the specification refuses will be refused again on
		// every retry: the writer counts it (Stats().Rejected, on
		// /metrics) and the output goes on. Only a sink's failure, which a
		// retry may mend, fails the write.
		if err := write(ctx, &d, t); err != nil && !onlyCounted(err) {
			return fmt.Errorf("write emf: %w", err)
		} else if err != nil && !sinkDropped(err) {
			// A sink behind or full counts its own drops
			// (SinkStats.Dropped); only documents refused for what they
			// are are rejections.
			s.reject(err)
		}
	}
	return nil
}

// onlyCounted reports whether err, perhaps joined, holds nothing but
// documents dropped and counted for good: *emf.InvalidError (refused by
// the specification), and a sink's drops (sinkDropped). Delivering the
// output again would not bring them back, and would send again, to be
// summed twice, the documents of the output that the sink took.
func onlyCounted(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if e != nil && !onlyCounted(e) {
				return false
			}
		}
		return true
	}
	var inv *emf.InvalidError
	return errors.As(err, &inv) || sinkDropped(err)
}

// sinkDropped reports whether err is a sink's drop, counted in its
// SinkStats.Dropped: emf.ErrSinkBehind (a sink that could not deliver in
// time, the CloudWatch agent or API away or hung) or emf.ErrSinkFull (a
// full buffer that the writer waited for to make room, in vain).
func sinkDropped(err error) bool {
	return errors.Is(err, emf.ErrSinkBehind) || errors.Is(err, emf.ErrSinkFull)
}

// Flush asks the writer's sinks to deliver what they buffer. A sink that
// is behind has dropped and counted what it could not deliver in time
// (its Stats, on /metrics, and the aggregate command's last lines): the
// partials and the checkpoint go on without it.
func (s *EMFSink) Flush(ctx context.Context) error {
	if err := s.W.Flush(ctx); err != nil && !onlyCounted(err) {
		return err
	}
	return nil
}
