package seglog

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/internal/dirlock"
)

// Record is one entry of the log: a payload holding Count events, whose
// offsets are FirstOffset … FirstOffset+Count-1.
type Record struct {
	FirstOffset uint64    // offset of the record's first event; assigned by Append
	Count       uint32    // events in the payload; at least 1
	MinTime     time.Time // earliest event time in the payload, for time seeks and retention; may be zero
	MaxTime     time.Time // latest event time; not before MinTime
	Codec       uint8     // the payload's codec, opaque to the log (1 Arrow+zstd, 2 JSON lines, …)
	Payload     []byte    // at most MaxPayload bytes
}

// SyncMode says when the log makes appended records durable.
type SyncMode uint8

// The sync modes. The zero value is SyncInterval.
const (
	SyncInterval   SyncMode = iota // a background goroutine syncs every SyncPolicy.Interval
	SyncEveryBatch                 // Append returns once its records are synced
	SyncNever                      // only Sync, a segment roll and Close sync
)

var syncModeNames = [...]string{SyncInterval: "interval", SyncEveryBatch: "every_batch", SyncNever: "never"}

// String returns the mode's name, such as "every_batch".
// SyncModeChoices are the names UnmarshalText accepts, the default first.
var SyncModeChoices = []string{"interval", "batch", "never"}

// UnmarshalText reads a sync mode by its configuration name: interval,
// batch (SyncEveryBatch) or never.
func (m *SyncMode) UnmarshalText(b []byte) error {
	switch string(b) {
	case "interval":
		*m = SyncInterval
	case "batch", "every_batch":
		*m = SyncEveryBatch
	case "never":
		*m = SyncNever
	default:
		return fmt.Errorf("sync mode %q: want one of interval, batch, never", b)
	}
	return nil
}

// Choices lists the names UnmarshalText accepts.
func (SyncMode) Choices() []string { return SyncModeChoices }

func (m SyncMode) String() string {
	if int(m) >= len(syncModeNames) {
		return "unknown"
	}
	return syncModeNames[m]
}

// SyncPolicy says when the log syncs. The zero value syncs every 10 ms.
type SyncPolicy struct {
	Mode     SyncMode
	Interval time.Duration // for SyncInterval; default 10ms
}

// Options configures a Log or a Reader. The zero value is the defaults.
type Options struct {
	SegmentBytes int64         // roll when a segment would grow past this; default 128 MiB, at least 1 KiB
	SegmentAge   time.Duration // roll a segment older than this, at the next append; default 1h
	Sync         SyncPolicy    // default every 10 ms: a machine crash loses at most the last 10 ms of appends
	RetainAge    time.Duration // remove the oldest segments whose newest event is older than this; 0 keeps them
	RetainBytes  int64         // remove the oldest segments while the log is larger than this; 0 is no bound

	// Report is called with every problem found: corrupt regions, torn
	// tails, missing events. A Log reports each region once, however many
	// of its readers meet it. It may be called from several goroutines at
	// once. It may be nil.
	Report func(Problem)

	Now        func() time.Time // the clock for segment ages and retention at a roll; default time.Now
	FollowPoll time.Duration    // how often Reader.Follow looks at the files for new data; default 50ms
}

const (
	defaultSegmentBytes = 128 << 20
	defaultSegmentAge   = time.Hour
	defaultSyncInterval = 10 * time.Millisecond
	defaultFollowPoll   = 50 * time.Millisecond
	minSegmentBytes     = 1 << 10
)

