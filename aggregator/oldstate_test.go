package aggregator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunLogResumesOldState: a state directory written by an earlier
// RunLog (testdata/oldstate: the code of commit e386882, reading
// testEvents(20_000) in records of 500 with FlushEvery 300, stopped by a
// sink failing after its fifth output, so that the state holds outputs
// not yet delivered) resumes: the outputs it holds are delivered again,
// the log is read on from its position, and the partials left are those
// of one uninterrupted run of that code (testdata/oldstate/want), byte for
// byte: nothing lost, nothing counted twice.
func TestRunLogResumesOldState(t *testing.T) {
	logDir := filepath.Join(t.TempDir(), "log")
	writeLog(t, logDir, testEvents(20_000))
	state, out := t.TempDir(), t.TempDir()
	want := files(t, filepath.Join("testdata", "oldstate", "want"))
	for name, b := range files(t, filepath.Join("testdata", "oldstate", "state")) {
		writeFile(t, filepath.Join(state, name), b)
	}
	delivered, err := os.ReadFile(filepath.Join("testdata", "oldstate", "delivered.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range strings.Fields(string(delivered)) {
		writeFile(t, filepath.Join(out, name), want[filepath.FromSlash(name)])
	}
	st, err := RunLog(context.Background(), LogOptions{Dir: logDir, StateDir: state, FlushEvery: 300,
		Rollup: Options{Window: time.Second, Lateness: 100 * time.Millisecond}, Sinks: []Sink{&PartialsDir{Dir: out}}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Redeliver == 0 || st.Next != 20_000 || st.Read.Events != 11_000 {
		t.Errorf("redelivered %d outputs, read %d events to %d: want the state's pending outputs, the log from 9,000 to its end", st.Redeliver, st.Read.Events, st.Next)
	}
	sameFiles(t, "resumed from an old state", files(t, out), want)
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
