package aggregator

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
)

// LatePolicy says what becomes of an event whose window was already
// emitted.
type LatePolicy uint8

// The late-event policies.
const (
	// LateCorrect merges late events into a correction of their window,
	// emitted at the next flush: sums stay exact (CloudWatch adds the
	// correction's EMF values to the window's), at the cost of a second
	// document for the window.
	LateCorrect LatePolicy = iota
	// LateDrop counts late events and drops them.
	LateDrop
)

// String returns the policy's configuration name.
func (p LatePolicy) String() string {
	if p == LateDrop {
		return "drop"
	}
	return "correct"
}

// ParseLatePolicy returns the policy named s ("correct" or "drop").
func ParseLatePolicy(s string) (LatePolicy, bool) {
	switch s {
	case "correct":
		return LateCorrect, true
	case "drop":
		return LateDrop, true
	}
	return 0, false
}

// Options configure a Rollup. The zero value takes every default.
type Options struct {
	Window time.Duration // window length; default 60 s
	// Lateness is how far behind the latest event time an event may be and
	// still join its window: a window closes once an event Lateness past
	// its end was seen. Default 500 ms. Windows close Lateness + Idle
	// after their end at the latest, so Lateness + Idle must cover how
	// long the edge holds a decision before writing it (decisions.linger,
	// 1 s by default), or its events arrive late.
	Lateness time.Duration
	Late     LatePolicy
	// Idle is how long a live partition may see no event before its
	// watermark follows the wall clock (Advance), so that the last window
	// of a quiet period is emitted on time. Default 1 s.
	Idle time.Duration
	// MaxSkew is how far ahead of the latest event time an event may be
	// and still move it (and the watermark) at once; default 10 s. An
	// event further ahead joins its window but moves the watermark only
	// once futureQuorum consecutive events were all that far ahead (a
	// quiet period ended, or the first events of a partition): one event
	// stamped in the future, by a bad clock or a hostile writer, cannot
	// close the windows of the present. It must cover how far ahead of
	// each other the edges' clocks and batches may be: the edges' linger
	// (1 s by default), the idle advance (Idle), Kinesis batching and
	// NTP-synchronised clocks take a few seconds at most; it bounds how
	// much of the present one such event can make late. An event more
	// than MaxSkew past the clock its reader vouches for (Rollup.Bound)
	// never moves it, however many come together: a record stamped in
	// 2100 by a broken clock cannot close the present. So the readers'
	// clocks must be within MaxSkew of the edges' too; an event beyond is
	// counted in RollupStats.Future.
	MaxSkew time.Duration
	// MaxAhead caps the open windows that start after the latest event
	// time: windows held only by events in the future (see MaxSkew), which
	// stay in memory until the watermark reaches them or a final flush. An
	// event that would open one more is dropped and counted
	// (RollupStats.AheadDropped); the windows of the present always open.
	// Default DefaultMaxAhead.
	MaxAhead int
	// MaxCorrections caps the pending corrections (LateCorrect): a late
	// event that would open one more is dropped and counted
	// (RollupStats.CorrectionsDropped). Default DefaultMaxCorrections.
	MaxCorrections int
	TopK           int // clients held by each top-K list; default 100
	// MaxKeys caps the distinct tiers, rules, nodes and reasons of a
	// window, each; the rest are counted under OtherKey (Partial.MaxKeys).
	// Default DefaultMaxKeys.
	MaxKeys int
	// IPv6Prefix is the length of the prefix an IPv6 client is counted
	// under in the top-K lists and distinct clients, the edge's
	// identity.ipv6_prefix (Partial.IPv6Prefix): 0 takes
	// DefaultIPv6Prefix, 128 counts each address.
	IPv6Prefix int
}

// DefaultMaxSkew is Options.MaxSkew's default.
const DefaultMaxSkew = 10 * time.Second

