package aggregator

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/kinesis"
	"github.com/ratewarden/ratewarden/decisions/stream"
)

// KinesisLambda aggregates the decisions of a Kinesis event-source mapping
// in AWS Lambda. Each invocation holds records of one shard, in sequence
// order; a kinesis.LambdaHandler hands them, in commit groups of
// CommitRecords consecutive records (default: the whole invocation), each
// one stream.Batch, to a stream.Handler of the invocation that keeps no
// position of its own (Lambda does). A group's decisions are rolled
// up into one partial per window they touch, and the group's partials are
// written to each sink in turn, then flushed, before the next group is
// read; the invocation returns once every group is written.
//
// An output is keyed by shard, window and the position of the window's
// first event in its commit group, "seq_sub" (Output.Range, see
// positionKey): where the window's events in the group begin, not where
// the group ends. Lambda retries from the record a failed invocation
// names, but may deliver more or fewer records than it did (a batch split
// in halves, records arrived since). Every retry begins where a group
// began, and the cuts below depend on the events from there alone, so a
// window's output in the retry starts at the same event as the failed
// group's did and replaces it, holding the same events or a prefix or an
// extension of them; events past a shorter retry come back in a later
// group, under the key of their own first event. So stored partials are
// replaced, never doubled, whatever the extents, and EMF documents carry
// the same rw_key. A function error (a timeout, a crash) is retried from
// the batch's first record instead, in halves with
// BisectBatchOnFunctionError, and a half may begin inside a group: the
// groups after it are cut at the same records all the same, as every cut
// depends on at most the record and the one before it
// (kinesis.StartsCommitGroup, the epochs and reaches below, a record's
// own windows), so the same holds. Readers merge a window's partials
// across groups, invocations and shards.
//
// A record that cannot be decoded is skipped, counted and reported. When a
// sink fails, the invocation answers with a partial batch failure naming
// the failed group's first record (map the function with
// FunctionResponseTypes ReportBatchItemFailures): Lambda then retries from
// that record on, and the groups before it, whose outputs are durable, are
// not delivered again. Sinks are written in order and a group stops at the
// first that fails, so a sink listed after a fallible one (EMF on stdout
// after stored partials) sees a group only once the one before it has it.
//
// Distinct clients are exact per partial but CloudWatch cannot merge them
// across invocations: UniqueClients of a window is a per-group figure in
// EMF; stored partials merge them exactly.
//
// A commit group holds a partial of every window its decisions touch until
// it is written, so the windows it holds are bounded. A backlog in time
// order is cut where a record's first event enters another epoch of
// MaxAhead/2 windows than the record before it. A record's reach is its
// epoch's first window, MaxAhead windows after it and MaxCorrections
// before it; a record that puts events out of its reach (events out of
// order, stamped far away) is cut after: the next record begins a new
// group. So records of one epoch hold at most MaxAhead + MaxCorrections
// + 1 windows, and a straying record its own besides. A cut writes the
// windows held (an early write, Invocation.EarlyWrites) and a new commit
// group begins at that record, so a failure after it names that record.
// Within a record, nothing is dropped: one record adds at most MaxAhead +
// MaxCorrections + 1 windows to a group, and an event of one more writes
// the windows held first (an early write within the group, cut where the
// record's own events say, whatever record its group began at). A record
// stamped at distinct windows, in the future or the past, cannot exhaust
// the function's memory, and a backlog spanning more windows than the
// caps loses nothing; a window written in several parts is merged by
// readers as separate groups are. When a part fails, nothing after it is
// written and the invocation names its group's first record. Each
// partial keeps MaxKeys names apart (Partial.MaxKeys). It is safe for
// concurrent use.
type KinesisLambda struct {
	Sinks         []Sink
	Window        time.Duration // default 60 s
	TopK          int           // default 100
	CommitRecords int           // records per commit group; default (0) all of an invocation's
	// MaxKeys caps each partial's distinct tiers, rules, nodes and
	// reasons, each; the rest are counted under OtherKey. Default
	// DefaultMaxKeys.
	MaxKeys int
	// MaxAhead and MaxCorrections are a record's reach after and before
	// the first window of its epoch, and so cap the windows a commit
	// group holds (see above). Defaults DefaultMaxAhead and
	// DefaultMaxCorrections.
	MaxAhead, MaxCorrections int
	// IPv6Prefix is the length of the prefix an IPv6 client is counted
	// under (Options.IPv6Prefix): 0 takes DefaultIPv6Prefix.
	IPv6Prefix int

	// OnInvocation, when set, is called at the end of each invocation with
	// what it did.
	OnInvocation func(ctx context.Context, inv Invocation)

	// perEvent makes Arrow records roll up event by event: the reference
	// the tests hold the columnar path to.
	perEvent bool

	mu       sync.Mutex
	problems []error
	stats    LambdaStats
}

