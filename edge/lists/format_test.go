package lists

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

var (
	t0 = time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC)
	t1 = t0.Add(time.Hour)
)

func TestParseAttributes(t *testing.T) {
	text := "203.0.113.7 # plain, as before\n" +
		"user:bob expires=2026-12-01T18:00:00Z added=2026-12-01T17:00:00Z by=alice reason=\"scraper # 800 rps\"\n" +
		"\"user:carol smith\" pending=true by=policy:stuffing\n" +
		"203.0.113.9 removed=2026-12-01T17:30:00Z by=alice\n" +
		"::ffff:198.51.100.0/120 expires=2026-12-01T17:30:00Z\n" +
		"user: eve\n" +
		"203.0.113.20 expires=2319-03-13T16:29:36Z\n" + // past what Unix nanoseconds hold
		"203.0.113.21 expires=1601-01-01T00:00:00Z\n"
	es, err := ParseEntries(strings.NewReader(text), "t.list", Challenge)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{List: Challenge, Target: "203.0.113.7"},
		{List: Challenge, Target: "user:bob", Expires: t1, Added: t0, By: "alice", Reason: "scraper # 800 rps"},
		{List: Challenge, Target: "user:carol smith", Pending: true, By: "policy:stuffing"},
		{List: Challenge, Target: "203.0.113.9", Removed: t0.Add(30 * time.Minute), By: "alice"},
		{List: Challenge, Target: "198.51.100.0/24", Expires: t0.Add(30 * time.Minute)},
		{List: Challenge, Target: "user:eve"},
		{List: Challenge, Target: "203.0.113.20", Expires: time.Date(2319, 3, 13, 16, 29, 36, 0, time.UTC)},
		{List: Challenge, Target: "203.0.113.21", Expires: time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	if len(es) != len(want) {
		t.Fatalf("%d entries, want %d: %+v", len(es), len(want), es)
	}
	for i := range want {
		if !sameEntry(es[i], want[i]) {
			t.Errorf("entry %d = %+v, want %+v", i, es[i], want[i])
		}
	}
	l := New(es, t0)
	a7, a9, net := netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("198.51.100.77")
	cases := []struct {
		addr netip.Addr
		user string
		at   time.Time
		want bool
	}{
		{a7, "", t0, true},
		{a9, "", t0, false}, // removed
		{netip.Addr{}, "bob", t0, true},
		{netip.Addr{}, "bob", t1.Add(-time.Second), true},
		{netip.Addr{}, "bob", t1, false},         // expired at read time
		{netip.Addr{}, "carol smith", t0, false}, // pending
		{net, "", t0, true},
		{net, "", t0.Add(30 * time.Minute), false},
		{a7, "", t1.Add(1000 * time.Hour), true}, // no expiry
		{netip.Addr{}, "eve", t0, true},
		{netip.MustParseAddr("203.0.113.20"), "", t0, true},
		{netip.MustParseAddr("203.0.113.21"), "", t0, false},
	}
	for _, c := range cases {
		if got := l.ContainsAt(c.addr, c.user, c.at); got != c.want {
			t.Errorf("ContainsAt(%v, %q, %v) = %v, want %v", c.addr, c.user, c.at, got, c.want)
		}
	}
}

// TestParseRefuses holds the file format to refusing, with file:line,
// what an attacker who can write one field might try.
func TestParseRefuses(t *testing.T) {
	cases := []struct{ name, text, want string }{
		{"NUL byte", "203.0.113.7\x00\n", `t.list:1: "203.0.113.7\x00": control character '\x00' at byte 12`},
		{"NUL in a quoted value", "user:a reason=\"x\x00\"\n", `t.list:1: `},
		{"escape in a line", "user:a by=\x1b[31m\n", "control character"},
		{"huge line", "203.0.113.7\n" + strings.Repeat("9", MaxLineLen+10) + "\n", "t.list:2: line longer than 4096 bytes"},
		{"host bits", "203.0.113.7/24 by=x", `t.list:1: "203.0.113.7/24 by=x": host bits set; want 203.0.113.0/24`},
		{"mapped host bits", "::ffff:203.0.113.7/120", "host bits set"},
		{"unknown attribute", "203.0.113.7 ttl=1h", `unknown attribute "ttl"; want one of expires, added, by, reason, pending, removed`},
		{"bad time", "203.0.113.7 expires=tomorrow", `expires="tomorrow"; want an RFC 3339 time`},
		{"twice", "203.0.113.7 by=a by=b", "attribute by given twice"},
		{"bad bool", "203.0.113.7 pending=yes", "pending=\"yes\"; want true or false"},
		{"unterminated quote", `user:a reason="x`, "unterminated or bad quoted string"},
		{"text after quote", `"user:a"b`, "text right after a quoted string"},
		{"escaped newline injects nothing", `"user:a\n203.0.113.7"`, "user id with a control character"},
		{"second target", "user:a 203.0.113.7", `"203.0.113.7" is not key=value`},
		{"invalid UTF-8", "user:\xff\xfe", "not valid UTF-8"},
		{"long reason", "user:a reason=" + strings.Repeat("r", MaxReasonLen+1), "reason of 513 bytes; want at most 512"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			es, err := ParseEntries(strings.NewReader(c.text), "t.list", Deny)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "t.list:") {
				t.Fatalf("ParseEntries = %+v, %v; want an error with t.list:N containing %q", es, err, c.want)
			}
		})
	}
}

