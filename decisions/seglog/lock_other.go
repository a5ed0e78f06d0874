//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package seglog

import (
	"fmt"
	"os"
	"path/filepath"
)

// lockDir opens dir's LOCK file. Without flock it does not exclude another
// writer: on these systems the caller must ensure there is one.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock log: %w", err)
	}
	return f, nil
}
