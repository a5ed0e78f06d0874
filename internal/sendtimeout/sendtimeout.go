// Package sendtimeout bounds how long a client may take to accept what a
// server writes to it, as nginx's send_timeout does: a client that stops
// reading its response (a slow-read attack) would otherwise hold its
// connection, and the server's share of connections, until it closes it.
//
// The bound is per write, not per response, so a long download or a
// stream goes on for as long as the client keeps reading: every write to
// a connection of Listener gets the timeout from its start to complete
// (less at most 1/64 of it: see package deadline), and a write of more than MaxChunk
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
	"time"

	"github.com/ratewarden/ratewarden/internal/deadline"
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
	return newConn(c, l.d, deadline.Keep(l.d)), nil
}

func newConn(c net.Conn, d, keep time.Duration) *conn {
	sc := &conn{Conn: c}
	sc.until.Init(d, keep)
	return sc
}

// conn sets its write deadline before each write of at most MaxChunk
// bytes, to d from the write's start, renewing it at most once every
// d/64 (package deadline). A deadline set by anyone else (net/http's
// server clears the write deadline after every response; both servers
// clear deadlines when they hand a connection over) is replaced at the
// next write: the bound holds whatever the server does with deadlines.
// (Like the connections of netutil.LimitListener, conn does not offer
// *net.TCPConn's CloseWrite.)
type conn struct {
	net.Conn
	// until is the write deadline conn set. Atomic: the servers write
	// from one goroutine at a time, but may set deadlines from another.
	until deadline.Renewing
}

func (c *conn) Write(p []byte) (n int, err error) {
	for n < len(p) {
		chunk := p[n:min(len(p), n+MaxChunk)]
		if t, ok := c.until.Next(); ok {
			if err := c.Conn.SetWriteDeadline(t); err != nil {
				c.until.Forget()
				return n, err
			}
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
	c.until.Forget()
	return c.Conn.SetWriteDeadline(t)
}

// SetDeadline sets the connection's read and write deadlines; the write
// deadline holds until the next write sets its own.
func (c *conn) SetDeadline(t time.Time) error {
	c.until.Forget()
	return c.Conn.SetDeadline(t)
}

// resetOnClose makes the connection's Close reset it, dropping what it
// has not sent (see the package doc).
func (c *conn) resetOnClose() {
	if l, ok := c.Conn.(interface{ SetLinger(sec int) error }); ok {
		l.SetLinger(0) // best effort: the connection is closed either way
	}
}
