package columnar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The checksum: the schema's metadata holds KeyChecksum with a value of
// eight characters. The writer writes eight '#', computes the CRC-32C of
// the whole stream and writes it over them; the reader recomputes it with
// the eight characters replaced by '#' again. The value is found as a
// flatbuffer string of length 8 (little-endian length, then the
// characters and a NUL) inside the schema message, so that it can be
// checked before any of the stream is parsed.
const checksumPlaceholder = "########"

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// schemaMessage returns the length of the first message of an IPC stream
// (continuation marker, length, flatbuffer; a schema has no body).
func schemaMessage(stream []byte) (int, error) {
	if len(stream) < 8 || binary.LittleEndian.Uint32(stream) != 0xFFFFFFFF {
		return 0, errors.New("not an Arrow IPC stream: no continuation marker at the start")
	}
	n := int64(binary.LittleEndian.Uint32(stream[4:]))
	if n <= 0 || 8+n > int64(len(stream)) {
		return 0, fmt.Errorf("truncated: a schema message of %d bytes in a stream of %d", n, len(stream))
	}
	return int(8 + n), nil
}

// checksumAt returns the offset in stream of the eight characters of
// the checksum (or of its placeholder), or -1 when the schema message
// holds no string of eight checksum characters.
func checksumAt(stream []byte, placeholder bool) (int, error) {
	end, err := schemaMessage(stream)
	if err != nil {
		return 0, err
	}
	meta := stream[:end]
	at := -1
	for i := 8; i+13 <= len(meta); i++ {
		if meta[i] != 8 || meta[i+1] != 0 || meta[i+2] != 0 || meta[i+3] != 0 || meta[i+12] != 0 {
			continue
		}
		v := meta[i+4 : i+12]
		if (placeholder && string(v) == checksumPlaceholder) || (!placeholder && isUpperHex(v)) {
			if at >= 0 {
				return 0, errors.New("two checksums in the schema")
			}
			at = i + 4
		}
	}
	return at, nil
}

func isUpperHex(b []byte) bool {
	for _, c := range b {
		if (c < '0' || c > '9') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

func sealChecksum(stream []byte) error {
	at, err := checksumAt(stream, true)
	if err != nil || at < 0 {
		return fmt.Errorf("encode decisions: checksum placeholder not found in the schema (%v)", err)
	}
	sum := crc32.Checksum(stream, crcTable)
	const digits = "0123456789ABCDEF"
	for i := range 8 {
		stream[at+i] = digits[sum>>(28-4*i)&0xf]
	}
	return nil
}

// verifyChecksum checks the stream's checksum. found is false when the
// schema holds none (a batch from another writer).
func verifyChecksum(stream []byte) (found bool, err error) {
	at, err := checksumAt(stream, false)
	if err != nil || at < 0 {
		return false, err
	}
	var want uint32
	for _, c := range stream[at : at+8] {
		want <<= 4
		if c <= '9' {
			want |= uint32(c - '0')
		} else {
			want |= uint32(c - 'A' + 10)
		}
	}
	sum := crc32.Update(0, crcTable, stream[:at])
	sum = crc32.Update(sum, crcTable, []byte(checksumPlaceholder))
	sum = crc32.Update(sum, crcTable, stream[at+8:])
	if sum != want {
		return true, fmt.Errorf("checksum mismatch: the batch says %08X, its bytes sum to %08X: the batch is corrupt or truncated", want, sum)
	}
	return true, nil
}
