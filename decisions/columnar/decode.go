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
	"github.com/klauspost/compress/zstd"

	"github.com/ratewarden/ratewarden/decisions"
)

// Decode appends the events of the encoded batch data to dst and returns
// the extended slice. It allocates a new Decoder; reuse a Decoder to
// decode many batches.
func Decode(data []byte, dst []decisions.Decision) ([]decisions.Decision, error) {
	return NewDecoder().Decode(data, dst)
}

// ErrNewerLayout is returned (wrapped) by Decode for a batch written in a
// newer columnar layout than this package reads. Newer schema versions
// (added columns) are read; only a new layout is refused.
var ErrNewerLayout = errors.New("batch from a newer writer")

// maxUncompressed bounds the bytes a batch may decompress to, so that a
// corrupt or hostile length cannot make Decode allocate without bound. It
// is arrow-go's default limit on a message body.
const maxUncompressed = 256 << 20

// MaxRows bounds the events one batch may hold, over all its record
// batches: sixteen times the most the edge writes in one record
// (decisions.batch, at most 65536). maxUncompressed alone let a hostile
// batch of 43 KB, five million minimal events, make its reader hold half
// a gigabyte; a batch past MaxRows is refused as corrupt before its rows
// are read.
const MaxRows = 1 << 20

// maxRows is the bound countRows checks: MaxRows, which a test lowers to
// prove the check on batches of a few thousand events rather than a
// million.
var maxRows = MaxRows

// Decoder decodes batches, reusing its scratch space, its decompressor
// and the strings of small dictionaries from one batch to the next. The
// zero value is ready to use. It is not safe for concurrent use: give
// each goroutine its own.
//
// It reads the streams this package writes with a fast reader of its own
// (no copy of uncompressed buffers, one reused decompressor, schemas
// parsed once and remembered), and any other valid stream of the same
// columns (big-endian, dictionary deltas, extra columns of types it does
// not step over) with arrow-go's general reader.
type Decoder struct {
	version int // schema version of the last batch decoded

	// skipChecksum makes Decode skip the checksum, so that the fuzz test
	// reaches the parsers with corrupt input; forceSlow makes it use
	// arrow-go's reader, so that tests can compare the two.
	skipChecksum, forceSlow bool
	slowDecodes             int  // batches the fast reader left to arrow-go's
	inflated                int  // compressed buffers the fast reader decompressed, so that tests see which it skipped
	repanic                 bool // let panics outside arrow-go through, so that fuzzing finds them

	cols    [numCols]colView
	values  [numCols][]string // dictionary values, per dictionary column
	intern  [numCols]map[string]string
	dicts   [numCols]rawCol // the current dictionary of each dictionary column (fast reader)
	hasDict [numCols]bool

	onColumns   func(*Columns) error // set during DecodeColumnSet
	want        ColumnSet            // the columns onColumns reads
	consumerErr error                // the callback's error
	inConsumer  bool                 // a panic now is the callback's: not recovered
	view        Columns
	rows        []decisions.Decision // DecodeRows' events
	zeros       []uint8

	schemas []*schemaInfo // recently seen schemas, newest first
	arena   []byte        // decompressed buffers of the current batch
	used    int           // of arena; total counts every arena
	total   int
	nrows   int           // the rows of the batch read so far (MaxRows)
	zstd    *zstd.Decoder // checks each frame's checksum
	frame   []byte        // a ZstdStream batch, decompressed

	// sealed says whether the batch being decoded carried its checksum,
	// checked (or skipChecksum): zstdSealed then decompresses its buffers
	// (zstdReader).
	sealed     bool
	zstdSealed *zstd.Decoder
}

// isZstdFrame reports whether data starts with a zstd frame's magic
// number; an Arrow IPC stream starts with 0xFFFFFFFF.
func isZstdFrame(data []byte) bool {
	return len(data) >= 4 && data[0] == 0x28 && data[1] == 0xb5 && data[2] == 0x2f && data[3] == 0xfd
}

// unframe decompresses a ZstdStream batch into d.frame, at most
// maxUncompressed bytes.
func (d *Decoder) unframe(data []byte) ([]byte, error) {
	z, err := d.zstdReader(false) // the batch's checksum is inside
	if err != nil {
		return nil, err
	}
	out, err := z.DecodeAll(data, d.frame[:0])
	if err != nil {
		return nil, fmt.Errorf("zstd stream: %w", err)
	}
	if cap(out) <= maxKeptFrame {
		d.frame = out
	}
	return out, nil
}

