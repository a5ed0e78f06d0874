package columnar

import (
	_ "embed"
	"fmt"

	"github.com/klauspost/compress/zstd"
)

// A small batch's Arrow stream is mostly the same bytes every time: the
// schema, the dictionary batches' and the record batch's flatbuffers, the
// padding. A zstd dictionary holding such streams (the raw streams of
// generated batches of 200, 20, 4 and 1 events, in that order) lets a
// ZstdDict frame refer to them instead of carrying them; BENCHMARKS.md
// has the sizes.
//
// A dictionary is content the zstd frame names by its id, so a dictionary
// once released never changes: a reader must find the very bytes the
// writer used. A better one is added under a new id, the writer switches
// to it, and every reader keeps all of them. When columns are added and
// TestDictionaryTargets fails, release the next: `go test -run
// TestDictionaryFrozen -update-dict` writes zstd-dict-next.bin from the
// current schema; rename it, embed it under the next id, freeze its size
// and checksum in TestDictionaryFrozen, and make it writerDict.
//
// Dictionary 1 holds streams of the schema before the origin's fields
// (response status, upstream latency); dictionary 2 those of the schema
// with them, so that a record of one decision stays smaller than its JSON.
var (
	//go:embed zstd-dict-1.bin
	dict1 []byte
	//go:embed zstd-dict-2.bin
	dict2 []byte
)

// Dictionary ids are in the range the zstd format leaves to private use
// (32,768 to 2^31-1), tagged "rw".
const (
	dict1ID = 0x72770001
	dict2ID = 0x72770002
)

// writerDict is the dictionary ZstdDict frames are written with.
var writerDict = struct {
	id      uint32
	content []byte
}{dict2ID, dict2}

// decoderDicts registers every dictionary ever written with.
func decoderDicts() []zstd.DOption {
	return []zstd.DOption{zstd.WithDecoderDictRaw(dict1ID, dict1), zstd.WithDecoderDictRaw(dict2ID, dict2)}
}

// newDictEncoder returns a zstd encoder for ZstdDict frames.
func newDictEncoder() (*zstd.Encoder, error) {
	z, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderDictRaw(writerDict.id, writerDict.content))
	if err != nil {
		return nil, fmt.Errorf("zstd dictionary %#x: %w", writerDict.id, err)
	}
	return z, nil
}
