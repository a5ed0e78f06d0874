package aggregator

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestHashV4: hashV4 is hashClient (the HyperLogLog library's hash of the
// identity key) for every IPv4 address tried: the edges of each byte and
// a million random ones.
func TestHashV4(t *testing.T) {
	f := func(a uint32) {
		c := Client{Addr: netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})}
		if got, want := hashV4(a), hashClient(c); got != want {
			t.Fatalf("%v: %x, want %x", c.Addr, got, want)
		}
	}
	for _, a := range []uint32{0, 1, 0xff, 0x100, 0xffff, 0x10000, 0xffffff, 0x1000000, 0x7f000001, 0xc0a80001, 0xffffffff} {
		f(a)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		f(r.Uint32())
	}
}
