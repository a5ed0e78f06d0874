package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestEmfValidate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const good = `{"_aws":{"Timestamp":1574109732004,"CloudWatchMetrics":[{"Namespace":"lambda-function-metrics","Dimensions":[["functionVersion"]],"Metrics":[{"Name":"time","Unit":"Milliseconds"}]}]},"functionVersion":"$LATEST","time":100}`
	goodFile := write("good.jsonl", good+"\n\n"+good+"\n")
	badFile := write("bad.jsonl", good+"\n"+
		`{"_aws":{"Timestamp":1574109732004,"CloudWatchMetrics":[{"Namespace":":a b","Dimensions":[["Tier"]],"Metrics":[{"Name":"x","Unit":"Requests"}]}]},"x":"1"}`+"\n"+
		"not json\n")
	const now = "2019-11-18T20:42:12Z"
	cases := []struct {
		name string
		args []string
		code int
		want []string // each in stdout+stderr
	}{
		{"help", []string{"emf", "--help"}, 0, []string{"Usage: ratewarden emf validate"}},
		{"validate help", []string{"emf", "validate", "--help"}, 0, []string{"-ignore-time"}},
		{"no subcommand", []string{"emf"}, 2, []string{"Usage: ratewarden emf validate"}},
		{"no files", []string{"emf", "validate"}, 2, []string{"Usage: ratewarden emf validate"}},
		{"bad -now", []string{"emf", "validate", "-now", "yesterday", goodFile}, 2, []string{`-now "yesterday"`}},
		{"valid", []string{"emf", "validate", "-now", now, goodFile}, 0, []string{"2 EMF documents are valid"}},
		{"valid, time ignored", []string{"emf", "validate", "-ignore-time", goodFile}, 0, []string{"2 EMF documents are valid"}},
		{"too old today", []string{"emf", "validate", goodFile}, 1, []string{goodFile + ":1: $._aws.Timestamp: is 1574109732004", goodFile + ":3: $._aws.Timestamp"}},
		{"invalid", []string{"emf", "validate", "-now", now, goodFile, badFile}, 1, []string{
			badFile + `:2: $._aws.CloudWatchMetrics[0].Namespace: starts with ':'; allowed: 1 to 255 printable ASCII characters`,
			badFile + `:2: $._aws.CloudWatchMetrics[0].Metrics[0].Unit: is "Requests"; allowed: one of Seconds`,
			badFile + `:2: $.Tier: is missing`,
			badFile + `:2: $.x: is a string`,
			badFile + `:3: $: is not valid JSON`,
			"2 of 5 EMF documents are invalid",
		}},
		{"missing file", []string{"emf", "validate", filepath.Join(dir, "nope")}, 1, []string{"validate emf file: open"}},
		{"size limit", []string{"emf", "validate", "-now", now, "-max-size", "100", goodFile}, 1, []string{goodFile + `:1: $: document is ` + strconv.Itoa(len(good)) + ` bytes; allowed: at most 100 bytes`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runCLI(t, nil, c.args...)
			if code != c.code {
				t.Errorf("exit %d, want %d\n%s%s", code, c.code, out, errs)
			}
			for _, w := range c.want {
				if !strings.Contains(out+errs, w) {
					t.Errorf("output lacks %q:\n%s%s", w, out, errs)
				}
			}
		})
	}
}
