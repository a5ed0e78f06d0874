package clientip

import (
	"net/netip"
	"testing"
)

// rfc6052Examples are the examples of RFC 6052, section 2.4: 192.0.2.33
// embedded under a network-specific prefix of each length the RFC
// defines, and under the well-known prefix.
var rfc6052Examples = []struct{ prefix, addr string }{
	{"2001:db8::/32", "2001:db8:c000:221::"},
	{"2001:db8:100::/40", "2001:db8:1c0:2:21::"},
	{"2001:db8:122::/48", "2001:db8:122:c000:2:2100::"},
	{"2001:db8:122:300::/56", "2001:db8:122:3c0:0:221::"},
	{"2001:db8:122:344::/64", "2001:db8:122:344:c0:2:2100::"},
	{"2001:db8:122:344::/96", "2001:db8:122:344::192.0.2.33"},
	{"64:ff9b::/96", "64:ff9b::192.0.2.33"},
}

// TestRFC6052Examples: each example address is 192.0.2.33 to a NAT64 of
// its prefix, and plain IPv6 to one without it; Embed writes it.
func TestRFC6052Examples(t *testing.T) {
	v4 := netip.MustParseAddr("192.0.2.33")
	for _, e := range rfc6052Examples {
		p, err := ParseNAT64Prefix(e.prefix)
		if err != nil {
			t.Errorf("ParseNAT64Prefix(%s): %v", e.prefix, err)
			continue
		}
		a := netip.MustParseAddr(e.addr)
		if got := NewNAT64([]netip.Prefix{p}).Of(a); got != v4 {
			t.Errorf("%s: Of(%s) = %s, want %s", e.prefix, a, got, v4)
		}
		if got, err := Embed(p, v4); got != a || err != nil {
			t.Errorf("Embed(%s, %s) = %v, %v; want %s", p, v4, got, err, a)
		}
		// An entry of the address, or of its /120 or the like, is the
		// IPv4 address or prefix.
		if got, err := NewNAT64([]netip.Prefix{p}).ParseEntry(e.addr); err != nil || got != netip.MustParsePrefix("192.0.2.33/32") {
			t.Errorf("%s: ParseEntry(%s) = %v, %v; want 192.0.2.33/32", e.prefix, e.addr, got, err)
		}
	}
	// Read through another prefix (and by the package's functions), an
	// example of a network-specific prefix is plain IPv6.
	other := NewNAT64([]netip.Prefix{netip.MustParsePrefix("2001:db8:ffff::/48")})
	for _, e := range rfc6052Examples[:6] {
		a := netip.MustParseAddr(e.addr)
		if got := other.Of(a); got != a {
			t.Errorf("through 2001:db8:ffff::/48, Of(%s) = %s, want it unchanged", a, got)
		}
		if got := Of(a); got != a {
			t.Errorf("package Of(%s) = %s, want it unchanged", a, got)
		}
	}
}

