package seglog

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
)

const readAhead = 1 << 20

// window caches a stretch of a file for the scanner.
type window struct {
	r   io.ReaderAt
	buf []byte
	off int64 // file position of buf[0]
}

// get returns up to n bytes at p, fewer only where limit or the file ends.
func (w *window) get(p int64, n int, limit int64) ([]byte, error) {
	avail := limit - p
	if avail <= 0 {
		return nil, nil
	}
	if int64(n) > avail {
		n = int(avail)
	}
	if p >= w.off && p+int64(n) <= w.off+int64(len(w.buf)) {
		i := p - w.off
		return w.buf[i : i+int64(n) : i+int64(n)], nil
	}
	want := int(min(int64(max(n, readAhead)), avail))
	if cap(w.buf) < want || (cap(w.buf) > 4*readAhead && want <= readAhead) {
		w.buf = make([]byte, want)
	}
	w.buf = w.buf[:want]
	m, err := w.r.ReadAt(w.buf, p)
	w.buf, w.off = w.buf[:m], p
	if err != nil && !errors.Is(err, io.EOF) {
		w.reset()
		return nil, fmt.Errorf("read segment: %w", err)
	}
	return w.buf[:min(n, m):min(n, m)], nil
}

// from returns what the window holds from p on, reading ahead when that is
// little; for scanning for a marker.
func (w *window) from(p int64, limit int64) ([]byte, error) {
	if end := w.off + int64(len(w.buf)); p >= w.off && p < end && (end-p >= 64<<10 || end >= limit) {
		return w.buf[p-w.off:], nil
	}
	return w.get(p, readAhead, limit)
}

// reset forgets what was read, so that bytes rewritten since are read again.
func (w *window) reset() { w.buf, w.off = w.buf[:0], 0 }

// frame is a valid frame: a record, or a segment's trailer.
type frame struct {
	pos, end   int64
	kind       byte // bodyRecord or bodyTrailer
	codec      byte
	first      uint64
	count      uint32
	minT, maxT int64
	payload    []byte // aliases the window: valid until the next read
	tr         trailer
}

func (f *frame) record() Record {
	return Record{
		FirstOffset: f.first, Count: f.count, Codec: f.codec,
		MinTime: nsTime(f.minT), MaxTime: nsTime(f.maxT),
		Payload: bytes.Clone(f.payload),
	}
}

type stepKind uint8

const (
	stepWait   stepKind = iota // nothing valid beyond pos for now; the segment may grow
	stepRecord                 // a record
	stepEnd                    // the segment is finished
)

type step struct {
	kind    stepKind
	fr      frame
	prob    Problem // a region skipped before this step, when hasProb
	hasProb bool
}

// segScan reads the frames of one segment file in order, past corrupt
// regions. It is not safe for concurrent use.
type segScan struct {
	path   string
	first  uint64
	f      *os.File
	win    window
	pos    int64  // where the next frame starts
	expect uint64 // the offset the next record should start at
	upper  uint64 // records end at or before this (the next segment's first), MaxUint64 if unknown
	sealed bool   // nothing more will be written: an invalid tail is corruption, not a write under way
	done   bool
}

func newScan(path string, first uint64, f *os.File, pos int64, expect uint64) *segScan {
	return &segScan{path: path, first: first, f: f, win: window{r: f}, pos: pos, expect: max(expect, first), upper: math.MaxUint64}
}

// next returns the next step, reading no further than limit.
func (s *segScan) next(limit int64) (step, error) {
	if s.done {
		return step{kind: stepEnd}, nil
	}
	bad := s.pos
	fr, reason, err := s.parseAt(bad, limit)
	if err != nil {
		return step{}, err
	}
	switch reason {
	case nil:
		return s.accept(fr, Problem{}, false), nil
	case errNoData:
		if s.sealed {
			s.done = true
			return step{kind: stepEnd}, nil
		}
		s.win.reset()
		return step{kind: stepWait}, nil
	}
	fr, found, err := s.resync(bad+1, limit)
	if err != nil {
		return step{}, err
	}
	if found {
		return s.accept(fr, Problem{Segment: s.path, Offset: bad, Bytes: fr.pos - bad, Err: reason}, true), nil
	}
	if !s.sealed {
		s.win.reset()
		return step{kind: stepWait}, nil
	}
	end := max(limit, bad)
	p := Problem{Segment: s.path, Offset: bad, Bytes: end - bad, Err: reason}
	if s.upper != math.MaxUint64 && s.upper > s.expect {
		p.Events = s.upper - s.expect
		s.expect = s.upper // counted here, not again as a gap before the next segment
	}
	s.pos, s.done = end, true
	return step{kind: stepEnd, prob: p, hasProb: true}, nil
}

