package dashboards

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/internal/sat"
)

// Index holds a compact summary of every window of the aggregator's
// outputs that the live dashboard shows: counts by tier, rule and outcome,
// drops, store latency and each window's heaviest clients. It is filled
// from the partials the aggregator stored (Load) and from its outputs as
// they are delivered (it is an aggregator.Sink), and keyed like the
// partials' files (window, partition, sequence range), so an output
// delivered again replaces itself and a correction adds to its window:
// the dashboard counts what the stored partials and the EMF documents
// count. It is safe for concurrent use.
type Index struct {
	size   time.Duration
	retain time.Duration

	mu       sync.RWMutex
	windows  map[int64]*window // by start, Unix nanoseconds
	order    []int64           // the starts, ascending
	wins     []*window         // the windows in the order of order
	series   map[seriesKey]uint32
	names    []seriesKey
	outcomes [256]string // outcome names by number
	clients  map[string]uint32
	cnames   []string
	version  atomic.Uint64
}

// seriesKey is a tier and rule; rule "" is the tier's decisions no rule
// made (the lists').
type seriesKey struct{ tier, rule string }

type window struct {
	outputs []contribution
}

// contribution is one output's share of a window.
type contribution struct {
	key string // partition "/" range
	sum summary
}

type cell struct {
	series  uint32
	outcome uint8
	n       uint64
}

type hit struct {
	client uint32
	n      uint64
}

// summary is what the dashboard keeps of one output's partial.
type summary struct {
	events   uint64
	cells    []cell
	dropped  uint64
	latN     uint64
	latP50   float64
	latP99   float64
	unique   uint64
	requests []hit
	refusals []hit
}

// offendersKept is how many of each window's heaviest clients the index
// keeps (by requests and by refusals).
const offendersKept = 5

var _ aggregator.Sink = (*Index)(nil)

// NewIndex returns an empty index of windows of length size, keeping the
// windows that start within retain of the newest.
func NewIndex(size, retain time.Duration) *Index {
	return &Index{size: size, retain: retain, windows: map[int64]*window{},
		series: map[seriesKey]uint32{}, clients: map[string]uint32{}}
}

// Window is the length of the index's windows.
func (x *Index) Window() time.Duration { return x.size }

// Version changes whenever the index does.
func (x *Index) Version() uint64 { return x.version.Load() }

// Load adds the partials stored in w (an aggregator.PartialsDir or
// PartialsTable), of the index's window length, that start in [from, to),
// and returns the ones it could not read.
func (x *Index) Load(ctx context.Context, w aggregator.PartialsWalker, from, to time.Time) ([]aggregator.ReadProblem, error) {
	return w.Walk(ctx, x.size, from, to, func(f aggregator.PartialFile, p *aggregator.Partial) {
		x.put(f.Partition+"/"+f.Range, p)
	})
}

// Write adds an output of partition (aggregator.Sink).
func (x *Index) Write(_ context.Context, partition string, o aggregator.Output) error {
	if o.Partial.Size == x.size {
		x.put(partition+"/"+o.RangeKey(), o.Partial)
	}
	return nil
}

// Flush does nothing (aggregator.Sink).
func (x *Index) Flush(context.Context) error { return nil }

func (x *Index) put(key string, p *aggregator.Partial) {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.summarize(p)
	start := p.Start.UnixNano()
	w := x.windows[start]
	if w == nil {
		w = &window{}
		x.windows[start] = w
		i, _ := slices.BinarySearch(x.order, start)
		x.order = slices.Insert(x.order, i, start)
		x.wins = slices.Insert(x.wins, i, w)
	}
	if i := slices.IndexFunc(w.outputs, func(c contribution) bool { return c.key == key }); i >= 0 {
		w.outputs[i].sum = s
	} else {
		w.outputs = append(w.outputs, contribution{key, s})
	}
	x.evict()
	x.version.Add(1)
}

