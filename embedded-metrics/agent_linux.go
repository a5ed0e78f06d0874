//go:build linux

package emf

import (
	"errors"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// agentUnacked returns the bytes in c's send queue that the peer has not
// acknowledged (SIOCOUTQ: write_seq - snd_una). After a reset the count is
// frozen at what was unacknowledged when the reset came.
func agentUnacked(c *net.TCPConn) (int, error) { return agentQueued(c, unix.SIOCOUTQ) }

// agentAbort resets c and returns the bytes its send queue held not yet
// sent (SIOCOUTQNSD: write_seq - snd_nxt) when it did: it reads the count
// and disconnects the socket (connect to AF_UNSPEC, which sends the reset
// and purges the queue) in one call on the socket, so that the kernel
// cannot send more in between, as it could while a Close waits for the
// goroutine reading c to let go of it. The caller still closes c. If the
// disconnect fails, c is left as it was and the error returned.
func agentAbort(c *net.TCPConn) (unsent int, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var qerr, derr error
	cerr := rc.Control(func(fd uintptr) {
		unsent, qerr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQNSD)
		sa := unix.RawSockaddr{Family: unix.AF_UNSPEC}
		if _, _, e := unix.Syscall(unix.SYS_CONNECT, fd, uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa)); e != 0 {
			derr = e
		}
	})
	if err := errors.Join(cerr, derr); err != nil {
		return 0, err
	}
	return unsent, qerr
}

// agentQueued reads a count of c's send queue with the ioctl req.
func agentQueued(c *net.TCPConn, req uint) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var (
		n    int
		ierr error
	)
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), req) }); err != nil {
		return 0, err
	}
	return n, ierr
}

// agentReset reports whether c's TCP state is CLOSE: reset, or done.
func agentReset(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return true
	}
	var (
		info *unix.TCPInfo
		ierr error
	)
	if err := rc.Control(func(fd uintptr) { info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil || ierr != nil {
		return true
	}
	const tcpClose = 7 // TCP_CLOSE in include/net/tcp_states.h
	return info.State == tcpClose
}

// agentRefused reads and clears c's pending socket error and reports
// whether it says the port was refused (ICMP port unreachable).
func agentRefused(c *net.UDPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var soerr int
	if err := rc.Control(func(fd uintptr) { soerr, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR) }); err != nil {
		return false
	}
	return errors.Is(syscall.Errno(soerr), syscall.ECONNREFUSED)
}
