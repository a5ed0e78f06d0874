package aggregator

import (
	"cmp"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
)

// benchSortKeys sorts 83 keyed counters (keys of random IPv4 clients)
// with f, largest key first, once per iteration.
func benchSortKeys(b *testing.B, f func([]keyed)) {
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]keyed, 83)
	for i := range src {
		src[i] = keyed{key: uint64(r.Uint32())<<7 | uint64(i), pos: int32(i)}
	}
	a := make([]keyed, len(src))
	for b.Loop() {
		copy(a, src)
		f(a)
	}
	if !slices.IsSortedFunc(a, func(x, y keyed) int { return cmp.Compare(y.key, x.key) }) {
		b.Fatal("unsorted")
	}
}

// BenchmarkSortKeysPdq and BenchmarkSortKeysQuick compare the sort of the
// lowest counters (sortKeys) with slices.SortFunc's.
func BenchmarkSortKeysPdq(b *testing.B) {
	benchSortKeys(b, func(a []keyed) { slices.SortFunc(a, func(x, y keyed) int { return cmp.Compare(y.key, x.key) }) })
}

func BenchmarkSortKeysQuick(b *testing.B) {
	benchSortKeys(b, func(a []keyed) { sortKeys(a, 2*bits.Len(uint(len(a)))) })
}
