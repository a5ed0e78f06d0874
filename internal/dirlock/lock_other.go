//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package dirlock

import (
	"errors"
	"os"
)

// errWouldBlock is never returned here.
var errWouldBlock = errors.New("locked")

// lock does nothing: without flock a directory is not kept to one
// process on these systems, and the caller must ensure there is one.
func lock(*os.File) error { return nil }
