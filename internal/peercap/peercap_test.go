package peercap

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serve accepts on l until it fails, sending each connection on the
// returned channel.
func serve(t *testing.T, l *Listener) <-chan net.Conn {
	t.Helper()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() { l.Close() })
	return accepted
}

func listen(t *testing.T, network, addr string, max int, key Key, onRefuse func(netip.Addr, int64)) *Listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	return New(ln, max, key, onRefuse)
}

func dialFrom(t *testing.T, from string, to net.Addr) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", to.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func next(t *testing.T, accepted <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c := <-accepted:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("nothing accepted")
		return nil
	}
}

func nothingAccepted(t *testing.T, accepted <-chan net.Conn) {
	t.Helper()
	select {
	case c := <-accepted:
		t.Fatalf("accepted a connection from %v past its cap", c.RemoteAddr())
	case <-time.After(100 * time.Millisecond):
	}
}

// isReset reports whether reading c ends in a reset, not an orderly close
// or a wait.
func isReset(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, syscall.ECONNRESET)
}

// refused reports whether a connection from from to to is reset: at once,
// or (on loopback the reset may beat the dial's return) as it is made.
func refused(t *testing.T, from string, to net.Addr) bool {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", to.String())
	if err != nil {
		return errors.Is(err, syscall.ECONNRESET)
	}
	defer c.Close()
	return isReset(t, c)
}

// openUnder is the number of capped connections open under k.
func openUnder(l *Listener, k netip.Addr) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.open[k])
}

func byAddr(a netip.Addr) (netip.Addr, bool) { return a, true }

// TestCapPerAddress: past two connections an address is reset at accept
// and its connection never reaches the server; another address is not
// held to the first's count; a closed connection gives its slot back, once
// however often it is closed.
func TestCapPerAddress(t *testing.T) {
	var mu sync.Mutex
	var told []string
	l := listen(t, "tcp", "127.0.0.1:0", 2, byAddr, func(a netip.Addr, n int64) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, a.String())
		if n != int64(len(told)) {
			t.Errorf("refusal %d told as %d", len(told), n)
		}
	})
	accepted := serve(t, l)
	a1 := dialFrom(t, "127.0.0.1", l.Addr())
	s1 := next(t, accepted)
	dialFrom(t, "127.0.0.1", l.Addr())
	next(t, accepted)
	if !refused(t, "127.0.0.1", l.Addr()) {
		t.Error("the third connection was not reset")
	}
	nothingAccepted(t, accepted)
	if l.Refused() != 1 || openUnder(l, netip.MustParseAddr("127.0.0.1")) != 2 {
		t.Errorf("refused %d, open %d; want 1, 2", l.Refused(), openUnder(l, netip.MustParseAddr("127.0.0.1")))
	}
	dialFrom(t, "127.0.0.2", l.Addr())
	next(t, accepted)

	s1.Close()
	s1.Close()
	a1.Close()
	if n := openUnder(l, netip.MustParseAddr("127.0.0.1")); n != 1 {
		t.Errorf("open after one close (twice): %d, want 1", n)
	}
	c := dialFrom(t, "127.0.0.1", l.Addr())
	s := next(t, accepted)
	if _, err := io.WriteString(s, "x"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Errorf("the connection that took the freed slot: %v", err)
	}
	if !refused(t, "127.0.0.1", l.Addr()) {
		t.Error("the third connection, once the slot was taken again, was not reset")
	}
	if nothingAccepted(t, accepted); l.Refused() != 2 {
		t.Errorf("refused %d, want 2", l.Refused())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 2 || told[0] != "127.0.0.1" || told[1] != "127.0.0.1" {
		t.Errorf("told of %v", told)
	}
}

// TestKeyDecides: the key groups addresses (two addresses under one key
// share its cap) and exempts them (an uncapped address is never counted),
// and an IPv4 client of a dual-stack listener is keyed by its IPv4
// address, not as ::ffff:a.b.c.d.
func TestKeyDecides(t *testing.T) {
	var seen []netip.Addr
	var mu sync.Mutex
	one := netip.MustParseAddr("192.0.2.1")
	l := listen(t, "tcp", "[::]:0", 1, func(a netip.Addr) (netip.Addr, bool) {
		mu.Lock()
		seen = append(seen, a)
		mu.Unlock()
		if a == netip.MustParseAddr("127.0.0.9") {
			return netip.Addr{}, false
		}
		return one, true
	}, nil)
	accepted := serve(t, l)
	port := l.Addr().(*net.TCPAddr).Port
	to := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	dialFrom(t, "127.0.0.1", to)
	next(t, accepted)
	if !refused(t, "127.0.0.2", to) {
		t.Error("a second address under the same key was not reset")
	}
	for range 3 {
		dialFrom(t, "127.0.0.9", to)
		if _, ok := next(t, accepted).(*net.TCPConn); !ok {
			t.Error("an uncapped connection was wrapped")
		}
	}
	if l.Refused() != 1 || openUnder(l, one) != 1 {
		t.Errorf("refused %d, open %d; want 1, 1", l.Refused(), openUnder(l, one))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range seen {
		if !a.Is4() {
			t.Errorf("keyed %v, want an IPv4 address", a)
		}
	}
}

// TestSetLinger: a wrapper around a capped connection can still make its
// close a reset.
func TestSetLinger(t *testing.T) {
	l := listen(t, "tcp", "127.0.0.1:0", 1, byAddr, nil)
	accepted := serve(t, l)
	c := dialFrom(t, "127.0.0.1", l.Addr())
	s := next(t, accepted)
	if err := s.(interface{ SetLinger(int) error }).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if !isReset(t, c) {
		t.Error("closed after SetLinger(0): not reset")
	}
}

// BenchmarkAccept is a connection's whole life on loopback (dial, accept,
// close both ends), on a plain listener and on one capped per address: the
// cap's bookkeeping (a lock, a map entry) is paid once a connection, not
// once a request.
func BenchmarkAccept(b *testing.B) {
	for _, capped := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "capped"}[capped], func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			if capped {
				ln = New(ln, 1000, byAddr, nil)
			}
			b.ReportAllocs()
			for b.Loop() {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				s, err := ln.Accept()
				if err != nil {
					b.Fatal(err)
				}
				s.Close()
				c.Close()
			}
		})
	}
}
