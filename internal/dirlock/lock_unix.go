//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package dirlock

import (
	"os"
	"syscall"
)

// errWouldBlock is lock's error for a file another holder has locked.
var errWouldBlock = syscall.EWOULDBLOCK

// lock takes an exclusive flock on f without waiting: a second process
// is refused at once, not queued behind the first. The kernel releases
// it when the file is closed or the process dies.
func lock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
