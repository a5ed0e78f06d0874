package alerts

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/decisions"
)

// topIdentities is how many identities an alert's evidence names.
const topIdentities = 10

// tierRule is one cell of the detectors: a tier and a rule ("" for the
// decisions of the lists, which apply no rule).
type tierRule struct{ tier, rule string }

// findings are the detectors' output for one window: the conditions that
// hold (as alerts to raise, or to keep open) and the value of every series
// for the baselines.
type findings struct {
	alerts []Alert
	values map[string]float64
}

// Series keys: measure|tier|rule.
func seriesKey(measure string, k tierRule) string { return measure + "|" + k.tier + "|" + k.rule }

// tokenIssued ends the reason of the token endpoint's decisions that
// issued a challenge token (edge/token.go).
const tokenIssued = "token issued"

// detect runs every detector over p.
func (e *Engine) detect(p *aggregator.Partial) *findings {
	f := &findings{values: map[string]float64{}}
	cells := map[tierRule]*[decisions.NumOutcomes]uint64{}
	var issued uint64
	for k, n := range p.Counts.Cells {
		if int(k.Outcome) >= decisions.NumOutcomes {
			continue
		}
		tr := tierRule{k.Tier, k.Rule}
		c := cells[tr]
		if c == nil {
			c = new([decisions.NumOutcomes]uint64)
			cells[tr] = c
		}
		c[k.Outcome] += n
		if strings.HasSuffix(k.Reason, tokenIssued) {
			issued += n
		}
	}
	keys := make([]tierRule, 0, len(cells))
	for k := range cells {
		keys = append(keys, k)
	}
	sortTierRules(keys)
	win := window{p: p, start: p.Start, end: p.End(), size: p.Size}
	for _, k := range keys {
		c := cells[k]
		var total, refused uint64
		for oc, n := range c {
			total += n
			if aggregator.Refused(decisions.Outcome(oc)) {
				refused += n
			}
		}
		e.rate(f, win, k, TypeRequestRate, "requests", float64(total), p.Offenders.RequestsByRule[k.rule])
		e.rate(f, win, k, TypeRefusalRate, "refusals", float64(refused), p.Offenders.RefusalsByRule[k.rule])
		if k.rule != "" {
			e.heavyHitters(f, win, k)
			e.stuffing(f, win, k, float64(total))
		}
		if e.watch[k.tier] && k.rule != "" {
			e.falsePositive(f, win, k, float64(c[decisions.Block]+c[decisions.Challenge]+c[decisions.LocalLimit]))
		}
		e.failOpen(f, win, k, c)
		e.solveRate(f, win, k, c[decisions.Challenge], c[decisions.TokenPass], issued)
	}
	e.drops(f, win)
	e.unsolved(f, win)
	return f
}

// window is the window the detectors look at.
type window struct {
	p          *aggregator.Partial
	start, end time.Time
	size       time.Duration
}

// alert returns an alert of the window with its common fields filled.
func (w window) alert(typ, severity, key string, k tierRule, summary string, ev Evidence, ids []string) Alert {
	return Alert{Type: typ, Severity: severity, Key: typ + "/" + key, Tier: k.tier, Rule: k.rule, Summary: summary,
		WindowStart: w.start, WindowEnd: w.end, Identities: ids, Evidence: ev}
}

// subject names a tier and rule in keys and summaries.
func subject(k tierRule) string {
	if k.rule == "" {
		return k.tier + "/(lists)"
	}
	return k.tier + "/" + k.rule
}

// identities returns up to n identities of top, heaviest first.
func identities(top *aggregator.TopK, n int) []string {
	if top == nil {
		return nil
	}
	hs := top.Top(n)
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.Client.String()
	}
	return out
}

// rate is the request-rate and refusal-rate detector of one tier and rule:
// v against its baseline, with enough history, enough volume, a robust
// z-score and a ratio all required, so that a smooth daily rise does not
// alert and a jump does.
func (e *Engine) rate(f *findings, w window, k tierRule, typ, measure string, v float64, top *aggregator.TopK) {
	key := seriesKey(measure, k)
	f.values[key] = v
	b := e.baseline(key, w.start)
	z := b.z(v)
	if b.n < e.c.MinHistory || v < float64(e.c.MinRequests) || v < e.c.Ratio*b.expected || z < e.c.ZScore {
		return
	}
	sev := Warning
	if z >= 4*e.c.ZScore {
		sev = Critical
	}
	f.alerts = append(f.alerts, w.alert(typ, sev, subject(k), k,
		fmt.Sprintf("%s %s: %.0f in the window, baseline %.1f (z %.1f)", subject(k), measure, v, b.expected, z),
		Evidence{Observed: v, Baseline: b.expected, Score: round(z), Counts: baseCounts(b, measure, v)},
		identities(top, topIdentities)))
}

