package memstore

import "testing"

// FuzzTable plays inserts, deletes, conditional deletes and resizes on a
// table and on a Go map, and checks that they hold the same entries. Hashes
// come from a small space whose home slots crowd the end of the table, so
// that clusters are long and wrap around.
func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 0, 3, 1, 2, 2, 0, 3, 5})
	f.Add([]byte{0, 15, 0, 31, 0, 47, 0, 14, 1, 15, 0, 63, 2, 1, 1, 47})
	f.Fuzz(func(t *testing.T, ops []byte) {
		tb := table{slots: make([]slot, minSlots)}
		model := map[uint64]int64{}
		for i := 0; i+1 < len(ops); i += 2 {
			// Hashes 1..64 with the low bits near the top of a 16-slot table.
			h := uint64(ops[i+1]&63) + 1
			h = h<<4 | (15 - h&3)
			switch ops[i] % 4 {
			case 0: // insert or update
				j, ok := tb.find(h)
				if ok {
					tb.slots[j].e.exp++
				} else {
					if tb.full() {
						tb.resize(2 * len(tb.slots))
						j, _ = tb.find(h)
					}
					tb.put(j, h, entry{exp: 1})
				}
				model[h]++
			case 1: // delete
				if j, ok := tb.find(h); ok {
					tb.deleteAt(j)
				}
				delete(model, h)
			case 2: // delete the entries with exp at most ops[i+1]%4
				lim := int64(ops[i+1] % 4)
				got := tb.deleteIf(func(e *entry) bool { return e.exp <= lim })
				want := 0
				for k, exp := range model {
					if exp <= lim {
						delete(model, k)
						want++
					}
				}
				if got != want {
					t.Fatalf("op %d: deleteIf deleted %d, want %d", i/2, got, want)
				}
			case 3: // resize, never below 3/4 full
				size := minSlots
				for tb.n+1 > size-size/4 {
					size *= 2
				}
				tb.resize(size)
			}
			if tb.n != len(model) {
				t.Fatalf("op %d: table holds %d, model %d", i/2, tb.n, len(model))
			}
			for k, exp := range model {
				j, ok := tb.find(k)
				if !ok || tb.slots[j].e.exp != exp {
					t.Fatalf("op %d: hash %#x: found %v, exp %d; want exp %d", i/2, k, ok, tb.slots[j].e.exp, exp)
				}
			}
			used := 0
			for _, s := range tb.slots {
				if s.h != 0 {
					used++
				}
			}
			if used != tb.n {
				t.Fatalf("op %d: %d slots used, n = %d", i/2, used, tb.n)
			}
		}
	})
}
