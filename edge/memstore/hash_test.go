package memstore

import (
	"math"
	"net/netip"
	"testing"

	"github.com/ratewarden/ratewarden/edge/limit"
)

// TestHashSpread hashes a million IPv4 clients in turn under one rule, and
// as many IPv6 /64 prefixes (the address an IPv6 client is counted under),
// the keys a client choosing addresses produces: no two may collide (the
// chance that a random 64-bit hash collides among them is about 1 in
// 10 million), and the shards (the top bits) and the home slots of a
// 4 Ki-slot table (the low bits) must each get an even share, within 6
// standard deviations.
func TestHashSpread(t *testing.T) {
	s := New(Options{SweepEvery: -1})
	const n = 1 << 20
	keys := map[string]func(i int) limit.Key{
		"ipv4": func(i int) limit.Key {
			return limit.Key{Rule: "anonymous:/api/search", Addr: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})}
		},
		"ipv6_64": func(i int) limit.Key {
			return limit.Key{Rule: "anonymous:/api/search", Addr: netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, byte(i >> 16), byte(i >> 8), byte(i)})}
		},
	}
	for name, key := range keys {
		seen := make(map[uint64]int, n)
		var shards [64]int
		var slots [1 << 12]int
		for i := range n {
			k := key(i)
			h := s.hash(&k, limit.FixedWindow)
			if j, ok := seen[h]; ok {
				t.Fatalf("%s: keys %d and %d hash alike (%#x)", name, j, i, h)
			}
			seen[h] = i
			shards[h>>58]++
			slots[h&(1<<12-1)]++
		}
		spread := func(what string, counts []int) {
			want := float64(n) / float64(len(counts))
			tol := 6 * math.Sqrt(want)
			for i, c := range counts {
				if d := float64(c) - want; d > tol || d < -tol {
					t.Errorf("%s: %s %d holds %d keys, want %.0f ± %.0f", name, what, i, c, want, tol)
					return
				}
			}
		}
		spread("shard", shards[:])
		spread("slot", slots[:])
	}
}
