package lists

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

func mustParse(t testing.TB, text string) *List {
	t.Helper()
	l, err := Parse(strings.NewReader(text), "test.list")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return l
}

const sample = "\uFEFF# deny list\n" +
	"203.0.113.7\n" +
	"  198.51.100.0/24   # a whole network\n" +
	"\n" +
	"\t2001:db8::1\t\r\n" +
	"2001:db8:ab00::/40\n" +
	"::ffff:192.0.2.9\n" +
	"::ffff:192.0.2.128/121\n" +
	"10.1.2.3/32\n" +
	"user:mallory\n" +
	"user: eve # spaces trimmed\n" +
	"   # indented comment\n" +
	"203.0.113.7\n" // a duplicate

func TestParseAndContains(t *testing.T) {
	l := mustParse(t, sample)
	if got, want := l.Len(), 9; got != want {
		t.Errorf("Len = %d, want %d", got, want)
	}
	cases := []struct {
		addr string
		user string
		want bool
	}{
		{"203.0.113.7", "", true},
		{"203.0.113.8", "", false},
		{"::ffff:203.0.113.7", "", true},   // IPv4-mapped client
		{"64:ff9b::203.0.113.7", "", true}, // an IPv4 client through NAT64
		{"64:ff9b::198.51.100.77", "", true},
		{"64:ff9b::1:cb00:7107", "", false}, // outside NAT64's /96: IPv6
		{"198.51.100.0", "", true},
		{"198.51.100.255", "", true},
		{"198.51.101.0", "", false},
		{"::ffff:198.51.100.77", "", true},
		{"2001:db8::1", "", true},
		{"2001:db8::2", "", false},
		{"2001:db8::1%eth0", "", true}, // zones are not part of the address
		{"2001:db8:ab12:3456::1", "", true},
		{"2001:db8:ac00::1", "", false},
		{"192.0.2.9", "", true},   // listed IPv4-mapped, looked up plain
		{"192.0.2.130", "", true}, // inside the mapped /121 = /25
		{"192.0.2.127", "", false},
		{"10.1.2.3", "", true},
		{"10.1.2.4", "", false},
		{"", "mallory", true},
		{"", "eve", true},
		{"", "alice", false},
		{"203.0.113.8", "mallory", true},
		{"203.0.113.7", "alice", true},
		{"", "", false},
		{"::", "", false},
		{"0.0.0.0", "", false},
	}
	for _, c := range cases {
		var a netip.Addr
		if c.addr != "" {
			a = netip.MustParseAddr(c.addr)
		}
		if got := l.Contains(a, c.user); got != c.want {
			t.Errorf("Contains(%q, %q) = %v, want %v", c.addr, c.user, got, c.want)
		}
	}
}

func TestEmptyLists(t *testing.T) {
	a := netip.MustParseAddr("203.0.113.7")
	var nilList *List
	for name, l := range map[string]*List{"nil": nilList, "zero": {}, "empty file": mustParse(t, "# nothing\n\n")} {
		if l.Contains(a, "alice") || l.Len() != 0 {
			t.Errorf("%s list: Contains %v, Len %d", name, l.Contains(a, "alice"), l.Len())
		}
	}
}

