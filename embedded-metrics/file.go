package emf

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FileConfig configures a FileSink.
// A FileConfig is a plain value; NewFileSink copies it.
type FileConfig struct {
	// Path is the file written to, e.g. /var/log/ratewarden/emf.log.
	Path string `json:"path" yaml:"path"`
	// MaxSize rotates the file before a document would take it past this
	// size; default 64 MiB. A document larger than MaxSize gets a file
	// of its own.
	MaxSize ByteSize `json:"max_size" yaml:"max_size"`
	// MaxAge rotates a non-empty file this long after the sink opened it;
	// zero rotates on size only.
	MaxAge time.Duration `json:"max_age" yaml:"max_age"`
	// Keep is how many rotated files to keep; the oldest beyond it are
	// removed. Default 5.
	Keep int `json:"keep" yaml:"keep"`
	// BufferSize is how much the sink buffers before writing to the
	// file; Flush writes it at once. Default 64 KiB.
	BufferSize ByteSize `json:"buffer_size" yaml:"buffer_size"`
	// Now is the clock for age-based rotation and rotated names; nil
	// means time.Now.
	Now func() time.Time `json:"-" yaml:"-"`
}

// Defaults for FileConfig.
const (
	DefaultFileMaxSize    = 64 * MiB
	DefaultFileKeep       = 5
	DefaultFileBufferSize = 64 * KiB
)

// SetDefaults fills the zero fields of c.
func (c *FileConfig) SetDefaults() {
	if c.MaxSize == 0 {
		c.MaxSize = DefaultFileMaxSize
	}
	if c.Keep == 0 {
		c.Keep = DefaultFileKeep
	}
	if c.BufferSize == 0 {
		c.BufferSize = DefaultFileBufferSize
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports every field of c that is out of range.
func (c FileConfig) Validate() error {
	var errs []error
	if c.Path == "" {
		errs = append(errs, errors.New(`path: "" is not allowed; use a file path`))
	}
	if c.MaxSize < 1*KiB {
		errs = append(errs, fmt.Errorf("max_size: %d is not allowed; use at least 1024 bytes", c.MaxSize))
	}
	if c.MaxAge < 0 {
		errs = append(errs, fmt.Errorf("max_age: %s is not allowed; use 0 or a positive duration", c.MaxAge))
	}
	if c.Keep < 1 {
		errs = append(errs, fmt.Errorf("keep: %d is not allowed; use at least 1", c.Keep))
	}
	if c.BufferSize < 0 {
		errs = append(errs, fmt.Errorf("buffer_size: %d is not allowed; use 0 or more bytes", c.BufferSize))
	}
	return errors.Join(errs...)
}

// FileSink appends documents, one per line, to a file and rotates it by
// size and age. A rotated file is renamed to
// NAME-YYYYMMDDTHHMMSS.sssZ.EXT (with -N before .EXT if that name is
// taken), named for the time of rotation, so names sort in order of age;
// the Keep newest are kept. Everything buffered is written to a file
// before it is renamed, so rotation loses no document. It is safe for
// concurrent use.
type FileSink struct {
	cfg            FileConfig
	dir, base, ext string
	name           string

	mu      sync.Mutex
	f       *os.File
	size    int64     // bytes in the file, including buf
	opened  time.Time // when the file was opened
	buf     []byte
	pending uint64 // documents in buf
	closed  bool
	stats   SinkStats
	rotated uint64
	// held is the set of the file's lines (their lineKey), read by
	// Holds, until the next Flush, Close or rotation.
	held map[lineKey]struct{}
	cut  int64 // see CutTail
}

var _ Holder = (*FileSink)(nil)

// lineKey is a line's two 64-bit hashes under the sink's seeds: 128 bits,
// so that two documents that differ are taken for one with a probability
// of about n²/2^129 among n lines.
type lineKey [2]uint64

// lineSeeds are the seeds of lineKey, the process's own.
var lineSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

var _ Sink = (*FileSink)(nil)

// NewFileSink opens (or creates) cfg.Path for appending, and its
// directory (0o755) when missing, as the decision log makes its own.
func NewFileSink(cfg FileConfig) (*FileSink, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("configure file sink: %w", err)
	}
	s := &FileSink{cfg: cfg, dir: filepath.Dir(cfg.Path), name: "file " + cfg.Path}
	s.ext = filepath.Ext(cfg.Path)
	s.base = strings.TrimSuffix(filepath.Base(cfg.Path), s.ext)
	if err := s.openLocked(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *FileSink) openLocked() error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("open emf file: %w", err)
	}
	f, err := os.OpenFile(s.cfg.Path, os.O_CREATE|os.O_APPEND|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("open emf file: %w", err)
	}
	var size, cut int64
	fi, err := f.Stat()
	if err == nil {
		size, cut, err = cutTail(f, fi.Size())
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("open emf file: %w", err)
	}
	s.f, s.size, s.opened = f, size, s.cfg.Now()
	s.cut += cut
	return nil
}

