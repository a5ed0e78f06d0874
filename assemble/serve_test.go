package assemble

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/ratewarden/ratewarden/edge/lists"
)

// TestServeLists: the dashboard sees each target of the allow and deny
// files once, without comments or blank lines, as the list store reads
// them (a missing file is an empty list, as the edge reads it), and a
// file that cannot be read is an error rather than an empty list.
func TestServeLists(t *testing.T) {
	dir := t.TempDir()
	allow := filepath.Join(dir, "allow.txt")
	os.WriteFile(allow, []byte("\uFEFF# partners\n203.0.113.0/24   # office\n\n  user:alice\n"), 0o644)
	deny := filepath.Join(dir, "deny.txt")
	os.WriteFile(deny, []byte("198.51.100.7\n"), 0o644)
	files := map[string]string{"allow": allow, "deny": deny}
	got, err := storeLists{lists.NewFileStore(files, nil), []string{"allow", "deny"}}.Entries(context.Background())
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
	files["allow"] = dir
	if _, err := (storeLists{lists.NewFileStore(files, nil), []string{"allow"}}).Entries(context.Background()); err == nil {
		t.Error("a list file that cannot be read (a directory) read as empty")
	}
}
