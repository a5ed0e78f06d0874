package aggregator

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/ratewarden/ratewarden/internal/atomicfile"
)

// A partition's state file, <state dir>/<partition>.state, holds the
// Rollup's snapshot and the outputs of the flush it follows that are not
// yet known to be delivered:
//
//	magic    "RWS"
//	version  u8 1
//	snapshot uvarint length, bytes (Rollup.AppendSnapshot)
//	pending  uvarint count, then per output:
//	         u8 correction, uvarint from, uvarint to, uvarint length, partial bytes
//	crc      u32 little-endian CRC-32C of everything before it
//
// It is written before the outputs are delivered and again, without them,
// once they are: a crash in between delivers them again on restart, with
// the same bytes and the same keys.

const (
	stateMagic   = "RWS"
	stateVersion = 1
	stateExt     = ".state"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type state struct {
	snapshot []byte
	pending  []Output
}

func statePath(dir, partition string) string { return filepath.Join(dir, partition+stateExt) }

func writeState(dir, partition string, st state) error {
	b := append([]byte(stateMagic), stateVersion)
	b = appendBytes(b, st.snapshot)
	b = appendUvarint(b, uint64(len(st.pending)))
	for _, o := range st.pending {
		c := byte(0)
		if o.Correction {
			c = 1
		}
		b = append(b, c)
		b = appendUvarint(b, o.From)
		b = appendUvarint(b, o.To)
		p, err := o.Partial.AppendBinary(nil)
		if err != nil {
			return fmt.Errorf("write state: %w", err)
		}
		b = appendBytes(b, p)
	}
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return atomicfile.Write(statePath(dir, partition), b, 0o644)
}

// readState reads a partition's state; ok is false when there is none.
func readState(dir, partition string) (st state, ok bool, err error) {
	path := statePath(dir, partition)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("read state: %w", err)
	}
	fail := func(why string) (state, bool, error) {
		return state{}, false, fmt.Errorf("read state %s: %s; move it away to start over from the beginning of the source", path, why)
	}
	if len(b) < len(stateMagic)+1+4 || string(b[:len(stateMagic)]) != stateMagic {
		return fail("not a state file")
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return fail("checksum mismatch")
	}
	if v := b[len(stateMagic)]; v != stateVersion {
		return fail(fmt.Sprintf("version %d, want %d", v, stateVersion))
	}
	r := &reader{b: body[len(stateMagic)+1:]}
	st.snapshot = r.bytes()
	n := r.count(4)
	for range n {
		o := Output{Correction: r.byte() == 1, From: r.uvarint(), To: r.uvarint()}
		pb := r.bytes()
		if r.err != nil {
			break
		}
		if o.Partial, err = DecodePartial(pb); err != nil {
			return fail(err.Error())
		}
		st.pending = append(st.pending, o)
	}
	if r.err != nil {
		return fail(r.err.Error())
	}
	return st, true, nil
}
