package columnar

import (
	"math/bits"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// recycler is the memory.Allocator an Encoder gives arrow-go's IPC writer.
// The writer allocates a buffer for each compressed column and frees it
// once the batch is written; the recycler keeps freed buffers, by
// power-of-two size class, for the next batch, so that a steady stream of
// batches of similar size allocates almost nothing. It keeps at most
// maxPerClass buffers per class. Like the Encoder, it is not safe for
// concurrent use (the writer compresses on one goroutine).
type recycler struct {
	free [48][][]byte
}

var _ memory.Allocator = (*recycler)(nil)

const maxPerClass = 64

func sizeClass(n int) int {
	if n <= 64 {
		return 6
	}
	return bits.Len(uint(n - 1))
}

// Allocate returns n zeroed bytes, as arrow-go's Go allocator does.
func (r *recycler) Allocate(n int) []byte {
	c := sizeClass(n)
	if c >= len(r.free) {
		return make([]byte, n)
	}
	if l := len(r.free[c]); l > 0 {
		b := r.free[c][l-1][:n]
		r.free[c] = r.free[c][:l-1]
		clear(b)
		return b
	}
	return make([]byte, n, 1<<c)
}

func (r *recycler) Reallocate(n int, b []byte) []byte {
	if n <= cap(b) {
		old := len(b)
		b = b[:n]
		if n > old {
			clear(b[old:])
		}
		return b
	}
	nb := r.Allocate(n)
	copy(nb, b)
	r.Free(b)
	return nb
}

func (r *recycler) Free(b []byte) {
	c := sizeClass(cap(b))
	if cap(b) != 1<<c || c >= len(r.free) || len(r.free[c]) >= maxPerClass {
		return // not one of ours, or enough kept
	}
	r.free[c] = append(r.free[c], b[:0])
}
