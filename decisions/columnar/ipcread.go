package columnar

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/ratewarden/ratewarden/decisions"
)

// The fast reader reads an IPC stream straight from the caller's bytes:
// message framing and flatbuffers are parsed in place, uncompressed
// buffers are not copied, compressed ones are decompressed by one reused
// decompressor into one reused arena, and a schema seen before is not
// parsed again. It handles the streams Encode writes and any stream like
// them; for anything else it returns errUnsupported and Decode falls back
// to arrow-go's reader.

// errUnsupported means the stream is valid Arrow, or may be, but uses a
// feature the fast reader leaves to arrow-go's reader.
var errUnsupported = errors.New("unsupported by the fast reader")

// Message header types (Message.fbs).
const (
	headerSchema          = 1
	headerDictionaryBatch = 2
	headerRecordBatch     = 3
)

// Body compression codecs (Message.fbs); -1 is none.
const (
	codecNone = -1
	codecLZ4  = 0
	codecZstd = 1
)

// metadataV5 is MetadataVersion.V5, the version arrow-go writes.
const metadataV5 = 4

// schemaInfo is what the fast reader keeps of a schema.
type schemaInfo struct {
	key      []byte // the schema message, checksum characters masked
	sumAt    int    // offset of the checksum characters in key, or -1
	version  int
	fields   []fieldInfo
	dictCols map[int64]int // dictionary id → our column
}

type fieldInfo struct {
	dt             arrow.DataType
	col            int // our column, or -1 for a column this reader skips
	nodes, buffers int // field nodes and buffers it takes in a record batch
}

// message is one framed IPC message.
type message struct {
	header int
	root   fbTable // the Message table
	table  fbTable // the header table (Schema, DictionaryBatch, RecordBatch)
	meta   []byte  // the flatbuffer
	body   []byte
}

// nextMessage reads the message at data[pos:] and returns it with the
// offset after it, or eos at the end-of-stream marker (or the end of
// data), with the offset after the marker.
func nextMessage(data []byte, pos int, bad *bool) (m message, next int, eos bool, err error) {
	if pos == len(data) {
		return m, pos, true, nil // no end-of-stream marker: arrow-go accepts this too
	}
	if len(data)-pos < 4 {
		return m, 0, false, fmt.Errorf("truncated message header at byte %d", pos)
	}
	cont := binary.LittleEndian.Uint32(data[pos:])
	if cont == 0 {
		return m, pos + 4, true, nil // the pre-0.15 end-of-stream marker
	}
	if cont != 0xFFFFFFFF {
		return m, 0, false, errUnsupported // pre-0.15 framing mid-stream, or garbage: arrow-go decides
	}
	if len(data)-pos < 8 {
		return m, 0, false, fmt.Errorf("truncated message header at byte %d", pos)
	}
	metaLen := int64(int32(binary.LittleEndian.Uint32(data[pos+4:])))
	if metaLen == 0 {
		return m, pos + 8, true, nil
	}
	start := int64(pos + 8)
	if metaLen < 4 || metaLen > maxMetadata || start+metaLen > int64(len(data)) {
		return m, 0, false, fmt.Errorf("message at byte %d: metadata of %d bytes, %d left", pos, metaLen, int64(len(data))-start)
	}
	m.meta = data[start : start+metaLen]
	root := fbRoot(m.meta, bad)
	if v := root.int16(0); v < metadataV5 {
		return m, 0, false, errUnsupported
	}
	m.root = root
	m.header = int(root.uint8(1))
	m.table, _ = root.table(2)
	bodyLen := root.int64(3)
	if *bad || m.table.buf == nil {
		return m, 0, false, fmt.Errorf("message at byte %d: %w", pos, errFlatbuffer)
	}
	bodyStart := start + metaLen
	if bodyLen < 0 || bodyLen > int64(len(data))-bodyStart {
		return m, 0, false, fmt.Errorf("message at byte %d: body of %d bytes, %d left", pos, bodyLen, int64(len(data))-bodyStart)
	}
	m.body = data[bodyStart : bodyStart+bodyLen]
	return m, int(bodyStart + bodyLen), false, nil
}