// evict drops the windows older than retain before the newest.
func (x *Index) evict() {
	if len(x.order) == 0 {
		return
	}
	oldest := x.order[len(x.order)-1] - int64(x.retain)
	n := 0
	for n < len(x.order) && x.order[n] < oldest {
		delete(x.windows, x.order[n])
		n++
	}
	x.order = x.order[n:]
	clear(x.wins[:n])
	x.wins = x.wins[n:]
	// The tables of names only grow as windows come; once they hold far
	// more than the windows kept can use, they are rebuilt from those.
	if n > 0 && (len(x.cnames) > 4*len(x.order)*2*offendersKept+1024 || len(x.names) > 4*x.liveSeries()+1024) {
		x.compact()
	}
}

// liveSeries is how many series the windows kept name at most: the cells
// of the busiest window, times a margin for change.
func (x *Index) liveSeries() int {
	n := 0
	for _, w := range x.wins {
		for _, c := range w.outputs {
			n = max(n, len(c.sum.cells))
		}
	}
	return n
}

// compact rebuilds the series and client tables from the windows kept.
func (x *Index) compact() {
	series, names := map[seriesKey]uint32{}, []seriesKey(nil)
	clients, cnames := map[string]uint32{}, []string(nil)
	for _, w := range x.wins {
		for i := range w.outputs {
			s := &w.outputs[i].sum
			for j, c := range s.cells {
				k := x.names[c.series]
				id, ok := series[k]
				if !ok {
					id = uint32(len(names))
					series[k] = id
					names = append(names, k)
				}
				s.cells[j].series = id
			}
			for _, hs := range [][]hit{s.requests, s.refusals} {
				for j, h := range hs {
					name := x.cnames[h.client]
					id, ok := clients[name]
					if !ok {
						id = uint32(len(cnames))
						clients[name] = id
						cnames = append(cnames, name)
					}
					hs[j].client = id
				}
			}
		}
	}
	x.series, x.names, x.clients, x.cnames = series, names, clients, cnames
}

// summarize is called with x.mu held.
func (x *Index) summarize(p *aggregator.Partial) summary {
	s := summary{events: p.Events, dropped: p.Counts.Dropped, latN: p.Latency.Count(), unique: aggregator.Estimate(p.Clients.All)}
	if s.latN > 0 {
		s.latP50, s.latP99 = p.Latency.Quantile(0.5), p.Latency.Quantile(0.99)
	}
	type so struct {
		series  uint32
		outcome uint8
	}
	cells := map[so]uint64{}
	for k, n := range p.Counts.Cells {
		o := uint8(k.Outcome)
		if x.outcomes[o] == "" {
			x.outcomes[o] = k.Outcome.String()
		}
		sk := seriesKey{k.Tier, k.Rule}
		id, ok := x.series[sk]
		if !ok {
			id = uint32(len(x.names))
			x.series[sk] = id
			x.names = append(x.names, sk)
		}
		cells[so{id, o}] += n
	}
	s.cells = make([]cell, 0, len(cells))
	for k, n := range cells {
		s.cells = append(s.cells, cell{k.series, k.outcome, n})
	}
	hits := func(t *aggregator.TopK) []hit {
		if t == nil {
			return nil
		}
		var hs []hit
		for _, h := range t.Top(offendersKept) {
			name := h.Client.String()
			id, ok := x.clients[name]
			if !ok {
				id = uint32(len(x.cnames))
				x.clients[name] = id
				x.cnames = append(x.cnames, name)
			}
			hs = append(hs, hit{id, h.Count})
		}
		return hs
	}
	if p.Offenders != nil {
		s.requests, s.refusals = hits(p.Offenders.Requests), hits(p.Offenders.Refusals)
	}
	return s
}

// span returns the starts of the windows in [from, to) and the windows;
// x.mu is held.
func (x *Index) span(from, to time.Time) ([]int64, []*window) {
	lo, _ := slices.BinarySearch(x.order, unixNano(from))
	hi, _ := slices.BinarySearch(x.order, unixNano(to))
	hi = max(lo, hi)
	return x.order[lo:hi], x.wins[lo:hi]
}

