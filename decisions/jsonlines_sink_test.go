package decisions_test

import (
	"bufio"
	"os"
	"path/filepath"
	"testing"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/sinktest"
)

// jsonFile is the JSON-lines file sink with a read-back.
type jsonFile struct {
	*decisions.JSONLinesFile
	path string
}

func (j jsonFile) ReadBack() ([]decisions.Decision, error) {
	f, err := os.Open(j.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []decisions.Decision
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		d, _, err := decisions.ParseJSON(sc.Bytes())
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, sc.Err()
}

func TestJSONLinesConformance(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) sinktest.Sink {
		path := filepath.Join(t.TempDir(), "d.jsonl")
		f, err := decisions.OpenJSONLines(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return jsonFile{f, path}
	})
}
