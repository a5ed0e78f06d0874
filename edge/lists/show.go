package lists

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/ratewarden/ratewarden/internal/clientip"
	"github.com/ratewarden/ratewarden/internal/texttable"
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
	List   string `json:"list"`
	Target string `json:"target"`
	// ReadAs is the IPv4 address or prefix an edge with the configuration's
	// identity.nat64_prefixes reads a target in one of them as
	// (NAT64Target); none for other targets.
	ReadAs  string     `json:"read_as,omitempty"`
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
// with each entry's state at now, and for an entry in one of nat's
// network-specific prefixes the IPv4 address or prefix an edge reading
// through nat reads it as (NAT64Target: a READ AS column, read_as in
// JSON), since that is the client it refuses, exempts or challenges.
// Every string it prints was checked free of control characters when
// read, so nothing in an entry can reach the terminal as a control
// sequence; the format characters and line separators a target, a writer
// or a reason may hold (a bidirectional override reorders what follows
// it) are escapes, in the table (visible.Escape) and in JSON
// (visible.AppendJSON).
func Show(w io.Writer, es []Entry, now time.Time, nat clientip.NAT64, asJSON bool) error {
	readAs := make([]string, len(es))
	column := false
	for i, e := range es {
		readAs[i] = NAT64Target(e.Target, nat)
		column = column || readAs[i] != ""
	}
	if asJSON {
		out := make([]shown, len(es))
		for i, e := range es {
			out[i] = shown{List: e.List, Target: e.Target, ReadAs: readAs[i], State: e.State(now), Expires: opt(e.Expires),
				Added: opt(e.Added), Removed: opt(e.Removed), By: e.By, Reason: e.Reason}
		}
		js, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(visible.AppendJSON(nil, js), '\n'))
		return err
	}
	// The READ AS column is there when an entry needs it: most sites have
	// no NAT64 prefix of their own.
	head, read := "", func(int) string { return "" }
	if column {
		head, read = "READ AS\t", func(i int) string { return dash(readAs[i]) + "\t" }
	}
	tw := texttable.NewWriter(w, 2)
	fmt.Fprintf(tw, "LIST\tTARGET\t%sSTATE\tEXPIRES\tADDED\tBY\tREASON\n", head)
	for i, e := range es {
		never := "never"
		if !e.Removed.IsZero() {
			never = "-"
		}
		// Targets are written as in a list file, quoted when they hold
		// spaces, so that a column is one target. A policy's reason holds
		// its alert's key, and with it the identity: what of it acts on
		// the text without being drawn is an escape.
		fmt.Fprintf(tw, "%s\t%s\t%s%s\t%s\t%s\t%s\t%s\n", e.List, appendField(nil, e.Target), read(i), e.State(now), stamp(e.Expires, never),
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
