package main

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// TestTableFollowWritesEachRow: `decisions cat --format table --follow`
// writes each row as it comes, lined up with the header; before, the
// table was held until the command stopped, so a follower saw nothing
// while it ran, and held every row in memory.
func TestTableFollowWritesEachRow(t *testing.T) {
	var out bytes.Buffer
	p := newEventPrinter(&out, "table", true, false)
	d := decisions.Decision{Time: time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC), Node: "edge-1", ClientIP: netip.MustParseAddr("203.0.113.9"),
		Tier: "anonymous", Method: "GET", Path: "/api", Rule: "anonymous:global", Count: 5, Limit: 100, Outcome: decisions.Allow}
	for i := range 3 {
		p.print("1", &d)
		if got := strings.Count(out.String(), "\n"); got != 2+i {
			t.Fatalf("after %d rows, %d lines written, want %d (the header and each row):\n%s", i+1, got, 2+i, out.String())
		}
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if want := strings.Index(lines[0], "TIER"); strings.Index(lines[1], "anonymous") != want || strings.Index(lines[3], "anonymous") != want {
		t.Errorf("rows not lined up with the header:\n%s", out.String())
	}
}

// TestTableHoldsABlock: without --follow a table is written a block of
// tableBlock rows at a time, not held whole until the end: a large log
// printed as a table took memory for every row of it.
func TestTableHoldsABlock(t *testing.T) {
	var out bytes.Buffer
	p := newEventPrinter(&out, "table", false, false)
	d := decisions.Decision{Time: time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC), Tier: "anonymous", Outcome: decisions.Allow}
	for range tableBlock {
		p.print("1", &d)
	}
	p.w.Flush() // the bufio.Writer's bytes, not the table's
	if got := strings.Count(out.String(), "\n"); got != tableBlock+1 {
		t.Errorf("after %d rows, %d lines written, want %d", tableBlock, got, tableBlock+1)
	}
}
