package columnar

import (
	"errors"
	"fmt"
	"time"
	"unsafe"
)

// Columns is one record batch's columns as they were decoded, for
// consumers that read columns rather than events (the aggregator's
// rollups): dictionary columns as indices and their dictionary, integers
// at their stored width, client addresses as 16-byte rows, times as
// deltas. Nothing is copied or materialised per event.
//
// A Columns and everything it returns point into the Decoder's buffers
// and the encoded batch: they are valid until the Decoder decodes again
// (and while the encoded batch is unchanged), and must not be modified. Strings from Dict.Values are the
// decoder's own (small dictionaries are interned) and may be kept.
//
// Columns missing from a batch of an older schema version read as the
// zero value of their field: a dictionary of the one value "", integers
// of 0. Columns a consumer did not ask for (Decoder.DecodeColumnSet) are
// empty instead: Decoded says which were decoded.
type Columns struct {
	Len     int       // rows
	Version int       // the writer's schema version
	Decoded ColumnSet // the columns decoded; the others are empty (see Decoder.DecodeColumnSet)

	Kind    []uint8 // decisions.Kind of each row
	Outcome []uint8 // decisions.Outcome of each row

	Node, Tier, Rule, Reason, ResponseError, List, Action, ClientIPZone Dict

	// ClientIP holds each row's address as 16 bytes (IPv4 addresses
	// IPv4-mapped), and ClientIPFamily says what it is: 0 for the zero
	// netip.Addr, 4 for IPv4, 6 for IPv6 (with its zone in ClientIPZone).
	// ClientIP is nil when every family is 0.
	ClientIP       []byte
	ClientIPFamily []uint8

	UserID Strings

	StoreLatency, UpstreamLatency Ints // nanoseconds
	Dropped                       Ints // a uint64 column: read with Uint

	time     *colView
	timeBase int64
}

// ColumnSet is a set of the columns a Columns holds, for a consumer that
// reads only some of them (Decoder.DecodeColumnSet): an aggregation of a
// few fields, a report, a query. Under body compression (Zstd, LZ4: the
// log's records of PerBuffer-sized batches) each column's buffers are
// compressed apart, and those of columns not in the set are never
// decompressed or checked. The zero value is the empty set.
type ColumnSet uint64

// The columns of Columns, by its fields. ColumnClientIP is the three
// columns that make an address: ClientIP, ClientIPFamily and ClientIPZone.
const (
	ColumnKind            ColumnSet = 1 << cKind
	ColumnTime            ColumnSet = 1 << cTime
	ColumnNode            ColumnSet = 1 << cNode
	ColumnClientIP        ColumnSet = 1<<cClientIP | 1<<cClientIPFamily | 1<<cClientIPZone
	ColumnUserID          ColumnSet = 1 << cUserID
	ColumnTier            ColumnSet = 1 << cTier
	ColumnRule            ColumnSet = 1 << cRule
	ColumnOutcome         ColumnSet = 1 << cOutcome
	ColumnReason          ColumnSet = 1 << cReason
	ColumnStoreLatency    ColumnSet = 1 << cStoreLatency
	ColumnList            ColumnSet = 1 << cList
	ColumnAction          ColumnSet = 1 << cAction
	ColumnDropped         ColumnSet = 1 << cDropped
	ColumnUpstreamLatency ColumnSet = 1 << cUpstreamLatency
	ColumnResponseError   ColumnSet = 1 << cResponseError

	// AllColumns is every column Columns holds: what DecodeColumns decodes.
	AllColumns = ColumnKind | ColumnTime | ColumnNode | ColumnClientIP | ColumnUserID | ColumnTier | ColumnRule |
		ColumnOutcome | ColumnReason | ColumnStoreLatency | ColumnList | ColumnAction | ColumnDropped |
		ColumnUpstreamLatency | ColumnResponseError
)

// Has reports whether s holds every column of t.
func (s ColumnSet) Has(t ColumnSet) bool { return s&t == t }

// has reports whether s holds column c (one of the c* constants).
func (s ColumnSet) has(c int) bool { return s>>c&1 != 0 }

// Dict is a dictionary-encoded column: each row's index into Values.
type Dict struct {
	Values []string
	idx    []byte
	w      int // bytes per index; 0 when the column is absent (every row is Values[0], "")
}

// emptyDict is the dictionary of an absent column.
var emptyDict = []string{""}

// At returns row i's index into Values.
func (d *Dict) At(i int) int {
	if d.w == 0 {
		return 0
	}
	return indexAt(d.idx, d.w, i)
}

// Indices returns every row's index into Values, widened to int32 in dst
// (grown if needed): one pass over the column, so that a consumer's per-row
// work is plain array indexing. It returns none (dst[:0]) for a column
// that was not decoded (no Values).
func (d *Dict) Indices(dst []int32, n int) []int32 {
	if d.Values == nil {
		return dst[:0]
	}
	return widenAll(dst, d.idx, d.w, n)
}