func (d *Decoder) decodeFast(data []byte, dst []decisions.Decision, sealed bool) ([]decisions.Decision, int, error) {
	var bad bool
	m, pos, eos, err := nextMessage(data, 0, &bad)
	if err != nil {
		return dst, 0, err
	}
	if eos || m.header != headerSchema {
		return dst, 0, errors.New("the stream does not start with a schema")
	}
	info, err := d.schema(data[:pos], m, sealed)
	if err != nil {
		return dst, 0, err
	}
	batches := 0
	for {
		m, next, eos, err := nextMessage(data, pos, &bad)
		if err != nil {
			return dst, 0, err
		}
		if eos {
			if next != len(data) {
				return dst, 0, fmt.Errorf("%d bytes after the end of the stream", len(data)-next)
			}
			break
		}
		switch m.header {
		case headerDictionaryBatch:
			if err := d.readDictionary(info, m); err != nil {
				return dst, 0, err
			}
		case headerRecordBatch:
			batches++
			n, err := d.readRecordBatch(info, m.table, m.body)
			if err != nil {
				return dst, 0, fmt.Errorf("record batch %d: %w", batches, err)
			}
			base, err := parseTimeBase(customValue(m.root, KeyTimeBase))
			if err != nil {
				return dst, 0, fmt.Errorf("record batch %d: %w", batches, err)
			}
			if dst, err = d.appendRows(dst, n, info.version, base); err != nil {
				return dst, 0, fmt.Errorf("record batch %d: %w", batches, err)
			}
		default:
			return dst, 0, fmt.Errorf("message at byte %d: header type %d where a dictionary or record batch belongs", pos, m.header)
		}
		pos = next
	}
	if batches == 0 {
		return dst, 0, errors.New("the stream holds no record batch")
	}
	return dst, info.version, nil
}

// schema returns what the fast reader needs of the schema message msg,
// from its cache when it has seen the message before.
func (d *Decoder) schema(msg []byte, m message, sealed bool) (*schemaInfo, error) {
	for i, s := range d.schemas {
		if s.matches(msg) {
			if s.sumAt >= 0 && !sealed {
				return nil, errors.New("checksum is malformed: the batch is corrupt")
			}
			copy(d.schemas[1:i+1], d.schemas[:i]) // most recent first
			d.schemas[0] = s
			return s, nil
		}
	}
	s, err := parseSchema(msg, m, sealed)
	if err != nil {
		return nil, err
	}
	if len(d.schemas) < 4 {
		d.schemas = append(d.schemas, nil)
	}
	copy(d.schemas[1:], d.schemas)
	d.schemas[0] = s
	return s, nil
}

func (s *schemaInfo) matches(msg []byte) bool {
	if len(msg) != len(s.key) {
		return false
	}
	if s.sumAt < 0 {
		return bytes.Equal(msg, s.key)
	}
	return bytes.Equal(msg[:s.sumAt], s.key[:s.sumAt]) && bytes.Equal(msg[s.sumAt+8:], s.key[s.sumAt+8:])
}

// parseSchema parses a schema message: its Arrow schema with arrow-go,
// and the dictionary ids and endianness, which arrow-go keeps to itself,
// from the flatbuffer.
func parseSchema(msg []byte, m message, sealed bool) (*schemaInfo, error) {
	if err := validateStream(msg); err != nil {
		return nil, err
	}
	r, err := ipc.NewReader(bytes.NewReader(msg))
	if err != nil {
		return nil, fmt.Errorf("not an Arrow IPC stream: %w", err)
	}
	schema := r.Schema()
	r.Release()
	version, err := checkSchema(schema.Metadata(), sealed)
	if err != nil {
		return nil, err
	}
	var bad bool
	t := m.table
	t.bad = &bad
	if t.int16(0) != 0 {
		return nil, errUnsupported // big-endian: arrow-go swaps
	}
	start, nf := t.vector(1, 4)
	if bad || nf != schema.NumFields() {
		return nil, fmt.Errorf("schema: %d fields in the flatbuffer, %d parsed", nf, schema.NumFields())
	}
	s := &schemaInfo{key: bytes.Clone(msg), version: version, fields: make([]fieldInfo, nf), dictCols: map[int64]int{}}
	s.sumAt, _ = checksumAt(msg, false)
	if s.sumAt >= 0 {
		copy(s.key[s.sumAt:], checksumPlaceholder)
	}
	seen := [numCols]bool{}
	for i := range nf {
		f := schema.Field(i)
		fi := fieldInfo{dt: f.Type, col: -1}
		var ok bool
		if fi.nodes, fi.buffers, ok = layout(f.Type); !ok {
			return nil, errUnsupported
		}
		c, known := columnIndex[f.Name]
		if known {
			if seen[c] {
				return nil, fmt.Errorf("column %s appears twice", f.Name)
			}
			seen[c] = true
			if err := checkType(c, f.Type); err != nil {
				return nil, err
			}
			fi.col = c
			if columns[c].typ == tDict {
				ft := t.tableAt(start, i)
				enc, ok := ft.table(4)
				if !ok || bad {
					return nil, fmt.Errorf("column %s: no dictionary encoding in the schema", f.Name)
				}
				id := enc.int64(0)
				if _, dup := s.dictCols[id]; dup {
					return nil, errUnsupported // a dictionary shared by two columns
				}
				s.dictCols[id] = c
			}
		}
		s.fields[i] = fi
	}
	if bad {
		return nil, fmt.Errorf("schema: %w", errFlatbuffer)
	}
	for c := range columns {
		if !seen[c] && columns[c].since <= version {
			return nil, fmt.Errorf("column %s is missing", columns[c].name)
		}
	}
	return s, nil
}

