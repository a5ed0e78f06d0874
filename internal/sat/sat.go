// Package sat adds counts that saturate: sums of counts read back from
// stored aggregates (a window's dropped decisions, over many windows and
// partials) stop at the largest uint64 rather than wrap a huge number
// into a small one.
package sat

import "math"

// Add returns a + b, or math.MaxUint64 where that would wrap.
func Add(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}
