package lists

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// FuzzParse checks that whatever a list file holds, Parse either refuses
// it naming the file, or accepts entries that write back as lines which
// read as the same entries, one a line.
func FuzzParse(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte("10.0.0.1/8\n"))
	f.Add([]byte("user:a#b\n::ffff:1.2.3.4/128\n0.0.0.0/0\n"))
	f.Add([]byte("fe80::1%eth0\n"))
	f.Add([]byte("\xff\xfe\x00"))
	f.Add([]byte(`"user:a b" expires=2026-12-01T18:00:00Z by=alice reason="x \"y\" # z" pending=true` + "\n"))
	f.Add([]byte("203.0.113.9 removed=2026-12-01T17:40:00Z by=\"\\n203.0.113.10\"\n"))
	f.Add([]byte("2001:db8:64::cb00:7142\n2001:db8:64::c633:6400/120\n203.0.113.66 pending=true\n2001:db8:64::/96\n"))
	f.Add([]byte("2001:db8:64::/48\n2001:db8:64::1:0:0/96\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := ParseEntries(bytes.NewReader(data), "fuzz", Deny)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz:") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		var out []byte
		for i := range es {
			out = AppendLine(out, &es[i])
		}
		back, err := ParseEntries(bytes.NewReader(out), "back", Deny)
		if err != nil {
			t.Fatalf("written entries do not read back: %v\n%s", err, out)
		}
		if len(back) != len(es) || bytes.Count(out, []byte("\n")) != len(es) {
			t.Fatalf("%d entries wrote %d lines and read back as %d", len(es), bytes.Count(out, []byte("\n")), len(back))
		}
		for i := range es {
			if !sameEntry(es[i], back[i]) {
				t.Fatalf("entry %d: %+v read back as %+v", i, es[i], back[i])
			}
		}
		l := New(es, time.Unix(0, 0))
		if l.Len() > len(es) {
			t.Fatalf("Len %d > %d entries", l.Len(), len(es))
		}
		// Read through a site's NAT64 prefix, the list holds every address
		// it held as written, unless an entry holds the prefix (Wide).
		site := NewNAT64(es, time.Unix(0, 0), siteNAT64)
		if site.Len() > l.Len() {
			t.Fatalf("through %s, Len %d > %d", sitePrefix, site.Len(), l.Len())
		}
		if len(site.Wide()) > 0 {
			return
		}
		for _, e := range es {
			p, err := netip.ParsePrefix(e.Target)
			if err != nil {
				a, _ := netip.ParseAddr(e.Target)
				p = netip.PrefixFrom(a, a.BitLen())
			}
			if a := p.Addr(); l.Contains(a, "") && !site.Contains(a, "") {
				t.Fatalf("through %s, %s is off the list", sitePrefix, a)
			}
		}
	})
}

// FuzzAppendLine checks that a writer can never inject a second entry, or
// change the first, through the text of a user id, a reason or who wrote
// it: an entry Validate accepts writes as one line that reads back as
// itself.
func FuzzAppendLine(f *testing.F) {
	f.Add("alice", "scraper", "bob")
	f.Add("a b\n203.0.113.7", "x\" 1.2.3.4 #", "eve\r\nuser:mallory")
	f.Add("\x00", "\u2028", "=")
	f.Fuzz(func(t *testing.T, user, reason, by string) {
		e := Entry{List: Challenge, Target: "user:" + user, Reason: reason, By: by,
			Added: time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC), Expires: time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC)}
		if err := e.Validate(); err != nil {
			return
		}
		line := AppendLine(nil, &e)
		es, err := ParseEntries(bytes.NewReader(line), "fuzz", Challenge)
		if err != nil || len(es) != 1 || !sameEntry(es[0], e) {
			t.Fatalf("%+v wrote %q, read back %+v, %v", e, line, es, err)
		}
	})
}

func sameEntry(a, b Entry) bool {
	return a.List == b.List && a.Target == b.Target && a.Expires.Equal(b.Expires) && a.Added.Equal(b.Added) &&
		a.Removed.Equal(b.Removed) && a.Reason == b.Reason && a.By == b.By && a.Pending == b.Pending
}

// FuzzTableItem checks the decoding of a lists-table item someone else
// wrote: it is refused, or it is an entry that writes back as the same item
// and reads as itself.
func FuzzTableItem(f *testing.F) {
	f.Add("203.0.113.7", "alice", "scraper", "1796148000", "", false)
	f.Add("user:a b\n", "x\x00", "\u202e", "-1", "1796148000", true)
	f.Add("10.0.0.1/8", "", "", "1e3", "x", false)
	f.Add("203.0.113.7", "", "", "99999999999999", "", false) // past year 9999, which RFC 3339 cannot write
	f.Fuzz(func(t *testing.T, target, by, reason, expires, removed string, pending bool) {
		it := key(Deny, target)
		it[TableByAttribute], it[TableReasonAttribute] = str(by), str(reason)
		it[TableExpiresAttribute] = &types.AttributeValueMemberN{Value: expires}
		if removed != "" {
			it[TableRemovedAttribute] = &types.AttributeValueMemberN{Value: removed}
		}
		it[TablePendingAttribute] = &types.AttributeValueMemberBOOL{Value: pending}
		e, err := entry(Deny, it)
		if err != nil {
			return
		}
		if e.Target != target {
			if n, err := NormalizeTarget(target); err != nil || n != e.Target {
				t.Fatalf("target %q read as %q", target, e.Target)
			}
		}
		if !e.Removed.IsZero() {
			return // a tombstone's expires is its own
		}
		back, err := entry(Deny, item(&e))
		if err != nil || !sameEntry(back, e) {
			t.Fatalf("%+v wrote back as %+v, %v", e, back, err)
		}
		line := AppendLine(nil, &e)
		es, err := ParseEntries(bytes.NewReader(line), "item", Deny)
		if err != nil || len(es) != 1 || !sameEntry(es[0], e) {
			t.Fatalf("%+v as a line %q read back as %+v, %v", e, line, es, err)
		}
	})
}
