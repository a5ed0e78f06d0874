package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplaces(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state")
	for _, want := range []string{"first", "second, longer"} {
		if err := Write(p, []byte(want), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != want {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("%d files left in the directory, want 1 (no temporary files)", len(ents))
	}
	if err := Write(filepath.Join(dir, "missing", "x"), nil, 0o600); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
}

// TestWriteFromFailureKeepsOld is a write that fails half way: the file
// keeps its old content and no temporary file is left.
func TestWriteFromFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "export.parquet")
	if err := os.WriteFile(p, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("interrupted")
	err := WriteFrom(p, 0o644, func(w io.Writer) error {
		if _, err := w.Write([]byte("half of the new")); err != nil {
			return err
		}
		if _, ok := w.(io.Closer); ok {
			t.Error("write got a writer it can close")
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("WriteFrom returned %v, want the write's error", err)
	}
	if got, _ := os.ReadFile(p); string(got) != "precious" {
		t.Fatalf("after a failed write the file holds %q, want the old content", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("%d files left in the directory, want 1 (no temporary files)", len(ents))
	}
	if err := WriteFrom(p, 0o644, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); string(got) != "new" {
		t.Fatalf("after a write the file holds %q, want %q", got, "new")
	}
}

// TestWriteThroughSymlink: a path that is a symbolic link (a list file
// linked from a checkout) stays a link, and the file it leads to, through
// any number of links, absolute or relative, gets the data, replaced in its
// own directory: before, the rename replaced the link with a regular file,
// and the file it led to kept the old content.
func TestWriteThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	real, links := filepath.Join(dir, "real"), filepath.Join(dir, "links")
	for _, d := range []string{real, links} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	target := filepath.Join(real, "deny.list")
	if err := os.WriteFile(target, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	abs, rel, chain := filepath.Join(links, "abs.list"), filepath.Join(links, "rel.list"), filepath.Join(links, "chain.list")
	for link, to := range map[string]string{abs: target, rel: "../real/deny.list", chain: "rel.list"} {
		if err := os.Symlink(to, link); err != nil {
			t.Fatal(err)
		}
	}
	for _, link := range []string{abs, rel, chain} {
		want := "written through " + filepath.Base(link) + "\n"
		if err := Write(link, []byte(want), 0o600); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s is no longer a symbolic link: %v, %v", link, fi.Mode(), err)
		}
		if got, err := os.ReadFile(target); err != nil || string(got) != want {
			t.Errorf("after Write(%s) the file it leads to holds %q, %v; want %q", link, got, err, want)
		}
	}
	for d, n := range map[string]int{real: 1, links: 3} {
		if ents, _ := os.ReadDir(d); len(ents) != n {
			t.Errorf("%d files in %s, want %d (no temporary files)", len(ents), d, n)
		}
	}
	dangling := filepath.Join(links, "dangling.list")
	if err := os.Symlink("../real/missing.list", dangling); err != nil {
		t.Fatal(err)
	}
	if err := Write(dangling, []byte("x"), 0o600); err == nil {
		t.Error("a write through a link that leads nowhere succeeded")
	}
}

// TestRemoveTemps: the temporary file of a write cut short (its name
// taken from a real WriteFrom, as a kill -9 would leave it) is removed by
// RemoveTemps of its path, once; the file itself, other files' temporary
// files and names that only look alike stay.
func TestRemoveTemps(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "123.log.5-9.rwp")
	var left []string
	for range 2 {
		WriteFrom(p, 0o644, func(io.Writer) error {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				left = append(left, e.Name())
			}
			return errors.New("killed")
		})
	}
	if len(left) != 2 || left[0] == left[1] {
		t.Fatalf("the writes made the temporary files %q, want two", left)
	}
	keep := []string{"123.log.5-9.rwp", ".123.log.5-9.rwp.tmp", ".123.log.5-9.rwp.12x.tmp", ".124.log.5-9.rwp.77.tmp",
		"123.log.5-9.rwp.77.tmp", ".123.log.5-9.rwp.77.tmp.old"}
	for _, name := range append(append([]string{}, left...), keep...) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, ".123.log.5-9.rwp.5.tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	keep = append(keep, ".123.log.5-9.rwp.5.tmp")
	n, err := RemoveTemps(p, filepath.Join(dir, "other.rwp"))
	if err != nil || n != 2 {
		t.Fatalf("RemoveTemps removed %d, %v; want the 2 a write left", n, err)
	}
	for _, name := range keep {
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s was removed: %v", name, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != len(keep) {
		t.Errorf("%d files left, want %d", len(ents), len(keep))
	}
	if n, err := RemoveTemps(p); n != 0 || err != nil {
		t.Errorf("RemoveTemps again removed %d, %v", n, err)
	}
	if n, err := RemoveTemps(filepath.Join(dir, "missing", "x.state")); n != 0 || err != nil {
		t.Errorf("RemoveTemps in a missing directory: %d, %v", n, err)
	}
}
