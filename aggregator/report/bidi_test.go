package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/decisions"
)

// TestIdentityBidiControls: a user id holding Unicode bidirectional
// controls (here RIGHT-TO-LEFT OVERRIDE, U+202E) renders as itself in the
// Markdown and HTML reports: the control is not passed on raw, where a
// viewer would draw "\u202enimda" as "admin", another user than the
// offender.
func TestIdentityBidiControls(t *testing.T) {
	const id = "\u202enimda"
	r := userReport(id)
	for _, f := range []Format{Markdown, HTML} {
		var b bytes.Buffer
		if err := r.Render(&b, f); err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(b.String(), "\n") {
			if strings.ContainsRune(line, '\u202e') {
				t.Errorf("%v: a line holds U+202E raw, shown reordered: %q", f, line)
				break
			}
		}
	}
}

// TestHiddenCharactersAreSpaces: control and format characters, and line
// and paragraph separators, in a user id are shown as spaces in the Markdown, HTML and CSV reports alike, and
// kept as they are in the JSON one, which is for programs.
func TestHiddenCharactersAreSpaces(t *testing.T) {
	const id = "\u202ead\u200bmi\u2066n\u061c\x1b[2J\ufeff\u2028x\u2029"
	r := userReport(id)
	for f, want := range map[Format]string{Markdown: "user: ad mi n  \\[2J  x ", HTML: "user: ad mi n  [2J  x ", CSV: "user: ad mi n  [2J  x "} {
		var b bytes.Buffer
		if err := r.Render(&b, f); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), want) {
			t.Errorf("%v does not show the user as %q:\n%s", f, want, b.String())
		}
		if strings.ContainsAny(b.String(), "\u202e\u200b\u2066\u061c\x1b\ufeff\u2028\u2029") {
			t.Errorf("%v holds a hidden character of the user id:\n%q", f, b.String())
		}
	}
	var b bytes.Buffer
	if err := r.Render(&b, JSON); err != nil {
		t.Fatal(err)
	}
	var v struct {
		ByUser []struct{ Identity string } `json:"offenders_by_user"`
	}
	if err := json.Unmarshal(b.Bytes(), &v); err != nil || len(v.ByUser) != 1 || v.ByUser[0].Identity != "user:"+id {
		t.Errorf("the JSON report lists %+v (%v), want %q", v.ByUser, err, "user:"+id)
	}
}

// userReport is the report of one window in which the user id made five
// requests, all blocked.
func userReport(id string) *Report {
	p := aggregator.NewPartial(t0, time.Minute, 10)
	for range 5 {
		p.Update(&decisions.Decision{Time: t0, UserID: id, Tier: "free", Rule: "free:global", Outcome: decisions.Block})
	}
	w := &Windows{Size: time.Minute, Parts: map[time.Time]*aggregator.Partial{t0: p}}
	return Build(w, nil, Options{From: t0, To: t0.Add(time.Minute)})
}