// baseCounts are the counts behind a baseline: the observed value, the
// history's length, and the median, moving mean and seasonal profile
// (rounded down to whole requests).
func baseCounts(b baseline, measure string, v float64) map[string]uint64 {
	return map[string]uint64{measure: uint64(v), "history_windows": uint64(b.n), "median": uint64(b.median),
		"ewma": uint64(b.ewma), "seasonal": uint64(b.seasonal)}
}

// perWindow is the most a rule lets one identity make in a window of
// size: its limit, prorated when the window is longer than the rule's.
func perWindow(l RuleLimit, size time.Duration) float64 {
	return float64(l.Limit) * max(1, float64(size)/float64(l.Window))
}

// heavyHitters raises an alert for each identity among the rule's top
// requesters whose count, at its lower bound, is over Factor × the rule's
// limit in the window. The alert's key names the identity, so an identity
// is reported when it enters and resolved when it leaves.
func (e *Engine) heavyHitters(f *findings, w window, k tierRule) {
	l, ok := e.o.Limits[k.rule]
	top := w.p.Offenders.RequestsByRule[k.rule]
	if !ok || top == nil {
		return
	}
	limit := perWindow(l, w.size)
	threshold := e.c.HeavyHitter.Factor * limit
	bits := e.v6bits()
	var refused []counted // read at the first heavy hitter
	for _, h := range byCounted(top, bits, uint64(threshold)) {
		n := float64(h.count - h.err)
		if n <= threshold {
			continue
		}
		if refused == nil {
			refused = byCounted(w.p.Offenders.RefusalsByRule[k.rule], bits, 0)
		}
		id := h.id()
		sev := Warning
		if n > 4*threshold {
			sev = Critical
		}
		counts := map[string]uint64{"requests": h.count - h.err, "limit": uint64(limit)}
		for _, r := range refused {
			if r.client == h.client {
				counts["refused"] = r.count - r.err
			}
		}
		if h.addrs > 1 {
			counts["addresses"] = uint64(h.addrs)
		}
		f.alerts = append(f.alerts, w.alert(TypeHeavyHitter, sev, k.rule+"/"+id, k,
			fmt.Sprintf("%s made %.0f requests on %s in the window, %.0f× its limit of %.0f", id, n, subject(k), n/limit, limit),
			Evidence{Observed: n, Baseline: limit, Score: round(n / limit), Counts: counts}, []string{id}))
	}
}

// v6bits is the length of the prefix the edge counts an IPv6 client
// under (identity.ipv6_prefix; 0 takes 64).
func (e *Engine) v6bits() int {
	if e.o.IPv6Prefix <= 0 {
		return 64
	}
	return e.o.IPv6Prefix
}

// counted is a client of a top-K as the edge counts it: a user, an IPv4
// address, or an IPv6 prefix (client.Bits its length) with the clients of
// it the top-K holds added up: their upper bounds, and their errors, so
// that count - err stays a lower bound. A partial's lists hold IPv6
// clients by their prefix already (aggregator.Partial.IPv6Prefix); one of
// encoding version 5 or earlier, or one rolled up with a longer prefix,
// holds addresses or longer prefixes, added up here.
type counted struct {
	client     aggregator.Client
	count, err uint64
	addrs      int
}

// id is the client as lists name it: "2001:db8:1:2::/64" for a prefix.
func (c *counted) id() string { return c.client.String() }