// widenAll returns the n signed integers of w bytes each in b (none when
// w is 0: zeros) in dst, grown if needed.
func widenAll[D int32 | int64](dst []D, b []byte, w, n int) []D {
	if cap(dst) < n {
		dst = make([]D, n)
	}
	dst = dst[:n]
	switch w {
	case 1:
		widenInto(dst, ints[int8](b, n))
	case 2:
		widenInto(dst, ints[int16](b, n))
	case 4:
		widenInto(dst, ints[int32](b, n))
	case 8:
		widenInto(dst, ints[int64](b, n))
	default:
		clear(dst)
	}
	return dst
}

func widenInto[D int32 | int64, S int8 | int16 | int32 | int64](dst []D, src []S) {
	for i, x := range src {
		dst[i] = D(x)
	}
}

// Strings is a utf8 column.
type Strings struct {
	offsets []int32
	raw     []byte
}

// Bytes returns row i's bytes, which point into the decoder's buffers.
func (s *Strings) Bytes(i int) []byte {
	if s.offsets == nil {
		return nil
	}
	base := s.offsets[0]
	return s.raw[s.offsets[i]-base : s.offsets[i+1]-base]
}

// Len returns the length of row i's string.
func (s *Strings) Len(i int) int {
	if s.offsets == nil {
		return 0
	}
	return int(s.offsets[i+1] - s.offsets[i])
}

// Data returns the bytes of every row's string, end to end, and each row's
// start in them: row i is data[start[i]-start[0]:start[i+1]-start[0]].
func (s *Strings) Data() (data []byte, start []int32) { return s.raw, s.offsets }

// Ints is an integer column at its stored width.
type Ints struct {
	b []byte
	w int
}

// Int returns row i of a signed column.
func (c *Ints) Int(i int) int64 {
	switch c.w {
	case 1:
		return int64(int8(c.b[i]))
	case 2:
		return int64(*(*int16)(unsafe.Pointer(&c.b[2*i])))
	case 4:
		return int64(*(*int32)(unsafe.Pointer(&c.b[4*i])))
	case 8:
		return *(*int64)(unsafe.Pointer(&c.b[8*i]))
	}
	return 0
}

// Uint returns row i of an unsigned column.
func (c *Ints) Uint(i int) uint64 {
	switch c.w {
	case 1:
		return uint64(c.b[i])
	case 2:
		return uint64(*(*uint16)(unsafe.Pointer(&c.b[2*i])))
	case 4:
		return uint64(*(*uint32)(unsafe.Pointer(&c.b[4*i])))
	case 8:
		return *(*uint64)(unsafe.Pointer(&c.b[8*i]))
	}
	return 0
}

// Int64s returns every row of a signed column, widened, in dst (grown if
// needed).
func (c *Ints) Int64s(dst []int64, n int) []int64 { return widenAll(dst, c.b, c.w, n) }

// NullTime is what Times gives a row whose time is the zero time.Time
// (stored as null): its UnixNano, so that consumers computing with
// UnixNano see what they would see from the event.
var NullTime = zeroTimeNs

// Times returns every row's time in nanoseconds since 1970 in dst (grown
// if needed), NullTime for the zero time; none (dst[:0]) when the time
// column was not decoded.
func (c *Columns) Times(dst []int64) []int64 {
	v := c.time
	if v == nil {
		return dst[:0]
	}
	n := c.Len
	if cap(dst) < n {
		dst = make([]int64, n)
	}
	dst = dst[:n]
	if v.ints == nil {
		for i := range dst {
			dst[i] = NullTime
		}
		return dst
	}
	switch v.intW {
	case 1:
		sumNs(dst, ints[int8](v.ints, n), v.valid, c.timeBase)
	case 2:
		sumNs(dst, ints[int16](v.ints, n), v.valid, c.timeBase)
	case 4:
		sumNs(dst, ints[int32](v.ints, n), v.valid, c.timeBase)
	default:
		sumNs(dst, ints[int64](v.ints, n), v.valid, c.timeBase)
	}
	return dst
}

func sumNs[T int8 | int16 | int32 | int64](dst []int64, deltas []T, valid []byte, prev int64) {
	if valid == nil {
		for i, d := range deltas {
			prev += int64(d)
			dst[i] = prev
		}
		return
	}
	for i, d := range deltas {
		if valid[i>>3]>>(i&7)&1 == 0 {
			dst[i] = NullTime
			continue
		}
		prev += int64(d)
		dst[i] = prev
	}
}

