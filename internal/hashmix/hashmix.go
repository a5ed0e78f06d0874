// Package hashmix mixes the bits of 64-bit hashes.
package hashmix

// Fmix64 is MurmurHash3's 64-bit finalizer: a bijection whose every
// output bit depends on every input bit, so that the low bits of a weak
// or structured hash (neighbouring addresses, FNV over decimal strings,
// which ends on their last bytes) pick slots or residues evenly.
func Fmix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	return h ^ h>>33
}