// DefaultMaxAhead is Options.MaxAhead's default. Every distinct window an
// event opens is a whole Partial (sketches, top-K lists) until it is
// emitted, so without a cap each record stamped at a distinct future
// minute (or second, with 1 s windows) would hold one more: a stream of
// such records would exhaust memory. 256 windows cover over 4 hours ahead
// with 60 s windows and over 4 minutes with 1 s windows, far more than
// the skew of clocks and batches the watermark must accept (MaxSkew), and
// hold a few megabytes when filled by one event each.
const DefaultMaxAhead = 256

// DefaultMaxCorrections is Options.MaxCorrections' default: corrections
// leave with the next closing window, so the late events of real traffic
// (the windows just emitted) need a few; each record stamped at a distinct
// past window would hold one more until then (see DefaultMaxAhead).
const DefaultMaxCorrections = 256

// futureQuorum is how many consecutive events more than MaxSkew ahead of
// the latest event time (with no event near it between them) move it to
// the earliest of them, and on through those that follow it in time
// each within MaxSkew of the one before (a quiet period's sparse traffic
// comes so): the next morning's events after a quiet night in a
// replay, or a partition's first events, do; fewer hostile events stamped
// in the future, with an event of the present after them, do not. Eight
// events of real traffic come within a second; eight consecutive records
// of one writer's choosing are not "a few".
const futureQuorum = 8

// aheadRun holds the times (Unix nanoseconds) of the consecutive events
// that arrived more than MaxSkew ahead of the latest event time. The zero
// value is empty.
type aheadRun struct {
	times [futureQuorum]int64
	n     int
}

// observe returns the latest event time (Unix nanoseconds; seen is false
// while there is none) after an event at t, given skew (MaxSkew), and how
// many events it found to be in the future. An event within skew of
// latest is of the present: it moves latest as it always did, and the
// events held ahead before it are in the future (unless the idle advance
// brought them within skew of latest since). An event further ahead
// is held; the futureQuorum-th held in a row moves latest to the earliest
// held and on, in time order, through each held within skew of the one
// before, the others being in the future. An event after ceil, the
// bound its reader vouched for (Rollup.Bound), is in the future whatever
// the events around it: it is neither held nor moves latest. It depends
// on the order of the events and on ceil alone, so a replay moves the
// watermark at the same events.
func (a *aheadRun) observe(latest int64, seen bool, t, skew, ceil int64) (int64, bool, uint64) {
	if t > ceil {
		return latest, seen, 1
	}
	if seen && !aheadOf(t, latest, skew) {
		var future uint64
		if a.n > 0 && !aheadOf(latest, t, skew) {
			// Those held that the idle advance (Advance) brought within
			// skew are of the present after all.
			moved := latest
			for _, x := range a.times[:a.n] {
				if aheadOf(x, latest, skew) {
					future++
				} else {
					moved = max(moved, x)
				}
			}
			latest, a.n = moved, 0
		}
		return max(latest, t), true, future
	}
	a.times[a.n] = t
	a.n++
	if a.n < futureQuorum {
		return latest, seen, 0
	}
	a.n = 0
	slices.Sort(a.times[:])
	if !seen || a.times[0] > latest {
		latest = a.times[0]
	}
	for i, x := range a.times {
		if aheadOf(x, latest, skew) {
			return latest, true, uint64(futureQuorum - i)
		}
		latest = max(latest, x)
	}
	return latest, true, 0
}

// aheadOf reports whether t is more than skew after ref (Unix
// nanoseconds), without overflow.
func aheadOf(t, ref, skew int64) bool { return t > ref && uint64(t)-uint64(ref) > uint64(skew) }

