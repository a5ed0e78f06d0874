package columnar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"time"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/klauspost/compress/zstd"

	"github.com/ratewarden/ratewarden/decisions"
)

// Compression is the codec of an encoded batch's buffers (Arrow IPC body
// compression).
type Compression uint8

// The compressions. The zero value is Zstd.
const (
	Zstd Compression = iota // the smallest: for the log and the pipeline
	LZ4                     // larger, faster to encode and decode
	None                    // uncompressed
	// ZstdStream compresses the whole uncompressed stream, schema and
	// dictionaries included, as one zstd frame. Each batch carries its
	// schema (a few kilobytes of metadata that buffer compression leaves
	// as it is), so for batches of a few hundred events this is smaller
	// than Zstd. Decode tells it by the frame's magic number.
	ZstdStream
	// ZstdDict is ZstdStream with a zstd dictionary of typical small
	// streams, which the frame names by id: a record of a few events no
	// longer pays for its schema. The smallest below PerBufferFrom events;
	// the choice of the Kinesis sink and the decision log there. Decode tells it by
	// the frame's magic number too, and knows every dictionary released.
	ZstdDict
)

// String returns the compression's name.
func (c Compression) String() string {
	switch c {
	case Zstd:
		return "zstd"
	case LZ4:
		return "lz4"
	case None:
		return "none"
	case ZstdStream:
		return "zstd-stream"
	case ZstdDict:
		return "zstd-dict"
	}
	return "Compression(" + strconv.Itoa(int(c)) + ")"
}

// framed reports whether c compresses the whole stream as one zstd frame.
func (c Compression) framed() bool { return c == ZstdStream || c == ZstdDict }

// Options configures encoding. The zero value compresses with Zstd.
type Options struct {
	Compression Compression
}

// Encode appends one encoded batch holding ds to dst and returns the
// extended buffer: a self-describing Arrow IPC stream (the schema, the
// dictionaries, one record batch). It allocates a new Encoder, whose
// compressor is costly to create; reuse an Encoder to encode many batches.
func Encode(dst []byte, ds []decisions.Decision, opts Options) ([]byte, error) {
	return NewEncoder(opts).Encode(dst, ds)
}

// Encoder encodes batches of decisions, reusing its buffers and its
// compressor from one batch to the next, so that encoding in a steady
// state allocates little. It is not safe for concurrent use.
type Encoder struct {
	opts Options

	kind, family, outcome []byte
	ints                  [numCols][]int64 // the integer columns, before narrowing; time holds deltas
	narrow                [numCols][]byte  // the integer columns and dictionary indices, narrowed
	timeValid             []byte           // validity bitmap of the time column; empty when no time is zero
	dropped               []uint64
	addr                  []byte
	timeBase              int64
	strs                  [numCols]strCol
	dicts                 [numCols]dictCol

	writer *ipc.Writer // a template: see encodeStream
	out    appendWriter
	frame  []byte        // ZstdStream, ZstdDict: the stream before compression
	zenc   *zstd.Encoder // ZstdStream, ZstdDict
	cols   [numCols]arrow.Array
}

// intCols are the signed integer columns, the time deltas included.
var intCols = []int{cTime, cLimit, cWindow, cCount, cRemaining, cReset, cStoreLatency, cTTL, cStatus, cUpstreamLatency}

type strCol struct {
	offsets []int32
	data    []byte
}

// dictCol interns a column's strings: values in order of first use, and
// each row's index into them.
type dictCol struct {
	index  map[string]int32
	values strCol
	n      int
	idx    []int32
	// recent are the indices of recently seen strings by their address:
	// the edge's tiers, rules, reasons and the like are the same few
	// strings in memory (from the configuration), and comparing addresses
	// is cheaper than hashing. A string at the same address and of the
	// same length has the same bytes; holding its address keeps it alive.
	recent [8]recentString
	next   int
	empty  int32 // index of "", or -1
}

type recentString struct {
	p *byte
	n int
	i int32
}

