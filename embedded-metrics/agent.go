package emf

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/ratewarden/ratewarden/internal/backoff"
)

// DefaultAgentAddress is where the CloudWatch agent listens for EMF by
// default, in the form of AWS_EMF_AGENT_ENDPOINT.
const DefaultAgentAddress = "tcp://127.0.0.1:25888"

// DefaultAgentFlushTimeout is the default FlushTimeout of an AgentSink:
// an agent on this host answers at once or not at all.
const DefaultAgentFlushTimeout = 5 * time.Second

// errAgentNoQueue says the send queue cannot be read on this system.
var errAgentNoQueue = errors.New("send queue not readable on this system")

const (
	agentMaxDatagram = 65_507   // largest UDP payload over IPv4
	agentWriteChunk  = 64 << 10 // bytes gathered into one TCP write
)

// AgentOptions configure an AgentSink. Zero fields take their defaults.
// An AgentOptions is a plain value; NewAgentSink copies it.
type AgentOptions struct {
	// Address is "tcp://host:port" or "udp://host:port", default
	// DefaultAgentAddress.
	Address string
	// BufferBytes bounds the documents held, queued or sent but not yet
	// acknowledged, default 8 MiB; a Write that would exceed it is dropped
	// and counted.
	BufferBytes  int
	DialTimeout  time.Duration // default 2s
	WriteTimeout time.Duration // deadline of one write, default 5s
	// BaseDelay and MaxDelay bound the reconnect backoff (full jitter),
	// default 50ms and 5s.
	BaseDelay, MaxDelay time.Duration
	// DrainTimeout is how long the sink waits, after the agent closed the
	// connection, for the agent's kernel to acknowledge what was already
	// sent, default 2s. What is still unacknowledged is sent again on the
	// next connection.
	DrainTimeout time.Duration
	// AckPoll is the longest wait between two looks at the send queue
	// while documents await acknowledgement (TCP) or a late refusal (UDP),
	// default 20ms; the first look is after 100µs and the wait doubles.
	AckPoll time.Duration
	// FlushTimeout bounds a Flush and a Close, default
	// DefaultAgentFlushTimeout: an agent that is away, or has hung
	// (accepts and never reads), cannot hold up the caller longer. What
	// is not acknowledged by then is dropped and counted, and the call
	// returns ErrSinkBehind.
	FlushTimeout time.Duration
}

func (o *AgentOptions) setDefaults() {
	if o.Address == "" {
		o.Address = DefaultAgentAddress
	}
	if o.BufferBytes == 0 {
		o.BufferBytes = 8 << 20
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 2 * time.Second
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = 5 * time.Second
	}
	if o.BaseDelay == 0 {
		o.BaseDelay = 50 * time.Millisecond
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = 5 * time.Second
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = 2 * time.Second
	}
	if o.AckPoll == 0 {
		o.AckPoll = 20 * time.Millisecond
	}
	if o.FlushTimeout == 0 {
		o.FlushTimeout = DefaultAgentFlushTimeout
	}
}

// Validate reports the first option out of range, after defaults.
func (o *AgentOptions) Validate() error {
	if _, _, err := agentAddress(o.Address); err != nil {
		return fmt.Errorf("agent.address: %w", err)
	}
	switch {
	case o.BufferBytes < 1:
		return fmt.Errorf("agent.buffer_bytes: %d, want more than 0", o.BufferBytes)
	case o.DialTimeout < 0, o.WriteTimeout < 0, o.DrainTimeout < 0, o.AckPoll < 0, o.FlushTimeout < 0:
		return fmt.Errorf("agent.dial_timeout, write_timeout, drain_timeout, ack_poll, flush_timeout: %v, %v, %v, %v, %v, want 0 or more",
			o.DialTimeout, o.WriteTimeout, o.DrainTimeout, o.AckPoll, o.FlushTimeout)
	case o.BaseDelay < 0 || o.MaxDelay < o.BaseDelay:
		return fmt.Errorf("agent.base_delay, max_delay: %v, %v, want 0 <= base_delay <= max_delay", o.BaseDelay, o.MaxDelay)
	}
	return nil
}

// agentAddress splits "tcp://host:port" into network and address.
func agentAddress(s string) (network, addr string, err error) {
	network, addr, ok := strings.Cut(s, "://")
	if !ok || (network != "tcp" && network != "udp") {
		return "", "", fmt.Errorf("%q, want tcp://host:port or udp://host:port", s)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", "", fmt.Errorf("%q: %w", s, err)
	}
	return network, addr, nil
}

