// Package sendtimeout bounds how long a client may take to accept what a
// server writes to it, as nginx's send_timeout does: a client that stops
// reading its response (a slow-read attack) would otherwise hold its
// connection, and the server's share of connections, until it closes it.
//
// The bound is per write, not per response, so a long download or a
// stream goes on for as long as the client keeps reading: every write to
// a connection of Listener gets the timeout from its start to complete
// (less at most 1/64 of it: see conn), and a write of more than MaxChunk
// bytes is made of writes of MaxChunk.
// A client must therefore accept MaxChunk bytes (or the whole write, if
// less) within the timeout; at the 60 s nginx defaults to, that is a
// reader slower than about 1 KiB a second. A write that does not complete
// in time fails with an error for which os.ErrDeadlineExceeded holds
// (and net.Error's Timeout), and the connection is of no further use: the
// server closes it.
//
// Closing it then resets it (SO_LINGER 0, as nginx's
// reset_timedout_connection does), so that what the client did not read
// is dropped at once: a socket closed the usual way keeps its unsent
// bytes, up to the kernel's send buffer of several MiB, for as long as
// the client keeps its window almost shut, and a slow reader would hold
// that memory instead of a connection.
package sendtimeout

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// MaxChunk is the most a write of a connection of Listener hands to the
// connection under one deadline.
const MaxChunk = 64 << 10

// Listener returns ln with each accepted connection's writes bounded by
// d (see the package doc); d ≤ 0 returns ln itself.
func Listener(ln net.Listener, d time.Duration) net.Listener {
	if d <= 0 {
		return ln
	}
	return &listener{Listener: ln, d: d}
}

type listener struct {
	net.Listener
	d time.Duration
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newConn(c, l.d, l.d-l.d/renew), nil
}

func newConn(c net.Conn, d, keep time.Duration) *conn {
	return &conn{Conn: c, d: d, keep: keep}
}

// conn sets its write deadline before each write of at most MaxChunk
// bytes, to d from the write's start; a deadline it set that is still
// more than keep (d - d/renew) away is kept, so that a connection writing
// many responses in a row renews it once every d/renew rather than at
// every write (the renewal costs a timer update; the clock read, about
// 50 ns, is all the rest pay). A deadline set by anyone else (net/http's
// server clears the write deadline after every response; both servers
// clear deadlines when they hand a connection over) is replaced at the
// next write: the bound holds whatever the server does with deadlines.
// (Like the connections of netutil.LimitListener, conn does not offer
// *net.TCPConn's CloseWrite.)
type conn struct {
	net.Conn
	d, keep time.Duration
	// until is the write deadline conn set, as time since epoch; 0 when
	// it set none or another was set since. Atomic: the servers write
	// from one goroutine at a time, but may set deadlines from another.
	until atomic.Int64
}

// epoch is what conn's deadlines are counted from (monotonic).
var epoch = time.Now()

// renew is the share of the timeout a write may lose to a deadline set
// earlier: each write gets at least d - d/renew.
const renew = 64

func (c *conn) Write(p []byte) (n int, err error) {
	for n < len(p) {
		chunk := p[n:min(len(p), n+MaxChunk)]
		if now := time.Since(epoch); time.Duration(c.until.Load())-now < c.keep {
			until := now + c.d
			if err := c.Conn.SetWriteDeadline(epoch.Add(until)); err != nil {
				return n, err
			}
			c.until.Store(int64(until))
		}
		m, err := c.Conn.Write(chunk)
		n += m
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				c.resetOnClose()
			}
			return n, err
		}
	}
	return n, nil
}

// SetWriteDeadline sets the connection's write deadline until the next
// write sets its own.
func (c *conn) SetWriteDeadline(t time.Time) error {
	c.until.Store(0)
	return c.Conn.SetWriteDeadline(t)
}

// SetDeadline sets the connection's read and write deadlines; the write
// deadline holds until the next write sets its own.
func (c *conn) SetDeadline(t time.Time) error {
	c.until.Store(0)
	return c.Conn.SetDeadline(t)
}

// resetOnClose makes the connection's Close reset it, dropping what it
// has not sent (see the package doc).
func (c *conn) resetOnClose() {
	if l, ok := c.Conn.(interface{ SetLinger(sec int) error }); ok {
		l.SetLinger(0) // best effort: the connection is closed either way
	}
}