// NewEncoder returns an Encoder with opts.
func NewEncoder(opts Options) *Encoder {
	e := &Encoder{opts: opts}
	for _, c := range dictColumns() {
		e.dicts[c].index = make(map[string]int32)
	}
	codec := []ipc.Option{ipc.WithAllocator(&recycler{})}
	switch opts.Compression {
	case Zstd:
		codec = append(codec, ipc.WithZstd())
	case LZ4:
		codec = append(codec, ipc.WithLZ4())
	}
	e.writer = ipc.NewWriter(&e.out, codec...)
	return e
}

func dictColumns() []int {
	var out []int
	for i, c := range columns {
		if c.typ == tDict {
			out = append(out, i)
		}
	}
	return out
}

// Encode appends one encoded batch holding ds to dst and returns the
// extended buffer. See the package documentation for what is stored and
// what comes back. It fails, and returns dst unchanged, when ds is empty,
// when an event's time is outside the years 1677–2262 (int64 nanoseconds
// since 1970; the zero time is stored as null), when a string column would
// exceed 2 GiB, or when the compression is unknown.
func (e *Encoder) Encode(dst []byte, ds []decisions.Decision) ([]byte, error) {
	if len(ds) == 0 {
		return dst, errors.New("encode decisions: empty batch")
	}
	if e.opts.Compression > ZstdDict {
		return dst, fmt.Errorf("encode decisions: unknown compression %d", e.opts.Compression)
	}
	if len(ds) > math.MaxInt32 {
		return dst, fmt.Errorf("encode decisions: %d events in one batch, at most %d", len(ds), math.MaxInt32)
	}
	if err := e.fill(ds); err != nil {
		return dst, err
	}
	if e.opts.Compression.framed() {
		raw, err := e.encodeStream(e.frame[:0], len(ds))
		if err != nil {
			return dst, err
		}
		e.frame = raw
		if err := sealChecksum(raw); err != nil {
			return dst, err
		}
		if e.zenc == nil {
			if e.opts.Compression == ZstdDict {
				e.zenc, err = newDictEncoder()
			} else {
				e.zenc, err = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
			}
			if err != nil {
				return dst, fmt.Errorf("encode decisions: %w", err)
			}
		}
		return e.zenc.EncodeAll(raw, dst), nil
	}
	start := len(dst)
	out, err := e.encodeStream(dst, len(ds))
	if err != nil {
		return dst, err
	}
	if err := sealChecksum(out[start:]); err != nil {
		return dst, err
	}
	return out, nil
}

