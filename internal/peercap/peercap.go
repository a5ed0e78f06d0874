// Package peercap caps the connections one client address may hold open
// at a time, as nginx's limit_conn does, so that one address cannot take
// every connection a server allows (its max_connections) and keep them,
// idle or dribbling, until nobody else gets in.
//
// The cap is taken at accept: a connection past its address's cap is
// reset at once (SO_LINGER 0: no FIN handshake, no TIME_WAIT left behind
// by an address that reconnects in a loop) and the listener goes on to
// the next, so a refused connection never reaches the server nor takes a
// slot of a listener around this one. Which connections are capped, and
// under which key, is the caller's: a trusted proxy, which carries many
// clients' connections, is left uncapped, and the IPv6 addresses of one
// allocation share a key, as they share a rate-limit counter.
package peercap

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/ratewarden/ratewarden/internal/clientip"
)

// Key returns the key a connection from a is capped under, and false when
// it is not capped. a is unmapped (an IPv4 client never arrives as
// ::ffff:a.b.c.d) and has no zone.
type Key func(a netip.Addr) (netip.Addr, bool)

// Listener is a net.Listener whose connections count against their key's
// cap until they are closed.
type Listener struct {
	net.Listener
	max     int32
	key     Key
	refused atomic.Int64
	// onRefuse, when not nil, is told of each refusal (outside mu).
	onRefuse func(a netip.Addr, refused int64)

	mu   sync.Mutex
	open map[netip.Addr]int32 // open connections by key; no zero entries
}

// New caps ln's connections at max per key (max ≥ 1). onRefuse, when not
// nil, is called with the address of each refused connection and the
// refusals so far (for a log line: Listener does not log).
func New(ln net.Listener, max int, key Key, onRefuse func(a netip.Addr, refused int64)) *Listener {
	return &Listener{Listener: ln, max: int32(min(max, 1<<30)), key: key, onRefuse: onRefuse, open: make(map[netip.Addr]int32)}
}

// Refused is the number of connections reset for being over their cap.
func (l *Listener) Refused() int64 { return l.refused.Load() }

// Accept returns the next connection within its cap. Connections over
// their cap are reset and counted (Refused) without returning; an error of
// the listener returns at once.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tcp, ok := c.RemoteAddr().(*net.TCPAddr)
		if !ok {
			return c, nil // not a network peer (a pipe in a test): nothing to key
		}
		a := clientip.Of(tcp.AddrPort().Addr())
		k, capped := l.key(a)
		if !capped {
			return c, nil
		}
		l.mu.Lock()
		n := l.open[k]
		if n < l.max {
			l.open[k] = n + 1
		}
		l.mu.Unlock()
		if n < l.max {
			return &conn{Conn: c, l: l, k: k}, nil
		}
		reset(c)
		refused := l.refused.Add(1)
		if l.onRefuse != nil {
			l.onRefuse(a, refused)
		}
	}
}

// release gives k's slot back.
func (l *Listener) release(k netip.Addr) {
	l.mu.Lock()
	if n := l.open[k] - 1; n > 0 {
		l.open[k] = n
	} else {
		delete(l.open, k)
	}
	l.mu.Unlock()
}

// reset closes c without a FIN handshake, dropping anything unsent.
func reset(c net.Conn) {
	if t, ok := c.(interface{ SetLinger(sec int) error }); ok {
		t.SetLinger(0) // best effort: c is closed either way
	}
	c.Close()
}

// conn holds a slot of its key until its first Close.
type conn struct {
	net.Conn
	l      *Listener
	k      netip.Addr
	closed atomic.Bool
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.release(c.k)
	}
	return err
}

// SetLinger passes to the connection's own (a *net.TCPConn's), so that a
// wrapper that resets a connection (package internal/sendtimeout) still
// can; it does nothing for a connection that has none.
func (c *conn) SetLinger(sec int) error {
	if t, ok := c.Conn.(interface{ SetLinger(sec int) error }); ok {
		return t.SetLinger(sec)
	}
	return nil
}
