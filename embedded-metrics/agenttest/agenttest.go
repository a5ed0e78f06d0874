// Package agenttest stands in for a CloudWatch agent that is away, for the
// tests of the packages that send to one (emf.AgentSink, the aggregator's
// EMF sink, `ratewarden aggregate --emf agent:...`): an agent that accepts
// connections and never reads (hung), and a port nothing listens on; and
// for one that is there, an agent that keeps what it reads.
package agenttest

import (
	"bufio"
	"context"
	"net"
	"slices"
	"sync"
	"testing"
)

// Hung listens on 127.0.0.1 like an agent that has hung: it accepts every
// connection and never reads from it, and its receive buffer is as small
// as the kernel allows, so that only a few KiB sent to it are ever
// acknowledged. It returns the address, as "tcp://127.0.0.1:PORT", and
// closes the listener and the connections when the test ends.
func Hung(t testing.TB) string {
	t.Helper()
	lc := net.ListenConfig{Control: smallReceiveBuffer}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ln, func(net.Conn) {})
	return "tcp://" + ln.Addr().String()
}

// Agent is a CloudWatch agent on 127.0.0.1 that reads every connection to
// its end and keeps the documents (lines) it received. It is safe for
// concurrent use.
type Agent struct {
	Addr string // "tcp://127.0.0.1:PORT"

	mu      sync.Mutex
	docs    []string
	arrived chan struct{} // closed and replaced whenever a document arrives
}

// Listen starts an Agent; it stops when the test ends.
func Listen(t testing.TB) *Agent {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{Addr: "tcp://" + ln.Addr().String(), arrived: make(chan struct{})}
	serve(t, ln, a.read)
	return a
}

// read keeps the lines of c until the sender closes it.
func (a *Agent) read(c net.Conn) {
	sc := bufio.NewScanner(c)
	sc.Buffer(nil, 2<<20) // documents of up to 1 MiB
	for sc.Scan() {
		a.mu.Lock()
		a.docs = append(a.docs, sc.Text())
		close(a.arrived)
		a.arrived = make(chan struct{})
		a.mu.Unlock()
	}
}

// Docs returns the documents received once n have arrived, or when ctx
// ends, in order of arrival. A sink counts a document written once the
// agent's kernel has it, a moment before the agent reads it.
func (a *Agent) Docs(ctx context.Context, n int) []string {
	for {
		a.mu.Lock()
		docs, arrived := slices.Clone(a.docs), a.arrived
		a.mu.Unlock()
		if len(docs) >= n {
			return docs
		}
		select {
		case <-arrived:
		case <-ctx.Done():
			return docs
		}
	}
}

// serve accepts the connections of ln and hands each to handle, in a
// goroutine of its own; when the test ends it closes the listener and the
// connections and waits for the goroutines.
func serve(t testing.TB, ln net.Listener, handle func(net.Conn)) {
	var (
		mu       sync.Mutex
		conns    []net.Conn
		handlers sync.WaitGroup
		done     = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			handlers.Go(func() { handle(c) })
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		handlers.Wait()
	})
}

// Closed returns the address of a port on 127.0.0.1 that nothing listens
// on (it was open a moment ago), as "tcp://127.0.0.1:PORT": every dial is
// refused.
func Closed(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "tcp://" + addr
}