// cutTail cuts an unfinished last line off f, size bytes long: a
// document whose write was cut short (a kill in the middle of a write),
// which no reader can take. Left there, the next document would be
// appended to it and read as one line with it, and lost too. It returns
// the file's size after and the bytes cut. (The aggregator writes the
// cut document again on restart, whole.)
func cutTail(f *os.File, size int64) (int64, int64, error) {
	var buf [4096]byte
	for end := size; end > 0; {
		start := max(0, end-int64(len(buf)))
		chunk := buf[:end-start]
		if _, err := f.ReadAt(chunk, start); err != nil {
			return size, 0, err
		}
		if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 || start == 0 {
			keep := start + int64(i) + 1 // 0 when the file holds no newline
			if keep == size {
				return size, 0, nil
			}
			if err := f.Truncate(keep); err != nil {
				return size, 0, err
			}
			return keep, size - keep, nil
		}
		end = start
	}
	return size, 0, nil
}

// CutTail is the bytes of an unfinished last line the sink cut off its
// file when it opened it (see cutTail): 0 when the file ended whole.
func (s *FileSink) CutTail() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cut
}

// Holds reports whether the file holds doc as one of its lines, byte for
// byte. The first call after a Flush, Close or rotation writes what the
// sink buffers and reads the file through once; later calls look in what
// it read. Rotated files are not read: a document written before a
// rotation is not found.
func (s *FileSink) Holds(doc []byte) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		if err := s.readHeldLocked(); err != nil {
			return false, err
		}
	}
	_, ok := s.held[keyOf(doc)]
	return ok, nil
}

// keyOf returns the lineKey of line.
func keyOf(line []byte) lineKey {
	return lineKey{maphash.Bytes(lineSeeds[0], line), maphash.Bytes(lineSeeds[1], line)}
}

// readHeldLocked writes the buffer and reads the key of every line of the
// file into held.
func (s *FileSink) readHeldLocked() error {
	if s.f == nil {
		s.held = map[lineKey]struct{}{}
		return nil
	}
	if err := s.flushLocked(); err != nil {
		return err
	}
	held := map[lineKey]struct{}{}
	r := bufio.NewReaderSize(io.NewSectionReader(s.f, 0, s.size), int(64*KiB))
	for {
		line, err := r.ReadBytes('\n') // once, at a restart: a copy a line is no cost
		if l, ok := bytes.CutSuffix(line, []byte{'\n'}); ok {
			held[keyOf(l)] = struct{}{}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read emf file: %w", err)
		}
	}
	s.held = held
	return nil
}

// Write appends doc and a newline, rotating first if the file is due.
func (s *FileSink) Write(_ context.Context, doc []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.stats.Dropped++
		return fmt.Errorf("write document: %w", ErrSinkClosed)
	}
	n := int64(len(doc) + 1)
	if s.size > 0 && (s.size+n > int64(s.cfg.MaxSize) ||
		s.cfg.MaxAge > 0 && s.cfg.Now().Sub(s.opened) >= s.cfg.MaxAge) {
		if err := s.rotateLocked(); err != nil {
			s.stats.Errors++ // keep writing to whatever file is open
		}
	}
	if s.f == nil {
		if err := s.openLocked(); err != nil {
			s.stats.Errors++
			s.stats.Dropped++
			return fmt.Errorf("write document: %w", err)
		}
	}
	if len(s.buf)+int(n) > int(s.cfg.BufferSize) {
		if err := s.flushLocked(); err != nil {
			s.stats.Dropped++
			return fmt.Errorf("write document: %w", err)
		}
	}
	s.buf = append(append(s.buf, doc...), '\n')
	s.pending++
	s.size += n
	if len(s.buf) > int(s.cfg.BufferSize) { // a document larger than the buffer
		return s.flushLocked()
	}
	return nil
}

