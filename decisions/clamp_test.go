package decisions_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// TestEmitterClamps: a decision with a field longer than readers take (a
// node name of 300 bytes, a reason quoting a client's input, a rule of a
// path too long), a time past MaxTime or a drop count over MaxDropped is
// written cut to what readers take, and counted; the decisions written
// with it stay readable. Before, the line (in the columnar codecs, the
// whole record) was refused by every reader.
func TestEmitterClamps(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 18, 0, 0, 0, time.UTC)
	ok := decisions.Decision{Time: t0, Node: "edge-1", Tier: "anonymous", Rule: "anonymous:global", Outcome: decisions.Allow, Reason: "under limit"}
	long := ok
	long.Node = strings.Repeat("n", 300)
	long.Reason = "x" + strings.Repeat("é", 200)        // 401 bytes: 256 would cut an é in two
	long.ResponseError = "ab" + strings.Repeat("😀", 80) // 322 bytes: 256 would cut the 64th emoji
	long.Rule = "anonymous:/" + strings.Repeat("p", decisions.MaxRuleLen)
	long.Time = decisions.MaxTime.Add(time.Hour)
	drops := decisions.Decision{Kind: decisions.KindDrops, Time: t0, Node: "edge-1", Dropped: decisions.MaxDropped + 1}
	got, s := emitAll(t, ok, long, drops, ok)
	if len(got) != 4 {
		t.Fatalf("read %d decisions, want 4", len(got))
	}
	c := got[1]
	if c.Node != long.Node[:decisions.MaxNameLen] || c.Reason != long.Reason[:255] || c.ResponseError != long.ResponseError[:254] ||
		c.Rule != long.Rule[:decisions.MaxRuleLen] || !c.Time.Equal(decisions.MaxTime) {
		t.Errorf("clamped decision: node %d bytes, reason %d, response_error %d, rule %d, time %v", len(c.Node), len(c.Reason), len(c.ResponseError), len(c.Rule), c.Time)
	}
	if got[2].Dropped != decisions.MaxDropped {
		t.Errorf("drops %d, want %d", got[2].Dropped, uint64(decisions.MaxDropped))
	}
	if got[0] != ok || got[3] != ok {
		t.Errorf("the decisions beside them changed: %+v, %+v", got[0], got[3])
	}
	if s.Clamped != 2 || s.Written != 4 {
		t.Errorf("stats %+v, want 2 clamped of 4 written", s)
	}
}

// TestEmitterClampsInvalidUTF8: a capped field within its cap in bytes
// but not valid UTF-8 is read as U+FFFD per bad byte, three bytes each (a
// plan header of 100 such bytes from a trusted proxy is a plan of 300): it
// is written cut to its cap as readers read it, and counted; one that
// fits as read is written as it is. Before, every reader refused it (the
// JSON line; in the log, its whole record with the other clients').
func TestEmitterClampsInvalidUTF8(t *testing.T) {
	ok := decisions.Decision{Time: time.Date(2026, 12, 4, 18, 0, 0, 0, time.UTC), Node: "edge-1", Tier: "anonymous", Rule: "anonymous:global", Outcome: decisions.Allow, Reason: "under limit"}
	bad := ok
	bad.Plan = strings.Repeat("\xff", 100)        // read as 300 bytes
	bad.Reason = "r" + strings.Repeat("\xfe", 90) // 271
	bad.Tier = strings.Repeat("t", 200) + "\xff"  // 203: fits
	got, s := emitAll(t, ok, bad, ok)
	if len(got) != 3 {
		t.Fatalf("read %d decisions, want 3", len(got))
	}
	c := got[1]
	if c.Plan != strings.Repeat("\uFFFD", 85) || c.Reason != "r"+strings.Repeat("\uFFFD", 85) || c.Tier != strings.Repeat("t", 200)+"\uFFFD" {
		t.Errorf("clamped decision: plan %q, reason %q, tier %q", c.Plan, c.Reason, c.Tier)
	}
	if s.Clamped != 1 || s.Written != 3 {
		t.Errorf("stats %+v, want 1 clamped of 3 written", s)
	}
}

// emitAll emits ds through an Emitter to JSON lines and returns what a
// reader reads back, with the emitter's stats.
func emitAll(t *testing.T, ds ...decisions.Decision) ([]decisions.Decision, decisions.EmitterStats) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "d.jsonl")
	w, err := decisions.OpenJSONLines(path)
	if err != nil {
		t.Fatal(err)
	}
	e := decisions.NewEmitter(w, decisions.EmitterOptions{Interval: time.Hour})
	for _, d := range ds {
		e.Emit(d)
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, err := jsonFile{path: path}.ReadBack()
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	return got, e.Stats()
}
