package dirlock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSame: one directory under other names (a trailing "/.", a
// symbolic link, a relative path) is the same; another, or one of two
// paths missing, is not; two missing paths compare as absolute paths.
func TestSame(t *testing.T) {
	tmp := t.TempDir()
	dir, other := filepath.Join(tmp, "log"), filepath.Join(tmp, "state")
	for _, d := range []string{dir, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(tmp, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	t.Chdir(tmp)
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{dir, dir + "/.", true},
		{dir, link, true},
		{dir, "log", true},
		{dir, other, false},
		{dir, filepath.Join(tmp, "missing"), false},
		{"missing", filepath.Join(tmp, "missing/"), true},
		{"missing", "missing-too", false},
	} {
		if got := Same(c.a, c.b); got != c.want {
			t.Errorf("Same(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// TestAcquire: a second Acquire of a held directory, in this process
// through another file, is refused with ErrLocked, the directory and the
// holder's pid; once the lock is closed the directory can be taken again,
// and the LOCK file stays.
func TestAcquire(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state") // created by Acquire
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, File))
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(os.Getpid()) {
		t.Errorf("LOCK holds %q, want this process's pid %d", got, os.Getpid())
	}
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no flock: a directory is not kept to one holder here")
	}
	_, err = Acquire(dir)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), dir) ||
		!strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second Acquire = %v, want ErrLocked naming %s and pid %d", err, dir, os.Getpid())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	l2, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Close: %v", err)
	}
	l2.Close()
	if _, err := os.Stat(filepath.Join(dir, File)); err != nil {
		t.Errorf("LOCK after Close: %v", err)
	}
}

// TestAcquireNotADirectory: a path that is a file cannot be locked, and
// the error says which.
func TestAcquireNotADirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	os.WriteFile(path, []byte("x"), 0o644)
	if _, err := Acquire(path); err == nil || errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Errorf("Acquire(file) = %v, want an error naming it, not ErrLocked", err)
	}
}

// holderEnv names the directory a re-executed test binary locks as
// TestHelperHolder, the holder TestAcquireKilledHolder kills.
const holderEnv = "DIRLOCK_TEST_HOLD"

// TestHelperHolder is the other process of TestAcquireKilledHolder: it
// takes the lock of $DIRLOCK_TEST_HOLD, says so, and waits to be killed.
func TestHelperHolder(t *testing.T) {
	dir := os.Getenv(holderEnv)
	if dir == "" {
		t.Skip("the holder process of TestAcquireKilledHolder")
	}
	if _, err := Acquire(dir); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("locked")
	time.Sleep(time.Minute)
	os.Exit(1)
}

// TestAcquireKilledHolder: a directory held by another process is
// refused with that process's pid; once it is killed (SIGKILL, no Close)
// the directory can be taken, whatever pid its LOCK file still holds.
func TestAcquireKilledHolder(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no flock: a directory is not kept to one holder here")
	}
	if testing.Short() {
		t.Skip("starts a process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHolder$", "-test.count=1")
	cmd.Env = append(os.Environ(), holderEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "locked\n" {
		t.Fatalf("holder said %q, want locked", line)
	}
	_, err = Acquire(dir)
	if want := fmt.Sprintf("pid %d", cmd.Process.Pid); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Acquire while another process holds it = %v, want ErrLocked naming %s", err, want)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after the holder was killed: %v", err)
	}
	l.Close()
}

// TestWait: a second Wait on a lock held waits until it is released, and
// gives up, with ctx's error, when its ctx ends first (a holder stopped
// with SIGSTOP holds nobody up past their deadline). Before, Wait
// ignored any deadline.
func TestWait(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no flock: nothing is held here")
	}
	path := filepath.Join(t.TempDir(), ".save.lock")
	release, err := Wait(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if r, err := Wait(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		if r != nil {
			r()
		}
		t.Fatalf("Wait on a lock held, until a deadline = %v, want context.DeadlineExceeded", err)
	}
	got := make(chan error, 1)
	go func() {
		r, err := Wait(context.Background(), path)
		if r != nil {
			r()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("Wait took a lock held: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Wait after the release: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait still waits 10 s after the release")
	}
}