func (o Options) withDefaults() Options {
	if o.Window <= 0 {
		o.Window = time.Minute
	}
	if o.Lateness <= 0 {
		o.Lateness = 500 * time.Millisecond
	}
	if o.Idle <= 0 {
		o.Idle = time.Second
	}
	if o.TopK <= 0 {
		o.TopK = 100
	}
	if o.MaxSkew <= 0 {
		o.MaxSkew = DefaultMaxSkew
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	if o.MaxAhead <= 0 {
		o.MaxAhead = DefaultMaxAhead
	}
	if o.MaxCorrections <= 0 {
		o.MaxCorrections = DefaultMaxCorrections
	}
	return o
}

// Output is a partial leaving a Rollup. From and To are the sequence
// numbers of its first and last events: with the partition and the window
// they make the output's idempotency key.
type Output struct {
	Partial    *Partial
	Correction bool // late events of a window emitted before
	From, To   uint64
	// Range, when set, names the source positions instead of From-To:
	// for the Lambda, the position of the window's first event in its
	// commit group, "seq_sub" (see KinesisLambda).
	Range string
}

// RangeKey is the part of the output's idempotency key that names its
// source positions: Range, or "From-To".
func (o Output) RangeKey() string {
	if o.Range != "" {
		return o.Range
	}
	return strconv.FormatUint(o.From, 10) + "-" + strconv.FormatUint(o.To, 10)
}

// pending is an open window, or the late events of an emitted one.
type pending struct {
	p        *Partial
	from, to uint64
}

// Rollup rolls one source partition's events up into windows in event
// time. Events carry sequence numbers the caller assigns, increasing in
// arrival order; a snapshot of the Rollup says where to resume. It is not
// safe for concurrent use.
type Rollup struct {
	o      Options
	open   map[int64]*pending // by window start, Unix nanoseconds
	late   map[int64]*pending
	latest time.Time // the latest event time seen, or the wall clock when idle
	closed time.Time // every window ending at or before it was emitted
	// emittedAhead holds the starts of the windows past latest (holding
	// events in the future only) that a final flush emitted: they do not
	// move closed, or every event of the present after a restart would
	// be late; their own later events are. Pruned once closed passes them.
	emittedAhead map[int64]struct{}
	next         uint64 // one past the highest sequence number seen
	active       bool   // an event arrived since the last Advance
	quiet        bool   // the last Advance moved the watermark with the wall clock
	oldest       int64  // the oldest open window's start, if oldestOK
	oldestOK     bool
	idleSince    time.Time
	ahead        aheadRun // events held ahead of latest (see Options.MaxSkew)
	ceil         int64    // see Bound; math.MaxInt64 for none
	stats        RollupStats
	batch        Batch // AddBatch's
}

// RollupStats count what a Rollup did.
type RollupStats struct {
	Events      uint64 // events added
	Late        uint64 // events whose window had been emitted
	LateDropped uint64 // late events dropped by LateDrop
	Windows     uint64 // windows emitted
	Corrections uint64 // corrections emitted
	// Future counts events more than MaxSkew ahead of the latest event
	// time that no quorum confirmed, and events more than MaxSkew past
	// the time their reader vouched for (Rollup.Bound): each joined its
	// window but did not move the watermark. A replay of a log whose
	// traffic has gaps longer than MaxSkew counts the events that came
	// alone after a gap too.
	Future uint64
	// Folded counts decisions counted with a tier, rule, node or reason
	// folded into OtherKey, past a window's MaxKeys.
	Folded uint64
	// AheadDropped counts events dropped because their window was not
	// open, started after the latest event time, and Options.MaxAhead
	// such windows were open already (usually counted in Future too).
	AheadDropped uint64
	// CorrectionsDropped counts late events (counted in Late) dropped
	// because their window had no pending correction and
	// Options.MaxCorrections corrections were pending already.
	CorrectionsDropped uint64
	// BadTime counts events skipped for their time (see windowOf): the
	// zero time, which only a hand-made or hostile record carries, or a
	// time in the last window of int64 nanoseconds, which ends past
	// decisions.MaxTime. They are in no window and do not move the
	// watermark.
	BadTime uint64
	// BadLatency counts latencies below 0 left out of the latency
	// sketches (Partial.BadLatency); their decisions are counted. Not in
	// the snapshot: a run counts its own.
	BadLatency uint64
}

// add adds t's counts to s.
func (s *RollupStats) add(t RollupStats) {
	s.Events += t.Events
	s.Late += t.Late
	s.LateDropped += t.LateDropped
	s.Windows += t.Windows
	s.Corrections += t.Corrections
	s.Future += t.Future
	s.Folded += t.Folded
	s.AheadDropped += t.AheadDropped
	s.CorrectionsDropped += t.CorrectionsDropped
	s.BadTime += t.BadTime
	s.BadLatency += t.BadLatency
}

// sub returns s less t: what a rollup did between t and s, two of its
// Stats.
func (s RollupStats) sub(t RollupStats) RollupStats {
	return RollupStats{Events: s.Events - t.Events, Late: s.Late - t.Late, LateDropped: s.LateDropped - t.LateDropped,
		Windows: s.Windows - t.Windows, Corrections: s.Corrections - t.Corrections, Future: s.Future - t.Future,
		Folded: s.Folded - t.Folded, AheadDropped: s.AheadDropped - t.AheadDropped, CorrectionsDropped: s.CorrectionsDropped - t.CorrectionsDropped,
		BadTime: s.BadTime - t.BadTime, BadLatency: s.BadLatency - t.BadLatency}
}

// OverCap returns the events dropped past a cap on the windows held:
// AheadDropped plus CorrectionsDropped.
func (s RollupStats) OverCap() uint64 { return s.AheadDropped + s.CorrectionsDropped }

// refuses reports whether an event of the window starting at start (Unix
// nanoseconds), not held yet, must be dropped rather than open it: late
// (a correction) past MaxCorrections, or starting after latest (seen is
// false while there is none) past MaxAhead. It depends on the windows held
// and latest alone, which the order of the events decides.
func (r *Rollup) refuses(late bool, start, latest int64, seen bool) bool {
	if late {
		return len(r.late) >= r.o.MaxCorrections
	}
	if seen && start <= latest || len(r.open) < r.o.MaxAhead {
		return false
	}
	n := 0
	for s := range r.open {
		if !seen || s > latest {
			n++
		}
	}
	return n >= r.o.MaxAhead
}

// openWindow opens the window starting at start (Unix nanoseconds), late
// for a correction, for the event numbered seq, latest (seen) being the
// latest event time after it; or, if it refuses it (see refuses), counts
// the event dropped and returns nil.
func (r *Rollup) openWindow(late bool, start int64, seq uint64, latest int64, seen bool) *pending {
	if r.refuses(late, start, latest, seen) {
		if late {
			r.stats.CorrectionsDropped++
		} else {
			r.stats.AheadDropped++
		}
		return nil
	}
	w := &pending{p: r.o.newPartial(start), from: seq}
	if late {
		r.late[start] = w
		return w
	}
	r.open[start] = w
	if r.oldestOK && start < r.oldest {
		r.oldest = start
	}
	return w
}

// NewRollup returns an empty Rollup.
func NewRollup(o Options) *Rollup {
	return &Rollup{o: o.withDefaults(), open: map[int64]*pending{}, late: map[int64]*pending{}, ceil: math.MaxInt64}
}

// Bound vouches for the time of the events added next: they were decided
// by at, by a clock their reader trusts more than theirs (a Kinesis
// record's arrival, or the wall clock when a log record was read). An
// event more than MaxSkew after at is in the future (RollupStats.Future):
// it joins its own window, but neither moves the watermark nor counts
// toward the quorum that moves it (see Options.MaxSkew). The zero time
// lifts the bound; so does a time outside decisions' range.
func (r *Rollup) Bound(at time.Time) {
	r.ceil = math.MaxInt64
	if at.IsZero() || !decisions.TimeInRange(at) {
		return
	}
	if n, skew := at.UnixNano(), int64(r.o.MaxSkew); n < math.MaxInt64-skew {
		r.ceil = n + skew
	}
}

// Options returns the options in force, defaults filled in.
func (r *Rollup) Options() Options { return r.o }

// Stats returns the counts so far.
func (r *Rollup) Stats() RollupStats { return r.stats }

// Watermark is the event time up to which windows close.
func (r *Rollup) Watermark() time.Time {
	if r.latest.IsZero() {
		return time.Time{}
	}
	return r.latest.Add(-r.o.Lateness)
}

// windowStart is the start, in Unix nanoseconds, of the window of length
// size that holds t: windows are aligned on the Unix epoch.
func windowStart(t time.Time, size time.Duration) int64 {
	return windowStartNs(t.UnixNano(), int64(size))
}

// windowStartNs is windowStart of the time n, in Unix nanoseconds, for
// windows of w nanoseconds. The window of the earliest times (readers
// take times from 1677-09-21T00:12:43Z, decisions.MinTime) would start
// before the earliest Unix nanosecond: it starts at that nanosecond
// instead, and reaches windowSpanNs, to the next window's start.
func windowStartNs(n, w int64) int64 {
	r := n % w
	switch {
	case r >= 0:
		return n - r
	case n-math.MinInt64 < w+r: // n-r-w would wrap into 2262
		return math.MinInt64
	}
	return n - r - w
}

// windowOf returns the start (windowStartNs) of the window of w
// nanoseconds holding an event at t (Unix nanoseconds), and whether a
// rollup takes the event: not when it has no time, the zero time.Time,
// which only a hand-made or hostile record carries (its UnixNano is
// columnar.NullTime, in 1754: a window there is one CloudWatch refuses),
// nor when its window ends past decisions.MaxTime (the last window of
// int64 nanoseconds, in 2262), since that end, the rollup's closing time
// once the window is emitted, would wrap into 1677 as Unix nanoseconds, in
// the columnar path and in the snapshot. Every path through which an
// event enters a window asks it first; what it refuses is counted as
// RollupStats.BadTime. The columnar path reads an event of
// 1754-08-30T22:43:41.128654848Z, the zero time's UnixNano, as the zero
// time, and so does Add.
func windowOf(t, w int64) (int64, bool) {
	start := windowStartNs(t, w)
	return start, t != columnar.NullTime && start <= math.MaxInt64-w
}

// inRun reports whether an event at t (Unix nanoseconds) continues a run
// of events in the window starting at start, of span windowSpanNs: a time
// in it, and not the zero time (NullTime, which windowOf refuses, though
// it falls in a window of 1754). uint64: times centuries apart are
// further apart than int64 holds.
func inRun(t, start int64, span uint64) bool {
	return t >= start && uint64(t-start) < span && t != columnar.NullTime
}

// windowSpanNs is how far the window starting at start (windowStartNs)
// reaches: w, or less for the window of the earliest times.
func windowSpanNs(start, w int64) int64 {
	if r := start % w; start == math.MinInt64 && r != 0 {
		return -r
	}
	return w
}

// Add adds the event numbered seq.
func (r *Rollup) Add(d *decisions.Decision, seq uint64) {
	r.next = max(r.next, seq+1)
	r.active = true
	r.stats.Events++
	t := d.Time.UnixNano()
	start, ok := windowOf(t, int64(r.o.Window))
	if !ok {
		r.stats.BadTime++
		return
	}
	end := time.Unix(0, start).Add(r.o.Window)
	closed := r.isClosed(start, end)
	r.see(t)
	m := r.open
	if closed {
		r.stats.Late++
		if r.o.Late == LateDrop {
			r.stats.LateDropped++
			return
		}
		m = r.late
	}
	w := m[start]
	if w == nil {
		latest, seen := r.latestNs()
		if w = r.openWindow(closed, start, seq, latest, seen); w == nil {
			return
		}
	}
	folded, bad := w.p.Folded, w.p.BadLatency
	w.p.Update(d)
	r.stats.Folded += w.p.Folded - folded
	r.stats.BadLatency += w.p.BadLatency - bad
	w.from, w.to = min(w.from, seq), max(w.to, seq)
}

// newPartial returns an empty partial for the window starting at start
// (Unix nanoseconds), of o's window length, top-K length and names cap.
func (o Options) newPartial(start int64) *Partial {
	p := NewPartial(time.Unix(0, start), o.Window, o.TopK)
	p.MaxKeys, p.IPv6Prefix = o.MaxKeys, o.IPv6Prefix
	return p
}

// latestNs returns latest in Unix nanoseconds, and whether there is one.
func (r *Rollup) latestNs() (int64, bool) {
	if r.latest.IsZero() {
		return 0, false
	}
	return r.latest.UnixNano(), true
}

// setLatest sets latest from Unix nanoseconds, if seen.
func (r *Rollup) setLatest(ns int64, seen bool) {
	if seen {
		r.latest = time.Unix(0, ns).UTC()
	}
}

// see moves latest for an event at t (Unix nanoseconds): see aheadRun.
func (r *Rollup) see(t int64) {
	old, seen := r.latestNs()
	latest, seen, future := r.ahead.observe(old, seen, t, int64(r.o.MaxSkew), r.ceil)
	r.stats.Future += future
	if latest != old || r.latest.IsZero() {
		r.setLatest(latest, seen)
	}
}

// Advance moves the watermark with the wall clock when the partition has
// been idle (no event since the previous Advance) for Options.Idle: a
// quiet partition is taken to have seen an event at now - Idle.
func (r *Rollup) Advance(now time.Time) {
	r.quiet = false
	if r.active || r.idleSince.IsZero() {
		r.active, r.idleSince = false, now
		return
	}
	if now.Sub(r.idleSince) >= r.o.Idle {
		r.quiet = true
		if t := now.Add(-r.o.Idle); t.After(r.latest) {
			r.latest = t
		}
	}
}

// isClosed reports whether the window [start, end) was emitted.
func (r *Rollup) isClosed(start int64, end time.Time) bool {
	if !r.closed.IsZero() && !end.After(r.closed) {
		return true
	}
	return r.emittedAheadHas(start)
}

// emittedAheadHas reports whether start is in emittedAhead.
func (r *Rollup) emittedAheadHas(start int64) bool {
	_, ok := r.emittedAhead[start]
	return ok
}

// markClosed records that the window [start, end) was emitted: it moves
// closed, unless it lies past latest (see emittedAhead).
func (r *Rollup) markClosed(start int64, end time.Time) {
	if latest, seen := r.latestNs(); !seen || start > latest {
		if r.emittedAhead == nil {
			r.emittedAhead = map[int64]struct{}{}
		}
		r.emittedAhead[start] = struct{}{}
		return
	}
	if end.After(r.closed) {
		r.closed = end
		for s := range r.emittedAhead {
			if s < r.closed.UnixNano() {
				delete(r.emittedAhead, s)
			}
		}
	}
}

// Flush hands emit every window the watermark closed, oldest first, and
// with them the corrections; with final, every open window too (a clean
// shutdown or the end of a replay). Corrections leave only with a closing
// window (or a final flush), never on their own: which events a correction
// holds then depends on the order of the events alone, not on when Flush
// was called, so a restart rebuilds the same corrections. The exception is
// a partition gone quiet (Advance moved its watermark with the wall clock
// and no event came since): no window of it will close, and its
// corrections would wait for its next event, for ever on a shard no edge
// writes to any more; they leave then, as its windows did. A replay never
// goes quiet. A window emit fails on stays pending and is offered again at
// the next Flush.
func (r *Rollup) Flush(final bool, emit func(Output) error) error {
	wm := r.Watermark()
	var errs []error
	closing := false
	for _, start := range sortedKeys(r.open) {
		w := r.open[start]
		if !final && w.p.End().After(wm) {
			break
		}
		if err := emit(Output{Partial: w.p, From: w.from, To: w.to}); err != nil {
			errs = append(errs, err)
			break
		}
		delete(r.open, start)
		r.oldestOK = false
		closing = true
		r.stats.Windows++
		r.markClosed(start, w.p.End())
	}
	if !closing && !final && !(r.quiet && !r.active) {
		return errors.Join(errs...)
	}
	for _, start := range sortedKeys(r.late) {
		w := r.late[start]
		if err := emit(Output{Partial: w.p, Correction: true, From: w.from, To: w.to}); err != nil {
			errs = append(errs, err)
			break
		}
		delete(r.late, start)
		r.stats.Corrections++
	}
	return errors.Join(errs...)
}

// take returns outs with what Flush(final) emits appended.
func (r *Rollup) take(final bool, outs []Output) []Output {
	r.Flush(final, func(o Output) error { outs = append(outs, o); return nil })
	return outs
}

// Due reports whether Flush would emit a window: the watermark has passed
// the end of the oldest open window. Checked after every Add, it closes
// windows at the same event whatever the batches the events came in.
func (r *Rollup) Due() bool {
	oldest, ok := r.oldestOpen()
	return ok && !time.Unix(0, oldest).Add(r.o.Window).After(r.Watermark())
}

// oldestOpen returns the oldest open window's start (Unix nanoseconds),
// and whether a window is open.
func (r *Rollup) oldestOpen() (int64, bool) {
	if len(r.open) == 0 {
		return 0, false
	}
	if !r.oldestOK {
		r.oldest, r.oldestOK = minKey(r.open), true
	}
	return r.oldest, true
}

func minKey(m map[int64]*pending) int64 {
	first := true
	var k0 int64
	for k := range m {
		if first || k < k0 {
			k0, first = k, false
		}
	}
	return k0
}

// snapshotMagic starts an encoded Rollup state; the byte after it is the
// encoding's version.
const snapshotMagic = "RWR"

// snapshotVersion 2 added the Future and Folded counts and the events
// held ahead; 3 the AheadDropped and CorrectionsDropped counts; 4 each
// window's top-K filters after its partial (Offenders.appendFilters),
// without which a restored list starts its filter's bounds at its Floor;
// 5 the BadTime count. Restore reads versions 1 to 4 too. Each window's
// partial carries its own encoding version (DecodePartial reads every
// one), so a new partial version needs no new snapshot version.
const snapshotVersion = 5

// Next is one past the highest sequence number added: where a restored
// Rollup's caller resumes reading.
func (r *Rollup) Next() uint64 { return r.next }

// AppendSnapshot appends the Rollup's whole state — its watermark, its
// open windows and its pending corrections — so that a Rollup restored from
// it and given the events from Next on emits exactly what this one would
// have. Save it with the outputs of the Flush it follows, before they are
// delivered (see package doc).
func (r *Rollup) AppendSnapshot(b []byte) ([]byte, error) {
	b = append(b, snapshotMagic...)
	b = append(b, snapshotVersion)
	b = appendUvarint(b, r.next)
	b = appendUvarint(b, uint64(r.latest.UnixNano()))
	b = appendUvarint(b, uint64(r.closed.UnixNano()))
	for _, m := range []map[int64]*pending{r.open, r.late} {
		keys := sortedKeys(m)
		b = appendUvarint(b, uint64(len(keys)))
		for _, k := range keys {
			w := m[k]
			b = appendUvarint(b, w.from)
			b = appendUvarint(b, w.to)
			var err error
			if b, err = appendPartial(b, w.p, true); err != nil {
				return b, fmt.Errorf("snapshot rollup: %w", err)
			}
			b = w.p.Offenders.appendFilters(b)
		}
	}
	b = appendUvarint(b, r.stats.Events)
	b = appendUvarint(b, r.stats.Late)
	b = appendUvarint(b, r.stats.LateDropped)
	b = appendUvarint(b, r.stats.Windows)
	b = appendUvarint(b, r.stats.Corrections)
	b = appendUvarint(b, r.stats.Future)
	b = appendUvarint(b, r.stats.Folded)
	b = appendUvarint(b, uint64(r.ahead.n))
	for _, t := range r.ahead.times[:r.ahead.n] {
		b = appendUvarint(b, uint64(t))
	}
	starts := slices.Sorted(maps.Keys(r.emittedAhead))
	b = appendUvarint(b, uint64(len(starts)))
	for _, s := range starts {
		b = appendUvarint(b, uint64(s))
	}
	b = appendUvarint(b, r.stats.AheadDropped)
	b = appendUvarint(b, r.stats.CorrectionsDropped)
	b = appendUvarint(b, r.stats.BadTime)
	return b, nil
}

// Restore makes an empty Rollup the one a snapshot was taken of.
func (r *Rollup) Restore(snapshot []byte) error {
	if len(r.open) > 0 || len(r.late) > 0 || r.next > 0 {
		return errors.New("restore rollup: not empty")
	}
	b := snapshot
	if len(b) < len(snapshotMagic)+1 || string(b[:len(snapshotMagic)]) != snapshotMagic {
		return errors.New("restore rollup: not a rollup snapshot")
	}
	v := b[len(snapshotMagic)]
	if v < 1 || v > snapshotVersion {
		return fmt.Errorf("restore rollup: version %d, want 1 to %d", v, snapshotVersion)
	}
	rd := &reader{b: b[len(snapshotMagic)+1:]}
	next := rd.uvarint()
	latest, closed := timeOrZero(rd.uvarint()), timeOrZero(rd.uvarint())
	open, late := map[int64]*pending{}, map[int64]*pending{}
	for _, m := range []map[int64]*pending{open, late} {
		n := rd.count(3)
		for range n {
			w := &pending{from: rd.uvarint(), to: rd.uvarint()}
			pb := rd.bytes()
			if rd.err != nil {
				return fmt.Errorf("restore rollup: %w", rd.err)
			}
			p, err := DecodePartial(pb)
			if err != nil {
				return fmt.Errorf("restore rollup: %w", err)
			}
			if v >= 4 {
				if err := p.Offenders.decodeFilters(rd); err != nil {
					return fmt.Errorf("restore rollup: %w", err)
				}
			}
			if p.Size != r.o.Window {
				return fmt.Errorf("restore rollup: a window of %v, configured %v", p.Size, r.o.Window)
			}
			start := p.Start.UnixNano()
			if m[start] != nil {
				return fmt.Errorf("restore rollup: the window of %v twice", p.Start.UTC().Format(time.RFC3339Nano))
			}
			// Its events to come, as the configuration says: neither is
			// encoded.
			p.MaxKeys, p.IPv6Prefix = r.o.MaxKeys, r.o.IPv6Prefix
			w.p = p
			m[start] = w
		}
	}
	st := RollupStats{Events: rd.uvarint(), Late: rd.uvarint(), LateDropped: rd.uvarint(),
		Windows: rd.uvarint(), Corrections: rd.uvarint()}
	var ahead aheadRun
	var emittedAhead map[int64]struct{}
	if v >= 2 {
		st.Future, st.Folded = rd.uvarint(), rd.uvarint()
		if n := rd.count(1); n < futureQuorum {
			ahead.n = int(n)
		} else {
			rd.fail(fmt.Errorf("%d events held ahead, want fewer than %d", n, futureQuorum))
		}
		for i := range ahead.n {
			ahead.times[i] = int64(rd.uvarint())
		}
		if n := rd.count(1); n > 0 {
			emittedAhead = make(map[int64]struct{}, n)
			for range n {
				emittedAhead[int64(rd.uvarint())] = struct{}{}
			}
		}
	}
	if v >= 3 {
		st.AheadDropped, st.CorrectionsDropped = rd.uvarint(), rd.uvarint()
	}
	if v >= 5 {
		st.BadTime = rd.uvarint()
	}
	if rd.err == nil && len(rd.b) != 0 {
		rd.fail(fmt.Errorf("%d bytes after the end", len(rd.b)))
	}
	if rd.err != nil {
		return fmt.Errorf("restore rollup: %w", rd.err)
	}
	r.next, r.latest, r.closed, r.open, r.late, r.stats, r.ahead = next, latest, closed, open, late, st, ahead
	r.emittedAhead = emittedAhead
	r.oldestOK = false
	return nil
}

func timeOrZero(n uint64) time.Time {
	if int64(n) == (time.Time{}).UnixNano() {
		return time.Time{}
	}
	return time.Unix(0, int64(n))
}
