package connlimit

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

func listen(t *testing.T, max int) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(ln, max)
	t.Cleanup(func() { l.Close() })
	return l
}

func dial(t *testing.T, l *Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// accept runs one Accept in the background.
func accept(l *Listener) <-chan net.Conn {
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(ch)
			return
		}
		ch <- c
	}()
	return ch
}

func got(t *testing.T, ch <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c, ok := <-ch:
		if !ok {
			t.Fatal("Accept failed")
		}
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not return")
		return nil
	}
}

func waits(t *testing.T, ch <-chan net.Conn) {
	t.Helper()
	select {
	case c := <-ch:
		t.Fatalf("Accept returned %v past the cap", c)
	case <-time.After(100 * time.Millisecond):
	}
}

// closed reports whether the server closed the client's connection c.
func closed(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return err == io.EOF
}

// TestDrainsAnIdleConnection: at the cap a new connection takes the place
// of an idle one, never of a busy one.
func TestDrainsAnIdleConnection(t *testing.T) {
	l := listen(t, 2)
	busyC := dial(t, l)
	busy := got(t, accept(l))
	l.Idle(busy, false)
	idleC := dial(t, l)
	got(t, accept(l))
	dial(t, l)
	got(t, accept(l))
	if !closed(t, idleC) {
		t.Error("the idle connection was not closed")
	}
	busyC.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := busyC.Read(make([]byte, 1)); !isTimeout(err) {
		t.Errorf("the busy connection: %v, want it open", err)
	}
	if l.Drained() != 1 || l.Open() != 2 {
		t.Errorf("drained %d, open %d; want 1, 2", l.Drained(), l.Open())
	}
}

