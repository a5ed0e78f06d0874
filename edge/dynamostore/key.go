package dynamostore

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/ratewarden/ratewarden/edge/limit"
)

// Algorithm tags, the first byte of every key. A key too long to store is
// tagged in upper case and followed by a SHA-256 of its long form.
var tags = [...]byte{
	limit.FixedWindow:   'f',
	limit.SlidingWindow: 's',
	limit.TokenBucket:   't',
	limit.Concurrency:   'c',
}

// Identity kinds, so that an address, a user and no identity never encode
// the same bytes.
const (
	kindNone byte = 0
	kind4    byte = 4
	kind6    byte = 6
	kindUser byte = 'u'
)

// maxRawKey is the longest key stored as it is. DynamoDB allows partition
// keys of 2048 bytes; longer region, rule and user bytes are hashed.
const maxRawKey = 1024

// windowLen is the length of the window index that ends fixed-window keys.
const windowLen = 8

// appendKey appends the binary key of k under alg: the algorithm's tag,
// the region and the rule id each behind its length as a uvarint, the
// identity's kind, then the user's bytes or the address (4 bytes, or 16
// and any zone). Every field but the last is delimited, so the encoding is
// injective. Fixed-window keys are followed by the window index; see
// appendWindow.
func appendKey(dst []byte, region string, alg limit.Algorithm, k *limit.Key) []byte {
	start := len(dst)
	dst = append(dst, tags[alg])
	dst = binary.AppendUvarint(dst, uint64(len(region)))
	dst = append(dst, region...)
	dst = binary.AppendUvarint(dst, uint64(len(k.Rule)))
	dst = append(dst, k.Rule...)
	switch {
	case k.User != "":
		dst = append(dst, kindUser)
		dst = append(dst, k.User...)
	case k.Addr.Is4():
		dst = append(dst, kind4)
		dst, _ = k.Addr.AppendBinary(dst)
	case k.Addr.IsValid():
		dst = append(dst, kind6)
		dst, _ = k.Addr.AppendBinary(dst)
	default:
		dst = append(dst, kindNone)
	}
	if len(dst)-start <= maxRawKey {
		return dst
	}
	sum := sha256.Sum256(dst[start:])
	dst = append(dst[:start], tags[alg]-'a'+'A')
	return append(dst, sum[:]...)
}

// appendWindow appends a fixed window's index, so that each window is an
// item of its own.
func appendWindow(dst []byte, idx int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(idx))
}