// maxKeptFrame bounds the decompression buffer a Decoder keeps.
const maxKeptFrame = 4 << 20

// NewDecoder returns a Decoder.
func NewDecoder() *Decoder {
	return &Decoder{}
}

// Version returns the schema version (decisions.Version of its writer) of
// the batch last decoded without error. A version newer than
// decisions.Version means the batch may have had columns this reader
// skipped.
func (d *Decoder) Version() int { return d.version }

// Decode appends the events of the encoded batch data to dst and returns
// the extended slice. On error it returns dst unchanged and an error that
// says what is wrong: data that is empty, truncated or corrupt (the
// checksum does not match), not an Arrow IPC stream, or an Arrow stream
// that is not a batch of decisions (no schema version, a newer layout, a
// column missing or of an unexpected type). Panics raised by the Arrow
// library on corrupt input are recovered and returned as errors.
//
// Times come back in UTC. Strings are not checked for valid UTF-8: this
// package's encoder writes only valid UTF-8, and what another writer wrote
// comes back as it is. The strings of a batch's events share a few
// allocations (one per string column); dictionary strings of up to 256
// values are interned, so that they are shared across batches too.
func (d *Decoder) Decode(data []byte, dst []decisions.Decision) (out []decisions.Decision, err error) {
	n0 := len(dst)
	defer func() {
		consumer := d.inConsumer
		d.inConsumer = false
		d.release()
		if d.repanic || consumer {
			return
		}
		if p := recover(); p != nil {
			out, err = dst[:n0], fmt.Errorf("decode decisions: corrupt batch: %v", p)
		}
	}()
	if len(data) == 0 {
		return dst, errors.New("decode decisions: empty input")
	}
	if isZstdFrame(data) {
		if data, err = d.unframe(data); err != nil {
			return dst, fmt.Errorf("decode decisions: %w", err)
		}
	}
	sealed := d.skipChecksum
	if !d.skipChecksum {
		if sealed, err = verifyChecksum(data); err != nil {
			return dst, fmt.Errorf("decode decisions: %w", err)
		}
	}
	d.sealed = sealed
	version := 0
	if !d.forceSlow {
		dst, version, err = d.decodeFast(data, dst, sealed)
		if errors.Is(err, errUnsupported) {
			d.slowDecodes++
			dst = dst[:n0]
			dst, version, err = d.decodeSlow(data, dst, sealed)
		}
	} else {
		dst, version, err = d.decodeSlow(data, dst, sealed)
	}
	if err != nil {
		return dst[:n0], fmt.Errorf("decode decisions: %w", err)
	}
	d.version = version
	return dst, nil
}

// release drops what the views hold into the batch, and scratch space that
// grew too large to keep.
func (d *Decoder) release() {
	for i := range d.cols {
		d.cols[i] = colView{}
		d.dicts[i] = rawCol{}
		d.hasDict[i] = false
	}
	if d.total > 64<<20 {
		d.arena = nil
	}
	d.used, d.total, d.nrows = 0, 0, 0
}

// countRows adds a record batch's n rows to the batch's and refuses them
// past MaxRows.
func (d *Decoder) countRows(n int64) error {
	if n < 0 || n > int64(maxRows-d.nrows) {
		return fmt.Errorf("%d rows after %d, more than the %d a batch may hold", n, d.nrows, maxRows)
	}
	d.nrows += int(n)
	return nil
}

