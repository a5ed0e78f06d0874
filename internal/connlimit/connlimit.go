// Package connlimit caps the connections a server holds open at a time
// and, when the cap is reached, makes room by closing an idle one, as
// nginx does when it runs out of worker_connections: a keep-alive
// connection waiting for its next request, or a new one that has not sent
// a byte, is worth less than a connection that is waiting to be accepted.
//
// Without that, whoever holds the connections keeps them: a client (or a
// few, each under its own per-address cap) that opens them and sends a
// request just often enough to stay within the idle timeout would keep
// every other client in the kernel's backlog. With it, connections are
// only held by requests in progress, which the server's own timeouts
// bound (headers, body, each write of the response).
//
// The server tells the listener which connections are idle (Listener.Idle,
// from its connection-state hook). A connection waiting to be accepted
// when the cap is reached is taken from the kernel first, so there may be
// one connection over the cap, in the listener's hands, while an idle one
// closes or, when none is idle, until a busy one does.
package connlimit

import (
	"net"
	"sync"
	"sync/atomic"
)

// Listener is a net.Listener that holds at most its cap of connections
// open at a time.
type Listener struct {
	net.Listener
	sem     chan struct{} // a token per open connection
	done    chan struct{} // closed by Close
	close   sync.Once
	drained atomic.Int64
	// wanted is the number of idle connections to close: one for each
	// Accept waiting for room that has not had one closed for it.
	wanted atomic.Int64

	mu    sync.Mutex
	conns map[*conn]struct{}
}

// New caps ln at max open connections (max ≥ 1).
func New(ln net.Listener, max int) *Listener {
	return &Listener{
		Listener: ln,
		sem:      make(chan struct{}, max),
		done:     make(chan struct{}),
		conns:    make(map[*conn]struct{}),
	}
}

// Open is the number of connections open (accepted and not yet closed).
func (l *Listener) Open() int { return len(l.sem) }

// Drained is the number of idle connections closed to make room for a new
// one.
func (l *Listener) Drained() int64 { return l.drained.Load() }

// Idle tells the listener whether c, a connection it accepted, is idle: a
// new connection that has sent nothing yet, or a keep-alive one between
// requests (true), or busy with a request (false). A connection is idle
// from its accept until it is told otherwise. A connection that becomes
// idle while a new one waits for room is closed at once. Connections that
// are not the listener's own are ignored.
func (l *Listener) Idle(c net.Conn, idle bool) {
	lc, ok := c.(*conn)
	if !ok || lc.l != l {
		return
	}
	lc.idle.Store(idle)
	if idle && l.wanted.Load() > 0 && !lc.closed.Load() && take(&l.wanted) {
		l.drain(lc)
	}
}

// Accept waits for a connection and for room for it: when the cap is
// reached it closes an idle connection, or waits for one to close or to
// become idle (then it closes that one).
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	select {
	case l.sem <- struct{}{}:
	default:
		l.wanted.Add(1)
		l.drainOne()
		select {
		case l.sem <- struct{}{}:
			take(&l.wanted) // room came otherwise: want no more
		case <-l.done:
			take(&l.wanted)
			c.Close()
			return nil, net.ErrClosed
		}
	}
	lc := &conn{Conn: c, l: l}
	lc.idle.Store(true)
	l.mu.Lock()
	l.conns[lc] = struct{}{}
	l.mu.Unlock()
	return lc, nil
}

// take decrements n if it is positive, and reports whether it did.
func take(n *atomic.Int64) bool {
	for {
		v := n.Load()
		if v <= 0 {
			return false
		}
		if n.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

// drainOne closes one idle connection, if there is one and room is still
// wanted: whichever the walk of the open connections meets first, which is
// as good as any, as any idle connection's client can open another once it
// has something to send.
func (l *Listener) drainOne() {
	l.mu.Lock()
	var victim *conn
	for c := range l.conns {
		if c.idle.Load() {
			victim = c
			break
		}
	}
	l.mu.Unlock()
	if victim != nil && take(&l.wanted) {
		l.drain(victim)
	}
}

// drain closes c, an idle connection, to make room.
func (l *Listener) drain(c *conn) {
	l.drained.Add(1)
	c.Close()
}

// Close closes the listener; an Accept waiting for room returns
// net.ErrClosed.
func (l *Listener) Close() error {
	l.close.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// conn holds a token of its listener's semaphore until its first Close.
type conn struct {
	net.Conn
	l      *Listener
	idle   atomic.Bool
	closed atomic.Bool
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
		<-c.l.sem
	}
	return err
}
