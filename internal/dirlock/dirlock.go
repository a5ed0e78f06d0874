// Package dirlock keeps a directory to one process at a time: the decision
// log's writer, an aggregator and its state. Two processes writing one
// directory overwrite each other's files (segments, states, checkpoints)
// without either noticing, so the second is refused at the start, told
// which process holds the directory.
package dirlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/ratewarden/ratewarden/internal/backoff"
)

// File is the name of the lock file Acquire creates in a directory. It
// holds the pid of the process that last took the lock.
const File = "LOCK"

// ErrLocked marks Acquire's refusal of a directory another holder has.
var ErrLocked = errors.New("in use by another process")

// Same reports whether paths a and b name one directory: the same
// directory on disk when both exist (a symbolic link or another spelling
// of it included), else the same absolute path. Two holders given one
// directory under two names would refuse each other at Acquire, the
// second told only that the directory is in use.
func Same(a, b string) bool {
	if fa, err := os.Stat(a); err == nil {
		if fb, err := os.Stat(b); err == nil {
			return os.SameFile(fa, fb)
		}
	}
	abs := func(p string) string {
		if q, err := filepath.Abs(p); err == nil {
			return q
		}
		return filepath.Clean(p)
	}
	return abs(a) == abs(b)
}

// Lock is a directory's lock, held until Close or the end of the process.
type Lock struct {
	f *os.File
}

// Acquire takes dir's lock, creating dir if need be, and writes this
// process's pid into dir/LOCK. A lock held by another process, or by
// this one through another Acquire, is refused with an error wrapping
// ErrLocked that names dir and the holder's pid. The lock is an flock
// on the LOCK file (where the system has one): a holder killed, however
// abruptly, releases it, and a LOCK file left behind (with its pid)
// locks nothing.
func Acquire(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	path := filepath.Join(dir, File)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	if err := lock(f); err != nil {
		f.Close()
		if errors.Is(err, errWouldBlock) {
			return nil, fmt.Errorf("lock %s: directory %w (%s)", dir, ErrLocked, holder(path))
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// The pid is written once the lock is held: a process refused
	// between the lock and the write reads no pid, never a wrong one.
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt(pid, 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// holder says who holds the lock at path, as far as its file says.
func holder(path string) string {
	b, err := os.ReadFile(path)
	pid, perr := strconv.Atoi(string(bytes.TrimSpace(b)))
	switch {
	case err != nil || perr != nil || pid <= 0:
		// Taken an instant ago (the pid not yet written), or by a
		// writer before the pid was recorded.
		return path + " names no pid"
	case pid == os.Getpid():
		return fmt.Sprintf("pid %d, this process", pid)
	}
	return fmt.Sprintf("pid %d", pid)
}

// Close releases the lock. The LOCK file stays (removing it could let a
// process that has just opened it lock a file no longer there while a
// third locks the new one); its pid is cleared, so that it names no
// process that has let the directory go. Close is idempotent.
func (l *Lock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	l.f.Truncate(0) // best effort: a stale pid locks nothing
	err := l.f.Close()
	l.f = nil
	return err
}

// Wait takes the flock of the file at path (made if missing), waiting for
// another holder, process or goroutine, to release it, or for ctx to end,
// and returns the function that releases it: for a short section that two
// processes sharing a directory must not run at once. The file stays. A
// holder that stops (SIGSTOP, a debugger) holds up a waiter only as long
// as its ctx allows.
func Wait(ctx context.Context, path string) (release func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	for tries := 1; ; tries++ {
		err := lock(f)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, errWouldBlock) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if err := backoff.Sleep(ctx, backoff.Bound(time.Millisecond, 50*time.Millisecond, tries)); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: held by another holder: %w", path, err)
		}
	}
}
