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