// checkSchema checks that md is the metadata of a batch of decisions that
// this reader can read, and returns its schema version. sealed says
// whether the batch's checksum was found (and checked).
func checkSchema(md arrow.Metadata, sealed bool) (int, error) {
	if v, ok := md.GetValue(KeyChecksum); ok && !sealed {
		// A corrupt checksum (or its corrupt length) is not recognised
		// as one, so the batch looked unsealed.
		return 0, fmt.Errorf("checksum %q is malformed: the batch is corrupt", v)
	}
	v, ok := md.GetValue(KeySchemaVersion)
	if !ok {
		return 0, fmt.Errorf("not a batch of decisions: no %s in the schema metadata", KeySchemaVersion)
	}
	version, err := strconv.Atoi(v)
	if err != nil || version < 1 {
		return 0, fmt.Errorf("schema metadata %s: %q is not a version (want an integer ≥ 1)", KeySchemaVersion, v)
	}
	l, ok := md.GetValue(KeyLayout)
	if !ok {
		return 0, fmt.Errorf("not a batch of decisions: no %s in the schema metadata", KeyLayout)
	}
	layout, err := strconv.Atoi(l)
	if err != nil || layout < 1 {
		return 0, fmt.Errorf("schema metadata %s: %q is not a layout version (want an integer ≥ 1)", KeyLayout, l)
	}
	if layout > Layout {
		return 0, fmt.Errorf("%w: layout %d (schema version %d); this reader knows layout %d: upgrade it", ErrNewerLayout, layout, version, Layout)
	}
	return version, nil
}

// parseTimeBase parses the value of KeyTimeBase.
func parseTimeBase(v string, ok bool) (int64, error) {
	if !ok {
		return 0, fmt.Errorf("no %s in the record batch metadata", KeyTimeBase)
	}
	base, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("record batch metadata %s: %q is not an integer", KeyTimeBase, v)
	}
	return base, nil
}

// checkType checks that dt is a type column c may have.
func checkType(c int, dt arrow.DataType) error {
	ok := false
	want := ""
	switch columns[c].typ {
	case tUint8:
		ok, want = dt.ID() == arrow.UINT8, "uint8"
	case tInt, tTime:
		ok, want = intWidth8(dt) > 0, "int8, int16, int32, int64 or duration[ns]"
		if columns[c].typ == tTime {
			ok, want = ok && dt.ID() != arrow.DURATION, "int8, int16, int32 or int64"
		}
	case tUint:
		ok, want = uintWidth8(dt) > 0, "uint8, uint16, uint32 or uint64"
	case tString:
		ok, want = dt.ID() == arrow.STRING, "utf8"
	case tAddr:
		t, isFSB := dt.(*arrow.FixedSizeBinaryType)
		ok, want = isFSB && t.ByteWidth == 16, "fixed_size_binary(16)"
	case tDict:
		t, isDict := dt.(*arrow.DictionaryType)
		ok = isDict && t.ValueType.ID() == arrow.STRING && indexWidth(t.IndexType) > 0
		want = "dictionary<int8|int16|int32, utf8>"
	}
	if !ok {
		return fmt.Errorf("column %s: type %s, want %s", columns[c].name, dt, want)
	}
	return nil
}

// indexWidth returns the size in bytes of a dictionary index type, or 0
// for a type this package does not write.
func indexWidth(t arrow.DataType) int {
	if t.ID() == arrow.INT64 {
		return 0
	}
	return intWidth8(t)
}

// intWidth8 returns the size in bytes of a signed integer type (durations
// in nanoseconds included), or 0.
func intWidth8(t arrow.DataType) int {
	switch t.ID() {
	case arrow.INT8:
		return 1
	case arrow.INT16:
		return 2
	case arrow.INT32:
		return 4
	case arrow.INT64:
		return 8
	case arrow.DURATION:
		if t.(*arrow.DurationType).Unit == arrow.Nanosecond {
			return 8
		}
	}
	return 0
}

func uintWidth8(t arrow.DataType) int {
	switch t.ID() {
	case arrow.UINT8:
		return 1
	case arrow.UINT16:
		return 2
	case arrow.UINT32:
		return 4
	case arrow.UINT64:
		return 8
	}
	return 0
}

// columnIndex maps column names to columns.
var columnIndex = func() map[string]int {
	m := make(map[string]int, numCols)
	for i, c := range columns {
		m[c.name] = i
	}
	return m
}()

// rawCol is one array of a record batch as buffers: the validity bitmap,
// the values (or offsets, for strings) and the string bytes.
type rawCol struct {
	n, nulls               int
	validity, values, data []byte
}

