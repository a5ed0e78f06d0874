package main

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
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
