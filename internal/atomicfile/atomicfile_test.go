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
