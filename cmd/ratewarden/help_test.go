package main

import (
	"context"
	"flag"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// Placeholders a --help may show, by the kind of value. flag.PrintDefaults
// shows a flag's first backquoted word as its placeholder, or else its Go
// type ("string", "int", "value"): a word backquoted mid-sentence for
// emphasis becomes the placeholder by accident (an int --top-k showed
// "list", a duration --lateness "window"). A new placeholder goes here
// once it reads as the value it names.
var (
	// pathPlaceholders are those of a flag naming a file or a directory.
	pathPlaceholders = []string{"file", "directory", "path"}
	// numberPlaceholders are those of int, uint and float flags.
	numberPlaceholders = []string{"n", "bytes", "offset", "ratio", "minutes", "X"}
	// textPlaceholders are those of the other string-valued flags.
	textPlaceholders = append([]string{"address", "URL", "name", "id", "T", "format", "list", "sink", "store", "server",
		"namespace", "region", "title", "prefix", "text", "ARN", "correct|drop"}, pathPlaceholders...)
)

// isPathFlag reports whether a flag of this name takes a file or directory.
func isPathFlag(name string) bool {
	return slices.Contains([]string{"config", "out", "dir", "alerts"}, name) ||
		strings.HasSuffix(name, "-dir") || strings.HasSuffix(name, "-file")
}

// TestHelpPlaceholders: every flag of every command (each command and
// action the top-level usage names, so a new one is covered) shows a
// placeholder that names its kind of value: none for a switch, "duration"
// for a duration, "T" for a time, a number's for a number, and for a path
// "file", "directory" or "path".
func TestHelpPlaceholders(t *testing.T) {
	var sets []*flag.FlagSet
	flagSetMade = func(fs *flag.FlagSet) { sets = append(sets, fs) }
	defer func() { flagSetMade = nil }()

	actions := regexp.MustCompile(`^[a-z-]+(\|[a-z-]+)*$`)
	commands := 0
	for _, line := range strings.Split(usage, "\n") {
		synopsis, _, _ := strings.Cut(strings.TrimSpace(line), "  ") // what follows two spaces says what it does
		f := strings.Fields(synopsis)
		if len(f) < 2 || f[0] != "ratewarden" {
			continue
		}
		args := [][]string{{f[1]}}
		if len(f) > 2 && actions.MatchString(f[2]) {
			args = nil
			for _, a := range strings.Split(f[2], "|") {
				args = append(args, []string{f[1], a})
			}
		}
		for _, a := range args {
			before := len(sets)
			err := run(context.Background(), append(a, "--help"), io.Discard, io.Discard, func(string) string { return "" })
			if code := exitCode(err, io.Discard); code != 0 || len(sets) == before {
				t.Errorf("%s --help: exit %d, %d flag sets made", strings.Join(a, " "), code, len(sets)-before)
			}
			commands++
		}
	}
	if commands < 20 {
		t.Fatalf("%d commands found in the usage", commands)
	}
	for _, fs := range sets {
		fs.VisitAll(func(f *flag.Flag) {
			name, _ := flag.UnquoteUsage(f)
			var want []string
			switch v := f.Value.(type) {
			case interface{ IsBoolFlag() bool }:
				if v.IsBoolFlag() {
					want = []string{""}
				}
			case *timeFlag:
				want = []string{"T"}
			}
			if want == nil {
				var v any // a flag of the command's own type (listFlag) is text
				if g, ok := f.Value.(flag.Getter); ok {
					v = g.Get()
				}
				switch v.(type) {
				case time.Duration:
					want = []string{"duration"}
				case int, int64, uint, uint64, float64:
					want = numberPlaceholders
				default:
					want = textPlaceholders
					if isPathFlag(f.Name) {
						want = pathPlaceholders
					}
				}
			}
			if !slices.Contains(want, name) {
				t.Errorf("%s -%s shows %q; want one of %q (usage %q)", fs.Name(), f.Name, name, want, f.Usage)
			}
		})
	}
}