// flushLocked writes buf to the file; on error the buffered documents are
// dropped, since a partial write cannot be repeated without duplicates.
func (s *FileSink) flushLocked() error {
	if len(s.buf) == 0 {
		return nil
	}
	_, err := s.f.Write(s.buf)
	s.buf = s.buf[:0]
	if err != nil {
		s.stats.Errors++
		s.stats.Dropped += s.pending
		s.pending = 0
		return fmt.Errorf("write emf file: %w", err)
	}
	s.stats.Written += s.pending
	s.pending = 0
	return nil
}

// rotateLocked writes out the buffer, renames the file and opens a new one.
func (s *FileSink) rotateLocked() error {
	s.held = nil
	flushErr := s.flushLocked()
	if err := s.f.Close(); err != nil {
		flushErr = errors.Join(flushErr, fmt.Errorf("close emf file: %w", err))
	}
	s.f = nil
	now := s.cfg.Now().UTC()
	stamp := now.Format("20060102T150405.000Z")
	target := filepath.Join(s.dir, s.base+"-"+stamp+s.ext)
	for i := 1; fileExists(target); i++ {
		target = filepath.Join(s.dir, s.base+"-"+stamp+"-"+strconv.Itoa(i)+s.ext)
	}
	renameErr := os.Rename(s.cfg.Path, target)
	if renameErr == nil {
		s.rotated++
	}
	openErr := s.openLocked()
	if renameErr != nil {
		return errors.Join(flushErr, fmt.Errorf("rotate emf file: %w", renameErr), openErr)
	}
	return errors.Join(flushErr, openErr, s.pruneLocked())
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// rotatedKey orders rotated files by time, then by collision number.
type rotatedKey struct {
	stamp string
	n     int
}

// pruneLocked removes the oldest rotated files beyond Keep.
func (s *FileSink) pruneLocked() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("prune emf files: %w", err)
	}
	type rotated struct {
		name string
		key  rotatedKey
	}
	var files []rotated
	for _, e := range entries {
		if k, ok := s.parseRotated(e.Name()); ok {
			files = append(files, rotated{e.Name(), k})
		}
	}
	if len(files) <= s.cfg.Keep {
		return nil
	}
	slices.SortFunc(files, func(a, b rotated) int {
		if c := strings.Compare(a.key.stamp, b.key.stamp); c != 0 {
			return c
		}
		return a.key.n - b.key.n
	})
	var errs []error
	for _, f := range files[:len(files)-s.cfg.Keep] {
		if err := os.Remove(filepath.Join(s.dir, f.name)); err != nil {
			errs = append(errs, fmt.Errorf("prune emf files: %w", err))
		}
	}
	return errors.Join(errs...)
}

// parseRotated recognises NAME-YYYYMMDDTHHMMSS.sssZ[-N].EXT.
func (s *FileSink) parseRotated(name string) (rotatedKey, bool) {
	rest, ok := strings.CutPrefix(name, s.base+"-")
	if !ok {
		return rotatedKey{}, false
	}
	if rest, ok = strings.CutSuffix(rest, s.ext); !ok {
		return rotatedKey{}, false
	}
	const layout = "20060102T150405.000Z"
	if len(rest) < len(layout) {
		return rotatedKey{}, false
	}
	stamp, tail := rest[:len(layout)], rest[len(layout):]
	if _, err := time.Parse(layout, stamp); err != nil {
		return rotatedKey{}, false
	}
	k := rotatedKey{stamp: stamp}
	if tail != "" {
		num, ok := strings.CutPrefix(tail, "-")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || n < 1 {
			return rotatedKey{}, false
		}
		k.n = n
	}
	return k, true
}

// Flush writes the buffer to the file.
func (s *FileSink) Flush(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = nil
	if s.f == nil {
		return nil
	}
	return s.flushLocked()
}

// Close writes the buffer and closes the file.
func (s *FileSink) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.held = nil
	if s.f == nil {
		return nil
	}
	err := s.flushLocked()
	if cerr := s.f.Close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("close emf file: %w", cerr))
	}
	s.f = nil
	return err
}

// Stats reports documents written to the file, buffered, dropped and
// the errors seen.
func (s *FileSink) Stats() SinkStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Sink = s.name
	st.Buffered = s.pending
	return st
}

// Rotations reports how many times the file was rotated.
func (s *FileSink) Rotations() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rotated
}