// TestNAT64Lengths: for prefixes shorter than /96 the IPv4 address is
// split around bits 64 to 71, the u octet, which must be zero: an address
// whose u octet is not is not a translated address but plain IPv6; the
// suffix after the IPv4 address is ignored (RFC 6052, section 2.2).
func TestNAT64Lengths(t *testing.T) {
	n := NewNAT64([]netip.Prefix{
		netip.MustParsePrefix("2001:db8::/32"),
		netip.MustParsePrefix("2001:db9:100::/40"),
		netip.MustParsePrefix("2001:dba:122::/48"),
		netip.MustParsePrefix("2001:dbb:122:300::/56"),
		netip.MustParsePrefix("2001:dbc:122:344::/64"),
	})
	for in, want := range map[string]string{
		"2001:db8:c000:221::":             "192.0.2.33",
		"2001:db8:cb00:7107::":            "203.0.113.7",
		"2001:db8:c000:221:ff:1:2:3":      "192.0.2.33", // a suffix is ignored
		"2001:db8:c000:221:100::":         "2001:db8:c000:221:100::",
		"2001:db8:c000:221:8000::%eth0":   "2001:db8:c000:221:8000::",
		"2001:db9:1c0:2:21::":             "192.0.2.33",
		"2001:db9:1c0:2:121::":            "2001:db9:1c0:2:121::",
		"2001:dba:122:c000:2:2100::":      "192.0.2.33",
		"2001:dba:122:c000:102:2100::":    "2001:dba:122:c000:102:2100::",
		"2001:dbb:122:3c0:0:221::":        "192.0.2.33",
		"2001:dbb:122:3c0:100:221::":      "2001:dbb:122:3c0:100:221::",
		"2001:dbc:122:344:c0:2:2100::":    "192.0.2.33",
		"2001:dbc:122:344:c0:2:2100:1":    "192.0.2.33",
		"2001:dbc:122:344:ffc0:2:2100::":  "2001:dbc:122:344:ffc0:2:2100::",
		"2001:dbc:122:344:1c0:2:2100::":   "2001:dbc:122:344:1c0:2:2100::",
		"2001:dbc:122:345:c0:2:2100::":    "2001:dbc:122:345:c0:2:2100::", // the next /64
		"2001:dbc:122:344::192.0.2.33":    "0.0.0.192",                    // a /96 spelling: 0.0.0.192 and a suffix
		"2001:dbc:122:343:ffff:ffff:ff::": "2001:dbc:122:343:ffff:ffff:ff::",
	} {
		if got := n.Of(netip.MustParseAddr(in)); got != netip.MustParseAddr(want) {
			t.Errorf("Of(%s) = %s, want %s", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"2001:db8::/32":                    "0.0.0.0/0", // the prefix: every IPv4 client behind it
		"2001:db8:c000::/48":               "192.0.0.0/16",
		"2001:db8:c000:200::/56":           "192.0.2.0/24",
		"2001:db8:c000:221::/64":           "192.0.2.33/32",
		"2001:db8:c000:221::/72":           "192.0.2.33/32",
		"2001:db8:c000:221::/128":          "192.0.2.33/32",
		"2001:db8:c000:221:ff00::/72":      "2001:db8:c000:221:ff00::/72", // u is not zero: plain IPv6
		"2001:db8:c000:221:1000::/68":      "2001:db8:c000:221:1000::/68",
		"2001:db9:1c0:2::/64":              "192.0.2.0/24",
		"2001:db9:1c0:2:21::/80":           "192.0.2.33/32",
		"2001:db9:1c0:2:20::/76":           "192.0.2.32/28",
		"2001:dba:122:c000::/64":           "192.0.0.0/16",
		"2001:dba:122:c000:2::/80":         "192.0.2.0/24",
		"2001:dbb:122:3c0::/64":            "192.0.0.0/8",
		"2001:dbb:122:3c0:0:200::/88":      "192.0.2.0/24",
		"2001:dbc:122:344::/64":            "0.0.0.0/0",
		"2001:dbc:122:344:c0:2::/96":       "192.0.2.0/24",
		"2001:dbc:122:344:c0:2:2100::/104": "192.0.2.33/32",
		"2001:dbc:122:344:c0:2:2100::/120": "192.0.2.33/32",
		"2001:dbc:122:344:100::/72":        "2001:dbc:122:344:100::/72",
		"2001:dbc:122::/48":                "error: mixes NAT64 (2001:dbc:122:344::/64) and plain IPv6 addresses",
		"2001:dbc:122:344::/63":            "error: mixes NAT64 (2001:dbc:122:344::/64) and plain IPv6 addresses",
		"2001:dbc:122:345::/64":            "2001:dbc:122:345::/64",
	} {
		got := result(n.Prefix(netip.MustParsePrefix(in)))
		if got != want {
			t.Errorf("Prefix(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestNAT64PrefixMatchesOf: an entry written in a prefix of each length
// holds its IPv4 clients, as Of reads them, and none beside them.
func TestNAT64PrefixMatchesOf(t *testing.T) {
	for _, e := range rfc6052Examples {
		p := netip.MustParsePrefix(e.prefix)
		n := NewNAT64([]netip.Prefix{p})
		v4 := netip.MustParsePrefix("198.51.100.0/24")
		in, err := Embed(p, v4.Addr())
		if err != nil {
			t.Fatal(err)
		}
		bits := p.Bits() + 24
		if p.Bits() <= 64 && bits > 64 {
			bits += 8 // the u octet
		}
		entry, err := n.Prefix(netip.PrefixFrom(in, bits))
		if err != nil || entry != v4 {
			t.Errorf("%s: Prefix(%s/%d) = %v, %v; want %s", e.prefix, in, bits, entry, err, v4)
		}
		for v, want := range map[string]bool{"198.51.100.0": true, "198.51.100.255": true, "198.51.101.0": false, "192.0.2.33": false} {
			a, err := Embed(p, netip.MustParseAddr(v))
			if err != nil {
				t.Fatal(err)
			}
			if got := entry.Contains(n.Of(a)); got != want {
				t.Errorf("%s: %s holds %s (%s): %v, want %v", e.prefix, entry, a, v, got, want)
			}
		}
	}
}

// TestNAT64Overlapping: of two prefixes one inside the other (which
// configuration refuses), the longer reads its addresses, in whichever
// order they are given.
func TestNAT64Overlapping(t *testing.T) {
	long, short := netip.MustParsePrefix("2001:db8:122:344::/96"), netip.MustParsePrefix("2001:db8::/32")
	for _, ps := range [][]netip.Prefix{{long, short}, {short, long}} {
		n := NewNAT64(ps)
		for in, want := range map[string]string{
			"2001:db8:122:344::192.0.2.33": "192.0.2.33",
			"2001:db8:c000:221::":          "192.0.2.33",
			"2001:db8:122:345::192.0.2.33": "1.34.3.69", // 2001:db8:122:345 read through the /32
		} {
			if got := n.Of(netip.MustParseAddr(in)); got != netip.MustParseAddr(want) {
				t.Errorf("NAT64 %v: Of(%s) = %s, want %s", ps, in, got, want)
			}
		}
	}
}

func TestEmbed(t *testing.T) {
	for _, tc := range []struct{ prefix, v4, want string }{
		{"2001:db8::/32", "203.0.113.7", "2001:db8:cb00:7107::"},
		{"2001:db8:122:344::/64", "255.255.255.255", "2001:db8:122:344:ff:ffff:ff00:0"},
		{"2001:db8:122:344:1:2:3:4/64", "10.0.0.1", "2001:db8:122:344:a:0:100:0"}, // masked
		{"2001:db8::/80", "10.0.0.1", "error: is not a /32, /40, /48, /56, /64 or /96"},
		{"2001:db8::/96", "2001:db8::1", "error: 2001:db8::1 is not an IPv4 address"},
	} {
		got := result(Embed(netip.MustParsePrefix(tc.prefix), netip.MustParseAddr(tc.v4)))
		if got != tc.want {
			t.Errorf("Embed(%s, %s) = %s, want %s", tc.prefix, tc.v4, got, tc.want)
		}
	}
}

func TestHeldByLengths(t *testing.T) {
	n := NewNAT64([]netip.Prefix{netip.MustParsePrefix("2001:db8:122:344::/64"), netip.MustParsePrefix("2001:db9::/32")})
	checkHeldBy(t, n, map[string]string{
		"2001:db8:122:344::/63":  "2001:db8:122:344::/64",
		"2001:db8::/32":          "2001:db8:122:344::/64",
		"2001:db8:122:344::/64":  "none",
		"2001:db8:122:344::/72":  "none",
		"2001:db9:c000:221::/64": "none",
		"2001:db9::/33":          "none",
	})
}

func BenchmarkNAT64OfLengths(b *testing.B) {
	for _, e := range rfc6052Examples {
		n := NewNAT64([]netip.Prefix{netip.MustParsePrefix(e.prefix)})
		a := netip.MustParseAddr(e.addr)
		b.Run(e.prefix, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink = n.Of(a)
			}
		})
	}
}
