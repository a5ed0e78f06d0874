package aggregator

import "math/bits"

// hashV4 is hashClient of the IPv4 address a (big-endian): MetroHash64,
// seed 1337, of the 17-byte identity key ('a' and the IPv4-mapped
// address), its steps for that length written out with the constant bytes
// folded in, so that making the batch's distinct clients needs no key
// built and no call. TestHashV4 holds it to hashClient.
func hashV4(a uint32) uint64 {
	const (
		k0   = 0xD6D018F5
		k1   = 0xA2AA033B
		k2   = 0x62992FC1
		k3   = 0x30BC5B29
		seed = 1337
	)
	hash := uint64(seed+k2) * k0
	// Bytes 0-7: 'a' and seven zeros; 8-15: three zeros, ff ff and the
	// address's first three bytes; 16: its last.
	v0 := hash + 'a'*k2
	v0 = bits.RotateLeft64(v0, -29) * k3
	w := uint64(0xffff)<<24 | uint64(a>>24)<<40 | uint64(a>>16&0xff)<<48 | uint64(a>>8&0xff)<<56
	v1 := hash + w*k2
	v1 = bits.RotateLeft64(v1, -29) * k3
	v0 ^= bits.RotateLeft64(v0*k0, -21) + v1
	v1 ^= bits.RotateLeft64(v1*k3, -21) + v0
	hash += v1
	hash += uint64(a&0xff) * k3
	hash ^= bits.RotateLeft64(hash, -37) * k1
	hash ^= bits.RotateLeft64(hash, -28)
	hash *= k0
	hash ^= bits.RotateLeft64(hash, -29)
	return hash
}
