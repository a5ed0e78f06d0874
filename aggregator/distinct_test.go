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
			// The set keeps sparse keys of precision-14 sketches only.
			keys := map[uint32]bool{}
			for _, h := range hs {
				keys[sparseKey(h)] = true
			}
			if p14 := precision14(c.sketch()); k.off != (!p14 || len(keys) > knownMax) || (!k.off && k.n != len(keys)) {
				t.Errorf("%d hashes: the known set holds %d of %d keys, off %v", c.n, k.n, len(keys), k.off)
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

// TestSparseKey: hashes that share a sparse key (sparseKey) make one
// precision-14 sketch whichever of them are inserted, so knownHashes may
// insert one of each key; hashes of different keys, ones that differ only
// in the rank below the top 25 bits among them, are all inserted. Sparse
// and dense sketches, straight and through knownHashes, encode alike.
func TestSparseKey(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{200, 5000, 30_000} {
		var hs []uint64
		for range n {
			top := r.Uint64() &^ (1<<39 - 1) // the top 25 bits
			if r.IntN(3) == 0 {
				top &^= (1<<11 - 1) << 39 // the 11 bits below the register index zero: the rank is in the key
			}
			for range 1 + r.IntN(3) { // hashes of one top, the rest of the bits differing
				hs = append(hs, top|r.Uint64()>>(25+r.IntN(39)))
			}
			if r.IntN(2) == 0 { // and of a top that differs in its last bit only
				hs = append(hs, top^1<<39|r.Uint64()>>25)
			}
		}
		straight, known, k := hyperloglog.New14(), hyperloglog.New14(), &knownHashes{}
		keys := map[uint32]bool{}
		ranks := 0
		for _, h := range hs {
			straight.InsertHash(h)
			k.insert(known, h)
			if key := sparseKey(h); key == 0 {
				t.Fatalf("hash %#x: key 0", h)
			} else if !keys[key] {
				keys[key] = true
				ranks += int(key & 1)
			}
		}
		if len(keys) == len(hs) || ranks == 0 {
			t.Fatalf("%d hashes, %d keys, %d with a rank: no shared keys or no ranks, the test covers nothing", len(hs), len(keys), ranks)
		}
		want, err := appendHLL(nil, straight)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := appendHLL(nil, known); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%d hashes of %d keys: through knownHashes %d bytes differ from the %d of each inserted (%v)", len(hs), len(keys), len(got), len(want), err)
		}
	}
}
