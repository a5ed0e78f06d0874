package lists

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rivo/uniseg"

	"github.com/ratewarden/ratewarden/internal/clientip"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestShow checks what `ratewarden lists show` prints, as a table and as
// JSON, against testdata/show*. A policy's reason names its alert's key,
// which holds the identity: in the table and in JSON, a character of it
// that is not drawn but acts on the text (a bidirectional override, a
// line separator) is an escape, as the target's are. An entry in the
// site's NAT64 prefix shows the IPv4 client or prefix an edge with
// identity.nat64_prefixes reads it as; one outside it, and every entry on
// an edge without the setting, shows none, and then the table has no
// READ AS column.
func TestShow(t *testing.T) {
	es, err := ParseEntries(strings.NewReader(`203.0.113.7 expires=2026-12-01T18:00:00Z added=2026-12-01T17:00:00Z by=alice reason="scraper: 800 rps"
"user:carol smith" pending=true by=policy:stuffing
198.51.100.0/24 expires=2026-12-01T17:10:00Z
203.0.113.9 removed=2026-12-01T17:20:00Z by=bob reason=mistake
"user:\u202etsinimda\u2028x" by=policy:challenge-scrapers reason="alert heavy_hitter/anonymous:global/user:\u202etsinimda\u2028x"
2001:DB8:64::CB00:7142 by=alice reason="as the origin logs it"
2001:db8:64::198.51.100.0/120
2001:db8:65::cb00:7142 by=alice reason="another translator's, not named"
`), "t.list", Challenge)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file   string
		nat    clientip.NAT64
		asJSON bool
	}{{"show.txt", siteNAT64, false}, {"show.json", siteNAT64, true}, {"show-plain.txt", clientip.NAT64{}, false}} {
		var b bytes.Buffer
		if err := Show(&b, es, t0.Add(30*time.Minute), c.nat, c.asJSON); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", c.file)
		if *update {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.Bytes(), want) {
			t.Errorf("%s:\n%s\nwant\n%s", c.file, b.Bytes(), want)
		}
	}
}

// TestShowWideCharacters: the table of `lists show` lines its columns up
// as a terminal draws them: a target, a writer or a reason in CJK (two
// columns a character), emoji or letters with combining marks (none)
// starts the next column where the header's does. It padded by
// characters (text/tabwriter), so such an entry shifted the columns after
// it.
func TestShowWideCharacters(t *testing.T) {
	es, err := ParseEntries(strings.NewReader(`user:alice by=alice reason=x
user:山田太郎 by=山田 reason=x
"user:e\u0301e\u0301x" by=😀😀 reason=x
`), "t.list", Challenge)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Show(&b, es, t0, clientip.NAT64{}, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	column := func(line, s string) int { return uniseg.StringWidth(line[:strings.Index(line, s)]) }
	for _, col := range [][2]string{{"STATE", "active"}, {"REASON", " x"}} {
		want := column(lines[0], col[0])
		for i, line := range lines[1:] {
			got := column(line, col[1])
			if col[1][0] == ' ' {
				got++
			}
			if got != want {
				t.Errorf("row %d: %s starts at column %d, want %d (the header's)", i+1, col[0], got, want)
			}
		}
	}
	if t.Failed() {
		t.Log("\n" + b.String())
	}
}