// layout returns how many field nodes and buffers an array of type dt
// takes in a record batch (Arrow columnar format, IPC), or false for the
// types whose layout the fast reader does not follow.
func layout(dt arrow.DataType) (nodes, buffers int, ok bool) {
	switch dt := dt.(type) {
	case *arrow.NullType:
		return 1, 0, true
	case *arrow.DictionaryType:
		return layout(dt.IndexType)
	case *arrow.StringType, *arrow.BinaryType, *arrow.LargeStringType, *arrow.LargeBinaryType:
		return 1, 3, true
	case arrow.FixedWidthDataType:
		return 1, 2, true
	case *arrow.ListType, *arrow.LargeListType, *arrow.MapType:
		n, b, ok := layout(dt.(arrow.ListLikeType).Elem())
		return 1 + n, 2 + b, ok
	case *arrow.FixedSizeListType:
		n, b, ok := layout(dt.Elem())
		return 1 + n, 1 + b, ok
	case *arrow.StructType:
		nodes, buffers = 1, 1
		for _, f := range dt.Fields() {
			n, b, ok := layout(f.Type)
			if !ok {
				return 0, 0, false
			}
			nodes, buffers = nodes+n, buffers+b
		}
		return nodes, buffers, true
	}
	return 0, 0, false
}

// customValue returns the value of key in a Message's custom metadata.
func customValue(msg fbTable, key string) (string, bool) {
	start, n := msg.vector(4, 4)
	for i := range n {
		kv := msg.tableAt(start, i)
		if string(kv.bytes(0)) == key {
			return string(kv.bytes(1)), !*msg.bad
		}
	}
	return "", false
}

// readDictionary keeps the dictionary of one of our columns; those of
// other columns are skipped.
func (d *Decoder) readDictionary(info *schemaInfo, m message) error {
	var bad bool
	t := m.table
	t.bad = &bad
	id := t.int64(0)
	rb, ok := t.table(1)
	isDelta := t.uint8(2) != 0
	if bad || !ok {
		return fmt.Errorf("dictionary batch: %w", errFlatbuffer)
	}
	c, ours := info.dictCols[id]
	if !ours || d.onColumns != nil && !d.want.has(c) {
		return nil
	}
	if isDelta {
		return errUnsupported
	}
	raw, n, err := d.readBuffers(rb, m.body, 1, 3)
	if err == nil && raw.n != n {
		err = fmt.Errorf("%d values in a batch of %d", raw.n, n)
	}
	if err != nil {
		return fmt.Errorf("dictionary of column %s: %w", columns[c].name, err)
	}
	d.dicts[c], d.hasDict[c] = raw, true
	return nil
}

// readRecordBatch makes views of our columns in the record batch t and
// returns its row count.
func (d *Decoder) readRecordBatch(info *schemaInfo, t fbTable, body []byte) (int, error) {
	h, err := readBatchHeader(t)
	if err != nil {
		return 0, err
	}
	if err := d.countRows(h.length); err != nil {
		return 0, err
	}
	n, codec := int(h.length), h.codec
	nodesAt, nNodes, bufsAt, nBufs := h.nodesAt, h.nNodes, h.bufsAt, h.nBufs
	ni, bi := 0, 0
	for _, f := range info.fields {
		if ni+f.nodes > nNodes || bi+f.buffers > nBufs {
			return 0, fmt.Errorf("%d field nodes and %d buffers for %d fields", nNodes, nBufs, len(info.fields))
		}
		if f.col >= 0 && d.onColumns != nil && !d.want.has(f.col) {
			// Not wanted: under body compression, its buffers are never
			// decompressed (the batch's checksum covers them).
			d.cols[f.col] = colView{typ: columns[f.col].typ, present: true, n: n}
		} else if f.col >= 0 {
			raw, err := d.rawAt(t, body, codec, nodesAt, ni, bufsAt, bi, f.buffers)
			if err != nil {
				return 0, fmt.Errorf("column %s: %w", columns[f.col].name, err)
			}
			var dict *rawCol
			if d.hasDict[f.col] {
				dict = &d.dicts[f.col]
			}
			if err := d.setView(f.col, f.dt, raw, dict, n); err != nil {
				return 0, err
			}
		}
		ni, bi = ni+f.nodes, bi+f.buffers
	}
	if ni != nNodes || bi != nBufs {
		return 0, fmt.Errorf("%d field nodes and %d buffers, the schema takes %d and %d", nNodes, nBufs, ni, bi)
	}
	return n, nil
}

