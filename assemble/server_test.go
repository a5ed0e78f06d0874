package assemble_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/assemble"
)

// TestServerLimits holds the listener and server to edge.client: a client
// that does not finish its headers is cut off after header_timeout, and
// past max_connections a connection waits until another is closed or
// becomes idle, which is then closed to make room.
func TestServerLimits(t *testing.T) {
	cfg := loadConfig(t, `
edge:
  listen: 127.0.0.1:0
  client:
    header_timeout: 200ms
    max_connections: 1
tiers:
  anonymous:
    global: {limit: 100}
`)
	ln, err := assemble.Listen(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	srv := assemble.Server(cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		io.WriteString(w, "ok")
	}), ln)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	status := func(c net.Conn, r *bufio.Reader, wait time.Duration) (int, error) {
		c.SetReadDeadline(time.Now().Add(wait))
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	// Headers that never end: the connection is closed after 200ms.
	slow, slowR := dial()
	io.WriteString(slow, "GET / HTTP/1.1\r\nHost: edge\r\nX-Slow: ")
	start := time.Now()
	if _, err := status(slow, slowR, 10*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("unfinished headers: %v, want the connection closed", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("closed after %v, want about 200ms", took)
	}

	// One connection at a time: a second waits while the first is busy,
	// and takes its place once it is idle.
	first, firstR := dial()
	io.WriteString(first, "GET /slow HTTP/1.1\r\nHost: edge\r\n\r\n")
	<-entered
	second, secondR := dial()
	io.WriteString(second, "GET / HTTP/1.1\r\nHost: edge\r\n\r\n")
	if s, err := status(second, secondR, 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("second connection while the first is busy: %d %v, want no answer", s, err)
	}
	close(release)
	if s, err := status(first, firstR, 10*time.Second); s != 200 {
		t.Fatalf("first connection: %d %v", s, err)
	}
	if s, err := status(second, secondR, 10*time.Second); s != 200 {
		t.Fatalf("second connection once the first was idle: %d %v", s, err)
	}
	first.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := firstR.ReadByte(); err != io.EOF {
		t.Errorf("the first connection, idle while the second waited: %v, want it closed", err)
	}
	// Nobody waits: the second connection, idle, stays open.
	time.Sleep(100 * time.Millisecond)
	io.WriteString(second, "GET / HTTP/1.1\r\nHost: edge\r\n\r\n")
	if s, err := status(second, secondR, 10*time.Second); s != 200 {
		t.Errorf("the second connection's next request: %d %v", s, err)
	}
}
