package lists

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/clientip"
)

// siteNAT64 is the NAT64 of an edge behind a translator of the site's own
// prefix (identity.nat64_prefixes: [2001:db8:64::/96]).
var siteNAT64 = clientip.NewNAT64([]netip.Prefix{netip.MustParsePrefix(sitePrefix)})

const sitePrefix = "2001:db8:64::/96"

func mustEntries(t testing.TB, text string) []Entry {
	t.Helper()
	es, err := ParseEntries(strings.NewReader(text), "test.list", Deny)
	if err != nil {
		t.Fatalf("ParseEntries: %v", err)
	}
	return es
}

// TestNAT64Entries: an entry written in the site's NAT64 prefix names the
// IPv4 clients it carries on an edge that reads that prefix as IPv4, in
// whatever spelling the client's address reaches the list; on an edge
// without the setting it is the IPv6 address it was, as are its clients.
func TestNAT64Entries(t *testing.T) {
	es := mustEntries(t, "2001:DB8:64::CB00:7142\n"+ // 203.0.113.66, as an origin's log may show it
		"2001:db8:64::198.51.100.0/120\n"+ // 198.51.100.0/24
		"2001:db8:64::1:c000:200/120\n") // the same /64, outside the /96: IPv6
	site, plain := NewNAT64(es, t0, siteNAT64), New(es, t0)
	for _, c := range []struct {
		addr        string
		site, plain bool
	}{
		{"203.0.113.66", true, false},
		{"2001:db8:64::cb00:7142", true, true},
		{"2001:db8:64::203.0.113.66", true, true},
		{"2001:db8:64::cb00:7142%eth0", true, true},
		{"::ffff:203.0.113.66", true, false},
		{"64:ff9b::203.0.113.66", true, false},
		{"203.0.113.67", false, false},
		{"2001:db8:64::cb00:7143", false, false},
		{"198.51.100.7", true, false},
		{"2001:db8:64::c633:64ff", true, true},
		{"64:ff9b::198.51.100.255", true, false},
		{"198.51.101.0", false, false},
		{"2001:db8:64::1:c000:2ff", true, true},
		{"192.0.2.255", false, false},
	} {
		a := netip.MustParseAddr(c.addr)
		if got := site.ContainsAt(a, "", t0); got != c.site {
			t.Errorf("through %s: ContainsAt(%s) = %v, want %v", sitePrefix, c.addr, got, c.site)
		}
		if got := plain.ContainsAt(a, "", t0); got != c.plain {
			t.Errorf("without it: ContainsAt(%s) = %v, want %v", c.addr, got, c.plain)
		}
	}
	// What is stored is what was written: the writers' form.
	for i, want := range []string{"2001:db8:64::cb00:7142", "2001:db8:64::c633:6400/120", "2001:db8:64::1:c000:200/120"} {
		if got := site.Entries()[i].Target; got != want {
			t.Errorf("entry %d: target %s, want %s as written", i, got, want)
		}
	}
	ps, _ := site.Targets(t0)
	if got := fmt.Sprint(ps); got != "[198.51.100.0/24 2001:db8:64::1:c000:200/120 203.0.113.66/32]" {
		t.Errorf("Targets through %s = %s", sitePrefix, got)
	}
}

