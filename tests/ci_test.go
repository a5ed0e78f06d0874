package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCIRunSetsCI runs .ci/run in a copy of the tree whose tests/run only
// prints CI, from an environment without CI: the integration tests must
// fail rather than skip under .ci/run in any runner.
func TestCIRunSetsCI(t *testing.T) {
	script, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, f := range []struct {
		path, text string
	}{
		{".ci/run", string(script)},
		{"tests/run", "#!/usr/bin/env bash\necho \"CI=${CI:-unset} args=$*\"\n"},
	} {
		p := filepath.Join(root, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(filepath.Join(root, ".ci/run"), "-run", "X")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CI=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if got, want := strings.TrimSpace(string(out)), "CI=true args=-run X"; err != nil || got != want {
		t.Errorf(".ci/run: %v, printed %q, want %q", err, got, want)
	}
}
