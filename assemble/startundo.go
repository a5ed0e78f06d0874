package assemble

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/internal/dirlock"
)

// StartUndo lets a command whose start fails (a port in use, say) remove
// the directories and files it made for its outputs, and nothing that was
// there before: NewStartUndo notes, of each path the command may create,
// the outermost of its missing directories (or the file itself), Started
// marks the start done, and Undo removes what was noted, unless the start
// was done, did not fail, or failed on a directory another process holds
// (dirlock.ErrLocked: that process may have made it since). Call Undo
// last, once every lock and file is closed. It is not safe for concurrent
// use.
type StartUndo struct {
	made    []string
	started bool
}

// NewStartUndo notes what is missing of paths; "" and "-" (standard
// output) are skipped.
func NewStartUndo(paths ...string) *StartUndo {
	u := &StartUndo{}
	for _, p := range paths {
		if p == "" || p == "-" {
			continue
		}
		root := ""
		for p = filepath.Clean(p); ; {
			if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
				break
			}
			root = p
			parent := filepath.Dir(p)
			if parent == p {
				break
			}
			p = parent
		}
		if root != "" && !slices.Contains(u.made, root) {
			u.made = append(u.made, root)
		}
	}
	return u
}

// EdgePaths are the paths the edge of cfg writes its decisions to, which
// NewEdge may create: the decision log, edge.decisions_file and the
// Kinesis sink's spill directory.
func EdgePaths(cfg *config.Config) []string {
	ps := []string{cfg.Decisions.Dir, cfg.Edge.DecisionsFile}
	if k := cfg.Decisions.Kinesis; k.Stream != "" {
		ps = append(ps, k.SpillDir)
	}
	return ps
}

// Started marks the start done: Undo removes nothing from then on.
func (u *StartUndo) Started() { u.started = true }

// Undo removes what NewStartUndo found missing when the start failed with
// err.
func (u *StartUndo) Undo(err error) {
	if err == nil || u.started || errors.Is(err, dirlock.ErrLocked) {
		return
	}
	for _, p := range u.made {
		os.RemoveAll(p)
	}
}