// fill turns ds into columns in the Encoder's buffers.
func (e *Encoder) fill(ds []decisions.Decision) error {
	n := len(ds)
	e.kind = resize(e.kind, n)
	e.family = resize(e.family, n)
	e.outcome = resize(e.outcome, n)
	e.timeValid = e.timeValid[:0]
	e.dropped = resize(e.dropped, n)
	e.addr = resize(e.addr, 16*n)
	for _, c := range intCols {
		e.ints[c] = resize(e.ints[c], n)
	}
	for _, c := range []int{cRequestID, cUserID, cTarget} {
		e.strs[c].reset(n)
	}
	for c := range e.dicts {
		if e.dicts[c].index != nil {
			e.dicts[c].reset(n)
		}
	}
	deltas, limit, window, count, remaining := e.ints[cTime], e.ints[cLimit], e.ints[cWindow], e.ints[cCount], e.ints[cRemaining]
	reset, latency, ttl := e.ints[cReset], e.ints[cStoreLatency], e.ints[cTTL]
	status, upstream := e.ints[cStatus], e.ints[cUpstreamLatency]

	// Deltas are from the previous event's time, and the first from the
	// base, the first event's time: the deltas of events a few hundred
	// microseconds apart fit in int32, where times since 1970 need int64.
	e.timeBase = 0
	for i := range ds {
		if t := ds[i].Time; !t.IsZero() && decisions.TimeInRange(t) {
			e.timeBase = t.UnixNano()
			break
		}
	}
	prev := e.timeBase
	for i := range ds {
		d := &ds[i]
		e.kind[i] = uint8(d.Kind)
		e.outcome[i] = uint8(d.Outcome)
		if d.Time.IsZero() {
			e.setNullTime(i, n)
			deltas[i] = 0
		} else {
			if !decisions.TimeInRange(d.Time) {
				return fmt.Errorf("encode decisions: event %d: time %s is outside 1677-09-21 to 2262-04-11, the range of int64 nanoseconds", i, d.Time.Format(time.RFC3339Nano))
			}
			ns := d.Time.UnixNano()
			deltas[i] = ns - prev // wraps for times ~300 years apart; the reader's sum wraps back
			prev = ns
			if len(e.timeValid) > 0 {
				e.timeValid[i>>3] |= 1 << (i & 7)
			}
		}
		e.putAddr(i, d.ClientIP)
		limit[i], window[i], count[i], remaining[i] = d.Limit, int64(d.Window), d.Count, d.Remaining
		reset[i], latency[i], ttl[i] = int64(d.Reset), int64(d.StoreLatency), int64(d.TTL)
		status[i], upstream[i] = int64(d.Status), int64(d.UpstreamLatency)
		e.dropped[i] = d.Dropped
		e.strs[cRequestID].add(d.RequestID)
		e.strs[cUserID].add(d.UserID)
		e.strs[cTarget].add(d.Target)
		e.dicts[cNode].add(i, d.Node)
		e.dicts[cClientIPZone].add(i, d.ClientIP.Zone())
		e.dicts[cPlan].add(i, d.Plan)
		e.dicts[cTier].add(i, d.Tier)
		e.dicts[cIdentitySource].add(i, d.IdentitySource)
		e.dicts[cMethod].add(i, d.Method)
		e.dicts[cHost].add(i, d.Host)
		e.dicts[cPath].add(i, d.Path)
		e.dicts[cRule].add(i, d.Rule)
		e.dicts[cAlgorithm].add(i, d.Algorithm)
		e.dicts[cReason].add(i, d.Reason)
		e.dicts[cPrivacy].add(i, d.Privacy)
		e.dicts[cList].add(i, d.List)
		e.dicts[cAction].add(i, d.Action)
		e.dicts[cResponseError].add(i, d.ResponseError)
	}
	for c := range e.strs {
		if len(e.strs[c].data) > math.MaxInt32 {
			return fmt.Errorf("encode decisions: column %s holds %d bytes, at most %d", columns[c].name, len(e.strs[c].data), math.MaxInt32)
		}
		if len(e.dicts[c].values.data) > math.MaxInt32 {
			return fmt.Errorf("encode decisions: dictionary of column %s holds %d bytes, at most %d", columns[c].name, len(e.dicts[c].values.data), math.MaxInt32)
		}
	}
	return nil
}

// setNullTime marks row i of n null, creating the validity bitmap (every
// row valid so far) at the first null.
func (e *Encoder) setNullTime(i, n int) {
	if len(e.timeValid) == 0 {
		e.timeValid = resize(e.timeValid, (n+7)/8)
		clear(e.timeValid)
		for j := range i {
			e.timeValid[j>>3] |= 1 << (j & 7)
		}
	}
	e.timeValid[i>>3] &^= 1 << (i & 7)
}

func (e *Encoder) putAddr(i int, a netip.Addr) {
	b := e.addr[16*i : 16*i+16]
	switch {
	case a.Is4():
		e.family[i] = family4
	case a.Is6():
		e.family[i] = family6
	default:
		e.family[i] = familyNone
		clear(b)
		return
	}
	a16 := a.As16()
	copy(b, a16[:])
}

func (s *strCol) reset(n int) {
	if cap(s.offsets) < n+1 {
		s.offsets = make([]int32, 0, n+1)
	}
	s.offsets = append(s.offsets[:0], 0)
	s.data = s.data[:0]
}

