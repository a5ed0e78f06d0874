package lists

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	addrA = netip.MustParseAddr("203.0.113.7")
	addrB = netip.MustParseAddr("198.51.100.7")
)

// writeList writes text to path and moves its modification time to a
// distinct instant, so that a change is seen even on coarse clocks.
func writeList(t *testing.T, path, text string, version int) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2026, 1, 1, 0, 0, version, 0, time.UTC)
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// reports collects what a watcher reports.
type reports struct {
	mu   sync.Mutex
	errs []error
}

func (r *reports) report(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

func (r *reports) get() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

func closeWatcher(t *testing.T, w *Watcher) {
	t.Helper()
	if err := w.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestWatchReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deny.list")
	writeList(t, path, "203.0.113.7\n", 1)
	var rep reports
	w, err := WatchSource(NewFileSource(path), WatchOptions{Every: time.Hour, Report: rep.report})
	if err != nil {
		t.Fatal(err)
	}
	defer closeWatcher(t, w)

	check := func(step string, a, b bool, loads, failures uint64) {
		t.Helper()
		l := w.List()
		if l.Contains(addrA, "") != a || l.Contains(addrB, "") != b {
			t.Errorf("%s: contains A %v B %v, want %v %v", step, l.Contains(addrA, ""), l.Contains(addrB, ""), a, b)
		}
		if gl, gf := w.Stats(); gl != loads || gf != failures {
			t.Errorf("%s: Stats = %d, %d; want %d, %d", step, gl, gf, loads, failures)
		}
	}
	check("first load", true, false, 1, 0)

	writeList(t, path, "198.51.100.0/24\n", 2)
	if err := w.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	check("changed file", false, true, 2, 0)

	writeList(t, path, "198.51.100.0/24\n203.0.113.300\n", 3)
	err = w.Reload()
	if err == nil || !strings.Contains(err.Error(), path+`:2: "203.0.113.300"`) {
		t.Fatalf("Reload of a bad file: %v, want an error naming %s:2", err, path)
	}
	check("bad file keeps last good list", false, true, 2, 1)

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Reload of a missing file: %v, want ErrNotExist", err)
	}
	check("missing file keeps last good list", false, true, 2, 2)

	writeList(t, path, "203.0.113.7\n198.51.100.7\n", 4)
	if err := w.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	check("recovered", true, true, 3, 2)
	if got := rep.get(); len(got) != 0 {
		t.Errorf("Reload errors were reported too: %v", got)
	}
}

func TestWatchStartFails(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.list")
	writeList(t, bad, "# ok\nnot-an-address\n", 1)
	if w, err := WatchSource(NewFileSource(bad), WatchOptions{Every: time.Hour}); err == nil || !strings.Contains(err.Error(), bad+`:2: "not-an-address"`) {
		t.Errorf("Watch of a bad file: %v, %v; want an error naming %s:2", w, err, bad)
	}
	if w, err := WatchSource(NewFileSource(filepath.Join(dir, "missing")), WatchOptions{Every: time.Hour}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Watch of a missing file: %v, %v; want ErrNotExist", w, err)
	}
}

// TestWatchPolls drives the polling goroutine with ticks of its own and
// waits for each to be handled before touching the file again.
func TestWatchPolls(t *testing.T) {
	path := filepath.Join(t.TempDir(), "allow.list")
	writeList(t, path, "203.0.113.7\n", 1)
	var rep reports
	tick := make(chan time.Time)
	stopped := make(chan struct{})
	handled := make(chan struct{})
	w, err := watch(NewFileSource(path), WatchOptions{Report: rep.report}, tick, func() { close(stopped) }, func() { handled <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	refresh := func() {
		tick <- time.Time{}
		<-handled
	}

	first := w.List()
	refresh()
	if w.List() != first {
		t.Error("an unchanged file was parsed again")
	}
	if loads, _ := w.Stats(); loads != 1 {
		t.Errorf("loads = %d after an unchanged tick, want 1", loads)
	}

	writeList(t, path, "198.51.100.7\n", 2)
	refresh()
	if l := w.List(); l.Contains(addrA, "") || !l.Contains(addrB, "") {
		t.Errorf("changed file not picked up")
	}

	writeList(t, path, "198.51.100.7\nuser:\n", 3)
	refresh()
	refresh() // the same bad file again: reported once
	if l := w.List(); !l.Contains(addrB, "") {
		t.Errorf("failed refresh dropped the last good list")
	}
	errs := rep.get()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), path+`:2: "user:": empty user id`) {
		t.Errorf("reports = %v, want one naming %s:2", errs, path)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	refresh() // a missing file is reported at every tick
	refresh()
	if errs := rep.get(); len(errs) != 3 || !errors.Is(errs[2], os.ErrNotExist) {
		t.Errorf("reports = %v, want two more ErrNotExist", errs)
	}

	writeList(t, path, "203.0.113.7\n", 4)
	refresh()
	if l := w.List(); !l.Contains(addrA, "") {
		t.Errorf("restored file not picked up")
	}
	if loads, failures := w.Stats(); loads != 3 || failures != 3 {
		t.Errorf("Stats = %d, %d; want 3, 3", loads, failures)
	}

	closeWatcher(t, w)
	select {
	case <-stopped:
	default:
		t.Error("Close returned before the goroutine stopped its ticker")
	}
	closeWatcher(t, w) // twice is fine
	if !w.List().Contains(addrA, "") {
		t.Error("list unreadable after Close")
	}
}

func TestWatchCloseContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l")
	writeList(t, path, "", 1)
	tick := make(chan time.Time)
	block := make(chan struct{})
	w, err := watch(NewFileSource(path), WatchOptions{Report: func(error) { <-block }}, tick, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Make the goroutine hang in report, so it cannot stop.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	tick <- time.Time{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Close with a done context: %v, want context.Canceled", err)
	}
	close(block)
	closeWatcher(t, w)
}

func TestWatchNoPolling(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l")
	writeList(t, path, "203.0.113.7\n", 1)
	w, err := WatchSource(NewFileSource(path), WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writeList(t, path, "198.51.100.7\n", 2)
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if !w.List().Contains(addrB, "") {
		t.Error("Reload without polling did not load")
	}
	closeWatcher(t, w)
}

func BenchmarkWatcherList(b *testing.B) {
	path := filepath.Join(b.TempDir(), "l")
	if err := os.WriteFile(path, []byte("203.0.113.7\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	w, err := WatchSource(NewFileSource(path), WatchOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w.List().Contains(addrA, "")
		}
	})
}