func TestNormalizeTarget(t *testing.T) {
	cases := []struct{ in, want, err string }{
		{"::ffff:203.0.113.7", "203.0.113.7", ""},
		{"::ffff:203.0.113.0/120", "203.0.113.0/24", ""},
		{"64:ff9b::203.0.113.7", "203.0.113.7", ""},
		{"64:ff9b::203.0.113.0/120", "203.0.113.0/24", ""},
		{"64:ff9b::/64", "", "mixes NAT64"},
		{"2001:DB8::1", "2001:db8::1", ""},
		{"90.0.0.1/32", "90.0.0.1", ""},
		{"::ffff:1.2.3.4/128", "1.2.3.4", ""},
		{"64:ff9b::203.0.113.7/128", "203.0.113.7", ""},
		{"2001:DB8::1/128", "2001:db8::1", ""},
		{"90.0.0.0/31", "90.0.0.0/31", ""},
		{"2001:db8::/127", "2001:db8::/127", ""},
		{" user:alice", "user:alice", ""},
		{"user:alice ", "", "white space"},
		{" 203.0.113.7\t", "203.0.113.7", ""},
		{"user:  alice", "", "white space"},     // matches no client: not trimmed into alice
		{"user:\u00a0alice", "", "white space"}, // nor with a no-break space
		{"user:alice\u2003", "", "white space"},
		{"user:", "", "empty user id"},
		{"user:\ufffd", "", "control character"},
		{"user:a\xffb", "", "not valid UTF-8"},
		{"user:a b", "user:a b", ""},
		{"10.0.0.1/8", "", "host bits set"},
		{"fe80::1%eth0", "", "zone"},
		{"user:a\nb", "", "control character"},
		{"user:a\u0085b", "", "control character"},
		{"example.com", "", "not an IP address"},
	}
	for _, c := range cases {
		got, err := NormalizeTarget(c.in)
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("NormalizeTarget(%q) = %q, %v; want %q, %q", c.in, got, err, c.want, c.err)
		}
	}
}

func TestAppendLine(t *testing.T) {
	e := Entry{Target: "user:a b", Expires: t1, Added: t0, By: "alice", Reason: `x "y" # z = w`, Pending: true}
	got := string(AppendLine(nil, &e))
	want := `"user:a b" expires=2026-12-01T18:00:00Z added=2026-12-01T17:00:00Z by=alice reason="x \"y\" # z = w" pending=true` + "\n"
	if got != want {
		t.Errorf("AppendLine =\n%s want\n%s", got, want)
	}
}
