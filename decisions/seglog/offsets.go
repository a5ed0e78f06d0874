package seglog

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
)

// Consumer offsets live in <dir>/offsets/<consumer>.off, 18 bytes:
//
//	magic    [5]byte "RWOFF"
//	version  u8      1
//	offset   u64     the next offset the consumer will read
//	crc      u32     CRC-32C of the 14 bytes before it
const (
	offsetsDir    = "offsets"
	offSuffix     = ".off"
	offLen        = 18
	offVersion    = 1
	maxConsumer   = 128
	consumerChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
)

var offMagic = [5]byte{'R', 'W', 'O', 'F', 'F'}

func checkConsumer(name string) error {
	if name == "" || len(name) > maxConsumer || name[0] == '.' {
		return fmt.Errorf("consumer %q: want 1 to %d of [A-Za-z0-9._-], not starting with a dot", name, maxConsumer)
	}
	for i := range len(name) {
		if strings.IndexByte(consumerChars, name[i]) < 0 {
			return fmt.Errorf("consumer %q: want 1 to %d of [A-Za-z0-9._-], not starting with a dot", name, maxConsumer)
		}
	}
	return nil
}

func offsetPath(dir, consumer string) string {
	return filepath.Join(dir, offsetsDir, consumer+offSuffix)
}

// CommitOffset stores, durably, that consumer will next read offset: it
// writes a temporary file, syncs it, renames it into place and syncs the
// directory. It first syncs the log up to offset, so that a consumer's
// offset never runs ahead of what a machine crash keeps (the log would
// otherwise reuse offsets the consumer has passed). Consumer names are 1 to
// 128 of [A-Za-z0-9._-], not starting with a dot.
func (l *Log) CommitOffset(consumer string, offset uint64) error {
	if err := checkConsumer(consumer); err != nil {
		return fmt.Errorf("commit offset: %w", err)
	}
	if next := l.NextOffset(); offset > next {
		return fmt.Errorf("commit offset: consumer %s: offset %d: %w %d", consumer, offset, ErrPastEnd, next)
	}
	if err := l.syncTo(offset); err != nil {
		return fmt.Errorf("commit offset: %w", err)
	}
	l.offMu.Lock()
	defer l.offMu.Unlock()
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return fmt.Errorf("commit offset: log %w", ErrClosed)
	}
	return writeOffset(l.dir, consumer, offset)
}

func writeOffset(dir, consumer string, offset uint64) error {
	b := make([]byte, 0, offLen)
	b = append(b, offMagic[:]...)
	b = append(b, offVersion)
	b = le.AppendUint64(b, offset)
	b = le.AppendUint32(b, crc32.Checksum(b, castagnoli))
	odir := filepath.Join(dir, offsetsDir)
	f, err := os.CreateTemp(odir, consumer+".*"+tmpSuffix)
	if err != nil {
		return fmt.Errorf("commit offset: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), offsetPath(dir, consumer))
	}
	if err == nil {
		err = syncDir(odir)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("commit offset: consumer %s: %w", consumer, err)
	}
	return nil
}

// Offset returns the offset consumer committed last, and false if it has
// committed none.
func (l *Log) Offset(consumer string) (uint64, bool, error) {
	return ReadOffset(l.dir, consumer)
}

// ReadOffset returns the offset consumer committed last in the log in dir,
// and false if it has committed none. It does not need the writer.
func ReadOffset(dir, consumer string) (uint64, bool, error) {
	if err := checkConsumer(consumer); err != nil {
		return 0, false, fmt.Errorf("read offset: %w", err)
	}
	path := offsetPath(dir, consumer)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("read offset: %w", err)
	case len(b) >= 6 && bytes.Equal(b[:5], offMagic[:]) && b[5] > offVersion:
		return 0, false, fmt.Errorf("read offset %s: version %d: %w", path, b[5], ErrVersion)
	case len(b) != offLen || !bytes.Equal(b[:5], offMagic[:]) || b[5] != offVersion ||
		crc32.Checksum(b[:14], castagnoli) != le.Uint32(b[14:]):
		return 0, false, fmt.Errorf("read offset %s: %w", path, ErrCorrupt)
	}
	return le.Uint64(b[6:14]), true, nil
}

// CommitReaderOffset stores, durably, that consumer will next read offset in
// the log in dir, without the writer: for a consumer in another process,
// which reads with OpenReader. Unlike CommitOffset it cannot sync the log
// first, so a machine crash that loses the log's unsynced tail can leave the
// offset past the log's end. Retention reports what it removes that the
// consumer has not read (Log.Retain).
func CommitReaderOffset(dir, consumer string, offset uint64) error {
	if err := checkConsumer(consumer); err != nil {
		return fmt.Errorf("commit offset: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, offsetsDir), 0o755); err != nil {
		return fmt.Errorf("commit offset: %w", err)
	}
	return writeOffset(dir, consumer, offset)
}

// consumerOffset is a consumer's committed offset.
type consumerOffset struct {
	name   string
	offset uint64
	ok     bool
}

// slowestConsumer returns the consumer with the lowest committed offset;
// ok is false when none has committed one. Offset files that cannot be
// read are passed over: retention never waits on them.
func (l *Log) slowestConsumer() consumerOffset {
	ents, err := os.ReadDir(filepath.Join(l.dir, offsetsDir))
	if err != nil {
		return consumerOffset{}
	}
	var c consumerOffset
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), offSuffix)
		if !ok || checkConsumer(name) != nil {
			continue
		}
		off, ok, err := ReadOffset(l.dir, name)
		if err != nil || !ok || c.ok && off >= c.offset {
			continue
		}
		c = consumerOffset{name: name, offset: off, ok: true}
	}
	return c
}