// colView is one column of a record batch, checked and ready to read.
type colView struct {
	typ     colType
	present bool
	n       int
	u8      []uint8
	ints    []byte // integers: little-endian, of intW bytes each
	intW    int
	valid   []byte // time: validity bitmap (nil when no nulls)
	addr    []byte
	offsets []int32 // strings
	raw     []byte  // strings: the column's bytes, from offsets[0]
	str     string  // strings: raw as a string, made when rows are filled
	idxW    int     // dictionary: index width in bytes
	idx     []byte  // dictionary: indices
}

// setView checks raw, column c of a record batch of n rows with type dt
// (already checked by checkType), and makes it d.cols[c]. dict is the
// dictionary of a dictionary column.
func (d *Decoder) setView(c int, dt arrow.DataType, raw rawCol, dict *rawCol, n int) error {
	v := &d.cols[c]
	*v = colView{typ: columns[c].typ}
	if raw.n != n {
		return fmt.Errorf("column %s: %d values for %d rows", columns[c].name, raw.n, n)
	}
	if raw.nulls != 0 && v.typ != tTime {
		return fmt.Errorf("column %s: %d nulls in a column without nulls", columns[c].name, raw.nulls)
	}
	var err error
	switch v.typ {
	case tUint8:
		v.u8, err = fixedBuf(raw.values, n, 1)
		if err == nil && c == cClientIPFamily {
			for i, f := range v.u8 {
				if f != familyNone && f != family4 && f != family6 {
					err = fmt.Errorf("row %d: address family %d, want 0, 4 or 6", i, f)
					break
				}
			}
		}
	case tInt, tTime, tUint:
		v.intW = intWidth8(dt)
		if v.typ == tUint {
			v.intW = uintWidth8(dt)
		}
		v.ints, err = fixedBuf(raw.values, n, v.intW)
		if err == nil && c == cDropped && v.intW == 8 {
			// Readers add dropped counts up: one over the cap makes the
			// batch corrupt, as a field over its cap does (Decision.Check).
			for i, x := range ints[uint64](v.ints, n) {
				if x > decisions.MaxDropped {
					err = fmt.Errorf("row %d: %w", i, decisions.DroppedTooMany(x))
					break
				}
			}
		}
		if err == nil && raw.nulls > 0 {
			if raw.nulls > n || len(raw.validity)*8 < n {
				err = fmt.Errorf("%d nulls, validity bitmap of %d bytes for %d rows", raw.nulls, len(raw.validity), n)
			}
			v.valid = raw.validity
		}
	case tAddr:
		v.addr, err = fixedBuf(raw.values, n, 16)
	case tString:
		if v.offsets, _, err = stringsOf(raw, true); err == nil {
			v.raw = raw.data[v.offsets[0]:v.offsets[len(v.offsets)-1]]
		}
	case tDict:
		v.idxW = indexWidth(dt.(*arrow.DictionaryType).IndexType)
		if v.idx, err = fixedBuf(raw.values, n, v.idxW); err != nil {
			break
		}
		if dict == nil {
			err = errors.New("no dictionary")
			break
		}
		if dict.nulls != 0 {
			err = fmt.Errorf("%d nulls in the dictionary", dict.nulls)
			break
		}
		if err = d.setValues(c, *dict); err != nil {
			break
		}
		err = checkIndices(v.idx, v.idxW, len(d.values[c]))
	}
	if err == nil && colCaps[c] > 0 {
		err = d.checkLens(c, colCaps[c])
	}
	if err != nil {
		return fmt.Errorf("column %s: %w", columns[c].name, err)
	}
	v.present, v.n = true, n
	return nil
}

// colCaps holds, by column, the longest value of the capped fields
// (decisions.FieldCaps), 0 for the others.
var colCaps = func() (caps [numCols]int) {
	for _, f := range decisions.FieldCaps {
		for c := range columns {
			if columns[c].name == f.Name {
				caps[c] = f.Max
			}
		}
	}
	return caps
}()

