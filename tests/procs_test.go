package tests

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// storeProcess is a store server a test owns: started on a loopback port
// of its own, so that the test can crash it (SIGKILL) and start it again on
// the same port, as a store that fails and comes back does. Its output goes
// to a file in the test's temporary directory and is shown when it fails
// to start. Methods are called from the test goroutine only.
type storeProcess struct {
	t    *testing.T
	name string
	argv []string
	addr string
	log  string

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// startProcess picks a free loopback port, starts argv(port) and waits
// until it accepts connections. The process is killed when the test ends.
func startProcess(t *testing.T, name string, argv func(port int) []string) *storeProcess {
	t.Helper()
	port := freePort(t)
	p := &storeProcess{t: t, name: name, argv: argv(port), addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		log: filepath.Join(t.TempDir(), name+".log")}
	t.Cleanup(p.stop)
	p.start()
	return p
}

// freePort returns a loopback port the kernel just handed out. Another
// process could take it before the store binds it; on this scale of test
// that is rare, and the store's failure to start says so.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pick a port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// start starts the process (again, after crash) on its port and waits
// until it accepts connections.
func (p *storeProcess) start() {
	p.t.Helper()
	if p.running() {
		p.t.Fatalf("%s: start: already running", p.name)
	}
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatalf("%s: start: %v", p.name, err)
	}
	defer out.Close()
	fmt.Fprintf(out, "== %v\n", p.argv)
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("%s: start: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	p.cmd, p.done = cmd, done

	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			p.t.Fatalf("%s exited before accepting connections on %s: %v\n%s", p.name, p.addr, cmd.ProcessState, p.output())
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: not accepting connections on %s after 30s: %v\n%s", p.name, p.addr, err, p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// crash kills the process with SIGKILL, as a crash or an OOM kill does: it
// flushes nothing and closes its connections abruptly. It returns once the
// process has exited.
func (p *storeProcess) crash() {
	p.t.Helper()
	if !p.running() {
		p.t.Fatalf("%s: crash: not running", p.name)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.t.Fatalf("%s: kill: %v", p.name, err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.t.Fatalf("%s: still running 10s after SIGKILL", p.name)
	}
}

func (p *storeProcess) running() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop kills the process if it runs; it is the test's cleanup.
func (p *storeProcess) stop() {
	if p.running() {
		p.cmd.Process.Kill()
		<-p.done
	}
}

// output returns what the process wrote, for failure messages.
func (p *storeProcess) output() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	const keep = 4 << 10
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	return string(b)
}

// program returns the path of an executable on PATH. Outside tests/run a
// missing program skips the test, saying what installs it; under CI (CI
// set) it fails the test, so that nothing is skipped there, as
// awstest.Endpoint does for the shared stand-ins.
func program(t testing.TB, name, installedBy string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		missing(t, fmt.Sprintf("%s is not installed (%s installs it): %v", name, installedBy, err))
	}
	return p
}

// file returns path if it exists, under the same rule as program.
func file(t *testing.T, path, installedBy string) string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		missing(t, fmt.Sprintf("%s is missing (%s installs it): %v", path, installedBy, err))
	}
	return path
}

func missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg + "; run tests/run")
}
