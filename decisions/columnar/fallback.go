package columnar

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/ratewarden/ratewarden/decisions"
)

// decodeSlow decodes data with arrow-go's general IPC reader: for the
// valid streams the fast reader leaves alone, and as the reference the
// tests hold the fast reader to.
func (d *Decoder) decodeSlow(data []byte, dst []decisions.Decision, sealed bool) (out []decisions.Decision, version int, err error) {
	n0 := len(dst)
	defer func() {
		if p := recover(); p != nil { // arrow-go panics on some corrupt input
			out, version, err = dst[:n0], 0, fmt.Errorf("arrow/ipc: %v", p)
		}
	}()
	if err := validateStream(data); err != nil {
		return dst, 0, err
	}
	br := bytes.NewReader(data)
	r, err := ipc.NewReader(br, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return dst, 0, fmt.Errorf("not an Arrow IPC stream: %w", err)
	}
	defer r.Release()
	schema := r.Schema()
	version, err = checkSchema(schema.Metadata(), sealed)
	if err != nil {
		return dst, 0, err
	}
	fieldCol := make([]int, schema.NumFields())
	seen := [numCols]bool{}
	for i, f := range schema.Fields() {
		fieldCol[i] = -1
		c, ok := columnIndex[f.Name]
		if !ok {
			continue
		}
		if seen[c] {
			return dst, 0, fmt.Errorf("column %s appears twice", f.Name)
		}
		if err := checkType(c, f.Type); err != nil {
			return dst, 0, err
		}
		seen[c], fieldCol[i] = true, c
	}
	batches := 0
	for r.Next() {
		batches++
		rec := r.RecordBatch()
		if err := d.countRows(rec.NumRows()); err != nil {
			return dst, 0, fmt.Errorf("record batch %d: %w", batches, err)
		}
		n := int(rec.NumRows())
		for i, c := range fieldCol {
			if c < 0 {
				continue
			}
			raw, dict, err := rawOf(rec.Column(i).Data())
			if err != nil {
				return dst, 0, fmt.Errorf("record batch %d: column %s: %w", batches, columns[c].name, err)
			}
			if err := d.setView(c, schema.Field(i).Type, raw, dict, n); err != nil {
				return dst, 0, fmt.Errorf("record batch %d: %w", batches, err)
			}
		}
		var base int64
		if rm, ok := rec.(arrow.RecordBatchWithMetadata); ok {
			base, err = parseTimeBase(rm.Metadata().GetValue(KeyTimeBase))
		} else {
			base, err = parseTimeBase("", false)
		}
		if err != nil {
			return dst, 0, fmt.Errorf("record batch %d: %w", batches, err)
		}
		if dst, err = d.appendRows(dst, n, version, base); err != nil {
			return dst, 0, fmt.Errorf("record batch %d: %w", batches, err)
		}
	}
	if err := r.Err(); err != nil {
		return dst, 0, fmt.Errorf("record batch %d: %w", batches+1, err)
	}
	if batches == 0 {
		return dst, 0, errors.New("the stream holds no record batch")
	}
	if br.Len() > 0 {
		return dst, 0, fmt.Errorf("%d bytes after the end of the stream", br.Len())
	}
	return dst, version, nil
}

// rawOf returns the buffers of an array read by arrow-go, and those of
// its dictionary.
func rawOf(data arrow.ArrayData) (rawCol, *rawCol, error) {
	if data.Offset() != 0 {
		return rawCol{}, nil, fmt.Errorf("array offset %d", data.Offset())
	}
	raw := rawCol{n: data.Len(), nulls: data.NullN()}
	bufs := data.Buffers()
	for k, p := range []*[]byte{&raw.validity, &raw.values, &raw.data} {
		if k < len(bufs) && bufs[k] != nil {
			*p = bufs[k].Bytes()
		}
	}
	dd := data.Dictionary()
	if dd == nil {
		return raw, nil, nil
	}
	if ad, ok := dd.(*array.Data); ok && ad == nil { // a nil *Data in the interface
		return raw, nil, nil
	}
	dict, _, err := rawOf(dd)
	if err != nil {
		return raw, nil, fmt.Errorf("dictionary: %w", err)
	}
	return raw, &dict, nil
}