// checkLens reports a value of string or dictionary column c longer than
// max bytes as every reader reads it (decisions.WrittenLen: another
// writer's bytes that are not UTF-8 are U+FFFD, three bytes, in JSON and
// to the JSON codec's reader): the batch is corrupt, whether a row uses
// the value or not. A value of at most max/3 bytes is within max however
// it is read.
func (d *Decoder) checkLens(c, max int) error {
	v := &d.cols[c]
	if v.typ == tDict {
		for _, s := range d.values[c] {
			if !decisions.FitsCap(s, max) {
				return fmt.Errorf("dictionary: %w", decisions.FieldTooLong(columns[c].name, decisions.WrittenLen(s), max))
			}
		}
		return nil
	}
	base := v.offsets[0]
	for i := 1; i < len(v.offsets); i++ {
		b := v.raw[v.offsets[i-1]-base : v.offsets[i]-base]
		if s := unsafe.String(unsafe.SliceData(b), len(b)); !decisions.FitsCap(s, max) {
			return fmt.Errorf("row %d: %w", i-1, decisions.FieldTooLong(columns[c].name, decisions.WrittenLen(s), max))
		}
	}
	return nil
}

// setValues makes dict the values of dictionary column c. Small
// dictionaries are interned: their strings are allocated once and shared
// by every batch that has them.
func (d *Decoder) setValues(c int, dict rawCol) error {
	offsets, s, err := stringsOf(dict, dict.n <= maxIntern)
	if err != nil {
		return fmt.Errorf("dictionary: %w", err)
	}
	vals := d.values[c][:0]
	if dict.n <= maxIntern {
		m := d.intern[c]
		if m == nil || len(m) > 4*maxIntern {
			m = make(map[string]string)
			d.intern[c] = m
		}
		b := dict.data
		for i := range dict.n {
			v := b[offsets[i]:offsets[i+1]]
			str, ok := m[string(v)]
			if !ok {
				str = string(v)
				m[str] = str
			}
			vals = append(vals, str)
		}
	} else {
		for i := range dict.n {
			vals = append(vals, s[offsets[i]-offsets[0]:offsets[i+1]-offsets[0]])
		}
	}
	d.values[c] = vals
	return nil
}

// maxIntern is the largest dictionary whose strings are interned.
const maxIntern = 256

// fixedBuf checks that b holds n values of width bytes and returns them,
// copied if they are not aligned to width.
func fixedBuf(b []byte, n, width int) ([]byte, error) {
	if n*width > len(b) {
		return nil, fmt.Errorf("value buffer of %d bytes for %d values of %d bytes", len(b), n, width)
	}
	b = b[:n*width]
	if n > 0 && width > 1 && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(width) != 0 {
		b = append(make([]byte, 0, len(b)+8), b...) // misaligned by a foreign or corrupt writer
	}
	return b, nil
}

// stringsOf checks a utf8 array's offsets and returns them, with the
// array's bytes as one string (one allocation) from offsets[0] unless
// noString.
func stringsOf(raw rawCol, noString bool) ([]int32, string, error) {
	n := raw.n
	if n == 0 {
		return []int32{0}, "", nil
	}
	ob, err := fixedBuf(raw.values, n+1, 4)
	if err != nil {
		return nil, "", fmt.Errorf("offsets: %w", err)
	}
	offsets := unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(ob))), n+1)
	first, last := offsets[0], offsets[n]
	if first < 0 || last < first || int(last) > len(raw.data) {
		return nil, "", fmt.Errorf("offsets %d to %d in a value buffer of %d bytes", first, last, len(raw.data))
	}
	prev := first
	for _, o := range offsets[1:] {
		if o < prev {
			return nil, "", errors.New("offsets decrease")
		}
		prev = o
	}
	if noString {
		return offsets, "", nil
	}
	return offsets, string(raw.data[first:last]), nil
}

// checkIndices checks that the w-byte indices in b are within a
// dictionary of nvals values.
func checkIndices(b []byte, w, nvals int) error {
	if w == 1 && nvals <= 128 && bytesBelow(b, nvals) {
		return nil // the common case, eight indices at a time
	}
	var lo, hi int64 = 0, -1
	switch w {
	case 1:
		for _, x := range ints[int8](b, len(b)) {
			lo, hi = min(lo, int64(x)), max(hi, int64(x))
		}
	case 2:
		for _, x := range ints[int16](b, len(b)/2) {
			lo, hi = min(lo, int64(x)), max(hi, int64(x))
		}
	case 4:
		for _, x := range ints[int32](b, len(b)/4) {
			lo, hi = min(lo, int64(x)), max(hi, int64(x))
		}
	}
	if lo < 0 || hi >= int64(nvals) {
		return fmt.Errorf("indices from %d to %d into a dictionary of %d values", lo, hi, nvals)
	}
	return nil
}

