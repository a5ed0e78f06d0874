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
// past max_connections a connection waits until another closes.
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
	srv := assemble.Server(cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
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

	// One connection at a time.
	first, firstR := dial()
	io.WriteString(first, "GET / HTTP/1.1\r\nHost: edge\r\n\r\n")
	if s, err := status(first, firstR, 10*time.Second); s != 200 {
		t.Fatalf("first connection: %d %v", s, err)
	}
	second, secondR := dial()
	io.WriteString(second, "GET / HTTP/1.1\r\nHost: edge\r\n\r\n")
	if s, err := status(second, secondR, 100*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("second connection while the first is open: %d %v, want no answer", s, err)
	}
	first.Close()
	if s, err := status(second, secondR, 10*time.Second); s != 200 {
		t.Errorf("second connection once the first closed: %d %v", s, err)
	}
}
