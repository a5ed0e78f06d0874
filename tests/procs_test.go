package tests

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

	ready func(addr string) error // nil: accepting connections is serving

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// startProcess picks a free loopback port, starts argv(port) and waits
// until it serves: until ready(addr) succeeds, or, with ready nil, until it
// accepts connections. The process is killed when the test ends.
//
// A process that exits before it serves because a port it binds is taken
// is started again on another port, up to five times. The port freePort
// handed out can go to another process before this one binds it, and a
// Redis Cluster node also binds its bus port, the port + 10000, which is
// not checked at all: in CI, among the other packages' connections, a
// node once listened on its port, then found its bus port taken and
// exited, and the cluster test failed on a refused connection.
func startProcess(t *testing.T, name string, argv func(port int) []string, ready func(addr string) error) *storeProcess {
	t.Helper()
	log := filepath.Join(t.TempDir(), name+".log")
	for attempt := 1; ; attempt++ {
		port := freePort(t)
		p := &storeProcess{t: t, name: name, argv: argv(port), addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			log: log, ready: ready}
		err := p.launch()
		if err == nil {
			t.Cleanup(p.stop)
			return p
		}
		if !errors.Is(err, errPortTaken) || attempt == 5 {
			t.Fatal(err)
		}
		t.Logf("%v; starting it on another port", err)
	}
}

// freePort returns a loopback port the kernel just handed out. Another
// process could take it before the store binds it (startProcess then
// starts the store on another).
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pick a port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// errPortTaken is launch's error for a process that exited before it
// served, saying that an address it binds is in use.
var errPortTaken = errors.New("a port it binds is taken")

// start starts the process again, after crash, on its port and waits
// until it serves.
func (p *storeProcess) start() {
	p.t.Helper()
	if err := p.launch(); err != nil {
		p.t.Fatal(err)
	}
}

// launch starts the process on its port and waits until it serves. On an
// error the process is no longer running.
func (p *storeProcess) launch() error {
	if p.running() {
		return fmt.Errorf("%s: start: already running", p.name)
	}
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: start: %v", p.name, err)
	}
	defer out.Close()
	fmt.Fprintf(out, "== %v\n", p.argv)
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: start: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	p.cmd, p.done = cmd, done

	deadline := time.Now().Add(30 * time.Second)
	for {
		err := p.serves()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			output := p.output()
			if strings.Contains(output, "Address already in use") || strings.Contains(output, "EADDRINUSE") {
				return fmt.Errorf("%s on %s exited before it served, %w (%v):\n%s", p.name, p.addr, errPortTaken, cmd.ProcessState, output)
			}
			return fmt.Errorf("%s exited before it served on %s: %v\n%s", p.name, p.addr, cmd.ProcessState, output)
		default:
		}
		if time.Now().After(deadline) {
			p.stop()
			return fmt.Errorf("%s: not serving on %s after 30s: %v\n%s", p.name, p.addr, err, p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serves reports whether the process serves: whether its ready check
// passes, or, with none, whether its port accepts a connection.
func (p *storeProcess) serves() error {
	if p.ready != nil {
		return p.ready(p.addr)
	}
	c, err := net.DialTimeout("tcp", p.addr, 200*time.Millisecond)
	if err == nil {
		c.Close()
	}
	return err
}

// redisPing is the ready check of a redis-server: it answers PING. A
// Redis Cluster node accepts connections before it binds its bus port,
// and exits if it cannot; it answers commands only after.
func redisPing(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return pingRedis(ctx, addr)
}

// pingRedis sends one PING to the redis-server at addr, without retries.
func pingRedis(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	return c.Ping(ctx).Err()
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
