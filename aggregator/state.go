package aggregator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/ratewarden/ratewarden/internal/atomicfile"
	"github.com/ratewarden/ratewarden/internal/dirlock"
)

// State is what a partition keeps between runs: the Rollup's snapshot,
// the outputs of the flush it follows that are not yet known to be
// delivered, and the source's position where the snapshot's Next does not
// say it all (a Kinesis shard's checkpoint and last batch; nothing for the
// log).
//
// It is saved before the outputs are delivered and again, without them,
// once they are: a crash in between delivers them again on restart, with
// the same bytes and the same keys.
type State struct {
	Snapshot []byte   // Rollup.AppendSnapshot
	Pending  []Output // outputs to deliver (again) on resume
	Cursor   []byte   // the source's position, opaque to the store
}

// StateStore keeps each partition's State. Save replaces the partition's
// state whole: a Load after it returns what was saved, or after a crash
// during it, the state before. Save does not keep st's bytes once it
// returns (the caller writes the next snapshot over them).
// Implementations are safe for concurrent use for different partitions.
type StateStore interface {
	// Load returns the partition's state; ok is false when it has none.
	Load(ctx context.Context, partition string) (st State, ok bool, err error)
	Save(ctx context.Context, partition string, st State) error
}

// stateNamer is a StateStore that can say where it keeps a partition's
// state, so that a state it loaded that cannot be restored (a snapshot of
// another window length, a cursor that does not decode) is reported with
// the file or item an operator must look at.
type stateNamer interface {
	// stateError returns err, an error of the partition's state, naming
	// where that state is kept.
	stateError(partition string, err error) error
}

// StateDir keeps each partition's state in a file of a directory,
// <Dir>/<partition>.state, replaced whole (written aside, synced,
// renamed). Processes on one machine may share it when each saves
// partitions of its own (Kinesis aggregators, a shard each); a process
// that owns the directory (the log's aggregator, the alerts) takes
// LockStateDir first. It is safe for concurrent use.
//
// As StateTable's, a save is conditioned on the file this StateDir last
// read or wrote for the partition: two aggregators that overlap on a
// shard while its lease changes hands do not overwrite each other's
// state; the second to save gets ErrStateMoved (and opens the shard
// again). The check and the rename are made under an flock of
// <Dir>/.save.lock, which stays.
type StateDir struct {
	Dir string

	mu   sync.Mutex
	seen map[string]os.FileInfo // by partition: its state file as last read or written; nil, none
}

// saveLock is the file whose flock StateDir.Save holds while it checks
// and replaces a state file.
const saveLock = ".save.lock"

// LockStateDir keeps the state directory dir to this process until the
// returned lock is closed (or the process ends, however abruptly): two
// processes saving the same partition, or the same alerts state,
// overwrite each other's positions and open windows, and each delivers
// outputs the other's state does not know of. A directory another process
// holds is refused with an error wrapping dirlock.ErrLocked that names it
// and that process's pid. One lock per process: the aggregator and the
// alerts of one process share it. Kinesis aggregators, which share a
// directory a shard each, take none.
func LockStateDir(dir string) (io.Closer, error) {
	l, err := dirlock.Acquire(dir)
	if errors.Is(err, dirlock.ErrLocked) {
		return nil, fmt.Errorf("state directory: %w; one process per state directory", err)
	}
	if err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	return l, nil
}

var (
	_ StateStore = (*StateDir)(nil)
	_ stateNamer = (*StateDir)(nil)
)

// A state file (or item) holds, after the magic and version:
//
//	magic    "RWS"
//	version  u8 2 (1: without the cursor)
//	snapshot uvarint length, bytes (Rollup.AppendSnapshot)
//	pending  uvarint count, then per output:
//	         u8 correction, uvarint from, uvarint to, uvarint length, partial bytes
//	cursor   uvarint length, bytes (version 2)
//	crc      u32 little-endian CRC-32C of everything before it
const (
	stateMagic   = "RWS"
	stateVersion = 2
	stateExt     = ".state"
)

func (s *StateDir) path(partition string) string { return filepath.Join(s.Dir, partition+stateExt) }

// Save writes the partition's state file.
func (s *StateDir) Save(ctx context.Context, partition string, st State) error {
	bp, _ := stateBufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	defer stateBufs.Put(bp)
	b, err := appendState(stateBuf(*bp, st), st)
	*bp = b[:0]
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	release, err := dirlock.Wait(ctx, filepath.Join(s.Dir, saveLock))
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	defer release()
	path := s.path(partition)
	if moved, err := s.moved(ctx, partition); err != nil {
		return fmt.Errorf("write state: %w", err)
	} else if moved {
		return fmt.Errorf("save state %s: %w", path, ErrStateMoved)
	}
	if err := atomicfile.Write(path, b, 0o644); err != nil {
		return err
	}
	now, err := statState(path)
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	s.setSeen(partition, now)
	return nil
}