// bytesBelow reports whether every byte of b is below n (n ≤ 128). Adding
// 128-n to a byte sets its top bit exactly when the byte is n or more; a
// byte of 128 or more has its top bit set already (and may carry into the
// next byte, but the answer is then false anyway).
func bytesBelow(b []byte, n int) bool {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	add := uint64(128-n) * ones
	var acc uint64
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		acc |= (x + add) | x
	}
	for ; i < len(b); i++ {
		x := uint64(b[i])
		acc |= (x + uint64(128-n)) | x
	}
	return acc&tops == 0
}

// appendRows appends n rows made from the column views to dst. Every
// column of the current version must have a view; columns of later
// versions missing from an older batch decode as zero values.
func (d *Decoder) appendRows(dst []decisions.Decision, n, version int, timeBase int64) ([]decisions.Decision, error) {
	for c := range columns {
		if !d.cols[c].present {
			if columns[c].since <= version {
				return dst, fmt.Errorf("column %s is missing", columns[c].name)
			}
			d.cols[c] = colView{typ: columns[c].typ}
		}
	}
	if n > math.MaxInt32 {
		return dst, fmt.Errorf("%d rows", n)
	}
	if d.onColumns != nil {
		return dst, d.columns(n, version, timeBase)
	}
	if n == 0 {
		return dst, nil
	}
	for c := range d.cols {
		if v := &d.cols[c]; v.typ == tString && v.present {
			v.str = string(v.raw) // one allocation for the column's strings
		}
	}
	start := len(dst)
	if cap(dst)-start < n {
		grown := make([]decisions.Decision, start, start+n)
		copy(grown, dst)
		dst = grown
	}
	dst = dst[:start+n]
	d.fillRows(dst[start:], timeBase)
	return dst, nil
}

// Field offsets in a Decision, for the column loops.
var (
	offKind      = unsafe.Offsetof(decisions.Decision{}.Kind)
	offOutcome   = unsafe.Offsetof(decisions.Decision{}.Outcome)
	stringFields = [numCols]uintptr{
		cRequestID:      unsafe.Offsetof(decisions.Decision{}.RequestID),
		cNode:           unsafe.Offsetof(decisions.Decision{}.Node),
		cUserID:         unsafe.Offsetof(decisions.Decision{}.UserID),
		cPlan:           unsafe.Offsetof(decisions.Decision{}.Plan),
		cTier:           unsafe.Offsetof(decisions.Decision{}.Tier),
		cIdentitySource: unsafe.Offsetof(decisions.Decision{}.IdentitySource),
		cMethod:         unsafe.Offsetof(decisions.Decision{}.Method),
		cHost:           unsafe.Offsetof(decisions.Decision{}.Host),
		cPath:           unsafe.Offsetof(decisions.Decision{}.Path),
		cRule:           unsafe.Offsetof(decisions.Decision{}.Rule),
		cAlgorithm:      unsafe.Offsetof(decisions.Decision{}.Algorithm),
		cReason:         unsafe.Offsetof(decisions.Decision{}.Reason),
		cPrivacy:        unsafe.Offsetof(decisions.Decision{}.Privacy),
		cList:           unsafe.Offsetof(decisions.Decision{}.List),
		cAction:         unsafe.Offsetof(decisions.Decision{}.Action),
		cTarget:         unsafe.Offsetof(decisions.Decision{}.Target),
		cResponseError:  unsafe.Offsetof(decisions.Decision{}.ResponseError),
	}
	int64Fields = [numCols]uintptr{
		cLimit:        unsafe.Offsetof(decisions.Decision{}.Limit),
		cWindow:       unsafe.Offsetof(decisions.Decision{}.Window),
		cCount:        unsafe.Offsetof(decisions.Decision{}.Count),
		cRemaining:    unsafe.Offsetof(decisions.Decision{}.Remaining),
		cReset:        unsafe.Offsetof(decisions.Decision{}.Reset),
		cStoreLatency: unsafe.Offsetof(decisions.Decision{}.StoreLatency),
		cTTL:          unsafe.Offsetof(decisions.Decision{}.TTL),
		cDropped:      unsafe.Offsetof(decisions.Decision{}.Dropped), // a uint64, stored as its bits

		cUpstreamLatency: unsafe.Offsetof(decisions.Decision{}.UpstreamLatency),
	}
)

