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
	for f, want := range map[Format]string{Markdown: "`user: ad mi n  [2J  x `", HTML: "user: ad mi n  [2J  x ", CSV: "user: ad mi n  [2J  x "} {
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

// TestMarkdownClientsAsCode: in the Markdown report a client's id and a
// rule's path are code spans, which GitHub renders as they are: it turns
// @name into a mention, #123 into an issue link and a bare URL into a
// link in text, escaped or not, but not in code. Each cell is read back
// as CommonMark and GFM tables read it (a pipe escaped as \| even in code,
// then one code span whose fence no run of backticks inside matches, one
// space stripped at each end when both ends are spaces) and must give the
// identity as it is.
func TestMarkdownClientsAsCode(t *testing.T) {
	ids := []string{"@octocat", "see #123", "http://evil.example/x", "www.evil.example", "a`b", "``x", "x`", " x ", "a|b", `a\|b`, `a\`, "*bold* _it_ <b>"}
	p := aggregator.NewPartial(t0, time.Minute, 20)
	for i, id := range ids {
		for range 2 + i {
			p.Update(&decisions.Decision{Time: t0, UserID: id, Tier: "free", Rule: "free:/api/@team/" + id, Outcome: decisions.Block})
		}
	}
	w := &Windows{Size: time.Minute, Parts: map[time.Time]*aggregator.Partial{t0: p}}
	r := Build(w, nil, Options{From: t0, To: t0.Add(time.Minute), Top: 20})
	var b bytes.Buffer
	if err := r.Render(&b, Markdown); err != nil {
		t.Fatal(err)
	}
	users, rules := map[string]bool{}, map[string]bool{}
	for line := range strings.Lines(b.String()) {
		cells := tableCells(strings.TrimSpace(line))
		if len(cells) == 0 {
			continue
		}
		if s, ok := codeSpan(cells[0]); ok && strings.HasPrefix(s, "user:") && len(cells) == 13 {
			users[strings.TrimPrefix(s, "user:")] = true
		}
		if s, ok := codeSpan(cells[0]); ok && strings.HasPrefix(s, "free:/api/@team/") {
			rules[strings.TrimPrefix(s, "free:/api/@team/")] = true
		}
	}
	for _, id := range ids {
		if !users[id] {
			t.Errorf("no offender row shows user:%q as a code span", id)
		}
		if !rules[id] {
			t.Errorf("no path row shows the rule of %q as a code span", id)
		}
	}
	if t.Failed() {
		t.Log("\n" + b.String())
	}
}

// tableCells splits a GFM table row into its cells, unescaping \| as a
// GFM table does before the cells' inlines are read; nil for a line that
// is not a row.
func tableCells(line string) []string {
	if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") {
		return nil
	}
	var cells []string
	var cell strings.Builder
	for i := 1; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cell.WriteByte('|')
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cell.String()))
			cell.Reset()
		default:
			cell.WriteByte(line[i])
		}
	}
	return cells
}

// codeSpan reads s as one CommonMark code span and returns its content.
func codeSpan(s string) (string, bool) {
	n := len(s) - len(strings.TrimLeft(s, "`"))
	if n == 0 || len(s) < 2*n || strings.Repeat("`", n) != s[len(s)-n:] || strings.HasSuffix(s[:len(s)-n], "`") {
		return "", false
	}
	c := s[n : len(s)-n]
	if strings.Contains(c, strings.Repeat("`", n)) { // a run of n inside would close it
		for _, run := range strings.FieldsFunc(c, func(r rune) bool { return r != '`' }) {
			if len(run) == n {
				return "", false
			}
		}
	}
	if len(c) >= 2 && c[0] == ' ' && c[len(c)-1] == ' ' && strings.Trim(c, " ") != "" {
		c = c[1 : len(c)-1]
	}
	return c, true
}