// AgentSink is a Sink that sends documents to the CloudWatch agent: over
// TCP as newline-delimited JSON on one connection, or over UDP one
// document per datagram. Write buffers and returns; one goroutine writes,
// reconnecting with backoff (full jitter) when the agent is away.
//
// The agent protocol has no acknowledgement, so the sink uses the
// transport's. Over TCP on Linux, after each write and while documents are
// outstanding, it reads the socket's unacknowledged byte count (SIOCOUTQ)
// and counts a document Written only when the agent's kernel has
// acknowledged its last byte. A goroutine reading the connection sees the
// agent close it; the sink then stops writing, waits up to DrainTimeout
// for what was sent to be acknowledged, and sends every document not
// acknowledged again, whole and in order, on the next connection (a write
// error or reset is handled the same way). So, across an agent restart:
//
//   - no document is duplicated, but for a document the agent read whose
//     acknowledgement had not reached this host when the connection was
//     reset (acknowledgements ride on the reset, which TCP ignores);
//   - no document is lost, but for documents the agent's kernel
//     acknowledged and the agent never read: those in its receive buffer
//     when it was killed or closed the connection without reading to the
//     end (at most one receive buffer). An agent that stops gracefully,
//     reading until it sees this end of the stream or half-closing and
//     reading on, loses nothing;
//   - a document cut by a reset is sent again whole; the agent discards
//     the partial line it read.
//
// Elsewhere than Linux the queue cannot be read: a document counts as
// Written once written to the socket, and those the agent's kernel did not
// take when the connection broke are lost (at most once).
//
// Over UDP there is no acknowledgement at all. A datagram the local kernel
// refuses because nothing listens on the port (ICMP port unreachable,
// which on the loopback interface arrives before the send returns) is kept
// and sent again after backoff, so a restart of an agent on this host
// loses and duplicates nothing; a document becomes Written once a later
// look at the socket finds no refusal. Datagrams dropped by a receiver
// with a full buffer or by the network are lost without a trace, and
// documents over 65,507 bytes are dropped and counted.
//
// Documents the buffer cannot hold are Dropped. So are, when a Flush or a
// Close runs out of time (FlushTimeout, or its context's end for Close),
// every document the sink holds: the writer abandons its connection
// (reset, so that what it had not sent is never sent) and goes on with
// the documents written after, and the call returns ErrSinkBehind. Of
// those, the documents sent whole and not yet acknowledged may still
// reach the agent: its kernel may hold them with its acknowledgement
// delayed, up to a receive buffer (6 or 7 documents of 2.5 KB in
// TestAgentTCPAbandonedUnconfirmed, with 16 KiB). Over TCP on Linux they
// are counted Unconfirmed besides Dropped (SIOCOUTQNSD, read in the same
// call on the socket as the reset is made, tells the bytes sent from those
// queued). An AgentSink is safe for concurrent use.
type AgentSink struct {
	// sender's gen is the writer's context: when it ends, the writer
	// drops what it holds, and either goes on in a new one (a Flush ran
	// out of time) or exits (Close did).
	sender
	opts          AgentOptions
	network, addr string

	// Guarded by mu.
	queue   [][]byte // not yet written on the current connection, oldest first
	retries uint64
	errs    uint64
}

var _ Sink = (*AgentSink)(nil)

// NewAgentSink returns an AgentSink sending to opts.Address and starts its
// writer; it does not wait for the agent. Close stops the writer.
func NewAgentSink(opts AgentOptions) (*AgentSink, error) {
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("new agent sink: %w", err)
	}
	network, addr, _ := agentAddress(opts.Address)
	s := &AgentSink{opts: opts, network: network, addr: addr}
	s.init("agent "+opts.Address, opts.BufferBytes, opts.FlushTimeout)
	if network == "tcp" {
		go s.runTCP()
	} else {
		go s.runUDP()
	}
	return s, nil
}

