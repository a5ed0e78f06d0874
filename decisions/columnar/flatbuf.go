package columnar

import (
	"encoding/binary"
	"errors"
)

// A minimal, bounds-checked reader of the flatbuffers in Arrow IPC
// messages: just the tables and fields the fast reader needs (Message,
// Schema, Field, DictionaryEncoding, DictionaryBatch, RecordBatch,
// BodyCompression), so that decoding needs neither arrow-go's internal
// flatbuf package nor another dependency. Every read is checked; a read
// out of bounds makes the table reader's err non-nil and returns zeros.

var errFlatbuffer = errors.New("malformed flatbuffer metadata")

type fbTable struct {
	buf   []byte
	pos   int // of the table
	vt    int // of its vtable
	vtLen int
	bad   *bool // set on the first read out of bounds
}

func (t fbTable) fail() {
	if t.bad != nil {
		*t.bad = true
	}
}

func fbU32(buf []byte, off int) (uint32, bool) {
	if off < 0 || off+4 > len(buf) {
		return 0, false
	}
	return binary.LittleEndian.Uint32(buf[off:]), true
}

// fbRoot returns the root table of buf.
func fbRoot(buf []byte, bad *bool) fbTable {
	off, ok := fbU32(buf, 0)
	if !ok {
		*bad = true
		return fbTable{bad: bad}
	}
	return fbAt(buf, int(off), bad)
}

// fbAt returns the table at pos.
func fbAt(buf []byte, pos int, bad *bool) fbTable {
	t := fbTable{buf: buf, pos: pos, bad: bad}
	so, ok := fbU32(buf, pos)
	if !ok {
		t.fail()
		return fbTable{bad: bad}
	}
	t.vt = pos - int(int32(so))
	if t.vt < 0 || t.vt+4 > len(buf) {
		t.fail()
		return fbTable{bad: bad}
	}
	t.vtLen = int(binary.LittleEndian.Uint16(buf[t.vt:]))
	if t.vtLen < 4 || t.vt+t.vtLen > len(buf) {
		t.fail()
		return fbTable{bad: bad}
	}
	return t
}

// field returns the position of field slot, or 0 when it is absent.
func (t fbTable) field(slot int) int {
	o := 4 + 2*slot
	if t.buf == nil || o+2 > t.vtLen {
		return 0
	}
	f := int(binary.LittleEndian.Uint16(t.buf[t.vt+o:]))
	if f == 0 {
		return 0
	}
	return t.pos + f
}

func (t fbTable) scalar(slot, size int) (uint64, bool) {
	p := t.field(slot)
	if p == 0 {
		return 0, false
	}
	if p+size > len(t.buf) {
		t.fail()
		return 0, false
	}
	switch size {
	case 1:
		return uint64(t.buf[p]), true
	case 2:
		return uint64(binary.LittleEndian.Uint16(t.buf[p:])), true
	case 4:
		return uint64(binary.LittleEndian.Uint32(t.buf[p:])), true
	}
	return binary.LittleEndian.Uint64(t.buf[p:]), true
}

func (t fbTable) int64(slot int) int64 {
	v, _ := t.scalar(slot, 8)
	return int64(v)
}

func (t fbTable) uint8(slot int) uint8 {
	v, _ := t.scalar(slot, 1)
	return uint8(v)
}

func (t fbTable) int16(slot int) int16 {
	v, _ := t.scalar(slot, 2)
	return int16(v)
}

// indirect follows the offset stored in field slot.
func (t fbTable) indirect(slot int) (int, bool) {
	p := t.field(slot)
	if p == 0 {
		return 0, false
	}
	off, ok := fbU32(t.buf, p)
	if !ok || p+int(off) >= len(t.buf) {
		t.fail()
		return 0, false
	}
	return p + int(off), true
}

// table returns the table in field slot.
func (t fbTable) table(slot int) (fbTable, bool) {
	p, ok := t.indirect(slot)
	if !ok {
		return fbTable{bad: t.bad}, false
	}
	sub := fbAt(t.buf, p, t.bad)
	return sub, sub.buf != nil
}

// vector returns the start and length of the vector in field slot, whose
// elements are elem bytes each.
func (t fbTable) vector(slot, elem int) (start, n int) {
	p, ok := t.indirect(slot)
	if !ok {
		return 0, 0
	}
	l, ok := fbU32(t.buf, p)
	if !ok || int64(l)*int64(elem) > int64(len(t.buf)-p-4) {
		t.fail()
		return 0, 0
	}
	return p + 4, int(l)
}

// tableAt returns the i-th table of a vector of tables starting at start.
func (t fbTable) tableAt(start, i int) fbTable {
	p := start + 4*i
	off, ok := fbU32(t.buf, p)
	if !ok {
		t.fail()
		return fbTable{bad: t.bad}
	}
	return fbAt(t.buf, p+int(off), t.bad)
}

// bytes returns the string or byte vector in field slot.
func (t fbTable) bytes(slot int) []byte {
	start, n := t.vector(slot, 1)
	if n == 0 {
		return nil
	}
	return t.buf[start : start+n]
}

// structAt returns the two int64 of the i-th 16-byte struct (FieldNode,
// Buffer) of a vector starting at start.
func (t fbTable) pairAt(start, i int) (int64, int64) {
	p := start + 16*i
	if p < 0 || p+16 > len(t.buf) {
		t.fail()
		return 0, 0
	}
	return int64(binary.LittleEndian.Uint64(t.buf[p:])), int64(binary.LittleEndian.Uint64(t.buf[p+8:]))
}
