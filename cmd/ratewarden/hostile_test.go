package main

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rivo/uniseg"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/internal/visible"
)

// TestDecisionsCatTableIsText: `decisions cat --format table` prints a
// user id the client chose as text: no terminal escape sequence reaches
// the terminal, and a newline or tab in the id does not start a row of its
// own or shift the columns. The edge no longer believes such an id
// (identity.Believes), so the decision is one an older edge logged.
func TestDecisionsCatTableIsText(t *testing.T) {
	at := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	user := "\x1b[2J\x1b[H\x1b]0;pwned\x07mallory\n0\t2026-12-01T03:00:00.000Z\tedge-1\t10.0.0.1\tadmin\tanonymous\tGET\t/\t-\t1/100\tallow\t-"
	dir := filepath.Join(t.TempDir(), "log")
	writeDecisions(t, dir, []decisions.Decision{{Time: at, Node: "edge-1", ClientIP: netip.MustParseAddr("203.0.113.9"), UserID: user,
		Tier: "anonymous", Method: "GET", Path: "/api", Rule: "anonymous:global", Count: 500, Limit: 100, Outcome: decisions.Block}})
	code, out, errs := runCLI(t, nil, "decisions", "cat", "--dir", dir, "--format", "table")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("the table holds terminal control characters:\n%q", out)
	}
	if lines := strings.Count(out, "\n"); lines != 2 {
		t.Errorf("the table has %d lines for one decision, want 2 (header, row):\n%s", lines, strings.ReplaceAll(out, "\x1b", "^["))
	}
}

// TestDecisionsCatJSONShowsFormatCharacters: `decisions cat` (JSON, the
// default) writes the format characters and line separators a user id may
// hold, which the edge believes, as \u escapes, as `lists show --json`
// does: "ad\u200bmin" on a terminal would read "admin", and U+202E would
// reorder what follows it. Each line still decodes to the id as logged.
func TestDecisionsCatJSONShowsFormatCharacters(t *testing.T) {
	at := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	users := []string{"ad\u200bmin", "\u202enimda", "user\u2028admin", "\u2066root\u2069", "bob\U000e0041"}
	var ds []decisions.Decision
	for _, u := range users {
		ds = append(ds, decisions.Decision{Time: at, Node: "edge-1", ClientIP: netip.MustParseAddr("203.0.113.9"), UserID: u, RequestID: u,
			Tier: "authenticated", Method: "GET", Path: "/api", Rule: "authenticated:global", Count: 500, Limit: 100, Outcome: decisions.Block})
	}
	dir := filepath.Join(t.TempDir(), "log")
	writeDecisions(t, dir, ds)
	code, out, errs := runCLI(t, nil, "decisions", "cat", "--dir", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if strings.ContainsFunc(strings.ReplaceAll(out, "\n", ""), visible.Hidden) || strings.Count(out, "\n") != len(users) {
		t.Errorf("the JSON lines hold a character that is not drawn:\n%q", out)
	}
	for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		d, _, err := decisions.ParseJSON([]byte(line))
		if err != nil || d.UserID != users[i] || d.RequestID != users[i] {
			t.Errorf("line %d decodes to user %q, request %q (%v), want %q", i+1, d.UserID, d.RequestID, err, users[i])
		}
	}
}

// TestTableCell: a table's field is quoted when it holds a character that
// is not printable, is not valid UTF-8, or starts with a double quote, and
// is printed as it is otherwise.
func TestTableCell(t *testing.T) {
	for in, want := range map[string]string{
		"":                 "-",
		"mallory":          "mallory",
		"rate limited":     "rate limited",
		"/api/é/ü?q=ß":     "/api/é/ü?q=ß",
		"ma\"llory":        "ma\"llory",
		"\"mallory\"":      `"\"mallory\""`,
		"mal\nlory":        `"mal\nlory"`,
		"mal\tlory":        `"mal\tlory"`,
		"\x1b[2Jmallory":   `"\x1b[2Jmallory"`,
		"\u202enimda":      `"\u202enimda"`,
		"ad\u200bmin":      `"ad\u200bmin"`,
		"\u00a0victim":     `"\u00a0victim"`,
		"mallory\u0085":    `"mallory\u0085"`,
		"mal\xfflory":      `"mal\xfflory"`,
		"user:\u2066admin": `"user:\u2066admin"`,
	} {
		if got := cell(in); got != want {
			t.Errorf("cell(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestDecisionsCatTableWideCharacters: `decisions cat --format table`
// lines its columns up as a terminal draws them: a user id or path of
// CJK characters (two columns each), emoji, or letters with combining
// marks (none) starts the next column where the header's does. It padded
// by characters (text/tabwriter), so each such field shifted every
// column after it.
func TestDecisionsCatTableWideCharacters(t *testing.T) {
	at := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	var ds []decisions.Decision
	for _, u := range []string{"alice", "山田太郎", "e\u0301e\u0301e\u0301x", "😀😀", "👩\u200d👩\u200d👧fam", "ｆｕｌｌ"} {
		ds = append(ds, decisions.Decision{Time: at, Node: "edge-1", ClientIP: netip.MustParseAddr("203.0.113.9"), UserID: u,
			Tier: "anonymous", Method: "GET", Path: "/api/" + u, Rule: "anonymous:global", Count: 5, Limit: 100, Outcome: decisions.Allow})
	}
	dir := filepath.Join(t.TempDir(), "log")
	writeDecisions(t, dir, ds)
	code, out, errs := runCLI(t, nil, "decisions", "cat", "--dir", dir, "--format", "table")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	// Where each column after a client's field starts, in terminal
	// columns: the header's name, then each row's value.
	at2 := func(line, s string) int {
		i := strings.Index(line, s)
		if i < 0 {
			return -1
		}
		return uniseg.StringWidth(line[:i])
	}
	for _, col := range [][2]string{{"TIER", " anonymous "}, {"RULE", " anonymous:global "}} {
		want := at2(lines[0], col[0])
		for i, line := range lines[1:] {
			if got := at2(line, col[1]) + 1; got != want {
				t.Errorf("row %d: %s starts at column %d, want %d (the header's)", i+1, col[0], got, want)
			}
		}
	}
	if len(lines) != len(ds)+1 || t.Failed() {
		t.Errorf("%d lines, want %d:\n%s", len(lines), len(ds)+1, out)
	}
}