// Invocation is what one KinesisLambda invocation did.
type Invocation struct {
	Shard    string
	From, To string  // sequence numbers of the invocation's first and last records
	Records  uint64  // records read
	Events   uint64  // decisions read
	Corrupt  uint64  // records (or log events) skipped
	Outputs  int     // partials written to every sink
	FailedAt string  // the first record whose outputs are not durable; "" when all are
	Err      error   // the sink error behind FailedAt
	Problems []error // the corrupt records' errors, at most 100

	// Folded counts decisions counted with a tier, rule, node or reason
	// folded into OtherKey, past a partial's MaxKeys.
	Folded uint64
	// EarlyWrites counts the writes of the windows held before the end
	// of a commit group: at a record that begins another epoch or
	// follows one that strayed out of its reach (a new group begins
	// there), or within a record whose events touch more than MaxAhead +
	// MaxCorrections + 1 windows (a group's last part is written at its
	// end, as a group in one part is).
	EarlyWrites uint64
	// BadTime counts decisions skipped for their time, as
	// RollupStats.BadTime: the zero time, or the last window of int64
	// nanoseconds.
	BadTime uint64
	// BadLatency counts latencies below 0 left out of the latency
	// sketches, as RollupStats.BadLatency.
	BadLatency uint64
	// Leftovers counts the temporary files of partials that an attempt
	// cut short by its timeout had left, removed (RunStats.Leftovers).
	Leftovers uint64
}

// LambdaStats count what a KinesisLambda did: the decoding counts of the
// Kinesis Lambda handler it reads records with, and the outputs.
type LambdaStats struct {
	kinesis.LambdaStats
	Outputs uint64 // partials written to every sink
	// Folded, EarlyWrites, BadTime, BadLatency and Leftovers sum the
	// invocations'.
	Folded, EarlyWrites, BadTime, BadLatency, Leftovers uint64
}

// Handle handles one invocation: a kinesis.LambdaHandler hands its commit
// groups, as stream batches, to the invocation's lambdaRun.
func (l *KinesisLambda) Handle(ctx context.Context, ev events.KinesisEvent) (events.KinesisEventResponse, error) {
	o := Options{Window: l.Window, TopK: l.TopK, MaxKeys: l.MaxKeys, MaxAhead: l.MaxAhead, MaxCorrections: l.MaxCorrections,
		IPv6Prefix: l.IPv6Prefix}.withDefaults()
	run := &lambdaRun{l: l, o: o, dec: columnar.NewDecoder(), touched: map[int64]bool{}}
	read := kinesis.NewLambdaHandler(run, kinesis.LambdaOptions{CommitRecords: l.CommitRecords})
	resp, err := read.Handle(ctx, ev)
	inv := run.inv
	if n := len(ev.Records); n > 0 { // none: an event that is not Kinesis's, said on its line all the same
		inv.From, inv.To = clipSeq(ev.Records[0].Kinesis.SequenceNumber), clipSeq(ev.Records[n-1].Kinesis.SequenceNumber)
	}
	rs := read.Stats()
	inv.Records, inv.Events, inv.Corrupt, inv.Problems = rs.Records, rs.Events, rs.Corrupt, read.Problems()
	l.mu.Lock()
	l.stats.Invocations++
	l.stats.Records += rs.Records
	l.stats.Events += rs.Events
	l.stats.Corrupt += rs.Corrupt
	l.stats.Outputs += uint64(inv.Outputs)
	l.stats.Folded += inv.Folded
	l.stats.EarlyWrites += inv.EarlyWrites
	l.stats.BadTime += inv.BadTime
	l.stats.BadLatency += inv.BadLatency
	l.stats.Leftovers += inv.Leftovers
	for _, p := range inv.Problems {
		if len(l.problems) < 100 {
			l.problems = append(l.problems, p)
		}
	}
	if inv.FailedAt != "" {
		l.stats.Failed++
	}
	l.mu.Unlock()
	if l.OnInvocation != nil {
		l.OnInvocation(ctx, inv)
	}
	return resp, err
}