// Write buffers doc for sending. It drops and counts the document, and
// says why, when the buffer is full, the sink is closed, or (UDP) the
// document does not fit in a datagram.
func (s *AgentSink) Write(_ context.Context, doc []byte) error {
	n := len(doc) + 1 // the newline
	s.mu.Lock()
	var err error
	switch {
	case s.closing:
		err = ErrSinkClosed
	case s.network == "udp" && len(doc) > agentMaxDatagram:
		err = fmt.Errorf("document of %d bytes exceeds the datagram limit of %d", len(doc), agentMaxDatagram)
		s.errs++ // a refused document, as one the kernel refuses with EMSGSIZE
	case s.bytes+n > s.maxBytes:
		err = ErrSinkFull
	}
	if err != nil {
		s.dropped++
		s.mu.Unlock()
		return fmt.Errorf("write %s: %w", s.name, err)
	}
	b := make([]byte, len(doc), n)
	copy(b, doc)
	if s.network == "tcp" {
		b = append(b, '\n')
	}
	s.queue = append(s.queue, b)
	s.bytes += n
	s.accepted++
	s.mu.Unlock()
	s.wakeUp()
	return nil
}

// Flush waits until every document written before it is acknowledged (or
// dropped), or ctx ends. If that takes longer than FlushTimeout, the
// documents the sink holds are dropped and counted, and Flush returns
// ErrSinkBehind, saying how many of its documents were not delivered.
func (s *AgentSink) Flush(ctx context.Context) error { return s.flush(ctx) }

// Close sends what is buffered, waits for its acknowledgement, and closes
// the connection. If ctx ends first, or FlushTimeout passes, what is left
// is dropped and counted; past FlushTimeout Close returns ErrSinkBehind.
func (s *AgentSink) Close(ctx context.Context) error { return s.close(ctx) }

// makeRoom waits until doc fits in the buffer, or FlushTimeout passes (see
// WriterOptions.WaitForRoom).
func (s *AgentSink) makeRoom(ctx context.Context, doc []byte) error {
	return s.awaitRoom(ctx, len(doc)+1)
}

// Stats reports the sink's counters. Retries counts documents sent again;
// Errors counts failed dials, broken connections and refused datagrams.
func (s *AgentSink) Stats() SinkStats {
	st := s.stats()
	s.mu.Lock()
	st.Retries, st.Errors = s.retries, s.errs
	s.mu.Unlock()
	return st
}

// done counts n documents of size bytes as written or dropped.
func (s *AgentSink) done(n, size int, written bool) {
	if written {
		s.settle(n, 0, size)
	} else {
		s.settle(0, n, size)
	}
}

func (s *AgentSink) addErrors(n int) {
	s.mu.Lock()
	s.errs += uint64(n)
	s.mu.Unlock()
}

// requeue puts docs back at the head of the queue; retry counts them as
// to be sent again.
func (s *AgentSink) requeue(docs [][]byte, retry bool) {
	if len(docs) == 0 {
		return
	}
	s.mu.Lock()
	s.queue = append(docs[:len(docs):len(docs)], s.queue...)
	if retry {
		s.retries += uint64(len(docs))
	}
	s.mu.Unlock()
}

// dropAll counts everything queued as dropped: a Flush or Close ran out
// of time.
func (s *AgentSink) dropAll() {
	s.mu.Lock()
	q := s.queue
	s.queue = nil
	s.mu.Unlock()
	size := 0
	for _, d := range q {
		size += s.held(d)
	}
	s.done(len(q), size, false)
}

// held is the size a queued document counts against BufferBytes.
func (s *AgentSink) held(doc []byte) int {
	if s.network == "tcp" {
		return len(doc)
	}
	return len(doc) + 1
}

// idle reports whether the sink is closing with nothing left to send.
func (s *AgentSink) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing && len(s.queue) == 0
}

// sleep waits d or until the writer's context ends.
func (s *AgentSink) sleep(d time.Duration) error { return backoff.Sleep(s.gen, d) }

// halted drops everything the sink holds, once the writer's context has
// ended, and reports whether the sink is stopped (Close ran out of time).
// Otherwise a Flush ran out of time: the writer goes on with a new
// context.
func (s *AgentSink) halted() bool {
	stopped := s.renew()
	s.dropAll()
	return stopped
}

// backoff is a full-jitter delay after failures consecutive failures.
func (s *AgentSink) backoff(failures int) time.Duration {
	return backoff.FullJitter(s.opts.BaseDelay, s.opts.MaxDelay, failures, backoff.Uniform)
}

// runTCP is the TCP writer: it connects, serves the connection until it
// breaks, puts back what was not acknowledged, and connects again.
func (s *AgentSink) runTCP() {
	defer close(s.exited)
	failures := 0
	for {
		if s.idle() {
			return
		}
		if failures > 0 {
			if s.sleep(s.backoff(failures)) != nil {
				if s.halted() {
					return
				}
				continue
			}
		}
		d := net.Dialer{Timeout: s.opts.DialTimeout}
		c, err := d.DialContext(s.gen, "tcp", s.addr)
		if err != nil {
			if s.gen.Err() != nil {
				if s.halted() {
					return
				}
				continue
			}
			s.addErrors(1)
			failures++
			continue
		}
		progressed, closed := s.serveTCP(c.(*net.TCPConn))
		if closed {
			return
		}
		if progressed {
			failures = 0
		}
		failures++
	}
}