// DecodeColumns decodes the encoded batch data, as Decode does, and calls
// f with the columns of each of its record batches (the streams this
// package writes hold one) instead of making events of them. An error
// from f stops the decoding and is returned as it is. The Columns passed
// to f stay valid until the Decoder decodes again (for a stream of
// several record batches, until f returns). Decoding allocates nothing
// per event. It is DecodeColumnSet with AllColumns.
func (d *Decoder) DecodeColumns(data []byte, f func(*Columns) error) error {
	return d.DecodeColumnSet(data, AllColumns, f)
}

// DecodeColumnSet is DecodeColumns for a consumer that reads only the
// columns in set: the Columns passed to f has those decoded, as
// DecodeColumns gives them, and Columns.Decoded says which they are. The
// others are left empty: their slices are nil (Kind, Outcome, ClientIP,
// ClientIPFamily), their Dicts have no Values, their Strings and Ints
// read as "" and 0, and Times returns no rows.
//
// What it saves depends on the batch's compression. Under body
// compression (Zstd or LZ4, as the decision log writes records of
// PerBufferFrom events or more) every column's buffers are
// compressed apart, and those of the columns left out are neither
// decompressed nor checked, nor are their dictionaries read. A batch
// compressed as one frame (ZstdStream, ZstdDict: small records, and
// Kinesis) must be decompressed whole before anything in it can be read,
// so there only the views of the columns left out are saved. The batch's
// checksum covers every byte either way: a corrupt batch is refused
// whatever the set.
func (d *Decoder) DecodeColumnSet(data []byte, set ColumnSet, f func(*Columns) error) (err error) {
	d.onColumns, d.want, d.consumerErr = f, set&AllColumns, nil
	_, err = d.Decode(data, nil)
	cerr := d.consumerErr
	d.onColumns, d.want, d.consumerErr = nil, 0, nil
	if cerr != nil {
		return cerr
	}
	return err
}

// errConsumer marks an error of the DecodeColumns callback, which is
// returned as it is rather than as a decoding error.
var errConsumer = errors.New("consumer error")

// columns hands the current record batch's views of the wanted columns
// to onColumns.
func (d *Decoder) columns(n, version int, timeBase int64) error {
	c := &d.view
	want := d.want
	*c = Columns{Len: n, Version: version, Decoded: want, timeBase: timeBase}
	if want.has(cTime) {
		c.time = &d.cols[cTime]
	}
	c.Kind = d.u8s(cKind, n)
	c.Outcome = d.u8s(cOutcome, n)
	if want.has(cClientIP) {
		c.ClientIPFamily = d.u8s(cClientIPFamily, n)
		if c.ClientIP = d.cols[cClientIP].addr; c.ClientIP == nil || c.ClientIPFamily == nil {
			c.ClientIP, c.ClientIPFamily = nil, d.u8s(-1, n) // every address the zero Addr
		}
	}
	for _, x := range [...]struct {
		dst *Dict
		col int
	}{{&c.Node, cNode}, {&c.Tier, cTier}, {&c.Rule, cRule}, {&c.Reason, cReason},
		{&c.ResponseError, cResponseError}, {&c.List, cList}, {&c.Action, cAction}, {&c.ClientIPZone, cClientIPZone}} {
		v := &d.cols[x.col]
		switch {
		case !want.has(x.col):
		case !v.present:
			*x.dst = Dict{Values: emptyDict}
		default:
			*x.dst = Dict{Values: d.values[x.col], idx: v.idx, w: v.idxW}
		}
	}
	if v := &d.cols[cUserID]; v.present && want.has(cUserID) {
		c.UserID = Strings{offsets: v.offsets, raw: v.raw}
	}
	for _, x := range [...]struct {
		dst *Ints
		col int
	}{{&c.StoreLatency, cStoreLatency}, {&c.UpstreamLatency, cUpstreamLatency}, {&c.Dropped, cDropped}} {
		if v := &d.cols[x.col]; v.ints != nil && want.has(x.col) {
			*x.dst = Ints{b: v.ints, w: v.intW}
		}
	}
	d.inConsumer = true
	err := d.onColumns(c)
	d.inConsumer = false
	if err != nil {
		d.consumerErr = err
		return fmt.Errorf("%w: %w", errConsumer, err)
	}
	return nil
}

// u8s returns uint8 column c's values, or n zeros when it is absent
// (c < 0: always), or nil when it is not wanted.
func (d *Decoder) u8s(c, n int) []uint8 {
	if c >= 0 && !d.want.has(c) {
		return nil
	}
	if c >= 0 && d.cols[c].u8 != nil {
		return d.cols[c].u8
	}
	if cap(d.zeros) < n {
		d.zeros = make([]uint8, n)
	}
	return d.zeros[:n]
}

// zeroTimeNs is the zero time.Time's UnixNano.
var zeroTimeNs = time.Time{}.UnixNano()

// TimeOf returns the time.Time a Times value stands for, as Decode gives
// it to the event: in UTC, and the zero time for NullTime.
func TimeOf(ns int64) time.Time {
	if ns == NullTime {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}