// unixNano is t in Unix nanoseconds, the nearest an int64 holds for a
// time outside 1678 to 2262 (where t.UnixNano wraps around).
func unixNano(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// Bounds returns the start of the oldest window held and the end of the
// newest; ok is false when the index is empty.
func (x *Index) Bounds() (oldest, newest time.Time, ok bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if len(x.order) == 0 {
		return time.Time{}, time.Time{}, false
	}
	return time.Unix(0, x.order[0]).UTC(), time.Unix(0, x.order[len(x.order)-1]).Add(x.size).UTC(), true
}

// Counts are decisions by outcome name.
type Counts map[string]uint64

// Total is the number of decisions.
func (c Counts) Total() uint64 {
	var t uint64
	for _, n := range c {
		t += n
	}
	return t
}

// SeriesTotal is the decisions of one tier, or one tier and rule.
type SeriesTotal struct {
	Tier     string `json:"tier"`
	Rule     string `json:"rule,omitempty"`
	Total    uint64 `json:"total"`
	Outcomes Counts `json:"outcomes"`
}

// Offender is a client and its count, summed over each window's heaviest
// clients: a lower bound of its true count in the range.
type Offender struct {
	Client string `json:"client"`
	Count  uint64 `json:"count"`
}

// LatencySummary is the counter store's latency over a range, in
// milliseconds: the mean of the windows' medians (weighted by their
// calls) and the worst window's 99th percentile.
type LatencySummary struct {
	Count  uint64  `json:"count"`
	P50    float64 `json:"p50_ms"`
	P99Max float64 `json:"p99_max_ms"`
}

// Totals is what the index holds for a range of windows.
type Totals struct {
	From     time.Time      `json:"from"`
	To       time.Time      `json:"to"`
	Window   string         `json:"window"`
	Windows  int            `json:"windows"`
	Events   uint64         `json:"events"`
	Requests uint64         `json:"requests"`
	Outcomes Counts         `json:"outcomes"`
	Tiers    []SeriesTotal  `json:"tiers"`
	Rules    []SeriesTotal  `json:"rules"`
	Dropped  uint64         `json:"dropped"` // decisions the edges reported dropped
	Unique   uint64         `json:"unique_max"`
	Latency  LatencySummary `json:"store_latency"`
	// TopRequests and TopRefusals are the heaviest clients.
	TopRequests []Offender `json:"top_requests"`
	TopRefusals []Offender `json:"top_refusals"`
}

// maxRules bounds the rules a summary lists, the busiest first.
const maxRules = 50

// Totals sums the windows that start in [from, to).
func (x *Index) Totals(from, to time.Time) Totals {
	x.mu.RLock()
	defer x.mu.RUnlock()
	t := Totals{From: from.UTC(), To: to.UTC(), Window: x.size.String(), Outcomes: Counts{}}
	// Counts by series id and outcome number, turned into maps at the end:
	// the loop over a day of windows does no map lookup per cell.
	bySeries := make([][256]uint64, len(x.names))
	reqs, refs := map[uint32]uint64{}, map[uint32]uint64{}
	var p50sum float64
	_, wins := x.span(from, to)
	for _, w := range wins {
		t.Windows++
		for _, c := range w.outputs {
			s := &c.sum
			t.Events += s.events
			t.Dropped = sat.Add(t.Dropped, s.dropped)
			t.Unique = max(t.Unique, s.unique)
			t.Latency.Count += s.latN
			p50sum += s.latP50 * float64(s.latN)
			t.Latency.P99Max = max(t.Latency.P99Max, s.latP99)
			for _, cl := range s.cells {
				bySeries[cl.series][cl.outcome] += cl.n
			}
			for _, h := range s.requests {
				reqs[h.client] += h.n
			}
			for _, h := range s.refusals {
				refs[h.client] += h.n
			}
		}
	}
	if t.Latency.Count > 0 {
		t.Latency.P50 = p50sum / float64(t.Latency.Count)
	}
	tiers := map[string]Counts{}
	for id, byOutcome := range bySeries {
		m := Counts{}
		for o, n := range byOutcome {
			if n > 0 {
				m[x.outcomes[o]] += n
				t.Outcomes[x.outcomes[o]] += n
			}
		}
		if len(m) == 0 {
			continue
		}
		k := x.names[id]
		tm := tiers[k.tier]
		if tm == nil {
			tm = Counts{}
			tiers[k.tier] = tm
		}
		for o, n := range m {
			tm[o] += n
		}
		if k.rule != "" {
			t.Rules = append(t.Rules, SeriesTotal{Tier: k.tier, Rule: k.rule, Total: m.Total(), Outcomes: m})
		}
	}
	t.Requests = t.Outcomes.Total()
	for name, m := range tiers {
		t.Tiers = append(t.Tiers, SeriesTotal{Tier: name, Total: m.Total(), Outcomes: m})
	}
	byName := func(a, b SeriesTotal) int { return cmp.Or(cmp.Compare(a.Tier, b.Tier), cmp.Compare(a.Rule, b.Rule)) }
	slices.SortFunc(t.Tiers, byName)
	slices.SortFunc(t.Rules, func(a, b SeriesTotal) int { return cmp.Or(cmp.Compare(b.Total, a.Total), byName(a, b)) })
	t.Rules = t.Rules[:min(len(t.Rules), maxRules)]
	t.TopRequests, t.TopRefusals = x.top(reqs), x.top(refs)
	return t
}

// top returns the ten heaviest of m, by count then name.
func (x *Index) top(m map[uint32]uint64) []Offender {
	out := make([]Offender, 0, len(m))
	for id, n := range m {
		out = append(out, Offender{x.cnames[id], n})
	}
	slices.SortFunc(out, func(a, b Offender) int { return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Client, b.Client)) })
	return out[:min(len(out), 10)]
}

