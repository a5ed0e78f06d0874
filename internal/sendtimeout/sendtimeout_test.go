package sendtimeout

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/deadline"
)

// smallBuffers is a listener whose connections have a small send buffer,
// so that what a server writes waits on its client's reading rather than
// on the kernel's room for it.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		err = c.(*net.TCPConn).SetWriteBuffer(16 << 10)
	}
	return c, err
}

// pair returns a server connection accepted by Listener(…, d) and the
// client's end, with a receive buffer of rcvbuf bytes unless it is 0.
func pair(t testing.TB, d time.Duration, rcvbuf int) (server net.Conn, client *net.TCPConn) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := Listener(smallBuffers{raw}, d)
	defer ln.Close()
	c, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client = c.(*net.TCPConn)
	if rcvbuf > 0 {
		if err := client.SetReadBuffer(rcvbuf); err != nil {
			t.Fatal(err)
		}
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// TestStalledReaderIsCutOff: a write to a client that reads nothing fails
// with a timeout once the kernel's buffers are full, having written part
// of it, as a server sees it; closing the connection then resets it, so
// that the client does not go on getting what the kernel held.
func TestStalledReaderIsCutOff(t *testing.T) {
	server, client := pair(t, 100*time.Millisecond, 4<<10)
	p := make([]byte, 64<<20)
	n, err := server.Write(p)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("wrote %d bytes, then %v: want a timeout", n, err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%v is not a net.Error timing out", err)
	}
	if n >= len(p) {
		t.Fatalf("wrote all %d bytes to a client that reads nothing", n)
	}
	server.Close()
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.Copy(io.Discard, client)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the client read %d of the %d bytes written, then %v: want the connection reset", got, n, err)
	}
}

// TestDeadlinesOfTheServer: a server that clears the write deadline
// between two responses (net/http's does, after every one) or sets one of
// its own does not lift the bound from the next write, even one right
// after the deadline was last set.
func TestDeadlinesOfTheServer(t *testing.T) {
	for _, set := range []struct {
		name string
		f    func(c net.Conn) error
	}{
		{"write deadline cleared", func(c net.Conn) error { return c.SetWriteDeadline(time.Time{}) }},
		{"deadlines cleared", func(c net.Conn) error { return c.SetDeadline(time.Time{}) }},
		{"a later write deadline", func(c net.Conn) error { return c.SetWriteDeadline(time.Now().Add(time.Hour)) }},
	} {
		t.Run(set.name, func(t *testing.T) {
			// A timeout long enough that the deadline the first write
			// sets is still one to keep when the second comes (big is
			// made before, so that its making does not come between).
			big := make([]byte, 64<<20)
			server, _ := pair(t, 3*time.Second, 4<<10)
			if _, err := server.Write([]byte("HTTP/1.1 200 OK\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			if err := set.f(server); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := server.Write(big)
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("the write to a client that reads nothing ended with %v, want a timeout", err)
				}
			case <-time.After(10 * time.Second):
				server.Close() // ends the write
				<-done
				t.Fatal("the write to a client that reads nothing was still under way after 10 s")
			}
		})
	}
}

// TestSteadyReaderIsNot: a client that keeps reading is never cut off,
// even when one write takes far longer than the timeout, and gets every
// byte in order; the bound is per chunk of a write.
func TestSteadyReaderIsNot(t *testing.T) {
	const d = 400 * time.Millisecond
	server, client := pair(t, d, 0)
	p := make([]byte, 24*MaxChunk)
	for i := range p {
		p[i] = byte(i / 997)
	}
	got := make(chan []byte, 1)
	go func() {
		// 32 KiB every 25 ms: about 1.3 MB a second, so a chunk takes
		// some 50 ms and the whole write well over a second.
		var b bytes.Buffer
		buf := make([]byte, 32<<10)
		for b.Len() < len(p) {
			time.Sleep(25 * time.Millisecond)
			n, err := io.ReadFull(client, buf[:min(len(buf), len(p)-b.Len())])
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		got <- b.Bytes()
	}()
	start := time.Now()
	n, err := server.Write(p)
	took := time.Since(start)
	if err != nil || n != len(p) {
		t.Fatalf("wrote %d of %d bytes in %v: %v", n, len(p), took, err)
	}
	if b := <-got; !bytes.Equal(b, p) {
		t.Fatalf("the client read %d bytes, not the %d written", len(b), len(p))
	}
	if took < 2*d {
		// Not a failure of the code: the test did not show what it is for.
		t.Fatalf("the write took %v, under twice the timeout: the client read faster than the test means it to", took)
	}
}

// TestZeroIsNone: no timeout leaves the listener as it is.
func TestZeroIsNone(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if ln := Listener(raw, 0); ln != raw {
		t.Fatalf("Listener(ln, 0) is %T, want ln", ln)
	}
}

// BenchmarkWrite is what the deadline adds to a write of a small
// response: raw is the connection as accepted, bounded is Listener's,
// and every-write the same with its deadline set at every write (as it
// was before a deadline far enough away was kept).
func BenchmarkWrite(b *testing.B) {
	for _, kind := range []string{"raw", "bounded", "every-write"} {
		b.Run(kind, func(b *testing.B) {
			raw, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer raw.Close()
			c, err := net.Dial("tcp", raw.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			go io.Copy(io.Discard, c)
			var server net.Conn
			if server, err = raw.Accept(); err != nil {
				b.Fatal(err)
			}
			defer server.Close()
			switch kind {
			case "bounded":
				server = newConn(server, time.Minute, deadline.Keep(time.Minute))
			case "every-write":
				server = newConn(server, time.Minute, time.Minute)
			}
			p := make([]byte, 512)
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := server.Write(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
