package lists

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/ratewarden/ratewarden/internal/visible"
)

// The states Show gives an entry.
const (
	StateActive  = "active"
	StatePending = "pending"
	StateExpired = "expired"
	StateRemoved = "removed"
)

// State returns e's state at now.
func (e *Entry) State(now time.Time) string {
	switch {
	case !e.Removed.IsZero():
		return StateRemoved
	case !e.Expires.IsZero() && !now.Before(e.Expires):
		return StateExpired
	case e.Pending:
		return StatePending
	}
	return StateActive
}

// shown is an entry as `ratewarden lists show --json` prints it.
type shown struct {
	List    string     `json:"list"`
	Target  string     `json:"target"`
	State   string     `json:"state"`
	Expires *time.Time `json:"expires,omitempty"`
	Added   *time.Time `json:"added,omitempty"`
	Removed *time.Time `json:"removed,omitempty"`
	By      string     `json:"by,omitempty"`
	Reason  string     `json:"reason,omitempty"`
}

func opt(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Show writes entries for people: a table, or with asJSON a JSON array,
// with each entry's state at now. Every string it prints was checked free
// of control characters when read, so nothing in an entry can reach the
// terminal as a control sequence; the table also shows the format
// characters and line separators a target, a writer or a reason may hold
// (a bidirectional override reorders what follows it) as escapes.
func Show(w io.Writer, es []Entry, now time.Time, asJSON bool) error {
	if asJSON {
		out := make([]shown, len(es))
		for i, e := range es {
			out[i] = shown{List: e.List, Target: e.Target, State: e.State(now), Expires: opt(e.Expires),
				Added: opt(e.Added), Removed: opt(e.Removed), By: e.By, Reason: e.Reason}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LIST\tTARGET\tSTATE\tEXPIRES\tADDED\tBY\tREASON")
	for _, e := range es {
		never := "never"
		if !e.Removed.IsZero() {
			never = "-"
		}
		// Targets are written as in a list file, quoted when they hold
		// spaces, so that a column is one target. A policy's reason holds
		// its alert's key, and with it the identity: what of it acts on
		// the text without being drawn is an escape.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.List, appendField(nil, e.Target), e.State(now), stamp(e.Expires, never),
			stamp(e.Added, "-"), dash(visible.Escape(e.By)), dash(visible.Escape(e.Reason)))
	}
	return tw.Flush()
}

func stamp(t time.Time, zero string) string {
	if t.IsZero() {
		return zero
	}
	return t.UTC().Format(time.RFC3339)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
