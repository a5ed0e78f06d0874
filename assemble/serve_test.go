package assemble

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestFileLists: the dashboard sees each target of the allow and deny
// files once, without comments or blank lines, and a missing file is an
// error rather than an empty list.
func TestFileLists(t *testing.T) {
	dir := t.TempDir()
	allow := filepath.Join(dir, "allow.txt")
	os.WriteFile(allow, []byte("\uFEFF# partners\n203.0.113.0/24   # office\n\n  user:alice\n"), 0o644)
	deny := filepath.Join(dir, "deny.txt")
	os.WriteFile(deny, []byte("198.51.100.7\n"), 0o644)
	got, err := fileLists{{"allow", allow}, {"deny", deny}, {"challenge", ""}}.Entries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, e := range got {
		targets = append(targets, e.List+" "+e.Target)
	}
	if !reflect.DeepEqual(targets, []string{"allow 203.0.113.0/24", "allow user:alice", "deny 198.51.100.7"}) {
		t.Errorf("entries %q", targets)
	}
	if _, err := (fileLists{{"allow", filepath.Join(dir, "none")}}).Entries(context.Background()); err == nil {
		t.Error("a missing list file read as empty")
	}
}