// byCounted returns the clients of top as the edge counts them, IPv6
// clients by their prefix of bits, whose count (an upper bound) is over
// over, heaviest first by count (ties by client). Without IPv6 clients to
// widen it is top's own order, cut at the first not over over.
func byCounted(top *aggregator.TopK, bits int, over uint64) []counted {
	if top == nil {
		return nil
	}
	hs := top.Top(top.Len())
	wider := func(c aggregator.Client) (aggregator.Client, bool) {
		if c.User != "" || !c.Addr.Is6() || c.Addr.Is4In6() || bits >= 128 || c.Bits != 0 && int(c.Bits) <= bits {
			return c, false
		}
		return aggregator.AddrClient(c.Addr, bits), true
	}
	if !slices.ContainsFunc(hs, func(h aggregator.Hitter) bool { _, ok := wider(h.Client); return ok }) {
		var out []counted
		for _, h := range hs {
			if h.Count <= over {
				break // heaviest first by Count
			}
			out = append(out, counted{client: h.Client, count: h.Count, err: h.Err, addrs: 1})
		}
		return out
	}
	out := make([]counted, len(hs))
	for i, h := range hs {
		c, _ := wider(h.Client)
		out[i] = counted{client: c, count: h.Count, err: h.Err, addrs: 1}
	}
	slices.SortFunc(out, func(a, b counted) int { return aggregator.CompareClients(a.client, b.client) })
	merged := out[:0]
	for _, c := range out {
		if n := len(merged); n > 0 && merged[n-1].client == c.client {
			m := &merged[n-1]
			m.count, m.err, m.addrs = m.count+c.count, m.err+c.err, m.addrs+1
			continue
		}
		merged = append(merged, c)
	}
	slices.SortStableFunc(merged, func(a, b counted) int { return cmp.Compare(b.count, a.count) })
	cut := slices.IndexFunc(merged, func(c counted) bool { return c.count <= over })
	if cut >= 0 {
		merged = merged[:cut]
	}
	return merged
}

// stuffing is the credential-stuffing detector: many distinct clients on
// one rule, each under the rule's limit, with requests and clients both
// far above the rule's baseline.
func (e *Engine) stuffing(f *findings, w window, k tierRule, requests float64) {
	clients := float64(aggregator.Estimate(w.p.Clients.ByRule[k.rule]))
	ck := seriesKey("clients", k)
	f.values[ck] = clients
	l, ok := e.o.Limits[k.rule]
	top := w.p.Offenders.RequestsByRule[k.rule]
	if !ok || top == nil || clients < float64(e.c.CredentialStuffing.MinClients) {
		return
	}
	bc, br := e.baseline(ck, w.start), e.baseline(seriesKey("requests", k), w.start)
	ratio := e.c.CredentialStuffing.Ratio
	if bc.n < e.c.MinHistory || clients < ratio*bc.expected || requests < ratio*br.expected || br.z(requests) < e.c.ZScore {
		return
	}
	heaviest := top.Top(1)
	if len(heaviest) == 1 && float64(heaviest[0].Count-heaviest[0].Err) > perWindow(l, w.size) {
		return // one client over the limit: a heavy hitter, not a spread
	}
	f.alerts = append(f.alerts, w.alert(TypeCredentialStuffing, Critical, subject(k), k,
		fmt.Sprintf("%s: %.0f clients made %.0f requests, each under the limit; baseline %.1f clients, %.1f requests",
			subject(k), clients, requests, bc.expected, br.expected),
		Evidence{Observed: clients, Baseline: bc.expected, Score: round(br.z(requests)),
			Counts: map[string]uint64{"clients": uint64(clients), "requests": uint64(requests),
				"baseline_requests": uint64(br.expected), "history_windows": uint64(bc.n)}},
		identities(top, topIdentities)))
}

// falsePositive watches the refusals by limits (block, challenge, local
// limit) of authenticated and paying tiers: above their baseline and the
// minimum, they suggest a limit too tight for legitimate users. No history
// is needed: paying users are refused rarely, and the first refusals are
// the ones to hear of.
func (e *Engine) falsePositive(f *findings, w window, k tierRule, refused float64) {
	key := seriesKey("limit_refusals", k)
	f.values[key] = refused
	b := e.baseline(key, w.start)
	if refused < float64(e.c.FalsePositive.MinRefusals) || refused <= b.expected || refused < e.c.Ratio*b.expected {
		return
	}
	sev, who := Warning, "authenticated"
	if e.paying[k.tier] {
		sev, who = Critical, "paying"
	}
	f.alerts = append(f.alerts, w.alert(TypeFalsePositive, sev, subject(k), k,
		fmt.Sprintf("%s users of %s refused %.0f times in the window, baseline %.1f", who, subject(k), refused, b.expected),
		Evidence{Observed: refused, Baseline: b.expected, Score: round(b.z(refused)), Counts: baseCounts(b, "refused", refused)},
		identities(w.p.Offenders.RefusalsByRule[k.rule], topIdentities)))
}