// chunk is how many rows are filled column by column before moving on:
// enough for tight loops, few enough that the rows stay in the cache
// while every column is written into them.
const chunk = 256

// fillRows writes every field of rows from the column views. Every field
// is written, so rows need not be zeroed first.
func (d *Decoder) fillRows(rows []decisions.Decision, timeBase int64) {
	prevNs := timeBase
	for lo := 0; lo < len(rows); lo += chunk {
		part := rows[lo:min(lo+chunk, len(rows))]
		for c := range d.cols {
			v := &d.cols[c]
			switch v.typ {
			case tUint8:
				switch c {
				case cKind:
					setUint8(part, offKind, v.u8, lo)
				case cOutcome:
					setUint8(part, offOutcome, v.u8, lo)
				}
			case tTime:
				prevNs = setTimes(part, v, lo, prevNs)
			case tAddr:
				d.setAddrs(part, lo)
			case tInt, tUint:
				if c == cStatus {
					setStatus(part, v, lo)
				} else {
					setInts(part, int64Fields[c], v, lo)
				}
			case tString:
				setStrings(part, stringFields[c], v, lo)
			case tDict:
				if c != cClientIPZone { // set with the address
					setDict(part, stringFields[c], v, d.values[c], lo)
				}
			}
		}
	}
}

// field returns the field of d at offset off.
func field[T any](d *decisions.Decision, off uintptr) *T {
	return (*T)(unsafe.Add(unsafe.Pointer(d), off))
}

func setUint8(rows []decisions.Decision, off uintptr, vals []uint8, lo int) {
	if vals == nil {
		for i := range rows {
			*field[uint8](&rows[i], off) = 0
		}
		return
	}
	vals = vals[lo : lo+len(rows)]
	for i := range rows {
		*field[uint8](&rows[i], off) = vals[i]
	}
}

// setInts writes an integer column into the int64 (or uint64) field at
// off, widening it: signed types are sign-extended, unsigned ones not.
func setInts(rows []decisions.Decision, off uintptr, v *colView, lo int) {
	switch {
	case v.ints == nil:
		for i := range rows {
			*field[int64](&rows[i], off) = 0
		}
	case v.typ == tUint:
		switch v.intW {
		case 1:
			widen(rows, off, v.ints[lo:lo+len(rows)])
		case 2:
			widen(rows, off, ints[uint16](v.ints, v.n)[lo:lo+len(rows)])
		case 4:
			widen(rows, off, ints[uint32](v.ints, v.n)[lo:lo+len(rows)])
		default:
			widen(rows, off, ints[uint64](v.ints, v.n)[lo:lo+len(rows)])
		}
	default:
		switch v.intW {
		case 1:
			widen(rows, off, ints[int8](v.ints, v.n)[lo:lo+len(rows)])
		case 2:
			widen(rows, off, ints[int16](v.ints, v.n)[lo:lo+len(rows)])
		case 4:
			widen(rows, off, ints[int32](v.ints, v.n)[lo:lo+len(rows)])
		default:
			widen(rows, off, ints[int64](v.ints, v.n)[lo:lo+len(rows)])
		}
	}
}

// setStatus writes the status column into Status, an int (of 32 bits on
// some platforms, so not one of the int64 fields setInts writes).
func setStatus(rows []decisions.Decision, v *colView, lo int) {
	for i := range rows {
		rows[i].Status = int(v.int(lo + i))
	}
}

// int returns row i of a signed integer column, 0 when the column is
// absent.
func (v *colView) int(i int) int64 {
	switch {
	case v.ints == nil:
		return 0
	case v.intW == 1:
		return int64(int8(v.ints[i]))
	case v.intW == 2:
		return int64(ints[int16](v.ints, v.n)[i])
	case v.intW == 4:
		return int64(ints[int32](v.ints, v.n)[i])
	}
	return ints[int64](v.ints, v.n)[i]
}

type integer interface {
	int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64
}

