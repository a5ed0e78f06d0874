package columnar

import "github.com/ratewarden/ratewarden/decisions"

// PerBufferFrom is the number of events from which the decision log and
// the Kinesis sink compress a record with Arrow's body compression (Zstd,
// zstd per buffer) rather than in one zstd frame with the dictionary
// (ZstdDict): from about 3,000 generator events a record the two are the
// same size (37.9 and 38.0 B an event at 3,072; 36.7 and 37.3 at 4,096),
// the dictionary winning below (by 15 % at 1,024), and a record
// compressed per buffer lets a reader leave the columns it does not read
// compressed and decodes without the dictionary's slower zstd path: the
// aggregator decodes such records to columns 3 to 4 times as fast
// (BENCHMARKS.md). Both are CodecArrow, which every reader tells apart by
// their first bytes.
const PerBufferFrom = 3072

// CompressionFor returns the compression of a record of n events:
// ZstdDict below PerBufferFrom, Zstd from it.
func CompressionFor(n int) Compression {
	if n >= PerBufferFrom {
		return Zstd
	}
	return ZstdDict
}

// SizedEncoder encodes each batch with the compression CompressionFor
// its size chooses, keeping an Encoder of each (the per-buffer one made on
// first use): the decision log's and the Kinesis sink's records. The zero
// value is ready to use. It is not safe for concurrent use.
type SizedEncoder struct {
	small, large *Encoder
}

// Encode appends ds, encoded as Encoder.Encode does with
// CompressionFor(len(ds)), to dst.
func (e *SizedEncoder) Encode(dst []byte, ds []decisions.Decision) ([]byte, error) {
	enc := &e.small
	if CompressionFor(len(ds)) == Zstd {
		enc = &e.large
	}
	if *enc == nil {
		*enc = NewEncoder(Options{Compression: CompressionFor(len(ds))})
	}
	return (*enc).Encode(dst, ds)
}