// agentFlight is a document written on the current connection and not
// yet acknowledged.
type agentFlight struct {
	doc []byte
	end int64 // offset on the connection just past its newline
}

// tcpConn is the writer's view of one connection.
type agentTCPConn struct {
	s        *AgentSink
	c        *net.TCPConn
	inflight []agentFlight
	sent     int64 // bytes the kernel took
	acked    int   // documents acknowledged on this connection
	noQueue  bool  // the send queue cannot be read: count on write
}

// abort resets the connection and returns how many of the documents in
// flight had left this host whole by then: every byte of them was sent,
// though not acknowledged. The reset cuts them off, but they may still
// arrive: the peer's kernel may hold them, its acknowledgement delayed or
// on its way. The count is read in the same call on the socket as the
// reset is made (agentAbort); where it cannot be, none are counted, and
// the caller's close resets the connection.
func (t *agentTCPConn) abort() int {
	unsent, err := agentAbort(t.c)
	if err != nil {
		return 0
	}
	n, _ := t.through(t.sent - int64(unsent))
	return n
}

// through returns how many of the documents in flight, of size bytes in
// all, end at or before offset off of the connection.
func (t *agentTCPConn) through(off int64) (n, size int) {
	for n < len(t.inflight) && t.inflight[n].end <= off {
		size += len(t.inflight[n].doc)
		n++
	}
	return n, size
}

// ack counts as written the documents the peer's kernel acknowledged.
func (t *agentTCPConn) ack() {
	unacked, err := agentUnacked(t.c)
	if err != nil {
		if !errors.Is(err, errAgentNoQueue) {
			return // keep them: they are sent again if the connection breaks
		}
		t.noQueue = true
		unacked = 0
	}
	n, size := t.through(t.sent - int64(unacked))
	if n == 0 {
		return
	}
	clear(t.inflight[:n])
	t.inflight = t.inflight[n:]
	t.acked += n
	t.s.done(n, size, true)
}