// TestDrainsTheLongestIdle: at the cap the connection closed is the one
// idle the longest, whether it has sent nothing since its accept or went
// idle after a request; one that went busy and idle again goes to the
// back.
func TestDrainsTheLongestIdle(t *testing.T) {
	l := listen(t, 3)
	var clients, servers [3]net.Conn
	for i := range clients {
		clients[i] = dial(t, l)
		servers[i] = got(t, accept(l))
	}
	// 0 serves a request: it is now the last to have been idle. 1 goes
	// busy and stays so.
	l.Idle(servers[0], false)
	l.Idle(servers[0], true)
	l.Idle(servers[0], true) // told idle again: keeps its place
	l.Idle(servers[1], false)
	// The first newcomer takes 2's place (idle since its accept), the
	// second 0's, the third the first newcomer's.
	newcomer := dial(t, l)
	got(t, accept(l))
	for _, want := range []int{2, 0} {
		if !closed(t, clients[want]) {
			t.Fatalf("connection %d, idle the longest, was not closed", want)
		}
		dial(t, l)
		got(t, accept(l))
	}
	if !closed(t, newcomer) {
		t.Fatal("the first newcomer, idle the longest, was not closed")
	}
	clients[1].SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := clients[1].Read(make([]byte, 1)); !isTimeout(err) {
		t.Errorf("the busy connection: %v, want it open", err)
	}
	if l.Drained() != 3 || l.Open() != 3 {
		t.Errorf("drained %d, open %d; want 3, 3", l.Drained(), l.Open())
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// waiting fills l's one slot with a busy connection and starts an Accept
// for a second, which waits: it returns the busy connection (the server's
// and the client's ends), the second's client end and the Accept.
func waiting(t *testing.T, l *Listener) (busy, busyC, nextC net.Conn, ch <-chan net.Conn) {
	t.Helper()
	busyC = dial(t, l)
	busy = got(t, accept(l))
	l.Idle(busy, false)
	nextC = dial(t, l)
	ch = accept(l)
	waits(t, ch)
	return busy, busyC, nextC, ch
}

// TestWaitsForIdle: when every connection is busy, a new one waits, and
// takes the place of the first that becomes idle.
func TestWaitsForIdle(t *testing.T) {
	l := listen(t, 1)
	first, firstC, _, ch := waiting(t, l)
	l.Idle(first, true)
	got(t, ch)
	if !closed(t, firstC) {
		t.Error("the connection that became idle was not closed")
	}
	if l.Drained() != 1 {
		t.Errorf("drained %d, want 1", l.Drained())
	}
}

// TestHeldBackResponseNotClosed: a connection told idle and at once busy
// again, as fasthttp tells one whose response it holds back for a
// pipelined request, is not closed for a new one that waits; it is once it
// has stayed idle for the grace.
func TestHeldBackResponseNotClosed(t *testing.T) {
	l := listen(t, 1)
	l.grace = 200 * time.Millisecond // wide, so that a loaded machine does not close it between the two calls
	first, firstC, _, ch := waiting(t, l)
	l.Idle(first, true)
	l.Idle(first, false)
	waits(t, ch)
	firstC.SetReadDeadline(time.Now().Add(l.grace))
	if _, err := firstC.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("a connection idle for a moment: %v, want it open", err)
	}
	l.Idle(first, true)
	got(t, ch)
	if !closed(t, firstC) {
		t.Error("the connection that stayed idle was not closed")
	}
	if l.Drained() != 1 {
		t.Errorf("drained %d, want 1", l.Drained())
	}
}

// TestWaitsForClose: a connection that closes makes room too, and then
// nothing idle is closed: a connection that becomes idle later stays.
func TestWaitsForClose(t *testing.T) {
	l := listen(t, 1)
	first, _, secondC, ch := waiting(t, l)
	first.Close()
	first.Close()
	second := got(t, ch)
	l.Idle(second, false)
	l.Idle(second, true)
	secondC.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := secondC.Read(make([]byte, 1)); !isTimeout(err) {
		t.Errorf("an idle connection nobody waits for: %v, want it open", err)
	}
	if l.Drained() != 0 || l.Open() != 1 {
		t.Errorf("drained %d, open %d; want 0, 1", l.Drained(), l.Open())
	}
}

// TestCloseWhileWaiting: closing the listener ends an Accept that waits
// for room, and closes the connection it holds.
func TestCloseWhileWaiting(t *testing.T) {
	l := listen(t, 1)
	_, _, heldC, ch := waiting(t, l)
	l.Close()
	select {
	case _, ok := <-ch:
		if ok {
			t.Error("Accept returned a connection after Close")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept still waits after Close")
	}
	if !closed(t, heldC) {
		t.Error("the held connection was not closed")
	}
}

// TestForeignConnIgnored: Idle on a connection of another listener, or on
// none of a listener's, changes nothing.
func TestForeignConnIgnored(t *testing.T) {
	l, other := listen(t, 1), listen(t, 1)
	dial(t, other)
	theirs := got(t, accept(other))
	dial(t, l)
	ours := got(t, accept(l))
	l.Idle(ours, false)
	dial(t, l)
	ch := accept(l)
	waits(t, ch)
	l.Idle(theirs, true)
	p, q := net.Pipe()
	defer p.Close()
	defer q.Close()
	l.Idle(p, true)
	waits(t, ch)
	ours.Close()
	got(t, ch)
	if l.Drained() != 0 || other.Drained() != 0 {
		t.Errorf("drained %d and %d, want none", l.Drained(), other.Drained())
	}
}

// TestNeverOverTheCap: clients that connect, go busy and idle and close
// in any order never leave more than the cap open, and every slot comes
// back.
func TestNeverOverTheCap(t *testing.T) {
	const max = 4
	l := listen(t, max)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if n := l.Open(); n > max {
				t.Errorf("%d open, cap %d", n, max)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 1)
				for {
					l.Idle(c, true)
					if _, err := c.Read(buf); err != nil {
						c.Close()
						return
					}
					l.Idle(c, false)
					if _, err := c.Write(buf); err != nil {
						c.Close()
						return
					}
				}
			}()
		}
	}()
	var clients sync.WaitGroup
	for i := range 40 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			buf := make([]byte, 1)
			for range i % 5 {
				if _, err := c.Write(buf); err != nil {
					return // drained: it was idle
				}
				if _, err := c.Read(buf); err != nil {
					return
				}
			}
		}()
	}
	clients.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for l.Open() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := l.Open(); n != 0 {
		t.Errorf("%d open after every client closed", n)
	}
	l.Close()
	wg.Wait()
}

// BenchmarkIdle is what a request adds to the server's work: it is told
// busy, then idle again (two connection-state hooks), with nobody waiting
// for room.
func BenchmarkIdle(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	l := New(ln, 10)
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	for b.Loop() {
		l.Idle(s, false)
		l.Idle(s, true)
	}
}

// BenchmarkIdleParallel is BenchmarkIdle on as many connections as
// goroutines, each told busy and idle in turn, as under a server's load.
func BenchmarkIdleParallel(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	l := New(ln, 1024)
	defer l.Close()
	var mu sync.Mutex
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		mu.Lock()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			mu.Unlock()
			b.Error(err)
			return
		}
		s, err := l.Accept()
		mu.Unlock()
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		defer s.Close()
		for pb.Next() {
			l.Idle(s, false)
			l.Idle(s, true)
		}
	})
}
