package seglog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/dirlock"
)

// FormatVersion is the version of the segment format this package writes and
// the newest it reads.
const FormatVersion = 1

// MaxPayload is the largest payload one Record may carry.
const MaxPayload = maxBody - recordFixedLen

// QuarantineDir is the subdirectory of a log directory where Open moves
// files that are named like segments but are not segments.
const QuarantineDir = "quarantine"

const (
	headerLen       = 28
	frameHeaderLen  = 12 // marker, length, crc
	recordFixedLen  = 30 // a record body before its payload
	trailerFixedLen = 50 // a trailer body without its index entries
	indexEntryLen   = 24
	maxBody         = 64 << 20 // bounds what a corrupt length can make a reader allocate
	maxBatch        = 256 << 20

	bodyRecord  = 1
	bodyTrailer = 2

	segSuffix = ".seg"
	nameLen   = 20 + len(segSuffix)
	noTime    = math.MinInt64
)

var (
	segMagic   = [5]byte{'R', 'W', 'S', 'E', 'G'}
	syncMarker = [4]byte{0xA7, 0x3F, 0xC1, 0x5B}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	le         = binary.LittleEndian
)

// Errors that Problem.Err and returned errors wrap, for callers that branch.
var (
	ErrCorrupt    = errors.New("corrupt data")
	ErrTornTail   = errors.New("torn tail")
	ErrNotSegment = errors.New("not a segment file")
	ErrVersion    = errors.New("unsupported format version")
	ErrMissing    = errors.New("events missing")
	ErrClosed     = errors.New("closed")
	// ErrLocked marks Open's refusal of a log another writer has open;
	// the error names the writer's pid (internal/dirlock).
	ErrLocked = dirlock.ErrLocked
	// ErrPastEnd marks a reader asked for an offset past the log's end: a
	// position kept from a log that was since removed, replaced or cut
	// short.
	ErrPastEnd = errors.New("past the log's end")
	// ErrUnread marks retention removing events a consumer that committed
	// an offset had not read: lost to that consumer.
	ErrUnread = fmt.Errorf("removed before a consumer read them: %w", ErrMissing)
)

// The reasons a frame or header is rejected. errNoData and errTruncated are
// also used as markers by the scanner.
var (
	errNoData         = errors.New("no data")
	errTruncated      = fmt.Errorf("truncated record: %w", ErrCorrupt)
	errMarker         = fmt.Errorf("no sync marker: %w", ErrCorrupt)
	errLength         = fmt.Errorf("implausible record length: %w", ErrCorrupt)
	errChecksum       = fmt.Errorf("record checksum mismatch: %w", ErrCorrupt)
	errCount          = fmt.Errorf("record of no events: %w", ErrCorrupt)
	errTimes          = fmt.Errorf("record min time after max time: %w", ErrCorrupt)
	errOffsets        = fmt.Errorf("record offsets do not follow: %w", ErrCorrupt)
	errTrailer        = fmt.Errorf("inconsistent segment trailer: %w", ErrCorrupt)
	errBodyType       = fmt.Errorf("unknown record type or version: %w", ErrVersion)
	errHeaderChecksum = fmt.Errorf("segment header checksum mismatch: %w", ErrCorrupt)
	errHeaderShort    = fmt.Errorf("segment header truncated: %w", ErrCorrupt)
	errEmpty          = fmt.Errorf("empty segment file: %w", ErrCorrupt)
	errHeaderVersion  = fmt.Errorf("segment header of a newer version than %d: %w", FormatVersion, ErrVersion)
	errHeaderOffset   = fmt.Errorf("segment header offset differs from the file name: %w", ErrCorrupt)
	errGap            = fmt.Errorf("offset gap: %w", ErrMissing)
)

// Problem is a region of a log that could not be read: a corrupt or torn
// record, a segment that is not one, or events missing between segments.
type Problem struct {
	Segment string // the segment file's path
	Offset  int64  // byte offset of the region in the file
	Bytes   int64  // bytes skipped
	Events  uint64 // events lost, when known (from the offset gap)
	Err     error  // what was wrong; wraps ErrCorrupt, ErrTornTail, ErrNotSegment, ErrVersion or ErrMissing
}