func (s *segScan) accept(fr frame, p Problem, has bool) step {
	// start is where the data after the previous record resumes: a
	// record's first offset, or a trailer's end.
	start, next := fr.first, fr.first+uint64(fr.count)
	if fr.kind == bodyTrailer {
		start, next = fr.tr.end, fr.tr.end
	}
	if start > s.expect {
		if !has {
			p, has = Problem{Segment: s.path, Offset: fr.pos, Err: errGap}, true
		}
		p.Events = start - s.expect
	}
	s.pos, s.expect = fr.end, max(s.expect, next)
	st := step{kind: stepRecord, fr: fr, prob: p, hasProb: has}
	if fr.kind == bodyTrailer {
		st.kind, s.done = stepEnd, true
	}
	return st
}

// resync looks from p on for the next marker that starts a valid frame.
func (s *segScan) resync(p, limit int64) (frame, bool, error) {
	for {
		w, err := s.win.from(p, limit)
		if err != nil {
			return frame{}, false, err
		}
		if len(w) < len(syncMarker) {
			return frame{}, false, nil
		}
		i := bytes.Index(w, syncMarker[:])
		if i < 0 {
			p += int64(len(w) - len(syncMarker) + 1)
			continue
		}
		q := p + int64(i)
		fr, reason, err := s.parseAt(q, limit)
		if err != nil {
			return frame{}, false, err
		}
		if reason == nil {
			return fr, true, nil
		}
		p = q + 1
	}
}

// parseAt reads the frame at p. reason is nil for a valid frame, errNoData
// when nothing is there, else why the frame is rejected.
func (s *segScan) parseAt(p, limit int64) (fr frame, reason, err error) {
	h, err := s.win.get(p, frameHeaderLen+recordFixedLen, limit)
	switch {
	case err != nil:
		return fr, nil, err
	case len(h) == 0:
		return fr, errNoData, nil
	case len(h) < len(syncMarker):
		return fr, errTruncated, nil
	case !bytes.Equal(h[:4], syncMarker[:]):
		return fr, errMarker, nil
	case len(h) < frameHeaderLen+recordFixedLen:
		return fr, errTruncated, nil
	}
	n := le.Uint32(h[4:8])
	if n < recordFixedLen || n > maxBody {
		return fr, errLength, nil
	}
	// Check what the body's head says before reading the whole body, so
	// that a corrupt length does not make every candidate a large read.
	body := h[frameHeaderLen:]
	fr.kind, fr.pos, fr.end = body[0], p, p+frameHeaderLen+int64(n)
	switch fr.kind {
	case bodyRecord:
		fr.codec, fr.first, fr.count = body[1], le.Uint64(body[2:10]), le.Uint32(body[10:14])
		fr.minT, fr.maxT = int64(le.Uint64(body[14:22])), int64(le.Uint64(body[22:30]))
		switch {
		case fr.count == 0:
			return fr, errCount, nil
		case fr.minT > fr.maxT:
			return fr, errTimes, nil
		case fr.first < s.expect || fr.first > s.upper || uint64(fr.count) > s.upper-fr.first:
			return fr, errOffsets, nil
		}
	case bodyTrailer:
		fr.first, fr.tr.end = le.Uint64(body[2:10]), le.Uint64(body[10:18])
		switch {
		case n < trailerFixedLen:
			return fr, errLength, nil
		case fr.first != s.first || fr.tr.end < s.expect || fr.tr.end > s.upper:
			return fr, errTrailer, nil
		}
	default:
		return fr, errBodyType, nil
	}
	b, err := s.win.get(p, frameHeaderLen+int(n), limit)
	switch {
	case err != nil:
		return fr, nil, err
	case len(b) < frameHeaderLen+int(n):
		return fr, errTruncated, nil
	case crc32.Checksum(b[frameHeaderLen:], castagnoli) != le.Uint32(b[8:12]):
		return fr, errChecksum, nil
	}
	if fr.kind == bodyTrailer {
		tr, ok := parseTrailer(b[frameHeaderLen:], p, s.first)
		if !ok {
			return fr, errTrailer, nil
		}
		fr.tr = tr
		return fr, nil, nil
	}
	fr.payload = b[frameHeaderLen+recordFixedLen:]
	return fr, nil, nil
}

// readTrailer finds the trailer that ends a sealed segment of the given
// size, if it has a valid one.
func readTrailer(f *os.File, path string, first uint64, size int64) (trailer, bool) {
	if size < headerLen+frameHeaderLen+trailerFixedLen {
		return trailer{}, false
	}
	var tail [4]byte
	if _, err := f.ReadAt(tail[:], size-4); err != nil {
		return trailer{}, false
	}
	n := int64(le.Uint32(tail[:]))
	if n < frameHeaderLen+trailerFixedLen || n > frameHeaderLen+maxBody || n > size-headerLen {
		return trailer{}, false
	}
	s := newScan(path, first, f, size-n, first)
	fr, reason, err := s.parseAt(size-n, size)
	if err != nil || reason != nil || fr.kind != bodyTrailer || fr.end != size {
		return trailer{}, false
	}
	return fr.tr, true
}
