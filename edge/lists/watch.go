package lists

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/internal/atomicfile"
	"github.com/ratewarden/ratewarden/internal/clientip"
)

// Recorder receives the feedback events of the changes a Watcher observes.
// Record must not block; it reports false when it dropped the event.
// decisions.Emitter and decisions.Fanout are Recorders.
type Recorder interface {
	Emit(d decisions.Decision) bool
}

var (
	_ Recorder = (*decisions.Emitter)(nil)
	_ Recorder = (*decisions.Fanout)(nil)
)

// WatchOptions configure a Watcher. The zero value is usable.
type WatchOptions struct {
	// List is the list's name (Allow, Deny, Challenge), recorded in its
	// entries and feedback events.
	List string
	// Every is the refresh interval; ≤ 0 disables polling: the source is
	// then re-read only by Reload.
	Every time.Duration
	// Report receives each failed refresh (the caller logs and counts
	// it); may be nil.
	Report func(error)
	// Record, when not nil, receives one feedback event per change seen
	// between two successful reads (see Diff).
	Record Recorder
	// StateFile, when set with Record, keeps the entries last recorded
	// across restarts: the first read is compared with it, so that changes
	// made while no watcher ran are recorded too, and it is rewritten
	// (atomically) after every read that recorded a change. Without it,
	// or while it does not exist, the first read is recorded as it is: no
	// events.
	StateFile string
	// Now reads the clock; default time.Now.
	Now func() time.Time
	// NAT64 is the NAT64 prefixes the list is read through (NewNAT64),
	// those the edge reads client addresses through
	// (config.Identity.NAT64); the zero value has the well-known prefix
	// alone.
	NAT64 clientip.NAT64
	// Wide, when not nil, receives each entry that holds a
	// network-specific prefix of NAT64 (List.Wide) once, at the first
	// read whose list has it: a changed list says again only what is new.
	Wide func(WideEntry)
}

// Source is where a Watcher reads its list from: a file (FileSource) or a
// DynamoDB table (TableStore). Read returns the entries of list, as
// ParseEntries does, or unchanged true and no entries when ifChanged and
// the source can tell that it has not changed since the last read. The
// Watcher builds the list (NewNAT64): how an edge reads entries is its
// own, not the source's.
type Source interface {
	Read(ctx context.Context, list string, ifChanged bool) (es []Entry, unchanged bool, err error)
	Name() string
}