// Error names the segment file and byte offset, and says what was lost.
func (p Problem) Error() string {
	b := make([]byte, 0, 128)
	b = append(b, "seglog: "...)
	b = append(b, p.Segment...)
	b = append(b, " at byte "...)
	b = strconv.AppendInt(b, p.Offset, 10)
	b = append(b, ": "...)
	b = strconv.AppendInt(b, p.Bytes, 10)
	b = append(b, " bytes skipped, "...)
	b = strconv.AppendUint(b, p.Events, 10)
	b = append(b, " events lost"...)
	if p.Err != nil {
		b = append(b, ": "...)
		b = append(b, p.Err.Error()...)
	}
	return string(b)
}

// Unwrap returns p.Err.
func (p Problem) Unwrap() error { return p.Err }

// segName returns the file name of the segment whose first offset is first.
func segName(first uint64) string {
	var b [nameLen]byte
	s := strconv.AppendUint(b[:0], first, 10)
	n := copy(b[20-len(s):], s)
	for i := range 20 - n {
		b[i] = '0'
	}
	copy(b[20:], segSuffix)
	return string(b[:])
}

// parseSegName returns the first offset a segment file name stands for.
func parseSegName(name string) (uint64, bool) {
	if len(name) != nameLen || !strings.HasSuffix(name, segSuffix) {
		return 0, false
	}
	for i := range 20 {
		if name[i] < '0' || name[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(name[:20], 10, 64)
	return v, err == nil
}

func segPath(dir string, first uint64) string { return filepath.Join(dir, segName(first)) }

type header struct {
	first   uint64
	created int64
}

func appendHeader(dst []byte, first uint64, created time.Time) []byte {
	start := len(dst)
	dst = append(dst, segMagic[:]...)
	dst = append(dst, FormatVersion, 0, 0)
	dst = le.AppendUint64(dst, first)
	dst = le.AppendUint64(dst, uint64(timeNS(created)))
	return le.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// parseHeader checks a segment header. The version is checked before the
// checksum: a newer header may be laid out differently.
func parseHeader(b []byte) (header, error) {
	switch {
	case len(b) == 0:
		return header{}, errEmpty
	case len(b) < len(segMagic)+1:
		if bytes.HasPrefix(segMagic[:], b) {
			return header{}, errHeaderShort
		}
		return header{}, ErrNotSegment
	case !bytes.Equal(b[:5], segMagic[:]):
		return header{}, ErrNotSegment
	case b[5] > FormatVersion:
		return header{}, errHeaderVersion
	case len(b) < headerLen:
		return header{}, errHeaderShort
	case b[5] == 0 || crc32.Checksum(b[:24], castagnoli) != le.Uint32(b[24:28]):
		return header{}, errHeaderChecksum
	}
	return header{first: le.Uint64(b[8:16]), created: int64(le.Uint64(b[16:24]))}, nil
}

// Times are stored as Unix nanoseconds; the zero time as noTime, which also
// sorts before every other time.
var (
	minTime = time.Unix(0, math.MinInt64+1)
	maxTime = time.Unix(0, math.MaxInt64)
)

func timeNS(t time.Time) int64 {
	if t.IsZero() {
		return noTime
	}
	return t.UnixNano()
}

// clampNS converts t for comparisons, mapping times out of range to the ends.
func clampNS(t time.Time) int64 {
	switch {
	case t.IsZero() || t.Before(minTime):
		return noTime
	case t.After(maxTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

func nsTime(ns int64) time.Time {
	if ns == noTime {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

func checkRecord(r *Record) error {
	switch {
	case r.Count == 0:
		return errors.New("count is 0, want at least 1")
	case len(r.Payload) > MaxPayload:
		return fmt.Errorf("payload of %d bytes, want at most %d", len(r.Payload), MaxPayload)
	case !r.MinTime.IsZero() && (r.MinTime.Before(minTime) || r.MinTime.After(maxTime)),
		!r.MaxTime.IsZero() && (r.MaxTime.Before(minTime) || r.MaxTime.After(maxTime)):
		return errors.New("time outside the years 1678 to 2262")
	case timeNS(r.MinTime) > timeNS(r.MaxTime):
		return fmt.Errorf("min time %v after max time %v", r.MinTime, r.MaxTime)
	}
	return nil
}

func frameLen(r *Record) int { return frameHeaderLen + recordFixedLen + len(r.Payload) }

// appendRecord appends r's frame to dst; r must have passed checkRecord.
func appendRecord(dst []byte, r *Record) []byte {
	start := len(dst)
	dst = append(dst, syncMarker[:]...)
	dst = le.AppendUint32(dst, uint32(recordFixedLen+len(r.Payload)))
	dst = le.AppendUint32(dst, 0)
	dst = append(dst, bodyRecord, r.Codec)
	dst = le.AppendUint64(dst, r.FirstOffset)
	dst = le.AppendUint32(dst, r.Count)
	dst = le.AppendUint64(dst, uint64(timeNS(r.MinTime)))
	dst = le.AppendUint64(dst, uint64(timeNS(r.MaxTime)))
	dst = append(dst, r.Payload...)
	le.PutUint32(dst[start+8:], crc32.Checksum(dst[start+frameHeaderLen:], castagnoli))
	return dst
}

// indexEntry locates a record in a segment.
type indexEntry struct {
	offset  uint64 // the record's first offset
	pos     int64  // its frame's byte position
	maxPrev int64  // latest event time of the segment's records before it
}

// trailer summarises a sealed segment.
type trailer struct {
	first, end, records uint64
	minT, maxT          int64
	index               []indexEntry
}

func appendTrailer(dst []byte, t *trailer) []byte {
	start := len(dst)
	n := len(t.index)
	body := trailerFixedLen + n*indexEntryLen
	dst = append(dst, syncMarker[:]...)
	dst = le.AppendUint32(dst, uint32(body))
	dst = le.AppendUint32(dst, 0)
	dst = append(dst, bodyTrailer, 0)
	dst = le.AppendUint64(dst, t.first)
	dst = le.AppendUint64(dst, t.end)
	dst = le.AppendUint64(dst, t.records)
	dst = le.AppendUint64(dst, uint64(t.minT))
	dst = le.AppendUint64(dst, uint64(t.maxT))
	dst = le.AppendUint32(dst, uint32(n))
	for _, e := range t.index {
		dst = le.AppendUint64(dst, e.offset)
		dst = le.AppendUint64(dst, uint64(e.pos))
		dst = le.AppendUint64(dst, uint64(e.maxPrev))
	}
	dst = le.AppendUint32(dst, uint32(frameHeaderLen+body))
	le.PutUint32(dst[start+8:], crc32.Checksum(dst[start+frameHeaderLen:], castagnoli))
	return dst
}

// parseTrailer decodes a trailer body (CRC already checked) found at pos in
// the segment whose first offset is first.
func parseTrailer(body []byte, pos int64, first uint64) (trailer, bool) {
	if len(body) < trailerFixedLen || (len(body)-trailerFixedLen)%indexEntryLen != 0 {
		return trailer{}, false
	}
	n := le.Uint32(body[42:46])
	if int(n) != (len(body)-trailerFixedLen)/indexEntryLen || int(le.Uint32(body[len(body)-4:])) != frameHeaderLen+len(body) {
		return trailer{}, false
	}
	t := trailer{
		first: le.Uint64(body[2:10]), end: le.Uint64(body[10:18]), records: le.Uint64(body[18:26]),
		minT: int64(le.Uint64(body[26:34])), maxT: int64(le.Uint64(body[34:42])),
	}
	if t.first != first || t.end < t.first || t.records > t.end-t.first || (t.records > 0 && t.minT > t.maxT) {
		return trailer{}, false
	}
	if n > 0 {
		t.index = make([]indexEntry, n)
	}
	prev := indexEntry{offset: first, pos: headerLen - 1, maxPrev: noTime}
	for i := range t.index {
		e := body[46+i*indexEntryLen:]
		x := indexEntry{offset: le.Uint64(e), pos: int64(le.Uint64(e[8:])), maxPrev: int64(le.Uint64(e[16:]))}
		if x.offset < prev.offset || x.offset >= t.end || x.pos <= prev.pos || x.pos >= pos || x.maxPrev < prev.maxPrev {
			return trailer{}, false
		}
		t.index[i], prev = x, x
	}
	return t, true
}