// moved reports whether another store saved the partition since this one
// last read or wrote it (what Save checks), from the file's metadata (see
// stateWatcher).
func (s *StateDir) moved(_ context.Context, partition string) (bool, error) {
	now, err := statState(s.path(partition))
	if err != nil {
		return false, err
	}
	return !sameState(s.seenOf(partition), now), nil
}

// statState returns the state file at path's FileInfo, nil if there is
// none.
func statState(path string) (os.FileInfo, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return fi, err
}

// sameState reports whether a and b (nil: no file) are one version of a
// state file: each save makes a new file and renames it into place, so
// another process's save changes the file, and its time and size.
func sameState(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

func (s *StateDir) seenOf(partition string) os.FileInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[partition]
}

func (s *StateDir) setSeen(partition string, fi os.FileInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]os.FileInfo{}
	}
	s.seen[partition] = fi
}

// removeLeftovers removes the temporary files that saves of the
// partition's state, cut short by a crash, left (see leftoverRemover).
func (s *StateDir) removeLeftovers(partition string, _ []Output) (int, error) {
	n, err := atomicfile.RemoveTemps(s.path(partition))
	if err != nil {
		err = fmt.Errorf("state: %w", err)
	}
	return n, err
}

// stateBufs holds the buffers StateDir.Save encodes states in (*[]byte):
// a state holds every open window's partial, and it is saved at every
// batch, so its buffer is reused rather than made at each save.
var stateBufs sync.Pool

// Load reads the partition's state file, and remembers which file it
// read (see StateDir).
func (s *StateDir) Load(_ context.Context, partition string) (State, bool, error) {
	path := s.path(partition)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		s.setSeen(partition, nil)
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("read state: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	var b []byte
	if err == nil {
		b, err = io.ReadAll(f)
	}
	if err != nil {
		return State{}, false, fmt.Errorf("read state: %w", err)
	}
	s.setSeen(partition, fi)
	st, err := decodeState(b)
	if err != nil {
		return State{}, false, s.stateError(partition, err)
	}
	return st, true, nil
}

// stateError says that err is an error of the partition's state file: it
// names the file, which an operator inspects or moves aside.
func (s *StateDir) stateError(partition string, err error) error {
	return fmt.Errorf("state %s: %w; move it away to start over from the beginning of the source", s.path(partition), err)
}

// stateBuf returns b emptied, grown if needed to hold st's encoding but
// for its pending partials, so that appending the snapshot does not grow
// it.
func stateBuf(b []byte, st State) []byte {
	return slices.Grow(b[:0], len(stateMagic)+1+len(st.Snapshot)+len(st.Cursor)+3*binary.MaxVarintLen64+4+len(st.Pending)*64)
}

// appendState appends st's encoding.
func appendState(b []byte, st State) ([]byte, error) {
	start := len(b)
	b = append(b, stateMagic...)
	b = append(b, stateVersion)
	b = appendBytes(b, st.Snapshot)
	b = appendUvarint(b, uint64(len(st.Pending)))
	for _, o := range st.Pending {
		c := byte(0)
		if o.Correction {
			c = 1
		}
		b = append(b, c)
		b = appendUvarint(b, o.From)
		b = appendUvarint(b, o.To)
		var err error
		if b, err = appendPartial(b, o.Partial, false); err != nil { // closed: no more hits
			return b, fmt.Errorf("write state: %w", err)
		}
	}
	b = appendBytes(b, st.Cursor)
	return appendSum(b, start), nil
}

// decodeState decodes a state; the error says why it is not one.
func decodeState(b []byte) (st State, err error) {
	if len(b) < len(stateMagic)+1+sumLen || string(b[:len(stateMagic)]) != stateMagic {
		return st, errors.New("not a state file")
	}
	body, ok := checkSum(b)
	if !ok {
		return st, errors.New("checksum mismatch")
	}
	v := b[len(stateMagic)]
	if v != 1 && v != stateVersion {
		return st, fmt.Errorf("version %d, want 1 or %d", v, stateVersion)
	}
	r := &reader{b: body[len(stateMagic)+1:]}
	st.Snapshot = r.bytes()
	n := r.count(4)
	for range n {
		c := r.byte()
		if c > 1 {
			r.fail(fmt.Errorf("correction byte %d, want 0 or 1", c))
		}
		o := Output{Correction: c == 1, From: r.uvarint(), To: r.uvarint()}
		pb := r.bytes()
		if r.err != nil {
			break
		}
		if o.Partial, err = DecodePartial(pb); err != nil {
			return State{}, err
		}
		st.Pending = append(st.Pending, o)
	}
	if v >= 2 {
		st.Cursor = r.bytes()
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail(fmt.Errorf("%d bytes after the end", len(r.b)))
	}
	if r.err != nil {
		return State{}, r.err
	}
	return st, nil
}
