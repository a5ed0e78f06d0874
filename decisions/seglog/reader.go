package seglog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"
)

// maxProblems bounds the problems a Reader keeps for Problems.
const maxProblems = 1000

// segmentGap is the error of the events missing between two segments,
// reported with the segment after them: it names their offsets, so that
// the message does not read as if that segment were the one missing.
func segmentGap(from, next uint64) error {
	return fmt.Errorf("segment missing or removed before this one (offsets %d to %d): %w", from, next-1, ErrMissing)
}

// Reader reads a log's records in offset order, past corrupt regions,
// which it reports. It reads what the writer has written, synced or not.
// Each record it returns has a payload of its own. A Reader is not safe
// for concurrent use; any number of Readers may read one log. Make one with
// Log.Reader, Log.ReaderAt or OpenReader; the zero Reader is not usable.
type Reader struct {
	dir    string
	log    *Log // nil for OpenReader
	report func(Problem)
	poll   time.Duration

	cur         *segReader
	started     bool   // the first segment has been chosen
	lastFirst   uint64 // first offset of the segment opened last
	expect      uint64 // the offset the next record should start at
	expectKnown bool

	// Where to start: the segment holding from, or, when hasStart, the
	// segment startSeg at startPos.
	from        uint64
	byOffset    bool // from is the offset asked for (not ReaderAt's)
	hasStart    bool
	startSeg    uint64
	startPos    int64
	startExpect uint64

	skipBefore uint64 // records ending at or before this are not returned
	seekTime   bool   // records with max times before seekNS are not returned, until one is
	seekNS     int64

	// checkEnd, for OpenReader, makes the first end of the data the
	// reader meets show a from past it as ErrPastEnd (pastEnd, returned
	// from then on); end is how far the data reaches, as read so far: past
	// the last record, or the first offset of the last segment with a
	// header.
	checkEnd bool
	end      uint64
	pastEnd  error

	problems []Problem
	loss     Loss
	closed   bool
	timer    *time.Timer
}

// segReader is the segment a Reader is in.
type segReader struct {
	sc    *segScan
	limit int64 // bytes that may be read
	dead  bool  // its header is unreadable: there is nothing to read in it
}

// Reader returns a reader from the record holding offset from: the caller
// skips the events before from in it (Record.FirstOffset tells). From below
// the oldest retained offset it starts at the oldest record.
func (l *Log) Reader(from uint64) (*Reader, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if from > l.next {
		return nil, fmt.Errorf("open reader: offset %d: %w %d", from, ErrPastEnd, l.next)
	}
	s := l.segs[0]
	for _, x := range l.segs {
		if x.first > from {
			break
		}
		s = x
	}
	r := l.newReader(from)
	r.byOffset = true
	r.startPos, r.startExpect = s.seek(from)
	r.hasStart, r.startSeg, r.skipBefore = true, s.first, from
	return r, nil
}

// ReaderAt returns a reader from the first record whose MaxTime is not
// before t; if there is none yet, from the end of the log.
func (l *Log) ReaderAt(t time.Time) (*Reader, error) {
	ns := clampNS(t)
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.segs[len(l.segs)-1]
	r := l.newReader(0)
	r.hasStart, r.startSeg, r.startPos, r.startExpect = true, a.first, a.size, l.next
	for _, s := range l.segs {
		if s.records == 0 || s.maxT < ns {
			continue
		}
		// Records before an index entry are no later than its maxPrev.
		r.startSeg, r.startPos, r.startExpect = s.first, headerLen, s.first
		for _, e := range s.index {
			if e.maxPrev >= ns {
				break
			}
			r.startPos, r.startExpect = e.pos, e.offset
		}
		r.seekTime, r.seekNS = true, ns
		break
	}
	return r, nil
}

func (l *Log) newReader(from uint64) *Reader {
	return &Reader{dir: l.dir, log: l, poll: l.opts.FollowPoll, from: from}
}

