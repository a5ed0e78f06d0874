package lists

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/gofrs/flock"

	"github.com/ratewarden/ratewarden/internal/atomicfile"
)

// Errors writers return that callers branch on.
var (
	ErrNotFound   = errors.New("no such entry")
	ErrNotPending = errors.New("entry is not pending")
	ErrNoList     = errors.New("list not configured")
)

// FileStore writes list files: each list (Allow, Deny, Challenge) is one
// file in the file format. A change rewrites the file to a temporary file
// and renames it over the old one (internal/atomicfile; over the file a
// symbolic link leads to, for a list file that is one), so a reader sees
// the old file or the new one, never half of one; lines the change does not
// concern, comments included, are kept as they are. Writers in any number of
// processes exclude one another with an flock on PATH.lock beside the file
// (a lock on the list file itself would not do: the rename replaces it),
// taken with github.com/gofrs/flock rather than syscall.Flock as the
// decision log does: a writer waits for the lock (the log refuses a second
// writer outright) and gives up when its context ends, on every platform
// the binary builds for. Readers take no lock. FileStore is safe for
// concurrent use.
type FileStore struct {
	paths map[string]string // list → file
	now   func() time.Time
}

// NewFileStore returns the store of the list files paths names, by list;
// now reads the clock (default time.Now).
func NewFileStore(paths map[string]string, now func() time.Time) *FileStore {
	if now == nil {
		now = time.Now
	}
	return &FileStore{paths: paths, now: now}
}

// lockRetry is how often a writer tries the lock again while another holds it.
const lockRetry = 5 * time.Millisecond

// Put writes e, replacing any entry (or tombstone) for its target. Added
// defaults to now; times are kept to the second. It refuses an invalid
// entry and an expiry not in the future.
func (s *FileStore) Put(ctx context.Context, e Entry) error {
	now := s.now()
	if err := prepare(&e, now); err != nil {
		return err
	}
	return s.edit(ctx, e.List, func(es []Entry, _ map[string]int) (string, *Entry, error) {
		if len(es) >= MaxEntries {
			return "", nil, fmt.Errorf("put: list %s has %d entries; at most %d", e.List, len(es), MaxEntries)
		}
		return e.Target, &e, nil
	})
}

// Remove marks the entry of target on list removed by by because of
// reason ("" for none), leaving a tombstone for TombstoneAge: it says who
// removed the entry and why, not why it was added. It returns
// ErrNotFound when no entry for
// target applies or waits for approval. A file edited by hand may hold
// several lines of target, of which the edge applies the longest-lived:
// when one of them applies or waits, the tombstone replaces them all.
func (s *FileStore) Remove(ctx context.Context, list, target, by, reason string) error {
	t, now, err := s.key(list, target, by)
	if err != nil {
		return err
	}
	if _, err := checkText(attrReason, reason, MaxReasonLen); err != nil {
		return err
	}
	return s.edit(ctx, list, func(es []Entry, _ map[string]int) (string, *Entry, error) {
		var live *Entry
		for i := range es {
			if e := &es[i]; e.Target == t && e.Removed.IsZero() && (e.Expires.IsZero() || now.Before(e.Expires)) {
				live = e
			}
		}
		if live == nil {
			return "", nil, fmt.Errorf("remove %s from %s: %w", t, list, ErrNotFound)
		}
		return t, tombstone(*live, by, reason, now), nil
	})
}

// Approve makes the pending entry of target on list apply, approved by by.
func (s *FileStore) Approve(ctx context.Context, list, target, by string) error {
	t, now, err := s.key(list, target, by)
	if err != nil {
		return err
	}
	return s.edit(ctx, list, func(es []Entry, at map[string]int) (string, *Entry, error) {
		i, ok := at[t]
		if !ok || !es[i].Removed.IsZero() {
			return "", nil, fmt.Errorf("approve %s on %s: %w", t, list, ErrNotFound)
		}
		e, err := approved(es[i], by, now)
		if err != nil {
			return "", nil, err
		}
		return t, e, nil
	})
}

// Entries returns the entries of list as they are in its file, pending and
// removed ones included; a missing file is an empty list.
func (s *FileStore) Entries(_ context.Context, list string) ([]Entry, error) {
	path, err := s.path(list)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return ParseEntries(bytes.NewReader(data), path, list)
}

func (s *FileStore) path(list string) (string, error) {
	p, ok := s.paths[list]
	if !ok || p == "" {
		return "", fmt.Errorf("list %q: %w; configured: %s", list, ErrNoList, strings.Join(s.Lists(), ", "))
	}
	return p, nil
}

// Source returns the Source of list's file, for a Watcher; nil when the
// store has no file for list.
func (s *FileStore) Source(list string) *FileSource {
	if s.paths[list] == "" {
		return nil
	}
	return NewFileSource(s.paths[list])
}

// Lists returns the names of the lists the store has a file for.
func (s *FileStore) Lists() []string {
	var out []string
	for _, n := range Names {
		if s.paths[n] != "" {
			out = append(out, n)
		}
	}
	return out
}