// clipSeq returns seq, or for one longer than any Kinesis gives (129
// digits; a forged event's) its first 140 bytes and "...", for the
// invocation's line.
func clipSeq(seq string) string {
	if len(seq) <= 140 {
		return seq
	}
	return strings.ToValidUTF8(seq[:140], "") + "..."
}

// lambdaRun is the stream.Handler of one KinesisLambda invocation: it
// rolls a commit group's decisions up into one partial per window they
// touch and writes them to the sinks before it returns, in parts when the
// windows would pass a cap. It keeps no position of its own: Lambda does.
type lambdaRun struct {
	l     *KinesisLambda
	o     Options // Window, TopK and the caps, defaults filled in
	dec   *columnar.Decoder
	batch Batch
	inv   Invocation

	// The windows held, by start (Unix nanoseconds).
	windows map[int64]*heldWindow
	// from is the first record of the commit group: a failure is
	// reported there, and the retry starts there.
	from string
	// rec is the record being added ("" before the batch's first);
	// touched holds the windows its events touched since it began or was
	// last cut (see window); epoch is the epoch of its first event (see
	// enter); strayed says the record put events in a window out of its reach
	// since it began or was last cut.
	rec     string
	touched map[int64]bool
	epoch   int64
	strayed bool
}

// heldWindow is a window's partial and the position of its first event
// since it was opened, which keys its output.
type heldWindow struct {
	p     *Partial
	first stream.Position
}

var _ stream.Handler = (*lambdaRun)(nil)

// Open returns from: Lambda holds the shard's position.
func (r *lambdaRun) Open(_ context.Context, _ string, from stream.Position) (stream.Position, error) {
	return from, nil
}

// Idle does nothing: Lambda does not call it.
func (r *lambdaRun) Idle(context.Context, string) error { return nil }

// Close does nothing: an invocation's outputs are written by Handle.
func (r *lambdaRun) Close(context.Context, string, bool) error { return nil }

// Handle rolls the group's decisions up and writes their windows to each
// sink, each keyed by the position of its first event (see
// KinesisLambda). A group that passed the caps at a record's start was
// committed there and goes on as a new group (see enter): a failure
// after that names that record (kinesis.RetryFrom).
func (r *lambdaRun) Handle(ctx context.Context, b *stream.Batch) error {
	r.inv.Shard = b.Partition
	r.windows = map[int64]*heldWindow{}
	r.from, r.rec, r.strayed = b.Records[0].Pos.Seq, "", false
	var err error
	if r.l.perEvent {
		err = r.addEvents(ctx, b)
	} else {
		_, err = b.Rows(r.dec, func(rows *stream.Rows) error { return r.add(ctx, rows) })
	}
	if err == nil {
		err = r.write(ctx)
	}
	if err != nil {
		r.inv.FailedAt, r.inv.Err = r.from, err
		return &kinesis.RetryFrom{Seq: r.from, Err: err}
	}
	return nil
}

// positionKey is the key of an output whose window's first event is at
// pos: "seq_sub". It has no '.' or '/', as a partial's file name wants.
func positionKey(pos stream.Position) string {
	return pos.Seq + "_" + strconv.FormatInt(pos.Sub, 10)
}

