package aggregator

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// refTopK is Space-Saving written plainly: the reference TopK must match.
type refTopK struct {
	k  int
	hs []Hitter
}

func (r *refTopK) add(c Client, n uint64) {
	for i := range r.hs {
		if r.hs[i].Client == c {
			r.hs[i].Count += n
			return
		}
	}
	if len(r.hs) < r.k {
		r.hs = append(r.hs, Hitter{Client: c, Count: n})
		return
	}
	low := 0 // the first of the least count
	for i, h := range r.hs {
		if h.Count < r.hs[low].Count {
			low = i
		}
	}
	r.hs[low] = Hitter{Client: c, Count: r.hs[low].Count + n, Err: r.hs[low].Count}
}

func (r *refTopK) top() []Hitter {
	hs := slices.Clone(r.hs)
	sortHitters(hs)
	return hs
}

// hostileHits is a stream that keeps the least count's counters few: the
// list filled with counts all different, then each newcomer hit twice, so
// that it leaves the least count at once and the next eviction takes the
// counter of the next count.
func hostileHits(k, n int) []Client {
	var cs []Client
	for i := range k {
		for range i + 1 {
			cs = append(cs, Client{Addr: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})})
		}
	}
	for i := 0; len(cs) < n; i++ {
		c := Client{User: fmt.Sprintf("newcomer-%d", i)}
		cs = append(cs, c, c)
	}
	return cs
}

// TestTopKMatchesReference: TopK, by Add and by runs of a batch's client
// ids (addIDs), holds exactly what plain Space-Saving holds, with the same
// client evicted among equal counts (the first in the list's order), after every step of streams of the
// generator's clients (most hits evict), of a stream that keeps the least
// count's counters few (hostileHits), and of hits of any weight
// (including 0, which leaves a newcomer among the least).
func TestTopKMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ds := genClients(20_000)
	for _, k := range []int{1, 2, 3, 17, 100} {
		streams := map[string][]Client{"generator": ds, "hostile": hostileHits(k, 3*k*k/2+2000)}
		for name, cs := range streams {
			tk, ref := NewTopK(k), &refTopK{k: k}
			for i, c := range cs {
				n := uint64(1)
				if name == "generator" && i%13 == 0 {
					n = uint64(r.IntN(4)) // 0 to 3
				}
				tk.Add(c, n)
				ref.add(c, n)
				if i%97 == 0 || i == len(cs)-1 {
					if got, want := tk.Top(k), ref.top(); !slices.Equal(got, want) {
						t.Fatalf("k %d, %s, after %d hits:\n got %v\nwant %v", k, name, i+1, got, want)
					}
				}
			}
			// The same hits by runs of ids, in chunks as batches give them.
			tk, ref = NewTopK(k), &refTopK{k: k}
			for lo := 0; lo < len(cs); lo += 700 {
				chunk := cs[lo:min(lo+700, len(cs))]
				b, ids := idBatch(chunk)
				tk.addIDs(b, ids)
				for _, c := range chunk {
					ref.add(c, 1)
				}
				if got, want := tk.Top(k), ref.top(); !slices.Equal(got, want) {
					t.Fatalf("k %d, %s, by ids, after %d hits:\n got %v\nwant %v", k, name, lo+len(chunk), got, want)
				}
			}
		}
	}
}

// idBatch returns a Batch that holds the distinct clients of cs as
// identify would, and the id of each hit.
func idBatch(cs []Client) (*Batch, []int32) {
	b := &Batch{}
	seen := map[Client]int32{}
	ids := make([]int32, len(cs))
	for i, c := range cs {
		id, ok := seen[c]
		if !ok {
			id = int32(len(b.clients))
			seen[c] = id
			b.clients = append(b.clients, c)
			b.hashes = append(b.hashes, hashClient(c))
		}
		ids[i] = id
	}
	return b, ids
}

// genClients returns the clients of n generator events.
func genClients(n int) []Client {
	ds := decisiontest.NewGenerator(5, t0).Batch(n)
	cs := make([]Client, n)
	for i := range ds {
		cs[i] = ClientOf(&ds[i])
	}
	return cs
}

// BenchmarkTopKHostile is a top-K list of 100 or 2,000 fed hostileHits:
// each eviction's least count holds one or two counters, the case in
// which finding the next least count must not read all k.
func BenchmarkTopKHostile(b *testing.B) {
	for _, k := range []int{100, 2000} {
		b.Run(fmt.Sprint(k), func(b *testing.B) {
			cs := hostileHits(k, k*(k+1)/2+1<<20)
			fill := k * (k + 1) / 2
			t := NewTopK(k)
			for _, c := range cs[:fill] {
				t.Add(c, 1)
			}
			hs := make([]uint64, len(cs))
			for i, c := range cs {
				hs[i] = hashClient(c)
			}
			b.ResetTimer()
			i := fill
			for b.Loop() {
				if i == len(cs) {
					b.StopTimer()
					i = fill
					t = NewTopK(k)
					for _, c := range cs[:fill] {
						t.Add(c, 1)
					}
					b.StartTimer()
				}
				t.add(cs[i], hs[i], 1)
				i++
			}
		})
	}
}

// TestRollupRestoreEvicting: a window whose top-K lists evict on nearly
// every hit (lists of 3 clients, the generator's thousands) is saved and
// restored every 777 events, each time into a new Rollup, and emits
// exactly the bytes of one that never stopped: the snapshot keeps each
// list's own order, which chooses among equal counts. Restored from its
// lists in Top order instead, as an output holds them, the same window
// comes out different, so the order kept is what makes them equal.
func TestRollupRestoreEvicting(t *testing.T) {
	ds := decisiontest.NewGenerator(9, t0).Batch(6000)
	opts := Options{Window: time.Hour, TopK: 3}
	final := func(r *Rollup) []byte {
		var out []byte
		if err := r.Flush(true, func(o Output) error { out = append(out, encode(t, o.Partial)...); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(out) == 0 {
			t.Fatal("no output")
		}
		return out
	}
	one := NewRollup(opts)
	for i := range ds {
		one.Add(&ds[i], uint64(i))
	}
	want := final(one)
	run := func(topOrder bool) []byte {
		r := NewRollup(opts)
		for i := range ds {
			r.Add(&ds[i], uint64(i))
			if i%777 != 776 {
				continue
			}
			snap, err := r.AppendSnapshot(nil)
			if err != nil {
				t.Fatal(err)
			}
			r = NewRollup(opts)
			if err := r.Restore(snap); err != nil {
				t.Fatal(err)
			}
			if topOrder {
				for _, w := range r.open {
					p, err := DecodePartial(encode(t, w.p))
					if err != nil {
						t.Fatal(err)
					}
					w.p.Offenders = p.Offenders
				}
			}
		}
		return final(r)
	}
	if got := run(false); !bytes.Equal(got, want) {
		t.Fatalf("restored every 777 events: %d bytes differ from the %d of a rollup that never stopped", len(got), len(want))
	}
	if got := run(true); bytes.Equal(got, want) {
		t.Fatal("restored from lists in Top order, the window is the same: the test does not tell the orders apart")
	}
}