// serveTCP writes on c until it breaks or the sink is closed. It reports
// whether a document was acknowledged, and whether the sink is done (closed
// and drained, or stopped).
func (s *AgentSink) serveTCP(c *net.TCPConn) (progressed, done bool) {
	t := &agentTCPConn{s: s, c: c}
	gone := make(chan struct{})
	go func() { // the agent sends nothing: a read returns when it closes
		defer close(gone)
		var b [256]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				return
			}
		}
	}()
	unblock := context.AfterFunc(s.gen, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer unblock()
	// broken closes c and puts back what was not acknowledged, to be
	// sent again; when the writer's context has ended, it drops it
	// instead, and resets c so that what was not sent never is (those
	// sent whole are counted unconfirmed: they may still arrive).
	broken := func() {
		retry := s.gen.Err() == nil
		t.ack()
		unsure := 0
		if !retry {
			c.SetLinger(0) // so that the close resets c if abort cannot
			unsure = t.abort()
		}
		c.Close()
		<-gone
		if !retry {
			n, size := t.through(math.MaxInt64) // all in flight
			s.settleUnsure(0, n, unsure, size)
			return
		}
		docs := make([][]byte, len(t.inflight))
		for i := range t.inflight {
			docs[i] = t.inflight[i].doc
		}
		s.requeue(docs, true)
	}

	var (
		buf   []byte
		poll  = 100 * time.Microsecond
		timer = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	for {
		select {
		case <-gone:
			s.drain(t)
			s.addErrors(1)
			broken()
			return t.acked > 0, false
		default:
		}
		if s.gen.Err() != nil {
			broken()
			return t.acked > 0, s.halted()
		}

		// Gather queued documents into one write.
		buf = buf[:0]
		s.mu.Lock()
		n := 0
		for n < len(s.queue) && (n == 0 || len(buf)+len(s.queue[n]) <= agentWriteChunk) {
			buf = append(buf, s.queue[n]...)
			t.inflight = append(t.inflight, agentFlight{doc: s.queue[n], end: t.sent + int64(len(buf))})
			n++
		}
		clear(s.queue[:n])
		s.queue = s.queue[n:]
		closing := s.closing && len(s.queue) == 0
		s.mu.Unlock()

		if len(buf) > 0 {
			c.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
			w, err := c.Write(buf)
			t.sent += int64(w)
			if err != nil {
				s.addErrors(1)
				broken()
				if s.gen.Err() != nil {
					return t.acked > 0, s.halted()
				}
				return t.acked > 0, false
			}
			t.ack()
			poll = 100 * time.Microsecond
			continue
		}
		if len(t.inflight) > 0 {
			t.ack()
		}
		if len(t.inflight) == 0 && closing {
			c.CloseWrite()
			c.Close()
			<-gone
			return t.acked > 0, true
		}
		var tick <-chan time.Time
		if len(t.inflight) > 0 {
			timer.Reset(poll)
			tick = timer.C
			poll = min(2*poll, s.opts.AckPoll)
		}
		select {
		case <-s.wake:
		case <-gone:
		case <-s.gen.Done():
		case <-tick:
		}
		timer.Stop()
	}
}

// drain waits, after the agent closed the connection, until what was sent
// is acknowledged, the connection is reset, or DrainTimeout passes.
func (s *AgentSink) drain(t *agentTCPConn) {
	deadline := time.Now().Add(s.opts.DrainTimeout)
	poll := 100 * time.Microsecond
	for {
		t.ack()
		if len(t.inflight) == 0 || t.noQueue || agentReset(t.c) || !time.Now().Before(deadline) {
			return
		}
		if s.sleep(poll) != nil {
			return
		}
		poll = min(2*poll, s.opts.AckPoll)
	}
}

// runUDP is the UDP writer: one datagram per document on a connected
// socket, so that the kernel reports a refusal of the port.
func (s *AgentSink) runUDP() {
	defer close(s.exited)
	var (
		c           *net.UDPConn
		provisional []byte // sent, not yet seen unrefused by a later look
		failures    int
		poll        = 100 * time.Microsecond
		timer       = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	confirm := func() {
		if provisional != nil {
			s.done(1, s.held(provisional), true)
			provisional = nil
		}
	}
	refused := func(doc []byte) {
		s.addErrors(1)
		var back [][]byte
		if provisional != nil {
			back = append(back, provisional)
			provisional = nil
		}
		if doc != nil {
			back = append(back, doc)
		}
		s.requeue(back, true)
		failures++
	}
	for {
		if s.gen.Err() != nil {
			if provisional != nil {
				s.done(1, s.held(provisional), false)
				provisional = nil
			}
			if s.halted() {
				return
			}
			continue
		}
		if c == nil {
			if failures > 0 && s.sleep(s.backoff(failures)) != nil {
				continue
			}
			d := net.Dialer{Timeout: s.opts.DialTimeout}
			conn, err := d.DialContext(s.gen, "udp", s.addr)
			if err != nil {
				s.addErrors(1)
				failures++
				continue
			}
			c = conn.(*net.UDPConn)
		}
		s.mu.Lock()
		var doc []byte
		if len(s.queue) > 0 {
			doc = s.queue[0]
			s.queue[0] = nil
			s.queue = s.queue[1:]
		}
		closing := s.closing && len(s.queue) == 0
		s.mu.Unlock()

		if doc == nil {
			if provisional != nil {
				if agentRefused(c) {
					refused(nil)
					continue
				}
				if closing {
					confirm()
					continue
				}
				timer.Reset(poll)
				poll = min(2*poll, s.opts.AckPoll)
				select {
				case <-s.wake:
				case <-s.gen.Done():
				case <-timer.C:
					if agentRefused(c) {
						refused(nil)
					} else {
						confirm()
					}
				}
				timer.Stop()
				continue
			}
			if closing {
				return
			}
			select {
			case <-s.wake:
			case <-s.gen.Done():
			}
			continue
		}

		if failures > 0 && provisional == nil && s.sleep(s.backoff(failures)) != nil {
			s.requeue([][]byte{doc}, false)
			continue
		}
		c.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
		_, err := c.Write(doc)
		switch {
		case err != nil && errors.Is(err, syscall.EMSGSIZE):
			s.addErrors(1)
			s.done(1, s.held(doc), false)
		case err != nil:
			// A refusal: this one was not sent, the one before was
			// refused. Anything else is retried the same way.
			refused(doc)
		case agentRefused(c):
			refused(doc)
		default:
			confirm()
			provisional = doc
			failures = 0
			poll = 100 * time.Microsecond
		}
	}
}