// Watcher holds the current list read from a Source and re-reads it on an
// interval. It is safe for concurrent use. Its goroutine is stopped by
// Close; the zero value is not usable, use Watch or WatchSource.
type Watcher struct {
	src  Source
	opts WatchOptions

	list     atomic.Pointer[List]
	loads    atomic.Uint64 // successful loads, the first included
	failures atomic.Uint64 // failed reloads
	changes  atomic.Uint64 // feedback events recorded
	drops    atomic.Uint64 // feedback events the Recorder dropped

	mu       sync.Mutex // serialises loads, so the diff sees lists in order
	recorded *List      // under mu: what the recorder last heard, nil before the first read
	retry    bool       // under mu: some changes were dropped; read again even if unchanged

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// WatchSource loads the list from src and starts a goroutine that, every
// o.Every, reads it again (a file only if its modification time, size or
// identity, an atomic rename, changed). An error loading it the first time
// is returned, so that start-up fails on a bad list. A failed refresh
// keeps the last good list and is passed to o.Report (the caller logs and
// counts it; Report may be nil); each change of a file is reported once,
// and a file that cannot be read is reported at every interval. Every ≤ 0
// disables polling: the source is then read again only by Reload. There
// is no shorthand for a file without options: a list is read through the
// NAT64 prefixes of the edge that obeys it (o.NAT64).
func WatchSource(src Source, o WatchOptions) (*Watcher, error) {
	if o.Every <= 0 {
		return watch(src, o, nil, nil, nil)
	}
	t := time.NewTicker(o.Every)
	w, err := watch(src, o, t.C, t.Stop, nil)
	if err != nil {
		t.Stop()
	}
	return w, err
}

// watch is WatchSource with the ticks supplied, so tests can drive the
// goroutine; stopTick, if not nil, is called when the goroutine ends, and
// afterTick, if not nil, after each tick was handled. A nil tick starts no
// goroutine.
func watch(src Source, o WatchOptions, tick <-chan time.Time, stopTick, afterTick func()) (*Watcher, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	w := &Watcher{src: src, opts: o, stop: make(chan struct{}), done: make(chan struct{})}
	if o.Record != nil && o.StateFile != "" {
		prev, err := readState(o.StateFile, o.List, o.Now())
		if err != nil && o.Report != nil {
			o.Report(fmt.Errorf("recorded list state (changes made while stopped are not recorded): %w", err))
		}
		w.recorded = prev
	}
	if err := w.load(context.Background(), false); err != nil {
		return nil, err
	}
	if tick == nil {
		close(w.done)
		return w, nil
	}
	go w.run(tick, stopTick, afterTick)
	return w, nil
}

func (w *Watcher) run(tick <-chan time.Time, stopTick, afterTick func()) {
	defer close(w.done)
	if stopTick != nil {
		defer stopTick()
	}
	for {
		select {
		case <-w.stop:
			return
		case <-tick:
			if err := w.load(context.Background(), true); err != nil && w.opts.Report != nil {
				w.opts.Report(err)
			}
			if afterTick != nil {
				afterTick()
			}
		}
	}
}

// List returns the current list. It does not allocate.
func (w *Watcher) List() *List {
	if w == nil {
		return nil
	}
	return w.list.Load()
}

// Source returns the source the watcher reads.
func (w *Watcher) Source() Source { return w.src }

// Reload re-reads the source now, whether or not it changed, as on SIGHUP.
// On error the last good list stays and the error is returned, not
// reported.
func (w *Watcher) Reload() error {
	return w.load(context.Background(), false)
}

// Stats returns the number of successful loads, the first included, and of
// failed reloads.
func (w *Watcher) Stats() (loads, failures uint64) {
	return w.loads.Load(), w.failures.Load()
}

// Changes returns the number of feedback events recorded, and of those
// the Recorder dropped (each tried again at the next read).
func (w *Watcher) Changes() (recorded, dropped uint64) {
	return w.changes.Load(), w.drops.Load()
}

// Close stops the goroutine and waits for it to finish, or for ctx to be
// done. With a Recorder, the source is read once more first, so that a
// change written since the last refresh is recorded while the recorder is
// still open. The last list stays readable. Close may be called more than
// once.
func (w *Watcher) Close(ctx context.Context) error {
	first := false
	w.closeOnce.Do(func() { close(w.stop); first = true })
	select {
	case <-w.done:
	case <-ctx.Done():
		return fmt.Errorf("close list watcher %s: %w", w.src.Name(), ctx.Err())
	}
	if first && w.opts.Record != nil {
		if err := w.load(ctx, true); err != nil && w.opts.Report != nil {
			w.opts.Report(err)
		}
	}
	return nil
}

// readTimeout bounds one read of a remote source.
const readTimeout = 10 * time.Second

// load reads the source and makes it the current list, recording the
// changes from the previous one. With ifChanged, a source that can tell it
// is unchanged is not read again.
func (w *Watcher) load(ctx context.Context, ifChanged bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	now := w.opts.Now()
	es, unchanged, err := w.src.Read(ctx, w.opts.List, ifChanged && !w.retry)
	switch {
	case err != nil:
		w.failures.Add(1)
		return fmt.Errorf("load list: %w", err)
	case !unchanged:
		l := NewNAT64(es, now, w.opts.NAT64)
		if w.opts.Record != nil {
			w.record(l, now)
		}
		if w.opts.Wide != nil && len(l.Wide()) > 0 {
			w.warnWide(w.list.Load(), l)
		}
		w.list.Store(l)
		w.loads.Add(1)
	}
	return nil
}

// warnWide hands Wide the wide entries of l that prev did not have.
func (w *Watcher) warnWide(prev, l *List) {
	seen := map[string]bool{}
	for _, e := range prev.Wide() {
		seen[e.Target] = true
	}
	for _, e := range l.Wide() {
		if !seen[e.Target] {
			w.opts.Wide(e)
		}
	}
}

// record hands the changes from the list last recorded to l to the
// Recorder, and keeps l as the one recorded.
func (w *Watcher) record(l *List, now time.Time) {
	prev := w.recorded
	w.recorded = l
	var ds []decisions.Decision
	if prev != nil {
		ds = Diff(w.opts.List, prev, l, now)
	}
	var dropped map[string]bool
	for _, d := range ds {
		if w.opts.Record.Emit(d) {
			w.changes.Add(1)
			continue
		}
		w.drops.Add(1)
		if dropped == nil {
			dropped = map[string]bool{}
		}
		dropped[d.Target] = true
	}
	w.retry = dropped != nil
	if w.retry {
		// What was dropped is not recorded: the next read tries again.
		w.recorded = unrecorded(prev, l, dropped, now)
	}
	if w.opts.StateFile == "" || (prev != nil && len(ds) == 0) {
		return
	}
	if err := writeState(w.opts.StateFile, w.recorded, now); err != nil && w.opts.Report != nil {
		w.opts.Report(err)
	}
}

// unrecorded is l with the entries of the dropped targets as they were in
// prev.
func unrecorded(prev, l *List, dropped map[string]bool, now time.Time) *List {
	var es []Entry
	for _, e := range l.Entries() {
		if !dropped[e.Target] {
			es = append(es, e)
		}
	}
	for _, e := range prev.Entries() {
		if dropped[e.Target] {
			es = append(es, e)
		}
	}
	return New(es, now)
}

// readState reads the entries last recorded; a missing file is no state.
func readState(path, list string, now time.Time) (*List, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	es, err := ParseEntries(bytes.NewReader(data), path, list)
	if err != nil {
		return nil, err
	}
	return New(es, now), nil
}

// writeState writes the entries of l that apply or may apply again (not
// removed, pending or expired).
func writeState(path string, l *List, now time.Time) error {
	m := live(l)
	var b []byte
	for _, t := range slices.Sorted(maps.Keys(m)) {
		if e := m[t]; e.Applies(now) {
			b = AppendLine(b, e)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write recorded list state: %w", err)
	}
	return atomicfile.Write(path, b, 0o644)
}

// FileSource reads a list file. It is not safe for concurrent use (a
// Watcher serialises its reads).
type FileSource struct {
	path string
	seen os.FileInfo // the file last read, nil after a stat failure
}

// NewFileSource returns the Source of the list file at path.
func NewFileSource(path string) *FileSource { return &FileSource{path: path} }

// Name returns the file's path.
func (s *FileSource) Name() string { return s.path }

// Read parses the file, or returns unchanged when ifChanged and the file
// looks as it did at the last attempt. A file that fails to parse is
// recorded as seen, so that it is reported once, not at every interval.
func (s *FileSource) Read(_ context.Context, list string, ifChanged bool) ([]Entry, bool, error) {
	f, err := os.Open(s.path)
	if err != nil {
		s.seen = nil
		return nil, false, err
	}
	defer f.Close()
	// The opened file is stat'ed, not the path, so that what is recorded is
	// what is read even if the file is replaced meanwhile.
	fi, err := f.Stat()
	if err != nil {
		s.seen = nil
		return nil, false, err
	}
	if ifChanged && s.seen != nil && sameVersion(s.seen, fi) {
		return nil, true, nil
	}
	s.seen = fi
	es, err := ParseEntries(f, s.path, list)
	return es, false, err
}

// sameVersion reports whether two looks at a file saw the same version.
func sameVersion(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}