// OpenReader returns a reader of the log in dir from the record holding
// offset from, without the writer: for another process. It uses
// opts.Report and opts.FollowPoll. It treats a torn tail as the end of the
// data, and waits there for the writer. If the end of the data it first
// reaches is below from, Next (and Follow) returns an error wrapping
// ErrPastEnd there and from then on, where Log.Reader refuses at once:
// from is then a position kept from a log that was removed, replaced or
// cut short (a writer only appends, so its data never ends below an
// offset read from it). From at the end is no error: there is nothing to
// read yet.
func OpenReader(dir string, from uint64, opts Options) (*Reader, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("open reader: %w", err)
	}
	opts = opts.withDefaults()
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("open reader: %w", err)
	}
	return &Reader{dir: dir, report: opts.Report, poll: opts.FollowPoll, from: from, byOffset: true, skipBefore: from, checkEnd: true}, nil
}

// Next returns the next record, or io.EOF at the current end of the log
// (for OpenReader, see there for an end below its start).
func (r *Reader) Next(ctx context.Context) (Record, error) {
	for {
		if r.closed {
			return Record{}, fmt.Errorf("read log: reader %w", ErrClosed)
		}
		if r.pastEnd != nil {
			return Record{}, r.pastEnd
		}
		if err := ctx.Err(); err != nil {
			return Record{}, err
		}
		if r.cur == nil {
			ok, err := r.openNext()
			if err != nil {
				return Record{}, err
			}
			if !ok {
				return Record{}, r.atEnd()
			}
		}
		c := r.cur
		st := step{kind: stepWait}
		if c.dead && c.sc.sealed {
			st.kind = stepEnd
		} else if !c.dead {
			var err error
			if st, err = c.sc.next(c.limit); err != nil {
				return Record{}, err
			}
		}
		if st.hasProb {
			r.problem(st.prob)
		}
		switch st.kind {
		case stepRecord:
			r.expect = c.sc.expect
			if r.skip(&st.fr) {
				continue
			}
			return st.fr.record(), nil
		case stepEnd:
			r.expect = max(r.expect, c.sc.expect)
			if !c.dead {
				r.end = max(r.end, c.sc.expect)
			}
			r.closeCur()
		case stepWait:
			changed, err := r.refresh(c)
			if err != nil {
				return Record{}, err
			}
			if changed && !c.dead {
				continue
			}
			newer, upper, err := r.newer(c.sc.first)
			if err != nil {
				return Record{}, err
			}
			if !newer {
				return Record{}, r.atEnd()
			}
			// A later segment exists, so this one is finished: read it to
			// its final end, where an invalid tail is corruption.
			c.sc.sealed, c.sc.upper = true, upper
			if _, err := r.refresh(c); err != nil {
				return Record{}, err
			}
		}
	}
}

// atEnd returns io.EOF, or, the first time for a reader that checks its
// end, an error wrapping ErrPastEnd if the data ends below from.
func (r *Reader) atEnd() error {
	if !r.checkEnd {
		return io.EOF
	}
	r.checkEnd = false
	end := r.end
	if c := r.cur; c != nil && !c.dead {
		// A readable segment's scan starts at its first offset or at a
		// record's, and moves past each record and trailer it reads.
		end = max(end, c.sc.expect)
	}
	if end < r.from {
		r.pastEnd = fmt.Errorf("log %s: offset %d: %w %d", r.dir, r.from, ErrPastEnd, end)
		return r.pastEnd
	}
	return io.EOF
}

// Follow is Next, but at the end of the log it waits for more until ctx is
// done: it looks at the files every FollowPoll, and wakes at once when the
// in-process Log appends. Once that Log is closed it returns ErrClosed at
// the end.
func (r *Reader) Follow(ctx context.Context) (Record, error) {
	for {
		var wake <-chan struct{} // nil, so never ready, without a Log
		if r.log != nil {
			wake = r.log.wait() // before reading, so that no append is missed
		}
		rec, err := r.Next(ctx)
		if !errors.Is(err, io.EOF) {
			return rec, err
		}
		if r.log != nil && r.log.isClosed() {
			return Record{}, fmt.Errorf("follow: log %w", ErrClosed)
		}
		if r.timer == nil {
			r.timer = time.NewTimer(r.poll)
		} else {
			r.timer.Reset(r.poll)
		}
		select {
		case <-ctx.Done():
			r.timer.Stop()
			return Record{}, ctx.Err()
		case <-wake:
		case <-r.timer.C:
		}
	}
}