func (s *FileStore) key(list, target, by string) (string, time.Time, error) {
	if _, err := s.path(list); err != nil {
		return "", time.Time{}, err
	}
	t, err := checkKey(target, by)
	return t, s.now().UTC().Truncate(time.Second), err
}

// checkKey normalizes the target of a removal or approval and checks who
// makes it.
func checkKey(target, by string) (string, error) {
	if _, err := checkText(attrBy, by, MaxByLen); err != nil {
		return "", err
	}
	t, err := NormalizeTarget(target)
	if err != nil {
		return "", fmt.Errorf("target %q: %v", target, err)
	}
	return t, nil
}

// edit rewrites list's file under its lock. change gets the file's entries
// and the index of each target's last line, and returns the target whose
// lines it replaces and the one entry that replaces them (written where
// the first of them was, else at the end).
func (s *FileStore) edit(ctx context.Context, list string, change func([]Entry, map[string]int) (string, *Entry, error)) error {
	path, err := s.path(list)
	if err != nil {
		return err
	}
	// Readable by all, as the list is: writers running as other users
	// (an operator, the aggregator) open it read-only to lock it.
	lk := flock.New(path+".lock", flock.SetPermissions(0o644))
	ok, err := lk.TryLockContext(ctx, lockRetry)
	if err != nil || !ok {
		return fmt.Errorf("lock %s.lock: %w", path, errors.Join(err, ctx.Err()))
	}
	defer lk.Unlock()

	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	lines, es, idx, err := splitEntries(data, path, list)
	if err != nil {
		return fmt.Errorf("refusing to rewrite a bad list: %w", err)
	}
	at := map[string]int{}
	for i, e := range es {
		at[e.Target] = i
	}
	target, repl, err := change(es, at)
	if err != nil {
		return err
	}
	now := s.now()
	var out []byte
	written := false
	for i, line := range lines {
		if j := idx[i]; j >= 0 {
			e := &es[j]
			if e.Target == target {
				if !written {
					out = AppendLine(out, repl)
					written = true
				}
				continue
			}
			if !e.Removed.IsZero() && now.Sub(e.Removed) > TombstoneAge ||
				e.Removed.IsZero() && !e.Expires.IsZero() && now.Sub(e.Expires) > TombstoneAge {
				continue // a tombstone every reader has seen, or an entry long expired
			}
		}
		out = append(out, line...)
		out = append(out, '\n')
	}
	if !written {
		out = AppendLine(out, repl)
	}
	perm := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		perm = fi.Mode().Perm()
	}
	return atomicfile.Write(path, out, perm)
}

// splitEntries splits a list file into its lines and parses each; idx[i]
// is the index in es of line i's entry, or -1 for a blank or comment line.
func splitEntries(data []byte, path, list string) (lines [][]byte, es []Entry, idx []int, err error) {
	if _, err := ParseEntries(bytes.NewReader(data), path, list); err != nil {
		return nil, nil, nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxLineLen)
	for n := 0; sc.Scan(); n++ {
		line := sc.Bytes()
		text := line
		if n == 0 {
			text = bytes.TrimPrefix(text, []byte("\uFEFF"))
		}
		e, ok, _ := parseLine(string(bytes.TrimSuffix(text, []byte("\r"))))
		lines = append(lines, bytes.Clone(line))
		if !ok {
			idx = append(idx, -1)
			continue
		}
		e.List = list
		idx = append(idx, len(es))
		es = append(es, e)
	}
	return lines, es, idx, sc.Err()
}

// prepare validates an entry a writer is about to store and fills in its
// defaults.
func prepare(e *Entry, now time.Time) error {
	now = now.UTC().Truncate(time.Second)
	if e.Added.IsZero() {
		e.Added = now
	}
	e.Added = e.Added.UTC().Truncate(time.Second)
	if !e.Expires.IsZero() {
		e.Expires = e.Expires.UTC().Truncate(time.Second)
		if !e.Expires.After(now) {
			return fmt.Errorf("expires %s is not in the future (now %s)", e.Expires.Format(time.RFC3339), now.Format(time.RFC3339))
		}
	}
	e.Removed = time.Time{}
	return e.Validate()
}

// tombstone is e removed by by at now because of reason.
func tombstone(e Entry, by, reason string, now time.Time) *Entry {
	e.Removed, e.By, e.Reason, e.Pending = now, by, reason, false
	e.Expires = time.Time{}
	return &e
}

// approved is the pending entry e approved by by at now.
func approved(e Entry, by string, now time.Time) (*Entry, error) {
	if !e.Pending {
		return nil, fmt.Errorf("approve %s on %s: %w", e.Target, e.List, ErrNotPending)
	}
	if !e.Expires.IsZero() && !now.Before(e.Expires) {
		return nil, fmt.Errorf("approve %s on %s: expired at %s", e.Target, e.List, e.Expires.Format(time.RFC3339))
	}
	e.Pending, e.By = false, by
	return &e, nil
}
