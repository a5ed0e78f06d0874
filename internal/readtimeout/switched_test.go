package readtimeout

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// switchingOrigin answers every request 101 and then, on the connection
// it took over, does what talk does; the connection's read side, once
// talk returns, tells originEnded when the proxy closed it.
func switchingOrigin(t *testing.T, talk func(rw *bufio.ReadWriter), originEnded chan<- error) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
		rw.Flush()
		talk(rw)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.Copy(io.Discard, rw)
		originEnded <- err
	}))
	t.Cleanup(srv.Close)
	return srv
}

// upgrade sends an upgrade request through c and returns the switched
// connection.
func upgrade(t *testing.T, c *http.Client, url string) io.ReadWriteCloser {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "test")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		t.Fatalf("the body of a 101, %T, cannot be written to: no proxy could switch protocols through it", resp.Body)
	}
	return rwc
}

// TestSwitchedSilentOriginIsClosed: on a switched connection (WebSocket)
// bytes pass both ways, and an origin that then stays silent has the
// connection closed once a read waited the timeout, on the origin's side
// too; it is not reported as a response's timed-out body.
func TestSwitchedSilentOriginIsClosed(t *testing.T) {
	const d = 200 * time.Millisecond
	ended := make(chan error, 1)
	srv := switchingOrigin(t, func(rw *bufio.ReadWriter) {
		// An echo of one line, then silence.
		line, err := rw.ReadString('\n')
		if err != nil {
			t.Error(err)
			return
		}
		rw.WriteString(line)
		rw.Flush()
	}, ended)
	c := client(d, func(*http.Request) { t.Error("a switched connection's read was reported as a body's") })
	conn := upgrade(t, c, srv.URL)
	defer conn.Close()
	if _, err := io.WriteString(conn, "hello\n"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 6)
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != "hello\n" {
		t.Fatalf("echo %q, %v", got, err)
	}
	read := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := conn.Read(make([]byte, 1))
		read <- err
	}()
	select {
	case err := <-read:
		if !errors.Is(err, ErrTimeout) {
			t.Errorf("the read ended with %v, want ErrTimeout", err)
		}
		if took := time.Since(start); took < d*63/64 {
			t.Errorf("closed after %v, before the timeout of %v", took, d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a switched connection whose origin is silent was still open after 10 s")
	}
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("the origin's side ended with %v, want the connection closed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the origin's side of the connection was still open after 10 s")
	}
}

// TestSwitchedFlowingIsNot: a switched connection on which the origin
// keeps sending is never cut off, however long it lasts.
func TestSwitchedFlowingIsNot(t *testing.T) {
	const d = 300 * time.Millisecond
	ended := make(chan error, 1)
	srv := switchingOrigin(t, func(rw *bufio.ReadWriter) {
		for range dripChunks {
			rw.WriteString("d")
			rw.Flush()
			time.Sleep(20 * time.Millisecond)
		}
	}, ended)
	c := client(d, func(*http.Request) { t.Error("timed out") })
	conn := upgrade(t, c, srv.URL)
	start := time.Now()
	got := make([]byte, dripChunks)
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatalf("read %q, then %v", got, err)
	}
	took := time.Since(start)
	conn.Close()
	if took < 2*d {
		// Not a failure of the code: the test did not show what it is for.
		t.Fatalf("the origin sent for %v, under twice the timeout: faster than the test means it to", took)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("closing the switched connection did not close the origin's side")
	}
}