// TestNAT64ZeroLeavesEntries: the zero NAT64 (an edge without
// identity.nat64_prefixes) reads every entry as New does: as written, an
// entry in a site's prefix too.
func TestNAT64ZeroLeavesEntries(t *testing.T) {
	es := mustEntries(t, sample+"2001:db8:64::cb00:7142\n2001:db8:64::/96\n2001:db8:64::/48\n64:ff9b::203.0.113.0/120\n")
	zero, plain := NewNAT64(es, t0, clientip.NAT64{}), New(es, t0)
	zp, zu := zero.Targets(t0)
	pp, pu := plain.Targets(t0)
	if !slices.Equal(zp, pp) || !slices.Equal(zu, pu) || zero.Len() != plain.Len() || len(zero.Wide())+len(plain.Wide()) != 0 {
		t.Fatalf("zero NAT64: %v %v %v; New: %v %v %v", zp, zu, zero.Wide(), pp, pu, plain.Wide())
	}
	var written []netip.Prefix
	for _, e := range es {
		if p, err := netip.ParsePrefix(e.Target); err == nil {
			written = append(written, p)
		} else if a, err := netip.ParseAddr(e.Target); err == nil {
			written = append(written, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	for _, p := range pp {
		if !slices.Contains(written, p) {
			t.Errorf("without NAT64, %v is not an entry as written (%v)", p, written)
		}
	}
	if len(pp) != plain.Len()-len(pu) || !slices.Contains(pp, netip.MustParsePrefix("2001:db8:64::cb00:7142/128")) {
		t.Errorf("without NAT64, targets %v", pp)
	}
}

// TestNAT64DuplicateSpellings: an entry in the site's prefix and one of
// the IPv4 address it carries are one address to an edge that reads the
// prefix as IPv4, under the rule for two lines of one target: of those
// that apply (neither pending nor removed) the longer-lived wins; a
// pending or removed one takes nothing from the other.
func TestNAT64DuplicateSpellings(t *testing.T) {
	soon, later := t0.Add(time.Hour), t0.Add(2*time.Hour)
	client := netip.MustParseAddr("203.0.113.66")
	for _, c := range []struct {
		name   string
		a, b   Entry // a in IPv4, b in the site's prefix (or IPv4 too, for the rule)
		at     time.Time
		listed bool
	}{
		{"both, the longer-lived applies", Entry{Expires: soon}, Entry{Expires: later}, soon.Add(time.Minute), true},
		{"both, both expired", Entry{Expires: soon}, Entry{Expires: later}, later, false},
		{"both, the other never expires", Entry{}, Entry{Expires: soon}, later, true},
		{"the other removed", Entry{Removed: t0}, Entry{}, t0, true},
		{"this one removed", Entry{}, Entry{Removed: t0}, t0, true},
		{"the other pending", Entry{Pending: true}, Entry{Expires: soon}, t0, true},
		{"both pending", Entry{Pending: true}, Entry{Pending: true}, t0, false},
		{"removed and pending", Entry{Removed: t0}, Entry{Pending: true}, t0, false},
	} {
		for _, spelling := range []string{"2001:db8:64::cb00:7142", "203.0.113.66"} {
			a, b := c.a, c.b
			a.Target, b.Target = "203.0.113.66", spelling
			l := NewNAT64([]Entry{a, b}, t0, siteNAT64)
			if got := l.ContainsAt(client, "", c.at); got != c.listed {
				t.Errorf("%s, as %s: ContainsAt = %v, want %v", c.name, spelling, got, c.listed)
			}
			if n := l.Len(); n > 1 {
				t.Errorf("%s, as %s: Len = %d, want one address", c.name, spelling, n)
			}
		}
	}
}

// TestNAT64WideEntries: an entry shorter than /96 that holds the site's
// prefix stays IPv6 (read as IPv4 it would hold every IPv4 client, those
// that reach the edge without the translator too) and is reported; one of
// /96 is every IPv4 client, as the entry says.
func TestNAT64WideEntries(t *testing.T) {
	es := mustEntries(t, "2001:db8:64::/48\n2001:db8::/32\n::/0\n2001:db8:64::/95\n2001:db8:64::/48 expires=2026-12-01T19:00:00Z\n"+
		"2001:db8:65::/48\n64:ff9b::198.51.100.0/120\n2001:db8:64::1:0:0/96\n2001:db8:64::/56 pending=true\n2001:db8::/31 removed=2026-12-01T17:00:00Z\n")
	l := NewNAT64(es, t0, siteNAT64)
	var got []string
	for _, w := range l.Wide() {
		got = append(got, w.Target+" "+w.NAT64.String())
	}
	want := []string{"2001:db8:64::/48 2001:db8:64::/96", "2001:db8::/32 2001:db8:64::/96", "::/0 2001:db8:64::/96", "2001:db8:64::/95 2001:db8:64::/96"}
	if !slices.Equal(got, want) {
		t.Errorf("Wide = %q, want %q", got, want)
	}
	for addr, listed := range map[string]bool{
		"2001:db8:64:1::1":          true,  // plain IPv6 in the /48
		"2001:db8:64::203.0.113.66": false, // an IPv4 client behind the translator
		"203.0.113.66":              false,
	} {
		if got := l.ContainsAt(netip.MustParseAddr(addr), "", t0); got != listed {
			t.Errorf("ContainsAt(%s) = %v, want %v", addr, got, listed)
		}
	}
	if len(New(es, t0).Wide()) != 0 {
		t.Errorf("without NAT64, Wide = %v, want none", New(es, t0).Wide())
	}
	if s := fmt.Sprint(l.Wide()); !strings.Contains(s, "2001:db8:64::/48 holds identity.nat64_prefixes 2001:db8:64::/96 but not the IPv4 clients") {
		t.Errorf("Wide says %q", s)
	}
	all := NewNAT64(mustEntries(t, "2001:db8:64::/96\n"), t0, siteNAT64)
	if !all.ContainsAt(netip.MustParseAddr("192.0.2.1"), "", t0) || len(all.Wide()) != 0 {
		t.Errorf("2001:db8:64::/96 through %s: does not hold 192.0.2.1, or is wide (%v)", sitePrefix, all.Wide())
	}
}

// TestWatchNAT64: a watcher reads its list through WatchOptions.NAT64, and
// tells Wide of each wide entry once, when a read first has it.
func TestWatchNAT64(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deny.list")
	writeList(t, path, "2001:db8:64::cb00:7142\n2001:db8:64::/48\n", 1)
	var wide []string
	w, err := WatchSource(NewFileSource(path), WatchOptions{List: Deny, NAT64: siteNAT64, Now: func() time.Time { return t0 },
		Wide: func(e WideEntry) { wide = append(wide, e.Target) }})
	if err != nil {
		t.Fatal(err)
	}
	defer closeWatcher(t, w)
	if !w.List().ContainsAt(netip.MustParseAddr("203.0.113.66"), "", t0) {
		t.Errorf("203.0.113.66 is not on the list of 2001:db8:64::cb00:7142 through %s", sitePrefix)
	}
	step := func(text string, version int, want ...string) {
		t.Helper()
		wide = nil
		if text != "" {
			writeList(t, path, text, version)
		}
		if err := w.Reload(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(wide, want) {
			t.Errorf("Wide told of %q, want %q", wide, want)
		}
	}
	if got := fmt.Sprint(wide); got != "[2001:db8:64::/48]" {
		t.Errorf("first read: Wide told of %s, want [2001:db8:64::/48]", got)
	}
	step("", 0)                                                   // read again, unchanged
	step("2001:db8:64::/48\n2001:db8::/32\n", 2, "2001:db8::/32") // what is new only
	step("2001:db8:64::cb00:7142\n", 3)                           // gone
	step("2001:db8:64::/48\n", 4, "2001:db8:64::/48")             // back
}

// TestAlike: Alike finds the entries an edge with the site's NAT64 prefix
// reads as the target reads, whichever spelling each was written in, and
// NAT64Target names the IPv4 address or prefix of an entry in the site's
// prefix; an address outside it (another /96 of the same /64, the
// deprecated IPv4-compatible ::a.b.c.d), a prefix that holds the target
// and one wider than the site's prefix are other clients, and without
// the setting an entry in the prefix is itself alone.
func TestAlike(t *testing.T) {
	es := mustEntries(t, "203.0.113.66\n2001:DB8:64::CB00:7142\n2001:db8:64:0:0:0:203.0.113.66 removed=2026-12-01T17:00:00Z\n"+
		"2001:db8:64:1::cb00:7142\n::203.0.113.66\n203.0.113.0/24\n2001:db8:64::cb00:7100/120\n2001:db8:64::/64\n203.0.113.66/32\nuser:203.0.113.66\n")
	f := func(target string, nat clientip.NAT64, want string) {
		t.Helper()
		norm, err := NormalizeTarget(target)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range Alike(es, norm, nat) {
			got = append(got, e.Target+"="+NAT64Target(e.Target, nat))
		}
		if strings.Join(got, " ") != want {
			t.Errorf("Alike(%s) = %s, want %s", target, strings.Join(got, " "), want)
		}
	}
	f("203.0.113.66", siteNAT64, "203.0.113.66= 2001:db8:64::cb00:7142=203.0.113.66 2001:db8:64::cb00:7142=203.0.113.66 203.0.113.66=")
	f("::FFFF:CB00:7142", siteNAT64, "203.0.113.66= 2001:db8:64::cb00:7142=203.0.113.66 2001:db8:64::cb00:7142=203.0.113.66 203.0.113.66=")
	f("64:ff9b::203.0.113.66", siteNAT64, "203.0.113.66= 2001:db8:64::cb00:7142=203.0.113.66 2001:db8:64::cb00:7142=203.0.113.66 203.0.113.66=")
	f("2001:db8:64::cb00:7142", clientip.NAT64{}, "2001:db8:64::cb00:7142= 2001:db8:64::cb00:7142=")
	f("203.0.113.66", clientip.NAT64{}, "203.0.113.66= 203.0.113.66=")
	f("203.0.113.0/24", siteNAT64, "203.0.113.0/24= 2001:db8:64::cb00:7100/120=203.0.113.0/24")
	f("2001:db8:64:1::cb00:7142", siteNAT64, "2001:db8:64:1::cb00:7142=")
	f("::cb00:7142", siteNAT64, "::cb00:7142=")
	f("2001:db8:64::/64", siteNAT64, "2001:db8:64::/64=")
	f("user:203.0.113.66", siteNAT64, "user:203.0.113.66=")
	f("198.51.100.7", siteNAT64, "")
}

// TestNAT64EntriesLengths: through a site prefix of /64 (or /32), an entry
// written in it is the IPv4 address or prefix RFC 6052 embeds there (after
// the u octet, bits 64 to 71), and matches its clients however their
// addresses are spelt; one whose u octet is not zero is plain IPv6, as are
// the addresses that have one; a wider entry is reported as at /96.
func TestNAT64EntriesLengths(t *testing.T) {
	nat := clientip.NewNAT64([]netip.Prefix{netip.MustParsePrefix("2001:db8:122:344::/64"), netip.MustParsePrefix("2001:db9::/32")})
	es := mustEntries(t, "2001:DB8:122:344:CB:71:4200:0\n"+ // 203.0.113.66
		"2001:db8:122:344:c6:3364::/96\n"+ // 198.51.100.0/24
		"2001:db8:122:344:1cb:71:4300:0\n"+ // u octet 01: IPv6
		"2001:db9:c000:200::/56\n") // 192.0.2.0/24 through the /32
	l := NewNAT64(es, t0, nat)
	for addr, listed := range map[string]bool{
		"203.0.113.66":                    true,
		"2001:db8:122:344:cb:71:4200:0":   true,
		"2001:db8:122:344:cb:71:4200:1":   true, // the suffix is ignored
		"::ffff:203.0.113.66":             true,
		"64:ff9b::203.0.113.66":           true,
		"2001:db9:cb00:7142::":            true,
		"203.0.113.67":                    false,
		"2001:db8:122:344:1cb:71:4200:0":  false, // u octet 01: not 203.0.113.66
		"2001:db8:122:344:1cb:71:4300:0":  true,  // listed as IPv6
		"198.51.100.200":                  true,
		"2001:db8:122:344:c6:3364:c800:0": true,
		"198.51.101.0":                    false,
		"192.0.2.33":                      true,
		"2001:db8:122:344:c0:2:2100::":    true,
		"2001:db8:122:345:cb:71:4200::":   false, // the next /64: plain IPv6
		"2001:db8:123::1":                 false, // outside everything
	} {
		a, err := netip.ParseAddr(addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.ContainsAt(a, "", t0); got != listed {
			t.Errorf("ContainsAt(%s) = %v, want %v", addr, got, listed)
		}
	}
	ps, _ := l.Targets(t0)
	if got := fmt.Sprint(ps); got != "[192.0.2.0/24 198.51.100.0/24 2001:db8:122:344:1cb:71:4300:0/128 203.0.113.66/32]" {
		t.Errorf("Targets = %s", got)
	}
	if len(l.Wide()) != 0 {
		t.Errorf("Wide = %v, want none", l.Wide())
	}
	wide := NewNAT64(mustEntries(t, "2001:db8:122::/48\n"), t0, nat)
	if !wide.ContainsAt(netip.MustParseAddr("2001:db8:122:1::1"), "", t0) || wide.ContainsAt(netip.MustParseAddr("2001:db8:122:344:cb:71:4200:0"), "", t0) {
		t.Errorf("2001:db8:122::/48 does not hold its plain IPv6 addresses, or holds an IPv4 client of the /64")
	}
	if got := fmt.Sprint(wide.Wide()); got != "[2001:db8:122::/48 holds identity.nat64_prefixes 2001:db8:122:344::/64 but not the IPv4 clients behind that translator, which the edge reads as their IPv4 addresses; list those by IPv4 address or prefix, or as 2001:db8:122:344::/64 (every IPv4 client)]" {
		t.Errorf("Wide = %s", got)
	}
}
