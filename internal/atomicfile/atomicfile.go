// Package atomicfile replaces files whole: a reader, or a machine that
// crashes, sees the old content or the new, never a mix or a torn write.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Write replaces the file at path with data: it writes a temporary file in
// the same directory, syncs it, renames it over path and syncs the
// directory, so the replacement is durable when Write returns. A path that
// is a symbolic link stays one: the file it leads to is replaced, in that
// file's directory, as a write through the link would change it; a link
// that leads to no file is an error.
func Write(path string, data []byte, perm os.FileMode) error {
	return WriteFrom(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFrom replaces the file at path with what write writes, as Write
// does, for content too large to hold in memory: on any error, write's
// or its own, the file at path is left as it was and the temporary file
// is removed. write gets a plain io.Writer: a writer that closes what it
// is given when it can (a Parquet writer) cannot close the file.
func WriteFrom(path string, perm os.FileMode, write func(io.Writer) error) error {
	// A rename over the link would replace the link itself with a regular
	// file, cutting it from the file an operator linked it to (a list
	// kept in a checkout), which keeps the old content.
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		to, err := filepath.EvalSymlinks(path)
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		path = to
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	err = write(struct{ io.Writer }{f}) // f is WriteFrom's to sync and close
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = SyncDir(dir)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// SyncDir syncs a directory, making the renames and creations in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// RemoveTemps removes the temporary files that writes of paths (Write,
// WriteFrom) left behind when a crash cut them short, and returns how
// many it removed. Only a file's sole writer may call it, before it
// writes the file again: a write of the same path in progress elsewhere
// would fail (its rename finds its temporary file gone), though never
// leave the file torn. A directory that does not exist holds none.
func RemoveTemps(paths ...string) (int, error) {
	byDir := map[string][]string{}
	for _, p := range paths {
		dir, base := filepath.Split(p)
		if dir == "" {
			dir = "."
		}
		byDir[dir] = append(byDir[dir], base)
	}
	n := 0
	for dir, bases := range byDir {
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("remove temporary files: %w", err)
		}
		for _, e := range ents {
			if !e.Type().IsRegular() || !isTempOf(e.Name(), bases) {
				continue
			}
			err := os.Remove(filepath.Join(dir, e.Name()))
			if err == nil {
				n++
			} else if !errors.Is(err, fs.ErrNotExist) {
				return n, fmt.Errorf("remove temporary files: %w", err)
			}
		}
	}
	return n, nil
}

// isTempOf reports whether name is the name of a temporary file
// WriteFrom makes for one of bases: "." + base + "." + the digits
// os.CreateTemp puts for its "*" + ".tmp".
func isTempOf(name string, bases []string) bool {
	rest, ok := strings.CutSuffix(name, ".tmp")
	if !ok || !strings.HasPrefix(rest, ".") {
		return false
	}
	i := strings.LastIndexByte(rest, '.')
	digits := rest[i+1:]
	if i <= 0 || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return false
	}
	return slices.Contains(bases, rest[1:i])
}