// readBuffers reads the one array of a dictionary's record batch.
func (d *Decoder) readBuffers(t fbTable, body []byte, nodes, buffers int) (rawCol, int, error) {
	h, err := readBatchHeader(t)
	if err != nil {
		return rawCol{}, 0, err
	}
	if h.nNodes != nodes || h.nBufs != buffers || h.length < 0 || h.length > 1<<31-1 {
		return rawCol{}, 0, fmt.Errorf("%d rows in %d field nodes and %d buffers, want %d and %d", h.length, h.nNodes, h.nBufs, nodes, buffers)
	}
	raw, err := d.rawAt(t, body, h.codec, h.nodesAt, 0, h.bufsAt, 0, buffers)
	return raw, int(h.length), err
}

// batchHeader is what a RecordBatch table says of its body: the row count,
// where its field nodes and buffers are described, and its compression.
type batchHeader struct {
	length                         int64
	nodesAt, nNodes, bufsAt, nBufs int
	codec                          int
}

// readBatchHeader reads the RecordBatch table t, for record batches and
// dictionary batches alike.
func readBatchHeader(t fbTable) (batchHeader, error) {
	var bad bool
	t.bad = &bad
	var h batchHeader
	h.length = t.int64(0)
	h.nodesAt, h.nNodes = t.vector(1, 16)
	h.bufsAt, h.nBufs = t.vector(2, 16)
	codec, err := bodyCodec(t)
	if err != nil {
		return h, err
	}
	if bad {
		return h, errFlatbuffer
	}
	h.codec = codec
	return h, nil
}

func bodyCodec(t fbTable) (int, error) {
	bc, ok := t.table(3)
	if !ok {
		return codecNone, nil
	}
	codec := int(bc.uint8(0))
	if bc.uint8(1) != 0 || (codec != codecLZ4 && codec != codecZstd) {
		return 0, fmt.Errorf("body compression codec %d method %d", codec, bc.uint8(1))
	}
	return codec, nil
}

// rawAt returns the array of field node ni whose buffers start at bi.
func (d *Decoder) rawAt(t fbTable, body []byte, codec int, nodesAt, ni, bufsAt, bi, nbufs int) (rawCol, error) {
	var raw rawCol
	length, nulls := t.pairAt(nodesAt, ni)
	if length < 0 || length > 1<<31-1 || nulls < 0 || nulls > length {
		return raw, fmt.Errorf("field node of %d values and %d nulls", length, nulls)
	}
	raw.n, raw.nulls = int(length), int(nulls)
	var bufs [3][]byte
	for k := range nbufs {
		off, size := t.pairAt(bufsAt, bi+k)
		b, err := d.buffer(body, off, size, codec)
		if err != nil {
			return raw, fmt.Errorf("buffer %d: %w", k, err)
		}
		bufs[k] = b
	}
	raw.validity, raw.values, raw.data = bufs[0], bufs[1], bufs[2]
	if *t.bad {
		return raw, errFlatbuffer
	}
	return raw, nil
}

