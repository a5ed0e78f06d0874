package dashboards

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestCloudWatchGolden: what `dashboards --out` writes for two tiers and an
// alarm action, against testdata/cloudwatch (-update rewrites it); every
// body is JSON whose widgets lie on the 24-column grid without overlap.
func TestCloudWatchGolden(t *testing.T) {
	dir := t.TempDir()
	paths, err := Write(dir, CloudWatchOptions{Region: "eu-west-1", Tiers: []string{"anonymous", `we"ird`}, AlarmActions: []string{"arn:aws:sns:eu-west-1:123456789012:oncall"}})
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "cloudwatch")
	if *update {
		os.RemoveAll(golden)
		os.MkdirAll(golden, 0o755)
	}
	for _, p := range paths {
		got, _ := os.ReadFile(p)
		g := filepath.Join(golden, filepath.Base(p))
		if *update {
			os.WriteFile(g, got, 0o644)
		}
		want, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s (run with -update after checking)", filepath.Base(p), g)
		}
		if !strings.HasPrefix(filepath.Base(p), "dashboard-") {
			continue
		}
		var b struct {
			Widgets []struct{ X, Y, Width, Height int }
		}
		if err := json.Unmarshal(got, &b); err != nil {
			t.Fatal(err)
		}
		for i, w := range b.Widgets {
			if w.X < 0 || w.X+w.Width > 24 || w.Width < 1 || w.Height < 1 {
				t.Errorf("%s: widget %d off the grid: %+v", p, i, w)
			}
			for j, v := range b.Widgets[:i] {
				if w.X < v.X+v.Width && v.X < w.X+w.Width && w.Y < v.Y+v.Height && v.Y < w.Y+w.Height {
					t.Errorf("%s: widgets %d and %d overlap", p, j, i)
				}
			}
		}
	}
	if len(paths) != 3+3+1 {
		t.Errorf("wrote %v", paths)
	}
}

// FuzzReadAlerts: any file reads without a panic; every line is a record
// or counted as skipped.
func FuzzReadAlerts(f *testing.F) {
	f.Add([]byte(`{"kind":"alert","time":"2026-03-01T12:00:10Z","state":"firing"}` + "\n" + `{"kind":"action","applied":true}` + "\nnot json\n"))
	f.Add([]byte(`{"kind":"alert","time":"yesterday"}`))
	f.Add([]byte("\n\n{\"kind\":\"action\",\"ttl\":5}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "alerts.jsonl")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		recs, skipped, _, err := ReadAlerts(path, 1<<20, 1000)
		if err != nil {
			return // a line too long
		}
		lines := 0
		for l := range bytes.Lines(b) {
			if len(bytes.TrimSpace(l)) > 0 {
				lines++
			}
		}
		if len(recs)+skipped != lines {
			t.Fatalf("%d records and %d skipped of %d lines", len(recs), skipped, lines)
		}
	})
}