// write writes the windows held to the sinks and empties them.
func (r *lambdaRun) write(ctx context.Context) error {
	for _, w := range r.windows {
		r.inv.Folded += w.p.Folded
		r.inv.BadLatency += w.p.BadLatency
	}
	n, err := r.l.write(ctx, r.inv.Shard, r.windows)
	r.inv.Leftovers += uint64(n)
	if err != nil {
		return err
	}
	r.inv.Outputs += len(r.windows)
	r.windows = map[int64]*heldWindow{}
	return nil
}

// enter begins the rows of record seq, whose first event falls in the
// window starting at first (Unix nanoseconds), unless they continue the
// record being added. A record begins a new commit group, the windows
// held written first (an early write), when
//   - its first event falls in another epoch than the previous record's
//     first event: a backlog in time order is cut there. An epoch is
//     MaxAhead/2 consecutive windows (at least one), counted from the
//     Unix epoch; or
//   - the previous record strayed: put events in a window out of its
//     reach, which is its epoch's first window, MaxAhead windows after
//     it and MaxCorrections before it (events out of order, stamped far
//     away).
//
// Both depend on two records alone, so any retry, whatever record it
// begins at, cuts there too: a retry from the record a failure names, and
// a function error's retry in halves, which may begin inside a group.
// Records of one epoch that do not stray hold the windows in its reach,
// MaxAhead + MaxCorrections + 1 at most, and a record that strays holds
// its own windows besides (as many at most before it writes within
// itself, see window). Once the windows are written, a failure names the
// new group's record.
func (r *lambdaRun) enter(ctx context.Context, seq string, first int64) error {
	if seq == r.rec {
		return nil
	}
	// The epoch's first window index (first is a window's start).
	epoch := windowStartNs(first/int64(r.o.Window), int64(max(1, r.o.MaxAhead/2)))
	cut := r.rec != "" && epoch != r.epoch && len(r.windows) > 0 || r.strayed
	r.rec, r.epoch, r.strayed = seq, epoch, false
	clear(r.touched)
	if cut {
		if err := r.write(ctx); err != nil {
			return err
		}
		r.inv.EarlyWrites++
		r.from = seq
	}
	return nil
}

// addClamped returns a+b, or the int64 nearest it.
func addClamped(a, b int64) int64 {
	s := a + b
	switch {
	case b > 0 && s < a:
		return math.MaxInt64
	case b < 0 && s > a:
		return math.MinInt64
	}
	return s
}

// reaches reports whether the window starting at start is in the reach
// of the record being added: from MaxCorrections windows before the
// first window of its epoch to MaxAhead after it.
func (r *lambdaRun) reaches(start int64) bool {
	i := start / int64(r.o.Window)
	return i >= addClamped(r.epoch, -int64(r.o.MaxCorrections)) && i <= addClamped(r.epoch, int64(r.o.MaxAhead))
}

// window returns the partial of the window starting at start (Unix
// nanoseconds) for the events from pos on, opened if need be. One record
// adds at most MaxAhead + MaxCorrections + 1 windows to those a group
// held when it began: an event of one more writes every window held
// first (an early write, in the same commit group). That cut depends on
// the record's events alone, wherever its group began, so a retry that
// begins at another record cuts there too.
func (r *lambdaRun) window(ctx context.Context, start int64, pos stream.Position) (*Partial, error) {
	if !r.touched[start] {
		if len(r.touched) > r.o.MaxAhead+r.o.MaxCorrections {
			if err := r.write(ctx); err != nil {
				return nil, err
			}
			r.inv.EarlyWrites++
			clear(r.touched)
			r.strayed = false
		}
		r.touched[start] = true
		if !r.reaches(start) {
			r.strayed = true
		}
	}
	if w := r.windows[start]; w != nil {
		return w.p, nil
	}
	p := r.o.newPartial(start)
	r.windows[start] = &heldWindow{p: p, first: pos}
	return p, nil
}