// buffer returns the body bytes from off to off+size, decompressed.
func (d *Decoder) buffer(body []byte, off, size int64, codec int) ([]byte, error) {
	if off < 0 || size < 0 || off > int64(len(body)) || size > int64(len(body))-off {
		return nil, fmt.Errorf("bytes %d to %d of a body of %d", off, off+size, len(body))
	}
	b := body[off : off+size]
	if codec == codecNone || len(b) == 0 {
		return b, nil
	}
	if len(b) < 8 {
		return nil, fmt.Errorf("compressed buffer of %d bytes", len(b))
	}
	ulen := int64(binary.LittleEndian.Uint64(b))
	if ulen == -1 {
		return b[8:], nil // stored uncompressed
	}
	if ulen < 0 || ulen > maxUncompressed-int64(d.total) {
		return nil, fmt.Errorf("decompresses to %d bytes, more than the %d a batch may", ulen, maxUncompressed)
	}
	out := d.alloc(int(ulen))
	d.inflated++
	var err error
	if codec == codecZstd {
		err = d.unzstd(b[8:], out)
	} else {
		err = unlz4Frame(b[8:], out)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// alloc returns n bytes of the arena, aligned to 8 and followed by
// arenaSlack bytes of capacity: zstd's fast loops write up to 16 bytes
// past what they decode, and fall back to slower exact copies without that
// room.
func (d *Decoder) alloc(n int) []byte {
	d.used = (d.used + 7) &^ 7
	if d.used+n+arenaSlack > len(d.arena) {
		d.arena = make([]byte, max(2*len(d.arena), n+arenaSlack, 1<<16))
		d.used = 0 // earlier buffers of this batch stay in the old arena
	}
	b := d.arena[d.used : d.used+n : d.used+n+arenaSlack]
	d.used += n + arenaSlack
	d.total += n
	return b
}

const arenaSlack = 32

// zstdReader returns the Decoder's zstd decoder, made once. For a sealed
// batch it is one that skips each frame's own checksum (XXH64 of the
// content): the batch's CRC-32C, checked before anything is
// decompressed, covers the compressed bytes already. Checking both cost
// 3 % of reading the query's columns (BenchmarkColumnsFromLog, zstd-3072).
func (d *Decoder) zstdReader(sealed bool) (*zstd.Decoder, error) {
	z := &d.zstd
	if sealed {
		z = &d.zstdSealed
	}
	if *z == nil {
		opts := append(decoderDicts(), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxUncompressed), zstd.IgnoreChecksum(sealed))
		dec, err := zstd.NewReader(nil, opts...)
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		*z = dec
	}
	return *z, nil
}

func (d *Decoder) unzstd(src, dst []byte) error {
	z, err := d.zstdReader(d.sealed)
	if err != nil {
		return err
	}
	out, err := z.DecodeAll(src, dst[:0])
	if err != nil {
		return fmt.Errorf("zstd: %w", err)
	}
	if len(out) != len(dst) || (len(dst) > 0 && &out[0] != &dst[0]) {
		return fmt.Errorf("zstd: decompressed to %d bytes, the buffer says %d", len(out), len(dst))
	}
	return nil
}

// unlz4Frame decompresses one LZ4 frame (the format Arrow's LZ4_FRAME
// codec writes) from src into dst, which must be its exact size.
func unlz4Frame(src, dst []byte) error {
	if len(src) < 7 || binary.LittleEndian.Uint32(src) != 0x184D2204 {
		return errors.New("lz4: not an LZ4 frame")
	}
	flg := src[4]
	if flg>>6 != 1 {
		return fmt.Errorf("lz4: frame version %d", flg>>6)
	}
	independent, blockSum, contentSize, contentSum, dictID := flg&0x20 != 0, flg&0x10 != 0, flg&0x08 != 0, flg&0x04 != 0, flg&0x01 != 0
	p := 6
	if contentSize {
		p += 8
	}
	if dictID {
		p += 4
	}
	p++ // header checksum: the batch checksum covers the frame
	out := 0
	for {
		if p+4 > len(src) {
			return errors.New("lz4: truncated frame")
		}
		size := binary.LittleEndian.Uint32(src[p:])
		p += 4
		if size == 0 {
			break
		}
		stored := size&0x80000000 != 0
		size &= 0x7FFFFFFF
		if int64(size) > int64(len(src)-p) {
			return errors.New("lz4: truncated block")
		}
		block := src[p : p+int(size)]
		p += int(size)
		if blockSum {
			p += 4
		}
		if stored {
			if len(block) > len(dst)-out {
				return errors.New("lz4: frame larger than its buffer")
			}
			out += copy(dst[out:], block)
			continue
		}
		var n int
		var err error
		if independent {
			n, err = lz4.UncompressBlock(block, dst[out:])
		} else {
			n, err = lz4.UncompressBlockWithDict(block, dst[out:], dst[max(0, out-64<<10):out])
		}
		if err != nil {
			return fmt.Errorf("lz4: %w", err)
		}
		out += n
	}
	if contentSum {
		p += 4
	}
	if p > len(src) {
		return errors.New("lz4: truncated frame")
	}
	if out != len(dst) {
		return fmt.Errorf("lz4: decompressed to %d bytes, the buffer says %d", out, len(dst))
	}
	return nil
}
