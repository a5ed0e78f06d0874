// Package agenttest stands in for a CloudWatch agent that is away, for the
// tests of the packages that send to one (emf.AgentSink, the aggregator's
// EMF sink, `ratewarden aggregate --emf agent:...`): an agent that accepts
// connections and never reads (hung), and a port nothing listens on.
package agenttest

import (
	"net"
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
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
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
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "tcp://" + ln.Addr().String()
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