// add appends v, with each byte that is not part of valid UTF-8 replaced
// by U+FFFD, as the JSON codec does: Arrow's utf8 type promises valid
// UTF-8 to every reader.
func (s *strCol) add(v string) {
	s.data = decisions.AppendValidUTF8(s.data, v)
	s.offsets = append(s.offsets, int32(len(s.data))) // lengths are checked after the loop
}

func (d *dictCol) reset(n int) {
	clear(d.index)
	d.values.reset(16)
	d.n = 0
	d.idx = resize(d.idx, n)
	d.recent = [8]recentString{}
	d.empty = -1
}

func (d *dictCol) add(i int, v string) {
	if len(v) == 0 {
		if d.empty < 0 {
			d.empty = d.intern(v)
		}
		d.idx[i] = d.empty
		return
	}
	p := unsafe.StringData(v)
	for k := range d.recent {
		if r := &d.recent[k]; r.p == p && r.n == len(v) {
			d.idx[i] = r.i
			return
		}
	}
	j := d.intern(v)
	d.recent[d.next] = recentString{p, len(v), j}
	d.next = (d.next + 1) % len(d.recent)
	d.idx[i] = j
}

// intern returns v's index in the dictionary, adding it if it is new.
func (d *dictCol) intern(v string) int32 {
	j, ok := d.index[v]
	if !ok {
		j = int32(d.n)
		d.n++
		d.index[v] = j
		d.values.add(v)
	}
	return j
}

// width returns the width code of the dictionary's indices.
func (d *dictCol) width() uint64 {
	switch {
	case d.n <= math.MaxInt8+1:
		return w8
	case d.n <= math.MaxInt16+1:
		return w16
	}
	return w32
}

// intWidth returns the width code of the narrowest signed integer type
// that holds every value.
func intWidth(vals []int64) uint64 {
	var lo, hi int64
	for _, v := range vals {
		lo, hi = min(lo, v), max(hi, v)
	}
	switch {
	case lo >= math.MinInt8 && hi <= math.MaxInt8:
		return w8
	case lo >= math.MinInt16 && hi <= math.MaxInt16:
		return w16
	case lo >= math.MinInt32 && hi <= math.MaxInt32:
		return w32
	}
	return w64
}

func uintWidth(vals []uint64) uint64 {
	var hi uint64
	for _, v := range vals {
		hi = max(hi, v)
	}
	switch {
	case hi <= math.MaxUint8:
		return w8
	case hi <= math.MaxUint16:
		return w16
	case hi <= math.MaxUint32:
		return w32
	}
	return w64
}

// narrowTo writes vals as little-endian integers of width code w into dst.
func narrowTo[T int64 | uint64 | int32](dst []byte, vals []T, w uint64) []byte {
	dst = resize(dst, len(vals)<<w)
	switch w {
	case w8:
		for i, v := range vals {
			dst[i] = byte(v)
		}
	case w16:
		for i, v := range vals {
			binary.LittleEndian.PutUint16(dst[2*i:], uint16(v))
		}
	case w32:
		for i, v := range vals {
			binary.LittleEndian.PutUint32(dst[4*i:], uint32(v))
		}
	default:
		for i, v := range vals {
			binary.LittleEndian.PutUint64(dst[8*i:], uint64(v))
		}
	}
	return dst
}