func (o Options) withDefaults() Options {
	if o.SegmentBytes == 0 {
		o.SegmentBytes = defaultSegmentBytes
	}
	if o.SegmentAge == 0 {
		o.SegmentAge = defaultSegmentAge
	}
	if o.Sync.Mode == SyncInterval && o.Sync.Interval == 0 {
		o.Sync.Interval = defaultSyncInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.FollowPoll == 0 {
		o.FollowPoll = defaultFollowPoll
	}
	return o
}

// Validate checks the options, after the defaults are filled in.
func (o Options) Validate() error {
	o = o.withDefaults()
	switch {
	case o.SegmentBytes < minSegmentBytes:
		return fmt.Errorf("SegmentBytes: got %d, want at least %d", o.SegmentBytes, minSegmentBytes)
	case o.SegmentAge < 0:
		return fmt.Errorf("SegmentAge: got %v, want a positive duration", o.SegmentAge)
	case int(o.Sync.Mode) >= len(syncModeNames):
		return fmt.Errorf("Sync.Mode: got %d, want SyncInterval, SyncEveryBatch or SyncNever", o.Sync.Mode)
	case o.Sync.Mode == SyncInterval && o.Sync.Interval < 0:
		return fmt.Errorf("Sync.Interval: got %v, want a positive duration", o.Sync.Interval)
	case o.RetainAge < 0:
		return fmt.Errorf("RetainAge: got %v, want 0 (keep) or a positive duration", o.RetainAge)
	case o.RetainBytes < 0:
		return fmt.Errorf("RetainBytes: got %d, want 0 (no bound) or a positive size", o.RetainBytes)
	case o.FollowPoll < 0:
		return fmt.Errorf("FollowPoll: got %v, want a positive duration", o.FollowPoll)
	}
	return nil
}

// indexEvery is how far apart a segment's index entries are.
func (o Options) indexEvery() int64 { return min(max(o.SegmentBytes/64, 4<<10), 4<<20) }

// segment is the in-memory index of one segment file.
type segment struct {
	first, end  uint64 // offsets: end is one past the last
	path        string
	size        int64
	records     uint64
	created     int64 // Unix ns
	minT, maxT  int64
	index       []indexEntry
	nextIndexAt int64
	sealed      bool // has a trailer
}

func newSegment(dir string, first uint64, created int64, every int64) *segment {
	return &segment{first: first, end: first, path: segPath(dir, first), size: headerLen, created: created,
		minT: noTime, maxT: noTime, nextIndexAt: headerLen + every}
}

// observe adds a record whose frame spans pos to end.
func (s *segment) observe(first uint64, count uint32, minT, maxT int64, pos, end, every int64) {
	if pos >= s.nextIndexAt {
		s.index = append(s.index, indexEntry{offset: first, pos: pos, maxPrev: s.maxT})
		s.nextIndexAt = pos + every
	}
	if s.records == 0 {
		s.minT, s.maxT = minT, maxT
	} else {
		s.minT, s.maxT = min(s.minT, minT), max(s.maxT, maxT)
	}
	s.records++
	s.end, s.size = first+uint64(count), end
}

// full reports whether a batch of n bytes would take s past limit, counting
// the trailer that will seal it.
func (s *segment) full(n, limit, every int64) bool {
	tr := int64(frameHeaderLen + trailerFixedLen + indexEntryLen*(len(s.index)+1+int(n/every)))
	return s.size+n+tr > limit
}

func (s *segment) trailer() trailer {
	return trailer{first: s.first, end: s.end, records: s.records, minT: s.minT, maxT: s.maxT, index: s.index}
}

// seek returns where to start reading s for the record holding offset.
func (s *segment) seek(offset uint64) (pos int64, expect uint64) {
	pos, expect = headerLen, s.first
	for _, e := range s.index {
		if e.offset > offset {
			break
		}
		pos, expect = e.pos, e.offset
	}
	return pos, expect
}

// Log is a segmented, append-only log in a directory, open for writing. It
// is safe for concurrent use. Make one with Open; the zero Log is not
// usable.
type Log struct {
	dir   string
	opts  Options
	every int64
	lock  *dirlock.Lock

	mu      sync.Mutex
	segs    []*segment // oldest first; the last is the active one
	f       *os.File   // the active segment
	retired []*os.File // sealed segments' files, closed by the next sync
	next    uint64
	buf     []byte
	err     error // sticky: after a failed sync the log refuses appends
	closed  bool
	notify  chan struct{} // closed and replaced at an append, when a follower waits
	waiting bool

	syncMu  sync.Mutex // serialises syncs
	durable atomic.Uint64
	nextA   atomic.Uint64

	stop, done chan struct{}

	offMu sync.Mutex // serialises consumer offset commits

	syncs, appends, rolls, removed, retainErrs atomic.Uint64
	removedUnread                              atomic.Uint64

	probMu        sync.Mutex
	seen          map[problemKey]struct{}
	corruptRegion uint64
	corruptBytes  int64
	corruptEvents uint64
}

type problemKey struct {
	segment string
	offset  int64
	err     string
}

const maxSeen = 4096

// Stats are a Log's counters.
type Stats struct {
	Segments       int    // segment files indexed
	Bytes          int64  // their size
	Records        uint64 // records in them
	Events         uint64 // offsets they span
	NextOffset     uint64 // the offset the next event will take
	Durable        uint64 // offsets below this are synced
	CorruptRegions uint64 // problems found so far, torn tails included, each once
	CorruptBytes   int64  // bytes they skipped
	CorruptEvents  uint64 // events they lost, where known
	Syncs          uint64 // fsyncs of segments
	Appends        uint64 // successful Append calls
	Rolls          uint64 // segments sealed
	Removed        uint64 // segments removed by retention
	RetainErrors   uint64 // failures of retention at a roll (Retain returns its own)
	// RemovedUnread counts the events retention removed that a consumer
	// with a committed offset had not read (each reported, ErrUnread).
	RemovedUnread uint64
}

var (
	errTorn       = fmt.Errorf("partial write at the end of the last segment, truncated: %w", ErrTornTail)
	errTornHeader = fmt.Errorf("segment created without a whole header, removed: %w", ErrTornTail)
)

// Open opens the log in dir for writing, creating dir if need be. It
// indexes the segments, reading the trailers of sealed ones; reads the last
// segment through and truncates a torn tail, reporting it; and syncs what
// it kept, so that everything read from the log at Open is durable. It
// refuses a log whose last segment is not one (a foreign file, a future
// version), naming it: appending after a segment it cannot read could
// reuse offsets. Close the Log to stop its sync goroutine.
func Open(dir string, opts Options) (*Log, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	opts = opts.withDefaults()
	if err := os.MkdirAll(filepath.Join(dir, offsetsDir), 0o755); err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	// One writer per log: a second would append at offsets the first
	// has used. A writer killed however abruptly lets the log go.
	lock, err := dirlock.Acquire(dir)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	l := &Log{
		dir: dir, opts: opts, every: opts.indexEvery(), lock: lock,
		notify: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
		seen: make(map[problemKey]struct{}),
	}
	if err := l.recover(); err != nil {
		l.closeFiles()
		return nil, fmt.Errorf("open log %s: %w", dir, err)
	}
	l.durable.Store(l.next)
	l.nextA.Store(l.next)
	l.retainAfterRoll(opts.Now())
	if opts.Sync.Mode == SyncInterval {
		go l.syncLoop(opts.Sync.Interval)
	} else {
		close(l.done)
	}
	return l, nil
}

func (l *Log) recover() error {
	removeTemps(l.dir, segSuffix+tmpSuffix)
	removeTemps(filepath.Join(l.dir, offsetsDir), tmpSuffix)
	names, err := listSegments(l.dir)
	if err != nil {
		return err
	}
	if names, err = l.quarantine(names); err != nil {
		return err
	}
	// A last segment without a whole header holds no record: its creation
	// was cut short. Anything else there is not ours to remove.
	for len(names) > 0 {
		last := names[len(names)-1]
		b, err := os.ReadFile(last.path)
		if err != nil {
			return err
		}
		if len(b) >= headerLen {
			break
		}
		if _, herr := parseHeader(b); herr != errEmpty && herr != errHeaderShort {
			break
		}
		if err := os.Remove(last.path); err != nil {
			return err
		}
		l.noteProblem(Problem{Segment: last.path, Bytes: int64(len(b)), Err: errTornHeader})
		names = names[:len(names)-1]
	}
	if len(names) == 0 {
		return l.create(0, l.opts.Now())
	}
	// Each sealed segment's offsets end where the next segment's begin;
	// a file whose header is not a segment's says nothing about that.
	upper := make([]uint64, len(names))
	next := uint64(math.MaxUint64)
	for i := len(names) - 1; i >= 0; i-- {
		upper[i] = next
		if segmentName(names[i].path) {
			next = names[i].first
		}
	}
	for i, n := range names[:len(names)-1] {
		if err := l.loadSealed(n, upper[i]); err != nil {
			return err
		}
	}
	return l.recoverLast(names[len(names)-1])
}

// loadSealed indexes a segment that is not the last, from its trailer or,
// lacking one, by reading it through.
func (l *Log) loadSealed(n segFile, nextFirst uint64) error {
	f, err := os.Open(n.path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	var hb [headerLen]byte
	m, _ := f.ReadAt(hb[:], 0)
	h, herr := parseHeader(hb[:m])
	switch {
	case herr == nil && h.first != n.first:
		l.noteProblem(Problem{Segment: n.path, Bytes: headerLen, Err: errHeaderOffset})
	case herr == errHeaderChecksum:
		l.noteProblem(Problem{Segment: n.path, Bytes: headerLen, Err: herr})
	case herr != nil:
		// Not a segment we can read: readers report it and skip it;
		// retention leaves it alone.
		l.noteProblem(Problem{Segment: n.path, Bytes: size, Err: herr})
		return nil
	}
	s := newSegment(l.dir, n.first, h.created, l.every)
	if tr, ok := readTrailer(f, n.path, n.first, size); ok && tr.end <= nextFirst {
		s.end, s.records, s.minT, s.maxT, s.index = tr.end, tr.records, tr.minT, tr.maxT, tr.index
		s.size, s.sealed = size, true
		l.segs = append(l.segs, s)
		return nil
	}
	sc := newScan(n.path, n.first, f, headerLen, n.first)
	sc.sealed, sc.upper = true, nextFirst
	for {
		st, err := sc.next(size)
		if err != nil {
			return err
		}
		if st.hasProb {
			l.noteProblem(st.prob)
		}
		if st.kind != stepRecord {
			break
		}
		s.observe(st.fr.first, st.fr.count, st.fr.minT, st.fr.maxT, st.fr.pos, st.fr.end, l.every)
	}
	s.end, s.size, s.sealed = max(sc.expect, s.end), size, true
	l.segs = append(l.segs, s)
	return nil
}

// recoverLast reads the last segment through, truncates its torn tail and
// makes it the active segment (or, when it was sealed, rolls past it).
func (l *Log) recoverLast(n segFile) error {
	f, err := os.OpenFile(n.path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	fail := func(err error) error { f.Close(); return err }
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	size := fi.Size()
	var hb [headerLen]byte
	m, _ := f.ReadAt(hb[:], 0)
	h, err := parseHeader(hb[:m])
	if err == nil && h.first != n.first {
		err = errHeaderOffset
	}
	if err != nil {
		return fail(fmt.Errorf("last segment %s at byte 0: %w (move it away to open the log)", n.path, err))
	}
	s := newSegment(l.dir, n.first, h.created, l.every)
	sc := newScan(n.path, n.first, f, headerLen, n.first)
	for {
		st, err := sc.next(size)
		if err != nil {
			return fail(err)
		}
		if st.hasProb {
			l.noteProblem(st.prob)
		}
		if st.kind == stepRecord {
			s.observe(st.fr.first, st.fr.count, st.fr.minT, st.fr.maxT, st.fr.pos, st.fr.end, l.every)
			continue
		}
		s.sealed = st.kind == stepEnd // a trailer
		break
	}
	if sc.pos < size {
		if err := f.Truncate(sc.pos); err != nil {
			return fail(err)
		}
		l.noteProblem(Problem{Segment: n.path, Offset: sc.pos, Bytes: size - sc.pos, Err: errTorn})
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	s.end, s.size = max(sc.expect, s.end), sc.pos
	l.segs = append(l.segs, s)
	l.next = s.end
	if !s.sealed {
		l.f = f
		return nil
	}
	f.Close()
	return l.create(s.end, l.opts.Now())
}

// create makes a new active segment starting at first.
func (l *Log) create(first uint64, now time.Time) error {
	f, err := createSegment(l.dir, first, now)
	if err != nil {
		return err
	}
	if l.f != nil {
		l.retired = append(l.retired, l.f)
	}
	l.f = f
	l.segs = append(l.segs, newSegment(l.dir, first, timeNS(now), l.every))
	l.next = first
	return nil
}

// createSegment writes a segment header under a temporary name, syncs it
// and renames it into place, so that a segment never appears without one.
func createSegment(dir string, first uint64, now time.Time) (*os.File, error) {
	path := segPath(dir, first)
	tmp := path + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create segment: %w", err)
	}
	_, err = f.Write(appendHeader(make([]byte, 0, headerLen), first, now))
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("create segment %s: %w", path, err)
	}
	return f, nil
}

// Append writes recs, in one write, at the next offsets, and returns the
// first offset it gave them; their FirstOffset fields are ignored. Under
// SyncEveryBatch the records are durable when it returns; otherwise they
// are when Durable passes them. Append keeps no reference to the records'
// payloads. When the write fails nothing is kept. When the sync fails the
// records were written at first but may not be durable, and the log
// refuses further appends: reopen it.
func (l *Log) Append(recs ...Record) (first uint64, err error) {
	size, events := 0, uint64(0)
	for i := range recs {
		if err := checkRecord(&recs[i]); err != nil {
			return 0, fmt.Errorf("append record %d: %w", i, err)
		}
		size += frameLen(&recs[i])
		events += uint64(recs[i].Count)
	}
	if size > maxBatch {
		return 0, fmt.Errorf("append: batch of %d bytes, want at most %d", size, maxBatch)
	}
	l.mu.Lock()
	first = l.next
	switch {
	case l.closed:
		l.mu.Unlock()
		return 0, fmt.Errorf("append: log %w", ErrClosed)
	case l.err != nil:
		err := l.err
		l.mu.Unlock()
		return 0, fmt.Errorf("append: %w", err)
	case len(recs) == 0:
		l.mu.Unlock()
		return first, nil
	case events > math.MaxUint64-first:
		l.mu.Unlock()
		return 0, errors.New("append: offsets exhausted")
	}
	now := l.opts.Now()
	a := l.segs[len(l.segs)-1]
	rolled := false
	if a.sealed || (a.records > 0 && (a.full(int64(size), l.opts.SegmentBytes, l.every) || now.Sub(nsTime(a.created)) >= l.opts.SegmentAge)) {
		if err := l.roll(now); err != nil {
			l.mu.Unlock()
			return 0, fmt.Errorf("append: %w", err)
		}
		rolled, a = true, l.segs[len(l.segs)-1]
	}
	buf := l.buf[:0]
	off := first
	for i := range recs {
		r := recs[i]
		r.FirstOffset = off
		buf = appendRecord(buf, &r)
		off += uint64(r.Count)
	}
	if _, err := l.f.WriteAt(buf, a.size); err != nil {
		if terr := l.f.Truncate(a.size); terr != nil {
			l.failLocked(terr)
		}
		l.mu.Unlock()
		return 0, fmt.Errorf("append: %w", err)
	}
	pos, off := a.size, first
	for i := range recs {
		r := &recs[i]
		end := pos + int64(frameLen(r))
		a.observe(off, r.Count, timeNS(r.MinTime), timeNS(r.MaxTime), pos, end, l.every)
		pos, off = end, off+uint64(r.Count)
	}
	l.next = off
	l.nextA.Store(off)
	if cap(buf) <= 4<<20 {
		l.buf = buf
	}
	if l.waiting {
		close(l.notify)
		l.notify, l.waiting = make(chan struct{}), false
	}
	l.mu.Unlock()
	l.appends.Add(1)
	if rolled {
		l.closeRetired()
		l.retainAfterRoll(now)
	}
	if l.opts.Sync.Mode == SyncEveryBatch {
		if err := l.syncTo(off); err != nil {
			return first, fmt.Errorf("append: %w", err)
		}
	}
	return first, nil
}

// roll seals the active segment with its trailer, syncs it, and starts the
// next one. l.mu is held.
func (l *Log) roll(now time.Time) error {
	a := l.segs[len(l.segs)-1]
	if !a.sealed {
		tr := a.trailer()
		tb := appendTrailer(nil, &tr)
		if _, err := l.f.WriteAt(tb, a.size); err != nil {
			if terr := l.f.Truncate(a.size); terr != nil {
				l.failLocked(terr)
			}
			return fmt.Errorf("seal segment: %w", err)
		}
		// The sealed segment is synced before the next one exists, so that
		// a machine crash cannot keep later offsets and lose earlier ones.
		if err := l.f.Sync(); err != nil {
			l.failLocked(err)
			return fmt.Errorf("seal segment: %w", err)
		}
		a.size += int64(len(tb))
		a.sealed = true
		l.syncs.Add(1)
		l.rolls.Add(1)
		l.advanceDurable(a.end)
	}
	return l.create(a.end, now)
}

// Sync makes everything appended so far durable.
func (l *Log) Sync() error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	return l.syncLocked()
}

// syncTo makes offsets below end durable, sharing a sync with other
// appenders when one has covered them meanwhile.
func (l *Log) syncTo(end uint64) error {
	if l.durable.Load() >= end {
		return nil
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	if l.durable.Load() >= end {
		return nil
	}
	return l.syncLocked()
}

// syncLocked syncs the active segment. l.syncMu is held; l.mu is not.
func (l *Log) syncLocked() error {
	l.mu.Lock()
	f, upto, retired, err := l.f, l.next, l.retired, l.err
	l.retired = nil
	l.mu.Unlock()
	for _, r := range retired {
		r.Close() // synced when it was sealed
	}
	switch {
	case err != nil:
		return err
	case f == nil:
		return fmt.Errorf("sync: log %w", ErrClosed)
	case upto <= l.durable.Load():
		return nil
	}
	if err := f.Sync(); err != nil {
		l.fail(err)
		return fmt.Errorf("sync segment: %w", err)
	}
	l.syncs.Add(1)
	l.advanceDurable(upto)
	return nil
}

// closeRetired closes the files of sealed segments, unless a sync is under
// way (which may be using one): then the next sync closes them.
func (l *Log) closeRetired() {
	if !l.syncMu.TryLock() {
		return
	}
	l.mu.Lock()
	retired := l.retired
	l.retired = nil
	l.mu.Unlock()
	l.syncMu.Unlock()
	for _, r := range retired {
		r.Close()
	}
}

func (l *Log) advanceDurable(v uint64) {
	for {
		cur := l.durable.Load()
		if v <= cur || l.durable.CompareAndSwap(cur, v) {
			return
		}
	}
}

// fail makes err sticky: after a failed sync the state of the page cache is
// unknown, so the log stops appending until it is reopened and read back.
func (l *Log) fail(err error) {
	l.mu.Lock()
	l.failLocked(err)
	l.mu.Unlock()
}

func (l *Log) failLocked(err error) {
	if l.err == nil {
		l.err = fmt.Errorf("log failed, reopen it: %w", err)
	}
}

func (l *Log) syncLoop(every time.Duration) {
	defer close(l.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			if l.durable.Load() < l.nextA.Load() {
				l.Sync() // an error is sticky: the next Append returns it
			}
		}
	}
}

// NextOffset returns the offset the next appended event will take.
func (l *Log) NextOffset() uint64 { return l.nextA.Load() }

// Durable returns the offset below which every appended event is synced:
// the events of a record are safe to acknowledge once
// Durable() ≥ FirstOffset+Count.
func (l *Log) Durable() uint64 { return l.durable.Load() }

// Close syncs and closes the log, and stops its sync goroutine. Readers of
// the log stay usable; followers at the end get ErrClosed. Closing twice
// does nothing.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.notify)
	l.mu.Unlock()
	close(l.stop)
	<-l.done
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	err := l.syncLocked()
	if errors.Is(err, ErrClosed) {
		err = nil
	}
	return errors.Join(err, l.closeFiles())
}

