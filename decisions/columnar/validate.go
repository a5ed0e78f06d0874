package columnar

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// arrow-go's IPC reader trusts the lengths in the flatbuffers it reads: a
// corrupt vector length makes it allocate (and the runtime abort with
// "out of memory", which no recover catches), a corrupt decompressed size
// likewise. So every message is checked here, with the bounds-checked
// flatbuffer reader, before arrow-go sees it.

// Limits on what a batch may declare. Ours declare a few kilobytes of
// schema and thirty-odd fields.
const (
	maxMetadata = 1 << 20 // bytes of flatbuffer metadata in one message
	maxFields   = 10_000  // fields in a schema, children included
	maxDepth    = 64      // nesting of fields
)

// validateStream checks the framing and the flatbuffers of every message
// of an IPC stream, and that the sizes they declare are within data and
// within maxUncompressed.
func validateStream(data []byte) error {
	pos, budget := 0, int64(maxUncompressed)
	for pos < len(data) {
		if len(data)-pos < 4 {
			return fmt.Errorf("truncated message header at byte %d", pos)
		}
		metaLen := int64(int32(binary.LittleEndian.Uint32(data[pos:])))
		start := int64(pos + 4)
		if uint32(metaLen) == 0xFFFFFFFF {
			if len(data)-pos < 8 {
				return fmt.Errorf("truncated message header at byte %d", pos)
			}
			metaLen = int64(int32(binary.LittleEndian.Uint32(data[pos+4:])))
			start += 4
		}
		if metaLen == 0 {
			return nil // end of stream
		}
		if metaLen < 4 || metaLen > maxMetadata || metaLen > int64(len(data))-start {
			return fmt.Errorf("message at byte %d: metadata of %d bytes, %d left", pos, metaLen, int64(len(data))-start)
		}
		meta := data[start : start+metaLen]
		var bad bool
		root := fbRoot(meta, &bad)
		header, _ := root.table(2)
		bodyLen := root.int64(3)
		bodyStart := start + metaLen
		if bad || header.buf == nil {
			return fmt.Errorf("message at byte %d: %w", pos, errFlatbuffer)
		}
		if bodyLen < 0 || bodyLen > int64(len(data))-bodyStart {
			return fmt.Errorf("message at byte %d: body of %d bytes, %d left", pos, bodyLen, int64(len(data))-bodyStart)
		}
		var err error
		switch root.uint8(1) {
		case headerSchema:
			err = validateSchema(header)
		case headerDictionaryBatch:
			rb, ok := header.table(1)
			if !ok {
				err = errors.New("dictionary batch without data")
				break
			}
			err = validateRecordBatch(rb, data[bodyStart:bodyStart+bodyLen], &budget)
		case headerRecordBatch:
			err = validateRecordBatch(header, data[bodyStart:bodyStart+bodyLen], &budget)
		default:
			err = fmt.Errorf("message type %d in a stream of record batches", root.uint8(1))
		}
		if err == nil && bad {
			err = errFlatbuffer
		}
		if err != nil {
			return fmt.Errorf("message at byte %d: %w", pos, err)
		}
		pos = int(bodyStart + bodyLen)
	}
	return nil
}

func validateSchema(t fbTable) error {
	v := validator{}
	start, n := t.vector(1, 4)
	for i := range n {
		if err := v.field(t.tableAt(start, i), 0); err != nil {
			return err
		}
	}
	v.keyValues(t, 2)
	t.vector(3, 8) // features
	if *t.bad {
		return fmt.Errorf("schema: %w", errFlatbuffer)
	}
	return nil
}

type validator struct{ fields int }

func (v *validator) field(t fbTable, depth int) error {
	v.fields++
	if depth > maxDepth || v.fields > maxFields {
		return fmt.Errorf("schema: more than %d fields or %d levels of nesting", maxFields, maxDepth)
	}
	t.bytes(0) // name
	if typ, ok := t.table(3); ok {
		switch t.uint8(2) {
		case 10: // Timestamp: its time zone
			typ.bytes(1)
		case 14: // Union: its type ids
			typ.vector(1, 4)
		}
	}
	if enc, ok := t.table(4); ok {
		enc.table(1) // index type
	}
	start, n := t.vector(5, 4)
	for i := range n {
		if err := v.field(t.tableAt(start, i), depth+1); err != nil {
			return err
		}
	}
	v.keyValues(t, 6)
	return nil
}

func (v *validator) keyValues(t fbTable, slot int) {
	start, n := t.vector(slot, 4)
	for i := range n {
		kv := t.tableAt(start, i)
		kv.bytes(0)
		kv.bytes(1)
	}
}

// validateRecordBatch checks a RecordBatch table: its buffers lie within
// the body, its compressed buffers decompress to no more than budget in
// all, and its counts are sane.
func validateRecordBatch(t fbTable, body []byte, budget *int64) error {
	bodyLen := int64(len(body))
	length := t.int64(0)
	nodesAt, nNodes := t.vector(1, 16)
	bufsAt, nBufs := t.vector(2, 16)
	_, compressed := t.table(3)
	vAt, nVariadic := t.vector(4, 8)
	if *t.bad {
		return errFlatbuffer
	}
	if length < 0 || length > 1<<31-1 {
		return fmt.Errorf("%d rows", length)
	}
	for i := range nNodes {
		n, nulls := t.pairAt(nodesAt, i)
		if n < 0 || n > 1<<31-1 || nulls < 0 || nulls > n {
			return fmt.Errorf("field node of %d values and %d nulls", n, nulls)
		}
	}
	for i := range nVariadic {
		c := int64(binary.LittleEndian.Uint64(t.buf[vAt+8*i:]))
		if c < 0 || c > int64(nBufs) {
			return fmt.Errorf("%d variadic buffers of %d", c, nBufs)
		}
	}
	for i := range nBufs {
		off, size := t.pairAt(bufsAt, i)
		if off < 0 || size < 0 || off > bodyLen || size > bodyLen-off {
			return fmt.Errorf("buffer %d: bytes %d to %d of a body of %d", i, off, off+size, bodyLen)
		}
		if !compressed || size == 0 {
			continue
		}
		if size < 8 {
			return fmt.Errorf("buffer %d: compressed buffer of %d bytes", i, size)
		}
		ulen := int64(binary.LittleEndian.Uint64(body[off:]))
		if ulen == -1 {
			continue // stored uncompressed
		}
		if ulen < 0 || ulen > *budget {
			return fmt.Errorf("buffer %d: decompresses to %d bytes, more than the %d a batch may", i, ulen, maxUncompressed)
		}
		*budget -= ulen
	}
	return nil
}
