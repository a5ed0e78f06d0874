package aggregator

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func sortU64(a []uint64, depth int) {
	for len(a) > 16 {
		if depth--; depth < 0 {
			slices.Sort(a)
			return
		}
		m, h := len(a)/2, len(a)-1
		if a[m] < a[0] {
			a[m], a[0] = a[0], a[m]
		}
		if a[h] < a[0] {
			a[h], a[0] = a[0], a[h]
		}
		if a[m] < a[h] {
			a[m], a[h] = a[h], a[m]
		}
		p := a[h]
		i := 0
		for j := range h {
			x := a[j]
			a[j] = a[i]
			a[i] = x
			i += b2i(x < p)
		}
		a[i], a[h] = a[h], a[i]
		if i < h-i {
			sortU64(a[:i], depth)
			a = a[i+1:]
		} else {
			sortU64(a[i+1:], depth)
			a = a[:i]
		}
	}
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

func benchU(b *testing.B, f func([]uint64)) {
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]uint64, 83)
	for i := range src {
		src[i] = uint64(r.Uint32())<<7 | uint64(i)
	}
	a := make([]uint64, len(src))
	for b.Loop() {
		copy(a, src)
		f(a)
	}
	if !slices.IsSorted(a) {
		b.Fatal("unsorted")
	}
}

func BenchmarkSortU64Pdq(b *testing.B)   { benchU(b, func(a []uint64) { slices.Sort(a) }) }
func BenchmarkSortU64Quick(b *testing.B) { benchU(b, func(a []uint64) { sortU64(a, 14) }) }