// Line is one chart line set: decisions per bucket of one tier, one tier
// and rule, or all, split into the outcomes charted.
type Line struct {
	Tier      string   `json:"tier,omitempty"`
	Rule      string   `json:"rule,omitempty"`
	Allow     []uint64 `json:"allow"`
	Challenge []uint64 `json:"challenge"`
	Block     []uint64 `json:"block"`
	Other     []uint64 `json:"other"`
}

func newLine(tier, rule string, n int) *Line {
	return &Line{Tier: tier, Rule: rule, Allow: make([]uint64, n), Challenge: make([]uint64, n), Block: make([]uint64, n), Other: make([]uint64, n)}
}

// The chart slots of outcomes.
const (
	slotAllow uint8 = iota
	slotChallenge
	slotBlock
	slotOther
)

func outcomeSlot(name string) uint8 {
	switch name {
	case "allow":
		return slotAllow
	case "challenge":
		return slotChallenge
	case "block":
		return slotBlock
	}
	return slotOther
}

func (l *Line) addSlot(slot uint8, i int, n uint64) {
	switch slot {
	case slotAllow:
		l.Allow[i] += n
	case slotChallenge:
		l.Challenge[i] += n
	case slotBlock:
		l.Block[i] += n
	default:
		l.Other[i] += n
	}
}

// Series is a range of windows downsampled into buckets of Step: the
// decisions of each bucket by tier, by the busiest rules and in all, the
// store latency and the drops. A chart draws one point per bucket, so the
// payload depends on the buckets asked for, not on the windows held.
type Series struct {
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	StepMS  int64     `json:"step_ms"`
	Windows int       `json:"windows"`
	Times   []int64   `json:"times"` // each bucket's start, Unix milliseconds
	Total   *Line     `json:"total"`
	Tiers   []*Line   `json:"tiers"`
	Rules   []*Line   `json:"rules"`
	// LatencyP99 is the worst window's 99th percentile in each bucket,
	// LatencyP50 the mean of the windows' medians, in milliseconds.
	LatencyP50 []float64 `json:"store_latency_p50_ms"`
	LatencyP99 []float64 `json:"store_latency_p99_ms"`
	Dropped    []uint64  `json:"dropped"`
}

// maxSeriesRules bounds the rules a series charts, the busiest first.
const maxSeriesRules = 12

