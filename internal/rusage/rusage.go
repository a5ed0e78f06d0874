// Package rusage reads the CPU time the process has used, for benchmarks
// on shared machines: wall time says what a run took, CPU time what it
// cost whatever else ran.
package rusage

import (
	"syscall"
	"time"
)

// CPU is the CPU time the process has used so far, user and system, its
// garbage collector included; 0 if the system does not say.
func CPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