// Problems returns the problems the reader has met so far (the first 1000).
func (r *Reader) Problems() []Problem { return append([]Problem(nil), r.problems...) }

// Loss totals what a Reader could not read, over every problem it met
// (Problems keeps the first 1000 only), and the events its start asked for
// that the log no longer holds.
type Loss struct {
	Problems uint64 // problems met
	Bytes    int64  // bytes skipped
	Events   uint64 // events lost, where known: in corrupt regions and missing segments
	Gaps     uint64 // of the problems, segments missing between two others (ErrMissing)
	// Removed is how many events from the reader's start offset lie before
	// the oldest segment it found: removed (by retention, RemoveBefore or
	// by hand) before this reader came to them. It is 0 for ReaderAt, and
	// not counted among Problems or Events: a reader starting from 0 on a
	// log whose old segments are gone may have never wanted them.
	Removed uint64
	// Start is the first offset the log held when the reader started, when
	// Removed is not 0.
	Start uint64
}

// Plus returns l with the problems of o added (Problems, Bytes, Events
// and Gaps); Removed and Start stay l's.
func (l Loss) Plus(o Loss) Loss {
	l.Problems, l.Bytes, l.Events, l.Gaps = l.Problems+o.Problems, l.Bytes+o.Bytes, l.Events+o.Events, l.Gaps+o.Gaps
	return l
}

// Less returns l without the problems of o, which l counts too (Problems,
// Bytes, Events and Gaps); Removed and Start stay l's.
func (l Loss) Less(o Loss) Loss {
	l.Problems, l.Bytes, l.Events, l.Gaps = l.Problems-o.Problems, l.Bytes-o.Bytes, l.Events-o.Events, l.Gaps-o.Gaps
	return l
}

// Loss returns what the reader could not read so far.
func (r *Reader) Loss() Loss { return r.loss }

// Close closes the reader's file.
func (r *Reader) Close() error {
	if r.timer != nil {
		r.timer.Stop()
	}
	r.closed = true
	return r.closeCur()
}

func (r *Reader) closeCur() error {
	if r.cur == nil {
		return nil
	}
	err := r.cur.sc.f.Close()
	r.cur = nil
	return err
}

func (r *Reader) skip(fr *frame) bool {
	if fr.first+uint64(fr.count) <= r.skipBefore {
		return true
	}
	if r.seekTime {
		if fr.maxT < r.seekNS {
			return true
		}
		r.seekTime = false
	}
	return false
}

func (r *Reader) problem(p Problem) {
	r.loss.Problems++
	r.loss.Bytes += p.Bytes
	r.loss.Events += p.Events
	if errors.Is(p.Err, ErrMissing) {
		r.loss.Gaps++
	}
	if len(r.problems) < maxProblems {
		r.problems = append(r.problems, p)
	}
	if r.log != nil {
		r.log.noteProblem(p)
	} else if r.report != nil {
		r.report(p)
	}
}

// openNext opens the segment to read next; false when there is none yet.
func (r *Reader) openNext() (bool, error) {
	names, err := listSegments(r.dir)
	if err != nil {
		return false, fmt.Errorf("read log: %w", err)
	}
	for {
		var pick segFile
		found := false
		if !r.started {
			// The segment holding the start: the last that begins at or
			// before it, else the oldest.
			target := r.from
			if r.hasStart {
				target = r.startSeg
			}
			for _, n := range names {
				if n.first > target && found {
					break
				}
				pick, found = n, true
			}
		} else {
			for _, n := range names {
				if n.first > r.lastFirst {
					pick, found = n, true
					break
				}
			}
		}
		if !found {
			return false, nil
		}
		ok, err := r.open(pick)
		if ok || err != nil {
			return ok, err
		}
		r.started, r.lastFirst = true, pick.first // removed meanwhile: go on to the next
	}
}