// encodeStream narrows the columns, builds the record batch on the
// Encoder's buffers and appends it to dst as an IPC stream.
func (e *Encoder) encodeStream(dst []byte, n int) (out []byte, err error) {
	var key uint64
	for k, c := range sized {
		var w uint64
		switch columns[c].typ {
		case tDict:
			w = e.dicts[c].width()
			e.narrow[c] = narrowTo(e.narrow[c], e.dicts[c].idx, w)
		case tInt, tTime:
			w = intWidth(e.ints[c])
			if c == cTime && (e.opts.Compression == Zstd || e.opts.Compression.framed()) {
				// zstd compresses int64 deltas a few hundred
				// microseconds apart to 3.3 bytes an event, but their
				// int32 form not at all (4 bytes): it finds the runs of
				// zero bytes, but Huffman coding of the mixed bytes does
				// not pay (TestTimeEncodings).
				w = w64
			}
			e.narrow[c] = narrowTo(e.narrow[c], e.ints[c], w)
		case tUint:
			w = uintWidth(e.dropped)
			e.narrow[c] = narrowTo(e.narrow[c], e.dropped, w)
		}
		key |= w << (2 * k)
	}
	schema := schemaFor(key)
	defer func() {
		for i, c := range e.cols {
			if c != nil {
				c.Release()
				e.cols[i] = nil
			}
		}
	}()
	for i := range columns {
		e.cols[i] = e.array(i, schema.Field(i).Type, n)
	}
	md := arrow.NewMetadata([]string{KeyTimeBase}, []string{strconv.FormatInt(e.timeBase, 10)})
	rec := array.NewRecordBatchWithMetadata(schema, e.cols[:], int64(n), md)
	defer rec.Release()

	// Each batch is a stream of its own, written by a copy of the template
	// writer: the copy starts afresh (schema, every dictionary) but shares
	// the template's compressor, which the Writer keeps in a slice filled
	// on first use; so the zstd encoder, costly to create, is made once
	// per Encoder rather than once per batch.
	w := *e.writer
	e.out.b = dst
	defer func() { e.out.b = nil }()
	if err := w.Write(rec); err != nil {
		return dst, fmt.Errorf("encode decisions: %w", err)
	}
	if err := w.Close(); err != nil {
		return dst, fmt.Errorf("encode decisions: %w", err)
	}
	return e.out.b, nil
}

// array wraps column i's buffers as an Arrow array of type t, without
// copying them.
func (e *Encoder) array(i int, t arrow.DataType, n int) arrow.Array {
	buf := func(b []byte) *memory.Buffer { return memory.NewBufferBytes(b) }
	var data *array.Data
	switch columns[i].typ {
	case tUint8:
		b := e.kind
		switch i {
		case cOutcome:
			b = e.outcome
		case cClientIPFamily:
			b = e.family
		}
		data = array.NewData(t, n, []*memory.Buffer{nil, buf(b)}, nil, 0, 0)
	case tTime:
		var valid *memory.Buffer
		nulls := 0
		if len(e.timeValid) > 0 {
			valid = buf(e.timeValid)
			nulls = n - countOnes(e.timeValid, n)
		}
		data = array.NewData(t, n, []*memory.Buffer{valid, buf(e.narrow[i])}, nil, nulls, 0)
	case tInt, tUint:
		data = array.NewData(t, n, []*memory.Buffer{nil, buf(e.narrow[i])}, nil, 0, 0)
	case tAddr:
		data = array.NewData(t, n, []*memory.Buffer{nil, buf(e.addr)}, nil, 0, 0)
	case tString:
		data = e.strs[i].arrayData(t, n)
	case tDict:
		d := &e.dicts[i]
		dt := t.(*arrow.DictionaryType)
		dictData := d.values.arrayData(arrow.BinaryTypes.String, d.n)
		defer dictData.Release()
		dict := array.MakeFromData(dictData)
		defer dict.Release()
		idxData := array.NewData(dt.IndexType, n, []*memory.Buffer{nil, buf(e.narrow[i])}, nil, 0, 0)
		defer idxData.Release()
		idx := array.MakeFromData(idxData)
		defer idx.Release()
		return array.NewDictionaryArray(dt, idx, dict)
	}
	defer data.Release()
	return array.MakeFromData(data)
}

func (s *strCol) arrayData(t arrow.DataType, n int) *array.Data {
	return array.NewData(t, n, []*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(s.offsets)), memory.NewBufferBytes(s.data)}, nil, 0, 0)
}

func countOnes(bitmap []byte, n int) int {
	c := 0
	for i := range n {
		c += int(bitmap[i>>3] >> (i & 7) & 1)
	}
	return c
}

type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/4)
	}
	return s[:n]
}
