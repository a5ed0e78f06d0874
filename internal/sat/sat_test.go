package sat

import (
	"math"
	"testing"
)

func TestAdd(t *testing.T) {
	for _, c := range []struct{ a, b, want uint64 }{
		{1, 2, 3},
		{math.MaxUint64 - 1, 1, math.MaxUint64},
		{math.MaxUint64 - 1, 2, math.MaxUint64},
		{math.MaxUint64, math.MaxUint64, math.MaxUint64},
		{0, math.MaxUint64, math.MaxUint64},
	} {
		if got := Add(c.a, c.b); got != c.want {
			t.Errorf("Add(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
