package hashmix

import (
	"math/bits"
	"testing"
)

// TestFmix64: MurmurHash3's published finalizer values, and the
// avalanche it exists for: flipping one input bit flips about half the
// output bits.
func TestFmix64(t *testing.T) {
	if got := Fmix64(0); got != 0 {
		t.Errorf("Fmix64(0) = %#x, want 0", got)
	}
	if got := Fmix64(1); got != 0xb456bcfc34c2cb2c {
		t.Errorf("Fmix64(1) = %#x, want 0xb456bcfc34c2cb2c", got)
	}
	for i := range 64 {
		x := uint64(0x0123456789abcdef)
		flipped := bits.OnesCount64(Fmix64(x) ^ Fmix64(x^1<<i))
		if flipped < 16 || flipped > 48 {
			t.Errorf("flipping input bit %d flips %d output bits", i, flipped)
		}
	}
}