func (l *Log) closeFiles() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, r := range l.retired {
		r.Close()
	}
	l.retired = nil
	if l.f != nil {
		errs = append(errs, l.f.Close())
		l.f = nil
	}
	if l.lock != nil {
		errs = append(errs, l.lock.Close())
		l.lock = nil
	}
	return errors.Join(errs...)
}

// Stats returns the log's counters.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	st := Stats{Segments: len(l.segs), NextOffset: l.next}
	for _, s := range l.segs {
		st.Bytes += s.size
		st.Records += s.records
		st.Events += s.end - s.first
	}
	l.mu.Unlock()
	l.probMu.Lock()
	st.CorruptRegions, st.CorruptBytes, st.CorruptEvents = l.corruptRegion, l.corruptBytes, l.corruptEvents
	l.probMu.Unlock()
	st.Durable = l.durable.Load()
	st.Syncs, st.Appends, st.Rolls = l.syncs.Load(), l.appends.Load(), l.rolls.Load()
	st.Removed, st.RetainErrors = l.removed.Load(), l.retainErrs.Load()
	st.RemovedUnread = l.removedUnread.Load()
	return st
}

// noteProblem counts p, once per region, and reports it.
func (l *Log) noteProblem(p Problem) {
	k := problemKey{segment: p.Segment, offset: p.Offset}
	if p.Err != nil {
		k.err = p.Err.Error()
	}
	l.probMu.Lock()
	if _, dup := l.seen[k]; dup {
		l.probMu.Unlock()
		return
	}
	if len(l.seen) < maxSeen {
		l.seen[k] = struct{}{}
	}
	l.corruptRegion++
	l.corruptBytes += p.Bytes
	l.corruptEvents += p.Events
	l.probMu.Unlock()
	if l.opts.Report != nil {
		l.opts.Report(p)
	}
}