func TestContainsEverything(t *testing.T) {
	l := mustParse(t, "0.0.0.0/0\n::/0\n")
	for _, s := range []string{"1.2.3.4", "255.255.255.255", "::1", "2001:db8::1", "::ffff:1.2.3.4"} {
		if !l.Contains(netip.MustParseAddr(s), "") {
			t.Errorf("/0 does not contain %s", s)
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name string
		text string
		want string
	}{
		{"bad address", "203.0.113.7\n\n203.0.113.300\n", `test.list:3: "203.0.113.300": not an IP address, a CIDR or user:<id>`},
		{"hostname", "example.com", `test.list:1: "example.com": not an IP address, a CIDR or user:<id>`},
		{"bad CIDR", "198.51.100.0/33", `test.list:1: "198.51.100.0/33": not an IP address, a CIDR or user:<id>`},
		{"host bits", "# x\n10.0.0.1/8", `test.list:2: "10.0.0.1/8": host bits set; want 10.0.0.0/8, or 10.0.0.1 for the one address`},
		{"host bits v6", "2001:db8::1/64", `test.list:1: "2001:db8::1/64": host bits set; want 2001:db8::/64`},
		{"short mapped prefix", "::ffff:0:0/95", `test.list:1: "::ffff:0:0/95": host bits set`},
		{"zone", "fe80::1%eth0", `test.list:1: "fe80::1%eth0": address with a zone`},
		{"empty user", "user:", `test.list:1: "user:": empty user id; want user:<id>`},
		{"empty user with comment", "user:   # nobody", `test.list:1: "user:": empty user id`},
		{"long user", "user:" + strings.Repeat("u", MaxUserLen+1), `test.list:1: "user:uuuu`},
		{"capitalised prefix", "User:alice", `test.list:1: "User:alice": not an IP address`},
		{"two entries on a line", "1.2.3.4 5.6.7.8", `test.list:1: "1.2.3.4 5.6.7.8": "5.6.7.8" is not key=value; want one target a line`},
		{"long line", "1.2.3.4\n" + strings.Repeat("x", MaxLineLen+1), `test.list:2: line longer than 4096 bytes`},
		{"long text quoted short", strings.Repeat("y", 200), `test.list:1: "` + strings.Repeat("y", 64) + `"...: not`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, err := Parse(strings.NewReader(c.text), "test.list")
			if err == nil || !strings.Contains(err.Error(), c.want) || l != nil {
				t.Fatalf("Parse: list %v, error %v; want nil and an error containing %q", l, err, c.want)
			}
		})
	}
}

func TestContainsDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	l := mustParse(t, sample)
	v4, v6 := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8:ffff::1")
	if n := testing.AllocsPerRun(100, func() {
		l.Contains(v4, "")
		l.Contains(v6, "alice")
	}); n != 0 {
		t.Errorf("Contains: %v allocations, want 0", n)
	}
}

// bigList returns a list of n entries: a mix of IPv4 /24s and /32s and
// IPv6 /48s, /64s and /128s.
func bigList(t testing.TB, n int) *List {
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for i := range n {
		switch i % 5 {
		case 0:
			fmt.Fprintf(&b, "%d.%d.%d.0/24\n", 11+r.IntN(200), r.IntN(256), r.IntN(256))
		case 1:
			fmt.Fprintf(&b, "%d.%d.%d.%d\n", 11+r.IntN(200), r.IntN(256), r.IntN(256), r.IntN(256))
		case 2:
			fmt.Fprintf(&b, "2001:db8:%x::/48\n", r.IntN(1<<16))
		case 3:
			fmt.Fprintf(&b, "2a00:%x:%x:%x::/64\n", r.IntN(1<<16), r.IntN(1<<16), r.IntN(1<<16))
		case 4:
			fmt.Fprintf(&b, "2a01::%x:%x\n", r.IntN(1<<16), r.IntN(1<<16))
		}
	}
	return mustParse(t, b.String())
}

func BenchmarkContains(b *testing.B) {
	miss4, miss6 := netip.MustParseAddr("5.6.7.8"), netip.MustParseAddr("2600::1")
	for _, n := range []int{0, 10, 10_000} {
		l := bigList(b, n)
		b.Run(fmt.Sprintf("entries=%d/v4-miss", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l.Contains(miss4, "")
			}
		})
		b.Run(fmt.Sprintf("entries=%d/v6-miss-user", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l.Contains(miss6, "alice")
			}
		})
		b.Run(fmt.Sprintf("entries=%d/v4-miss-parallel", n), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.Contains(miss4, "")
				}
			})
		})
	}
	// Read through a site's NAT64 prefix, an IPv6 client is looked for in
	// that prefix first.
	site := NewNAT64(bigList(b, 10_000).Entries(), t0, siteNAT64)
	b.Run("nat64/entries=10000/v4-miss", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			site.Contains(miss4, "")
		}
	})
	b.Run("nat64/entries=10000/v6-miss-user", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			site.Contains(miss6, "alice")
		}
	})
	l := mustParse(b, "198.51.100.0/24\n")
	hit := netip.MustParseAddr("198.51.100.7")
	b.Run("hit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.Contains(hit, "")
		}
	})
}