// ceilDiv is a/b rounded up, for a >= 0 and b > 0, without overflow.
func ceilDiv(a, b time.Duration) time.Duration {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// Series downsamples the windows that start in [from, to) into at most
// points buckets, each a whole number of windows.
//
// Any range is taken: one wider than a Duration holds (292 years) gets
// buckets of the largest step one holds, the last taking the windows past
// it (the API refuses ranges over maxRange).
func (x *Index) Series(from, to time.Time, points int) Series {
	x.mu.RLock()
	defer x.mu.RUnlock()
	points = max(points, 1)
	span := max(to.Sub(from), 0)
	perBucket := ceilDiv(ceilDiv(span, time.Duration(points)), x.size) // in windows
	step := x.size * min(max(perBucket, 1), math.MaxInt64/x.size)
	from = from.Truncate(step)
	n := int(ceilDiv(max(to.Sub(from), 0), step))
	s := Series{From: from.UTC(), To: to.UTC(), StepMS: step.Milliseconds(), Times: make([]int64, n), Total: newLine("", "", n),
		LatencyP50: make([]float64, n), LatencyP99: make([]float64, n), Dropped: make([]uint64, n)}
	for i, t := 0, from; i < n; i, t = i+1, t.Add(step) {
		s.Times[i] = t.UnixMilli()
	}
	latN := make([]uint64, n)
	// Lines by series id, and the chart slot of each outcome number: the
	// loop over the windows does no map lookup per cell.
	tiers := map[string]*Line{}
	tierOf := make([]*Line, len(x.names))
	ruleOf := make([]*Line, len(x.names))
	ruleTotals := make([]uint64, len(x.names))
	for id, k := range x.names {
		tl := tiers[k.tier]
		if tl == nil {
			tl = newLine(k.tier, "", n)
			tiers[k.tier] = tl
		}
		tierOf[id] = tl
		if k.rule != "" {
			ruleOf[id] = newLine(k.tier, k.rule, n)
		}
	}
	var slot [256]uint8
	for o, name := range x.outcomes {
		slot[o] = outcomeSlot(name)
	}
	used := make([]bool, len(x.names))
	starts, wins := x.span(from, to)
	for j, w := range wins {
		s.Windows++
		i := min(max(int(time.Unix(0, starts[j]).Sub(from)/step), 0), n-1)
		for _, c := range w.outputs {
			sm := &c.sum
			s.Dropped[i] = sat.Add(s.Dropped[i], sm.dropped)
			latN[i] += sm.latN
			s.LatencyP50[i] += sm.latP50 * float64(sm.latN)
			s.LatencyP99[i] = max(s.LatencyP99[i], sm.latP99)
			for _, cl := range sm.cells {
				k := slot[cl.outcome]
				s.Total.addSlot(k, i, cl.n)
				tierOf[cl.series].addSlot(k, i, cl.n)
				used[cl.series] = true
				if rl := ruleOf[cl.series]; rl != nil {
					rl.addSlot(k, i, cl.n)
					ruleTotals[cl.series] += cl.n
				}
			}
		}
	}
	for i, c := range latN {
		if c > 0 {
			s.LatencyP50[i] /= float64(c)
		}
	}
	seen := map[*Line]bool{}
	for id, l := range tierOf {
		if used[id] && !seen[l] {
			seen[l] = true
			s.Tiers = append(s.Tiers, l)
		}
	}
	slices.SortFunc(s.Tiers, func(a, b *Line) int { return cmp.Compare(a.Tier, b.Tier) })
	var ids []int
	for id, l := range ruleOf {
		if l != nil && used[id] && ruleTotals[id] > 0 {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b int) int {
		return cmp.Or(cmp.Compare(ruleTotals[b], ruleTotals[a]), cmp.Compare(x.names[a].tier, x.names[b].tier), cmp.Compare(x.names[a].rule, x.names[b].rule))
	})
	for _, id := range ids[:min(len(ids), maxSeriesRules)] {
		s.Rules = append(s.Rules, ruleOf[id])
	}
	return s
}