// Retain removes the oldest segments that retention says to: those whose
// newest event is older than now minus RetainAge, and those beyond
// RetainBytes of the total. It removes segments only from the oldest on,
// never the active one, and never a file it could not read as a segment.
// Records without times count as old. The Log also applies it at each roll.
// Readers that have a removed segment open go on reading it.
//
// Retention does not wait for consumers: a full disk would stop the writer.
// A removed segment holding events that a consumer with a committed offset
// (CommitOffset, CommitReaderOffset) has not read is reported, once per
// segment, as a Problem wrapping ErrUnread that names the consumer furthest
// behind, and its unread events are counted in Stats.RemovedUnread. The
// offset file of a consumer gone for good is to be removed (offsets/), or
// retention goes on reporting what it removes as unread by it.
func (l *Log) Retain(now time.Time) (removed int, err error) {
	if l.opts.RetainAge == 0 && l.opts.RetainBytes == 0 {
		return 0, nil
	}
	cutoff := clampNS(now.Add(-l.opts.RetainAge))
	return l.removeOldest("retain", func(s *segment, total int64) bool {
		newest := s.maxT
		if s.records == 0 {
			newest = s.created
		}
		old := l.opts.RetainAge > 0 && newest < cutoff
		big := l.opts.RetainBytes > 0 && total > l.opts.RetainBytes
		return old || big
	})
}

