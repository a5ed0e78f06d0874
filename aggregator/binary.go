package aggregator

import (
	"cmp"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
)

// The partials' binary encoding is built from uvarints and length-prefixed
// strings; every map is written in sorted key order so that equal
// aggregates encode to equal bytes, which is what makes replay and
// idempotent rewrites byte-identical.

var errTruncated = errors.New("truncated")

// castagnoli is CRC-32C's table: the checksum that ends a state and a
// partial (sumLen bytes, little-endian).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sumLen is the length of the checksum appendSum appends.
const sumLen = 4

// appendSum appends the CRC-32C of b[start:].
func appendSum(b []byte, start int) []byte {
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// checkSum returns b without the checksum that ends it, and whether the
// checksum matches; b holds at least sumLen bytes.
func checkSum(b []byte) ([]byte, bool) {
	body := b[:len(b)-sumLen]
	return body, crc32.Checksum(body, castagnoli) == binary.LittleEndian.Uint32(b[len(body):])
}

func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// openFrame starts bytes that closeFrame will prefix with their length,
// as appendBytes does, so that an encoder appends into b itself rather
// than into a buffer of its own that appendBytes then copies: it reserves
// one byte for the length and returns where.
func openFrame(b []byte) ([]byte, int) { return append(b, 0), len(b) }

// closeFrame writes the length of the bytes appended since openFrame
// returned at, moving them when the length takes more than one byte.
func closeFrame(b []byte, at int) []byte {
	var n [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(n[:], uint64(len(b)-at-1))
	if k > 1 {
		b = append(b, n[1:k]...) // room for the length's other bytes
		copy(b[at+k:], b[at+1:])
	}
	copy(b[at:], n[:k])
	return b
}

func sortedKeys[M ~map[K]V, K cmp.Ordered, V any](m M) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// reader decodes the encoding; the first error sticks and every later read
// returns zero values, so a decoder checks r.err once per item.
type reader struct {
	b   []byte
	err error
	// addrsOnly says that the clients of top-K lists carry no prefix
	// length (Client.Bits): a partial of encoding version 5 or earlier.
	addrsOnly bool
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = nil
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(errTruncated)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.fail(errTruncated)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail(errTruncated)
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) string() string { return string(r.bytes()) }

// count reads an item count and refuses one that the remaining bytes cannot
// hold at minBytes per item, so a corrupt count cannot make a decoder
// allocate or loop without bound.
func (r *reader) count(minBytes int) uint64 {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)/max(minBytes, 1)) {
		r.fail(errors.New("count larger than the data"))
		return 0
	}
	return n
}