// addEvents rolls the batch's records up event by event, decoded whole
// (the per-event reference); Batch.Rows counts and reports them all the
// same.
func (r *lambdaRun) addEvents(ctx context.Context, b *stream.Batch) error {
	b.Rows(r.dec, func(*stream.Rows) error { return nil })
	var ds []decisions.Decision
	for i := range b.Records {
		var err error
		ds, err = columnar.DecodeRecord(b.Records[i].Data, ds[:0])
		if _, partial := columnar.IsCorruptEvents(err); err != nil && !partial {
			continue
		}
		if err := r.addDecisions(ctx, ds, b.Records[i].Pos); err != nil {
			return err
		}
	}
	return nil
}

// addDecisions rolls decisions up one by one, the first at position pos.
// Those windowOf refuses are counted (BadTime) and skipped: the record
// enters with its first other event, and a record of none is as one of
// no events.
func (r *lambdaRun) addDecisions(ctx context.Context, ds []decisions.Decision, pos stream.Position) error {
	w := int64(r.o.Window)
	entered := false
	for j := range ds {
		d := &ds[j]
		start, ok := windowOf(d.Time.UnixNano(), w)
		if !ok {
			r.inv.BadTime++
			continue
		}
		if !entered {
			if err := r.enter(ctx, pos.Seq, start); err != nil {
				return err
			}
			entered = true
		}
		at := stream.Position{Seq: pos.Seq, Sub: pos.Sub + int64(j)}
		p, err := r.window(ctx, start, at)
		if err != nil {
			return err
		}
		p.Update(d)
	}
	return nil
}

// add rolls rows up: events one by one, Arrow records from their columns,
// a run of rows of one window at a time.
func (r *lambdaRun) add(ctx context.Context, rows *stream.Rows) error {
	if rows.Columns == nil {
		return r.addDecisions(ctx, rows.Events[rows.Lo:], stream.Position{Seq: rows.Pos.Seq, Sub: rows.Pos.Sub + int64(rows.Lo)})
	}
	if rows.Lo >= rows.Len() {
		return nil
	}
	r.batch.Prepare(rows.Columns)
	times, w := r.batch.Times(), int64(r.o.Window)
	entered := false
	for i := rows.Lo; i < len(times); {
		start, ok := windowOf(times[i], w)
		if !ok {
			r.inv.BadTime++ // as addDecisions
			i++
			continue
		}
		if !entered {
			if err := r.enter(ctx, rows.Pos.Seq, start); err != nil {
				return err
			}
			entered = true
		}
		j, span := i+1, uint64(windowSpanNs(start, w))
		for j < len(times) && inRun(times[j], start, span) {
			j++
		}
		p, err := r.window(ctx, start, stream.Position{Seq: rows.Pos.Seq, Sub: rows.Pos.Sub + int64(i)})
		if err != nil {
			return err
		}
		p.UpdateColumns(&r.batch, i, j)
		i = j
	}
	return nil
}

// write writes a group's windows to each sink in turn and flushes it,
// stopping at the first sink that fails. A sink that writes files through
// temporary files (leftoverRemover) first removes those that an attempt
// at the same outputs left, cut short by the invocation's timeout: the
// retry writes the same files, and is their only writer (a shard's
// batches are handled one at a time, an attempt ended before its retry).
// It returns how many it removed.
func (l *KinesisLambda) write(ctx context.Context, shard string, windows map[int64]*heldWindow) (leftovers int, err error) {
	if len(windows) == 0 {
		return 0, nil
	}
	starts := sortedKeys(windows)
	outs := make([]Output, len(starts))
	for i, start := range starts {
		w := windows[start]
		outs[i] = Output{Partial: w.p, Range: positionKey(w.first)}
	}
	for _, s := range l.Sinks {
		if r, ok := s.(leftoverRemover); ok {
			n, err := r.removeLeftovers(shard, outs)
			leftovers += n
			if err != nil {
				return leftovers, err
			}
		}
		for _, o := range outs {
			if err := s.Write(ctx, shard, o); err != nil {
				return leftovers, err
			}
		}
		if err := s.Flush(ctx); err != nil {
			return leftovers, err
		}
	}
	return leftovers, nil
}

// Stats returns the counts so far.
func (l *KinesisLambda) Stats() LambdaStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Problems returns the first corrupt records' errors.
func (l *KinesisLambda) Problems() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.problems...)
}