// RemoveBefore removes the oldest segments all of whose events lie before
// offset: what a consumer that committed offset has read. It never removes
// the active segment. Readers that have a removed segment open go on
// reading it.
func (l *Log) RemoveBefore(offset uint64) (removed int, err error) {
	return l.removeOldest("remove before", func(s *segment, _ int64) bool { return s.end <= offset })
}

// removeOldest removes segments from the oldest on while drop says to,
// never the active one. drop sees the segment and the total size of the
// segments from it on.
func (l *Log) removeOldest(op string, drop func(s *segment, total int64) bool) (removed int, err error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, fmt.Errorf("%s: log %w", op, ErrClosed)
	}
	var total int64
	for _, s := range l.segs {
		total += s.size
	}
	cut := 0
	for ; cut < len(l.segs)-1 && drop(l.segs[cut], total); cut++ {
		total -= l.segs[cut].size
	}
	victims := l.segs[:cut:cut]
	l.segs = append([]*segment(nil), l.segs[cut:]...)
	l.mu.Unlock()
	var behind consumerOffset
	if op == "retain" && len(victims) > 0 {
		behind = l.slowestConsumer()
	}
	var errs []error
	for _, s := range victims {
		if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed++
		if behind.ok && behind.offset < s.end {
			l.removedUnread.Add(s.end - max(s.first, behind.offset))
			if l.opts.Report != nil {
				l.opts.Report(Problem{Segment: s.path, Events: s.end - max(s.first, behind.offset),
					Err: fmt.Errorf("consumer %s had read to offset %d: %w", behind.name, behind.offset, ErrUnread)})
			}
		}
	}
	l.removed.Add(uint64(removed))
	if len(errs) > 0 {
		return removed, fmt.Errorf("%s: %w", op, errors.Join(errs...))
	}
	return removed, nil
}

