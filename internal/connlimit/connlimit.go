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
// from its connection-state hook). The connection closed is the one idle
// the longest, as nginx closes its least recently used: a keep-alive
// connection whose client is between two requests of a page, or whose
// response the server still holds back for a pipelined request (fasthttp),
// goes last. A connection waiting to be accepted
// when the cap is reached is taken from the kernel first, so there may be
// one connection over the cap, in the listener's hands, while an idle one
// closes or, when none is idle, until a busy one does.
//
// When every connection is busy, the new one waits, and the first to
// become idle is closed for it once it has stayed idle for Grace: a server
// reports a connection idle for a moment between two requests its client
// pipelined (fasthttp even while it holds the first answer back for the
// second), and closing it then would lose their answers.
package connlimit

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Grace is how long a connection that becomes idle while a new one waits
// for room must stay idle before it is closed for it: far longer than a
// pipelining server takes from one request to the next already received,
// and short beside the wait of a connection in the backlog.
const Grace = 10 * time.Millisecond

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
	grace  time.Duration // Grace; tests set it
	armed  atomic.Bool   // a drain is due in grace

	mu   sync.Mutex
	idle ring // the idle connections, the one idle longest first
}

// ring is a list of connections, linked through their prev and next; the
// zero ring is empty (its links are set on first use).
type ring struct{ head conn }

func (r *ring) first() *conn {
	if r.head.next == nil || r.head.next == &r.head {
		return nil
	}
	return r.head.next
}

// pushBack links c last. c is not linked.
func (r *ring) pushBack(c *conn) {
	if r.head.next == nil {
		r.head.next, r.head.prev = &r.head, &r.head
	}
	c.prev, c.next = r.head.prev, &r.head
	c.prev.next, r.head.prev = c, c
}

// remove unlinks c, if it is linked.
func (r *ring) remove(c *conn) {
	if c.next == nil {
		return
	}
	c.prev.next, c.next.prev = c.next, c.prev
	c.prev, c.next = nil, nil
}

// New caps ln at max open connections (max ≥ 1).
func New(ln net.Listener, max int) *Listener {
	return &Listener{
		Listener: ln,
		sem:      make(chan struct{}, max),
		done:     make(chan struct{}),
		grace:    Grace,
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
// from its accept until it is told otherwise. When one becomes idle while
// a new one waits for room, the connection idle the longest is closed
// Grace later, if it still is. Connections that are not the listener's own
// are ignored.
func (l *Listener) Idle(c net.Conn, idle bool) {
	lc, ok := c.(*conn)
	if !ok || lc.l != l {
		return
	}
	l.mu.Lock()
	switch {
	case lc.closed.Load():
	case !idle:
		l.idle.remove(lc)
	case lc.next == nil: // (one already idle keeps its place)
		l.idle.pushBack(lc)
		if l.wanted.Load() > 0 && l.armed.CompareAndSwap(false, true) {
			time.AfterFunc(l.grace, func() {
				l.armed.Store(false)
				l.drainOne()
			})
		}
	}
	l.mu.Unlock()
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
	l.mu.Lock()
	l.idle.pushBack(lc)
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

// drainOne closes the connection idle the longest, if there is one and
// room is still wanted.
func (l *Listener) drainOne() {
	l.mu.Lock()
	victim := l.idle.first()
	if victim != nil && take(&l.wanted) {
		l.idle.remove(victim)
	} else {
		victim = nil
	}
	l.mu.Unlock()
	if victim != nil {
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
	l          *Listener
	prev, next *conn // in l.idle while idle (guarded by l.mu)
	closed     atomic.Bool
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.mu.Lock()
		c.l.idle.remove(c)
		c.l.mu.Unlock()
		<-c.l.sem
	}
	return err
}
