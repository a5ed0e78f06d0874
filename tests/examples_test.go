package tests

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// shownRE finds the command an example shows in its header comment.
var shownRE = regexp.MustCompile(`(?m)^#\s+(ratewarden edge --config examples/([a-z_-]+\.yaml)[^#\n]*?)\s*$`)

// TestExamplesStart runs, for every file in examples/, the command its
// header shows, as a new user would: from the repository root, through the
// shell, with the binary on PATH. The edge must start, answer on its admin
// listener and stop cleanly on SIGINT. Only what cannot run on a test
// machine is added after the command: loopback ports instead of fixed ones,
// directories in the test's own temporary directory instead of system
// paths, and AWS endpoints on a closed loopback port, so nothing leaves the
// machine.
func TestExamplesStart(t *testing.T) {
	bin := buildBinary(t)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("../examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			m := shownRE.FindSubmatch(data)
			if m == nil || string(m[2]) != filepath.Base(f) {
				t.Fatalf("%s shows no command `ratewarden edge --config examples/%s ...` in its header", f, filepath.Base(f))
			}
			tmp := t.TempDir()
			cmd := exec.Command("bash", "-c", "exec "+string(m[1])+` "$@"`, "bash",
				"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
				"--decisions-dir", filepath.Join(tmp, "decisions"), "--kinesis-spill-dir", filepath.Join(tmp, "spill"))
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"),
				"AWS_REGION=us-east-1", "AWS_ENDPOINT_URL=http://127.0.0.1:9", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test")
			_, admin := startEdgeCommand(t, cmd)
			if r := get(t, http.DefaultClient, admin+"/healthz"); r.status != 200 || r.body != "ok\n" {
				t.Errorf("%s: /healthz answered %d %q", m[1], r.status, r.body)
			}
		})
	}
}
