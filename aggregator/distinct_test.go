package aggregator

import (
	"bytes"
	"encoding/binary"
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
	t.Parallel()
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
			// And through knownHashes deferred (add, then flush after
			// runs of random lengths, some below flushDirect), as the
			// columnar path inserts, into precision-14 sketches.
			sk, filtered, k := c.sketch(), c.sketch(), &knownHashes{}
			deferred, kd := c.sketch(), &knownHashes{}
			p14 := c.n != 5000
			for i, h := range seq {
				sk.InsertHash(h)
				k.insert(filtered, h)
				if p14 {
					kd.add(deferred, h)
					if r.IntN(1+r.IntN(3000)) == 0 {
						kd.flush(deferred)
					}
				}
				if r.IntN(len(seq)/3+1) == 0 || i == len(seq)/2 {
					sk.Estimate()
				}
			}
			kd.flush(deferred)
			if k.off != (c.n > knownMax) || (!k.off && k.n != c.n) {
				t.Errorf("%d hashes: the known set holds %d, off %v", c.n, k.n, k.off)
			}
			sketches := map[string]*hyperloglog.Sketch{"repeats": sk, "known": filtered}
			if p14 {
				sketches["deferred"] = deferred
			}
			for name, sk := range sketches {
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

// TestSparseKey holds sparseKey to the key the library's sparse sketch
// keeps for a hash (read from the encoding of a sketch of that hash
// alone), for random hashes and for hashes whose bits between the two
// precisions are zero (the key then carries a count of zeros).
func TestSparseKey(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 20_000 {
		x := r.Uint64()
		switch i % 4 {
		case 1:
			x &^= (1<<11 - 1) << 39 // the bits between precisions 14 and 25
		case 2:
			x &^= (1<<11-1)<<39 | (1<<39 - 1) // and every bit after them
		case 3:
			x &^= (1<<11-1)<<39 | (1<<uint(r.IntN(39)) - 1)
		}
		sk := hyperloglog.New14()
		sk.InsertHash(x)
		b, err := sk.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if n := binary.BigEndian.Uint32(b[4:8]); n != 1 {
			t.Fatalf("the sketch of one hash holds %d keys not yet merged", n)
		}
		if want, got := binary.BigEndian.Uint32(b[8:12]), sparseKey(x); got != want {
			t.Fatalf("sparseKey(%#016x) = %#08x, the library keeps %#08x", x, got, want)
		}
	}
}

// TestSettle holds the canonical form of a precision-14 sketch (settle,
// sparseMax): of sparseMax keys it encodes sparse; of more, dense, to the
// bytes of a sketch that was dense from the start and took the same
// hashes, whether it took them one by one, as two halves merged or
// deferred as the columnar path inserts them; and Estimate gives the
// estimate its encoding gives once decoded. Many hashes of a few keys (an
// attacker's users chosen to collide) keep it sparse.
func TestSettle(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		n, keys int
	}{{1, 1}, {sparseMax - 1, sparseMax - 1}, {sparseMax, sparseMax}, {sparseMax + 1, sparseMax + 1}, {3 * sparseMax, 3 * sparseMax}, {11_000, 11_000}, {3 * sparseMax, 100}} {
		// Hashes of c.keys distinct sparse keys: distinct top 25 bits,
		// the 11 below the top 14 not all zero, so that each is its key.
		tops := map[uint64]bool{}
		for len(tops) < c.keys {
			if top := r.Uint64() >> 39; top&(1<<11-1) != 0 {
				tops[top] = true
			}
		}
		var topList []uint64
		for top := range tops {
			topList = append(topList, top)
		}
		hs := make([]uint64, c.n)
		for i := range hs {
			hs[i] = topList[i%len(topList)]<<39 | r.Uint64()>>25
		}
		one, dense, a, b := hyperloglog.New14(), hyperloglog.NewNoSparse(), hyperloglog.New14(), hyperloglog.New14()
		deferred, k := hyperloglog.New14(), &knownHashes{}
		for i, h := range hs {
			one.InsertHash(h)
			dense.InsertHash(h)
			if i%2 == 0 {
				a.InsertHash(h)
			} else {
				b.InsertHash(h)
			}
			k.add(deferred, h)
			if i%700 == 699 {
				k.flush(deferred)
			}
		}
		k.flush(deferred)
		if err := a.Merge(b); err != nil {
			t.Fatal(err)
		}
		wantDense := c.keys > sparseMax
		if k.off != wantDense {
			t.Errorf("%d hashes of %d keys: the columnar path's set dropped %v, want %v", c.n, c.keys, k.off, wantDense)
		}
		var want []byte
		for name, sk := range map[string]*hyperloglog.Sketch{"one by one": one, "halves merged": a, "deferred": deferred} {
			est := Estimate(sk.Clone())
			enc, err := appendHLL(nil, sk)
			if err != nil {
				t.Fatal(err)
			}
			n, w := binary.Uvarint(enc)
			if w <= 0 || int(n) != len(enc)-w {
				t.Fatalf("frame % x", enc[:4])
			}
			body := enc[w:]
			if sparse := body[3] == 1; sparse == wantDense {
				t.Errorf("%d hashes of %d keys, %s: encoded sparse %v", c.n, c.keys, name, sparse)
			}
			var decoded hyperloglog.Sketch
			if err := decoded.UnmarshalBinary(body); err != nil {
				t.Fatal(err)
			}
			if d := decoded.Estimate(); est != d {
				t.Errorf("%d hashes of %d keys, %s: Estimate %d, its encoding decoded %d", c.n, c.keys, name, est, d)
			}
			if want == nil {
				want = enc
			} else if !bytes.Equal(enc, want) {
				t.Errorf("%d hashes of %d keys, %s: encodes to other bytes", c.n, c.keys, name)
			}
		}
		if wantDense {
			if d, err := appendHLL(nil, dense); err != nil || !bytes.Equal(d, want) {
				t.Errorf("%d hashes of %d keys: not the bytes of a sketch dense from the start (%v)", c.n, c.keys, err)
			}
		}
	}
}
