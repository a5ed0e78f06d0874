package tests

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSecondSignalStops: the first SIGINT starts a clean stop, which waits
// for a request the origin never answers (within a grace of a minute);
// the stop says on stderr that a second signal stops at once, and the
// second does, where before the edge swallowed it and only SIGKILL ended
// the wait.
func TestSecondSignalStops(t *testing.T) {
	bin := buildBinary(t)
	got, release := make(chan struct{}, 1), make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- struct{}{}:
		default:
		}
		<-release
	}))
	defer origin.Close()
	defer close(release)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(cfg, []byte(`
edge:
  shutdown_grace: 1m
  origin: {response_header_timeout: 5m}
tiers:
  anonymous:
    global: {limit: 60, window: 1m}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "edge", "--config", cfg, "--listen", "127.0.0.1:0", "--admin-listen", "off", "--upstream", origin.URL)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	addr := make(chan string, 1)
	log, logDone := scanLog(stderr, func(line string) {
		if m := listenRE.FindStringSubmatch(line); m != nil {
			addr <- m[1]
		}
	})
	var edge string
	select {
	case edge = <-addr:
	case <-time.After(30 * time.Second):
		t.Fatalf("the edge did not start\n%s", log())
	}
	go http.Get("http://" + edge + "/api/search") // held by the origin
	select {
	case <-got:
	case <-time.After(30 * time.Second):
		t.Fatalf("the request did not reach the origin\n%s", log())
	}

	cmd.Process.Signal(os.Interrupt)
	waitFor(t, "the first signal's notice", func(context.Context) error {
		if !strings.Contains(log(), "ratewarden: interrupt: stopping cleanly; a second signal stops at once") {
			return errors.New("not yet")
		}
		return nil
	})
	exited := make(chan error, 1)
	go func() { <-logDone; exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("the edge stopped with a request in flight and most of its grace left: %v\n%s", err, log())
	case <-time.After(time.Second):
	}
	cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGINT {
			t.Errorf("after the second signal: %v, want the end of SIGINT's default action\n%s", err, log())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the second signal did not stop the edge\n%s", log())
	}
}