// open opens segment n; false if it no longer exists.
func (r *Reader) open(n segFile) (bool, error) {
	f, err := os.Open(n.path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return false, fmt.Errorf("read log: %w", err)
	}
	size := fi.Size()
	var hb [headerLen]byte
	m, err := f.ReadAt(hb[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return false, fmt.Errorf("read log: %w", err)
	}
	h, herr := parseHeader(hb[:m])

	initial := !r.started
	r.started, r.lastFirst = true, n.first
	// Only a segment's header makes its name a first offset: a stranger's
	// file named like a segment neither shows a gap nor moves the offsets.
	named := hasSegmentHeader(herr)
	if named {
		r.end = max(r.end, n.first)
	}
	if initial && named && r.byOffset && n.first > r.from {
		r.loss.Removed, r.loss.Start = n.first-r.from, n.first
	}
	if named && r.expectKnown && n.first > r.expect {
		r.problem(Problem{Segment: n.path, Events: n.first - r.expect, Err: segmentGap(r.expect, n.first)})
	}
	expect := n.first
	switch {
	case r.expectKnown && named:
		expect = max(r.expect, n.first)
	case r.expectKnown:
		expect = r.expect
	}
	pos := int64(headerLen)
	switch {
	case initial && r.hasStart && n.first == r.startSeg:
		pos, expect = r.startPos, r.startExpect
	case initial && !r.hasStart && herr == nil && r.from > n.first:
		if tr, ok := readTrailer(f, n.path, n.first, size); ok {
			pos, expect = (&segment{first: n.first, index: tr.index}).seek(r.from)
		}
	}
	c := &segReader{sc: newScan(n.path, n.first, f, pos, expect), limit: size}
	switch {
	case herr == nil && h.first != n.first:
		r.problem(Problem{Segment: n.path, Bytes: headerLen, Err: errHeaderOffset})
	case herr == errHeaderChecksum:
		r.problem(Problem{Segment: n.path, Bytes: headerLen, Err: herr})
	case herr != nil:
		r.problem(Problem{Segment: n.path, Bytes: size, Err: herr})
		c.dead = true
	}
	r.cur, r.expect, r.expectKnown = c, expect, true
	if r.log != nil {
		if _, err := r.refresh(c); err != nil {
			return true, err
		}
	}
	return true, nil
}

// refresh updates how far c may be read, and reports whether that changed.
func (r *Reader) refresh(c *segReader) (bool, error) {
	old := c.limit
	if r.log != nil && !c.sc.sealed {
		if limit, live := r.log.readLimit(c.sc.first); live {
			c.limit = limit
			return c.limit != old, nil
		}
	}
	fi, err := c.sc.f.Stat()
	if err != nil {
		return false, fmt.Errorf("read log: %w", err)
	}
	c.limit = fi.Size()
	return c.limit != old, nil
}

// newer reports whether a segment after the one starting at first exists,
// and the first offset of the next that has a segment header (MaxUint64 if
// none has).
func (r *Reader) newer(first uint64) (bool, uint64, error) {
	if r.log != nil {
		ok, next := r.log.newerThan(first)
		return ok, next, nil
	}
	names, err := listSegments(r.dir)
	if err != nil {
		return false, 0, fmt.Errorf("read log: %w", err)
	}
	for _, n := range names {
		// A file without a segment's header is no successor: the writer
		// creates segments whole, header first.
		if n.first > first && segmentName(n.path) {
			return true, n.first, nil
		}
	}
	return false, math.MaxUint64, nil
}

// readLimit returns how much of segment first a reader may read, when it is
// the active segment: what has been written whole.
func (l *Log) readLimit(first uint64) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.segs[len(l.segs)-1]
	if a.first == first && !a.sealed {
		return a.size, true
	}
	return 0, false
}

func (l *Log) newerThan(first uint64) (bool, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.segs {
		if s.first > first {
			return true, s.first
		}
	}
	return false, 0
}

// wait returns a channel closed at the next append (or at Close).
func (l *Log) wait() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.waiting = true
	}
	return l.notify
}

func (l *Log) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}