// failOpen watches decisions made without the store (fail open, fail
// closed, local limit): store trouble.
func (e *Engine) failOpen(f *findings, w window, k tierRule, c *[decisions.NumOutcomes]uint64) {
	n := float64(c[decisions.FailOpen] + c[decisions.FailClosed] + c[decisions.LocalLimit])
	key := seriesKey("store_failures", k)
	f.values[key] = n
	b := e.baseline(key, w.start)
	if n < float64(e.c.FailOpen.Min) || n < e.c.Ratio*b.expected {
		return
	}
	sev := Warning
	if c[decisions.FailClosed] > 0 {
		sev = Critical
	}
	f.alerts = append(f.alerts, w.alert(TypeFailOpenSurge, sev, subject(k), k,
		fmt.Sprintf("%s: %.0f decisions without the store in the window (fail open %d, fail closed %d, local limit %d)",
			subject(k), n, c[decisions.FailOpen], c[decisions.FailClosed], c[decisions.LocalLimit]),
		Evidence{Observed: n, Baseline: b.expected, Counts: map[string]uint64{"fail_open": c[decisions.FailOpen],
			"fail_closed": c[decisions.FailClosed], "local_limit": c[decisions.LocalLimit]}}, nil))
}

// drops watches the decisions the edges reported dropped.
func (e *Engine) drops(f *findings, w window) {
	n := w.p.Counts.Dropped
	if n < uint64(e.c.Drops.Min) {
		return
	}
	f.alerts = append(f.alerts, w.alert(TypeDrops, Warning, "edge", tierRule{},
		"the edges dropped "+strconv.FormatUint(n, 10)+" decisions in the window: the pipeline misses events",
		Evidence{Observed: float64(n), Counts: map[string]uint64{"dropped": n}}, nil))
}

// solveRate is the CAPTCHA loop's rate per tier and rule: of the
// challenges issued, how many came back with a token that passed. Tokens
// issued are counted across rules (the token endpoint has a rule of its
// own) and reported beside.
func (e *Engine) solveRate(f *findings, w window, k tierRule, challenged, passed, issued uint64) {
	if challenged < uint64(e.c.SolveRate.MinChallenges) {
		return
	}
	rate := float64(passed) / float64(challenged)
	if rate >= e.c.SolveRate.MinRate {
		return
	}
	f.alerts = append(f.alerts, w.alert(TypeLowSolveRate, Warning, subject(k), k,
		fmt.Sprintf("%s: %d challenges, %d token passes (solve rate %.1f%%)", subject(k), challenged, passed, 100*rate),
		Evidence{Observed: round(rate), Baseline: e.c.SolveRate.MinRate,
			Counts: map[string]uint64{"challenges": challenged, "token_passes": passed, "tokens_issued": issued}},
		identities(w.p.Offenders.Challenged, topIdentities)))
}

// unsolved flags the identities challenged at least Unsolved.Min times in
// the window that never passed on a token, an IPv6 client by the prefix
// the edge counts and challenges it under (as heavyHitters does), so that
// a client rotating over the addresses of its /64 is flagged as one. An
// identity missing from the token-passing top-K is taken as never
// passing: the list holds the heaviest solvers, and one who solves often
// is among them.
func (e *Engine) unsolved(f *findings, w window) {
	ch, tp := w.p.Offenders.Challenged, w.p.Offenders.TokenPassed
	if ch == nil {
		return
	}
	bits := e.v6bits()
	passed := map[aggregator.Client]uint64{}
	for _, h := range byCounted(tp, bits, 0) {
		passed[h.client] = h.count
	}
	for _, h := range byCounted(ch, bits, 0) {
		n := h.count - h.err
		if n < uint64(e.c.Unsolved.Min) {
			continue
		}
		if passed[h.client] > 0 {
			continue
		}
		id := h.id()
		counts := map[string]uint64{"challenges": n, "token_passes": 0}
		if h.addrs > 1 {
			counts["addresses"] = uint64(h.addrs)
		}
		f.alerts = append(f.alerts, w.alert(TypeUnsolved, Warning, id, tierRule{},
			fmt.Sprintf("%s was challenged %d times in the window and never passed", id, n),
			Evidence{Observed: float64(n), Counts: counts}, []string{id}))
	}
}

func sortTierRules(ks []tierRule) {
	slices.SortFunc(ks, func(a, b tierRule) int { return cmp.Or(cmp.Compare(a.tier, b.tier), cmp.Compare(a.rule, b.rule)) })
}

// round keeps 3 decimals, so that evidence reads well and encodes the same.
func round(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return math.Round(x*1000) / 1000
}
