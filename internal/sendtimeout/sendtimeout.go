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
	return &conn{Conn: c, d: l.d, keep: l.d - l.d/renew}, nil
}

// conn sets its write deadline before each write of at most MaxChunk
// bytes, to d from the write's start; a deadline that is still more than
// d - d/renew away is kept, so that a connection writing many responses
// in a row renews it once every d/renew rather than at every write (the
// renewal costs a timer update; the clock read, about 50 ns, is all
// the rest pay). Its other methods are its connection's: a write deadline
// the server sets itself is replaced at the next renewal. (Like the
// connections of netutil.LimitListener, it does not offer *net.TCPConn's
// CloseWrite.)
type conn struct {
	net.Conn
	d     time.Duration
	keep  time.Duration // a deadline further away than this is kept
	until time.Time     // the write deadline set, zero for none
}

// renew is the share of the timeout a write may lose to a deadline set
// earlier: each write gets at least d - d/renew.
const renew = 64

func (c *conn) Write(p []byte) (n int, err error) {
	for n < len(p) {
		chunk := p[n:min(len(p), n+MaxChunk)]
		if now := time.Now(); c.until.Sub(now) < c.keep {
			c.until = now.Add(c.d)
			if err := c.Conn.SetWriteDeadline(c.until); err != nil {
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

// resetOnClose makes the connection's Close reset it, dropping what it
// has not sent (see the package doc).
func (c *conn) resetOnClose() {
	if l, ok := c.Conn.(interface{ SetLinger(sec int) error }); ok {
		l.SetLinger(0) // best effort: the connection is closed either way
	}
}
