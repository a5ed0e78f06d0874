package texttable

import (
	"bytes"
	"fmt"
	"testing"
	"text/tabwriter"
)

// TestASCIIAsTabwriter: for a table of ASCII cells the output is
// text/tabwriter's (padding with spaces, no minimum width), byte for byte,
// so moving a table here changes none of its ASCII output.
func TestASCIIAsTabwriter(t *testing.T) {
	table := "NAME\tCOUNT\tREASON\nalice\t1\twithin the limit\nb\t12345\t-\n\t\tlast\n"
	for _, padding := range []int{1, 2} {
		var want, got bytes.Buffer
		tw := tabwriter.NewWriter(&want, 0, 8, padding, ' ', 0)
		fmt.Fprint(tw, table)
		tw.Flush()
		w := NewWriter(&got, padding)
		fmt.Fprint(w, table)
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("padding %d:\n%s\nwant\n%s", padding, got.String(), want.String())
		}
	}
}

// TestWidth: a cell is padded by the columns it takes on a terminal: two
// for a CJK character, a fullwidth letter or an emoji, none for a
// combining mark.
func TestWidth(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b, 1)
	fmt.Fprint(w, "USER\tTIER\nalice\ta\n山田太郎\ta\ne\u0301e\u0301x\ta\n😀\ta\nｆｕ\ta\n")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "USER     TIER\nalice    a\n山田太郎 a\ne\u0301e\u0301x      a\n😀       a\nｆｕ     a\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// TestWidthsKept: a table flushed in parts keeps each column's width from
// the parts before, and widens it for a wider cell.
func TestWidthsKept(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b, 1)
	for _, part := range []string{"A\tB\nx\ty\n", "longer\tz\n", "x\ty\n"} {
		fmt.Fprint(w, part)
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if want := "A B\nx y\nlonger z\nx      y\n"; b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
