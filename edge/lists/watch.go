package lists

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Watcher holds the current list parsed from a file and re-reads the file
// when it changes. It is safe for concurrent use. Its goroutine is stopped
// by Close; the zero value is not usable, use Watch.
type Watcher struct {
	path   string
	report func(error)

	list     atomic.Pointer[List]
	loads    atomic.Uint64 // successful loads, the first included
	failures atomic.Uint64 // failed reloads

	mu   sync.Mutex  // serialises loads, so seen matches the list
	seen os.FileInfo // the file last read, nil after a stat failure

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// Watch loads the list at path and starts a goroutine that, every interval,
// re-reads the file if its modification time, size or identity (an atomic
// rename) changed. An error loading the file the first time is returned, so
// that start-up fails on a bad list. A failed refresh keeps the last good
// list and is passed to report (the caller logs and counts it; report may be
// nil); each change of the file is reported once, and a file that cannot be
// read is reported at every interval. every ≤ 0 disables polling: the file is
// then re-read only by Reload.
func Watch(path string, every time.Duration, report func(error)) (*Watcher, error) {
	if every <= 0 {
		return watch(path, nil, nil, nil, report)
	}
	t := time.NewTicker(every)
	w, err := watch(path, t.C, t.Stop, nil, report)
	if err != nil {
		t.Stop()
	}
	return w, err
}

// watch is Watch with the ticks supplied, so tests can drive the goroutine;
// stopTick, if not nil, is called when the goroutine ends, and afterTick,
// if not nil, after each tick was handled. A nil tick starts no goroutine.
func watch(path string, tick <-chan time.Time, stopTick, afterTick func(), report func(error)) (*Watcher, error) {
	w := &Watcher{
		path:   path,
		report: report,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	if err := w.load(false); err != nil {
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
			if err := w.load(true); err != nil && w.report != nil {
				w.report(err)
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

// Reload re-reads the file now, whether or not it changed, as on SIGHUP. On
// error the last good list stays and the error is returned, not reported.
func (w *Watcher) Reload() error {
	return w.load(false)
}

// Stats returns the number of successful loads, the first included, and of
// failed reloads.
func (w *Watcher) Stats() (loads, failures uint64) {
	return w.loads.Load(), w.failures.Load()
}

// Close stops the goroutine and waits for it to finish, or for ctx to be
// done. The last list stays readable. Close may be called more than once.
func (w *Watcher) Close(ctx context.Context) error {
	w.closeOnce.Do(func() { close(w.stop) })
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close list watcher %s: %w", w.path, ctx.Err())
	}
}

// load reads and parses the file and makes it the current list. With
// ifChanged, a file that looks as it did at the last attempt is not read
// again.
func (w *Watcher) load(ifChanged bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	l, err := w.read(ifChanged)
	switch {
	case err != nil:
		w.failures.Add(1)
		return fmt.Errorf("load list: %w", err)
	case l != nil:
		w.list.Store(l)
		w.loads.Add(1)
	}
	return nil
}

// read returns the parsed file, or nil and no error when ifChanged and the
// file is unchanged. A file that fails to parse is recorded as seen, so
// that it is reported once, not at every interval.
func (w *Watcher) read(ifChanged bool) (*List, error) {
	f, err := os.Open(w.path)
	if err != nil {
		w.seen = nil
		return nil, err
	}
	defer f.Close()
	// The opened file is stat'ed, not the path, so that what is recorded is
	// what is read even if the file is replaced meanwhile.
	fi, err := f.Stat()
	if err != nil {
		w.seen = nil
		return nil, err
	}
	if ifChanged && w.seen != nil && sameVersion(w.seen, fi) {
		return nil, nil
	}
	w.seen = fi
	return Parse(f, w.path)
}

// sameVersion reports whether two looks at a file saw the same version.
func sameVersion(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}