func (l *Log) retainAfterRoll(now time.Time) {
	if _, err := l.Retain(now); err != nil {
		l.retainErrs.Add(1)
	}
}

// segmentName reports whether the file at path has a segment's header, if
// perhaps a damaged or newer one: whether its name is a segment's first
// offset rather than a stranger's choice.
func segmentName(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var hb [headerLen]byte
	m, _ := f.ReadAt(hb[:], 0)
	_, err = parseHeader(hb[:m])
	return hasSegmentHeader(err)
}

// hasSegmentHeader reports whether a header that parseHeader returned herr
// for is a segment's, if perhaps a damaged or newer one, so that the file's
// name is a first offset; a file without one says nothing about offsets.
func hasSegmentHeader(herr error) bool {
	return herr == nil || herr == errHeaderChecksum || herr == errHeaderVersion
}

// quarantine moves the files named like segments that do not start with a
// segment's magic (a stranger's file, not a damaged segment) to
// QuarantineDir, reporting each, and returns the other names. Such a file
// says nothing about offsets: left in place it would read as a gap before
// its name and, as the last file, keep the log from opening.
func (l *Log) quarantine(names []segFile) ([]segFile, error) {
	kept := names[:0:0]
	for _, n := range names {
		f, err := os.Open(n.path)
		if err != nil {
			return nil, err
		}
		var hb [headerLen]byte
		m, _ := f.ReadAt(hb[:], 0)
		fi, serr := f.Stat()
		f.Close()
		if serr != nil {
			return nil, serr
		}
		if _, herr := parseHeader(hb[:m]); herr != ErrNotSegment {
			kept = append(kept, n)
			continue
		}
		to, err := quarantineFile(l.dir, n.path)
		if err != nil {
			return nil, err
		}
		l.noteProblem(Problem{Segment: n.path, Bytes: fi.Size(), Err: &quarantinedError{to: to}})
	}
	return kept, nil
}

