//go:build unix

package agenttest

import "syscall"

// smallReceiveBuffer sets a listening socket's receive buffer to the
// smallest the kernel allows, before it listens: the accepted connections
// inherit it and advertise a window of that size.
func smallReceiveBuffer(_, _ string, rc syscall.RawConn) error {
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1) }); err != nil {
		return err
	}
	return serr
}
