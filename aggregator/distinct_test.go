package aggregator

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/axiomhq/hyperloglog"
)

// TestHyperLogLogSetOnly: a HyperLogLog's encoding (after Estimate, as
// appendHLL writes it) depends only on the set of hashes inserted, not on
// their order, their repeats, or compactions between inserts, whether the
// sketch ends sparse or dense and whether it turned dense before or after
// the repeats: what lets Distinct.UpdateColumns insert each distinct client
// of a batch once, and skip the hashes a sketch holds (knownHashes).
func TestHyperLogLogSetOnly(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		n      int
		sketch func() *hyperloglog.Sketch
	}{
		{50, hyperloglog.New14}, {3000, hyperloglog.New14}, {16_000, hyperloglog.New14},
		{17_000, hyperloglog.New14}, {40_000, hyperloglog.New14}, {5000, newRuleSketch},
	} {
		hs := make([]uint64, c.n)
		for i := range hs {
			hs[i] = r.Uint64()
		}
		once := c.sketch()
		for _, h := range hs {
			once.InsertHash(h)
		}
		want, err := appendHLL(nil, once)
		if err != nil {
			t.Fatal(err)
		}
		for round := range 3 {
			// Every hash one to four times, in a shuffled order, with
			// compactions at random points.
			var seq []uint64
			for _, h := range hs {
				for range 1 + r.IntN(4) {
					seq = append(seq, h)
				}
			}
			r.Shuffle(len(seq), func(i, j int) { seq[i], seq[j] = seq[j], seq[i] })
			// The same sequence straight into a sketch, and through
			// knownHashes, which inserts each hash once until it holds
			// knownMax.
			sk, filtered, k := c.sketch(), c.sketch(), &knownHashes{}
			for i, h := range seq {
				sk.InsertHash(h)
				k.insert(filtered, h)
				if r.IntN(len(seq)/3+1) == 0 || i == len(seq)/2 {
					sk.Estimate()
				}
			}
			if k.off != (c.n > knownMax) || (!k.off && k.n != c.n) {
				t.Errorf("%d hashes: the known set holds %d, off %v", c.n, k.n, k.off)
			}
			for name, sk := range map[string]*hyperloglog.Sketch{"repeats": sk, "known": filtered} {
				got, err := appendHLL(nil, sk)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%d hashes, round %d, %s: %d bytes differ from the %d of each hash once", c.n, round, name, len(got), len(want))
				}
			}
		}
	}
}