// quarantineFile moves path into dir's QuarantineDir under its own name,
// or with a numeric suffix when that is taken, and returns where it went.
func quarantineFile(dir, path string) (string, error) {
	qdir := filepath.Join(dir, QuarantineDir)
	if err := os.MkdirAll(qdir, 0o755); err != nil {
		return "", fmt.Errorf("quarantine %s: %w", path, err)
	}
	base := filepath.Join(qdir, filepath.Base(path))
	to := base
	for i := 1; ; i++ {
		if _, err := os.Lstat(to); errors.Is(err, os.ErrNotExist) {
			break
		}
		if i > 1000 {
			return "", fmt.Errorf("quarantine %s: %s and 1000 more names are taken", path, base)
		}
		to = base + "." + strconv.Itoa(i)
	}
	if err := os.Rename(path, to); err != nil {
		return "", fmt.Errorf("quarantine %s: %w", path, err)
	}
	if err := errors.Join(syncDir(qdir), syncDir(dir)); err != nil {
		return "", fmt.Errorf("quarantine %s: %w", path, err)
	}
	return to, nil
}

// quarantinedError is the Problem.Err of a file Open moved to quarantine.
type quarantinedError struct{ to string }

func (e *quarantinedError) Error() string {
	return "named like a segment but " + ErrNotSegment.Error() + " (no RWSEG header), so it holds no events: moved to " + e.to
}

func (e *quarantinedError) Unwrap() error { return ErrNotSegment }

// segFile is a segment file found in a directory.
type segFile struct {
	first uint64
	path  string
}

// listSegments returns the segment files in dir, in offset order.
// HasSegments reports whether dir holds a segment file: whether it is a
// log (a log holds one from the moment Open made it), rather than some
// other directory that a reader would read as an empty log.
func HasSegments(dir string) (bool, error) {
	segs, err := listSegments(dir)
	return len(segs) > 0, err
}

func listSegments(dir string) ([]segFile, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list segments: %w", err)
	}
	var out []segFile
	for _, e := range ents {
		if first, ok := parseSegName(e.Name()); ok && !e.IsDir() {
			out = append(out, segFile{first: first, path: filepath.Join(dir, e.Name())})
		}
	}
	return out, nil
}

const tmpSuffix = ".tmp"

// removeTemps removes the files, named with suffix, that a crash left
// half-written.
func removeTemps(dir, suffix string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), suffix) && !e.IsDir() {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