// ints views b, n little-endian integers aligned to their size (see
// fixedBuf), as a slice.
func ints[T integer](b []byte, n int) []T {
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

func widen[T integer](rows []decisions.Decision, off uintptr, vals []T) {
	for i := range rows {
		*field[int64](&rows[i], off) = int64(vals[i])
	}
}

func setStrings(rows []decisions.Decision, off uintptr, v *colView, lo int) {
	if !v.present {
		for i := range rows {
			*field[string](&rows[i], off) = ""
		}
		return
	}
	offsets := v.offsets[lo : lo+len(rows)+1]
	base := v.offsets[0]
	s := v.str
	start := offsets[0] - base
	for i := range rows {
		end := offsets[i+1] - base
		*field[string](&rows[i], off) = s[start:end]
		start = end
	}
}

func setDict(rows []decisions.Decision, off uintptr, v *colView, vals []string, lo int) {
	switch v.idxW {
	case 1:
		idx := v.idx[lo : lo+len(rows)]
		for i := range rows {
			*field[string](&rows[i], off) = vals[int8(idx[i])]
		}
	case 2:
		idx := ints[int16](v.idx, v.n)[lo : lo+len(rows)]
		for i := range rows {
			*field[string](&rows[i], off) = vals[idx[i]]
		}
	case 4:
		idx := ints[int32](v.idx, v.n)[lo : lo+len(rows)]
		for i := range rows {
			*field[string](&rows[i], off) = vals[idx[i]]
		}
	default: // column absent
		for i := range rows {
			*field[string](&rows[i], off) = ""
		}
	}
}

// setTimes rebuilds times from the deltas, carrying the running sum prev
// from chunk to chunk, and returns it.
func setTimes(rows []decisions.Decision, v *colView, lo int, prev int64) int64 {
	switch {
	case v.ints == nil:
		for i := range rows {
			rows[i].Time = time.Time{}
		}
		return prev
	case v.intW == 1:
		return sumTimes(rows, ints[int8](v.ints, v.n), v.valid, lo, prev)
	case v.intW == 2:
		return sumTimes(rows, ints[int16](v.ints, v.n), v.valid, lo, prev)
	case v.intW == 4:
		return sumTimes(rows, ints[int32](v.ints, v.n), v.valid, lo, prev)
	}
	return sumTimes(rows, ints[int64](v.ints, v.n), v.valid, lo, prev)
}

func sumTimes[T int8 | int16 | int32 | int64](rows []decisions.Decision, deltas []T, valid []byte, lo int, prev int64) int64 {
	deltas = deltas[lo : lo+len(rows)]
	if valid == nil {
		for i := range rows {
			prev += int64(deltas[i])
			rows[i].Time = time.Unix(0, prev).UTC()
		}
		return prev
	}
	for i := range rows {
		j := lo + i
		if valid[j>>3]>>(j&7)&1 == 0 {
			rows[i].Time = time.Time{}
			continue
		}
		prev += int64(deltas[i])
		rows[i].Time = time.Unix(0, prev).UTC()
	}
	return prev
}

// setAddrs rebuilds client addresses from the address, family and zone
// columns.
func (d *Decoder) setAddrs(rows []decisions.Decision, lo int) {
	a, fam, zone := &d.cols[cClientIP], &d.cols[cClientIPFamily], &d.cols[cClientIPZone]
	if !a.present || !fam.present {
		for i := range rows {
			rows[i].ClientIP = netip.Addr{}
		}
		return
	}
	zones := d.values[cClientIPZone]
	for i := range rows {
		j := lo + i
		var ip netip.Addr
		switch fam.u8[j] {
		case family4:
			b := a.addr[16*j : 16*j+16]
			ip = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		case family6:
			ip = netip.AddrFrom16([16]byte(a.addr[16*j : 16*j+16]))
			if zone.present {
				if z := zones[zone.at(j)]; z != "" {
					ip = ip.WithZone(z)
				}
			}
		}
		rows[i].ClientIP = ip
	}
}

// at returns the dictionary index of row i.
func (v *colView) at(i int) int { return indexAt(v.idx, v.idxW, i) }

// indexAt returns the i-th of the w-byte dictionary indices in idx.
func indexAt(idx []byte, w, i int) int {
	switch w {
	case 1:
		return int(int8(idx[i]))
	case 2:
		return int(*(*int16)(unsafe.Pointer(&idx[2*i])))
	}
	return int(*(*int32)(unsafe.Pointer(&idx[4*i])))
}
