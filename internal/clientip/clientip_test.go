package clientip

import (
	"net/netip"
	"testing"
)

func TestOf(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1":              "192.0.2.1",
		"::ffff:192.0.2.1":       "192.0.2.1",
		"64:ff9b::192.0.2.1":     "192.0.2.1",
		"64:ff9b::c000:201":      "192.0.2.1",
		"64:ff9b::c000:201%eth0": "192.0.2.1",
		"64:ff9b::1:c000:201":    "64:ff9b::1:c000:201", // outside the /96
		"64:ff9b:1::c000:201":    "64:ff9b:1::c000:201", // the local-use prefix (RFC 8215) has no fixed embedding
		"2001:db8::1":            "2001:db8::1",
		"fe80::1%eth0":           "fe80::1",
		"::192.0.2.1":            "::c000:201", // IPv4-compatible: deprecated, not an IPv4 client
		"0:64:ff9b::c000:201":    "0:64:ff9b::c000:201",
	} {
		got := Of(netip.MustParseAddr(in))
		if got.String() != want {
			t.Errorf("Of(%s) = %s, want %s", in, got, want)
		}
	}
	if got := Of(netip.Addr{}); got.IsValid() {
		t.Errorf("Of(zero) = %v, want the zero Addr", got)
	}
}

func TestPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.0/24":           "192.0.2.0/24",
		"192.0.2.7/24":           "192.0.2.0/24",
		"::ffff:192.0.2.0/120":   "192.0.2.0/24",
		"::ffff:192.0.2.7/128":   "192.0.2.7/32",
		"64:ff9b::192.0.2.0/120": "192.0.2.0/24",
		"64:ff9b::/96":           "0.0.0.0/0",
		"64:ff9b::192.0.2.9/127": "192.0.2.8/31",
		"2001:db8::/32":          "2001:db8::/32",
		"::/0":                   "::/0",
		"64:ff9b::1:0:0/96":      "64:ff9b::1:0:0/96", // outside the well-known /96
		"::ffff:192.0.2.0/80":    "error: mixes IPv4-mapped and plain IPv6 addresses",
		"64:ff9b::/64":           "error: mixes NAT64 (64:ff9b::/96) and plain IPv6 addresses",
		"64:ff9b::192.0.2.0/95":  "error: mixes NAT64 (64:ff9b::/96) and plain IPv6 addresses",
	} {
		got := result(Prefix(netip.MustParsePrefix(in)))
		if got != want {
			t.Errorf("Prefix(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestPrefixMatchesOf: an address inside a prefix is inside it as Of and
// Prefix put them, whichever way each is written.
func TestPrefixMatchesOf(t *testing.T) {
	for _, pre := range []string{"192.0.2.0/24", "::ffff:192.0.2.0/120", "64:ff9b::192.0.2.0/120"} {
		p, err := Prefix(netip.MustParsePrefix(pre))
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []string{"192.0.2.200", "::ffff:192.0.2.200", "64:ff9b::192.0.2.200"} {
			if !p.Contains(Of(netip.MustParseAddr(a))) {
				t.Errorf("%s (%v) does not hold %s", pre, p, a)
			}
		}
		for _, a := range []string{"192.0.3.1", "64:ff9b::1:c000:2c8", "2001:db8::c000:2c8"} {
			if p.Contains(Of(netip.MustParseAddr(a))) {
				t.Errorf("%s (%v) holds %s", pre, p, a)
			}
		}
	}
}

func BenchmarkOf(b *testing.B) {
	for _, s := range []string{"192.0.2.1", "::ffff:192.0.2.1", "64:ff9b::192.0.2.1", "2001:db8::1"} {
		a := netip.MustParseAddr(s)
		b.Run(s, func(b *testing.B) {
			for b.Loop() {
				sink = Of(a)
			}
		})
	}
}

var sink netip.Addr

// result is a prefix or address as a test compares it: its text, or
// "error: " and the error's.
func result[T interface{ String() string }](v T, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return v.String()
}

func TestParseEntry(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.0/8":            "10.0.0.0/8",
		"10.1.2.3/8":            "10.0.0.0/8",
		"192.0.2.1":             "192.0.2.1/32",
		"::ffff:192.0.2.1":      "192.0.2.1/32",
		"64:ff9b::10.0.0.0/104": "10.0.0.0/8",
		"2001:db8::1":           "2001:db8::1/128",
		"fe80::1%eth0":          "error: is not an IP address",
		"proxy.local":           "error: is not an IP address",
		"10.0.0.0/33":           "error: is not a valid CIDR",
		"64:ff9b::/64":          "error: mixes NAT64 (64:ff9b::/96) and plain IPv6 addresses",
	} {
		got := result(ParseEntry(in))
		if got != want {
			t.Errorf("ParseEntry(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestParseNAT64Prefix(t *testing.T) {
	for in, want := range map[string]string{
		"2001:db8:64::/96":        "2001:db8:64::/96",
		"2001:db8:64::c000:2/96":  "2001:db8:64::/96", // masked
		"64:ff9b::/96":            "64:ff9b::/96",
		"64:ff9b:1::/96":          "64:ff9b:1::/96", // inside the local-use /48 (RFC 8215)
		"2001:db8:64::/64":        "2001:db8:64::/64",
		"2001:db8::/32":           "2001:db8::/32",
		"2001:db8:100::/40":       "2001:db8:100::/40",
		"2001:db8:122::/48":       "2001:db8:122::/48",
		"2001:db8:122:300::/56":   "2001:db8:122:300::/56",
		"2001:db8:122:344:1::/64": "2001:db8:122:344::/64", // masked
		"64:ff9b:1::/48":          "64:ff9b:1::/48",        // the local-use prefix (RFC 8215) itself
		"2001:db8:64::/128":       "error: is not a /32, /40, /48, /56, /64 or /96",
		"2001:db8:64::/80":        "error: is not a /32, /40, /48, /56, /64 or /96",
		"2001:db8::/24":           "error: is not a /32, /40, /48, /56, /64 or /96",
		"64:ff9b::/64":            "error: holds the well-known prefix 64:ff9b::/96",
		"::/32":                   "error: holds the loopback and unspecified addresses",
		"192.0.2.0/24":            "error: is not an IPv6 prefix",
		"::ffff:0:0/96":           "error: is not an IPv6 prefix",
		"::/96":                   "error: holds the loopback and unspecified addresses",
		"2001:db8:64::":           "error: is not a valid CIDR",
		"2001:db8:64::/96%eth0":   "error: is not a valid CIDR",
	} {
		got := result(ParseNAT64Prefix(in))
		if got != want {
			t.Errorf("ParseNAT64Prefix(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestNAT64Specific: a network-specific prefix carries IPv4 clients as the
// well-known one does, and only its own /96 does.
func TestNAT64Specific(t *testing.T) {
	n := NewNAT64([]netip.Prefix{netip.MustParsePrefix("2001:db8:64::/96"), netip.MustParsePrefix("64:ff9b::/96")})
	for in, want := range map[string]string{
		"2001:db8:64::192.0.2.1":      "192.0.2.1",
		"2001:db8:64::c000:201%eth0":  "192.0.2.1",
		"64:ff9b::192.0.2.1":          "192.0.2.1",
		"::ffff:192.0.2.1":            "192.0.2.1",
		"192.0.2.1":                   "192.0.2.1",
		"2001:db8:64::1:c000:201":     "2001:db8:64::1:c000:201", // the same /64, outside the /96
		"2001:db8:65::c000:201":       "2001:db8:65::c000:201",
		"2001:db8:64:0:1::c000:201":   "2001:db8:64:0:1::c000:201",
		"2001:db8::1":                 "2001:db8::1",
		"fe80::2001:db8:64:0:c000:21": "fe80::2001:db8:64:0:c000:21",
	} {
		if got := n.Of(netip.MustParseAddr(in)); got != netip.MustParseAddr(want) {
			t.Errorf("Of(%s) = %s, want %s", in, got, want)
		}
	}
	// The zero NAT64, and the package's functions, know the well-known
	// prefix alone.
	a := netip.MustParseAddr("2001:db8:64::192.0.2.1")
	if got := Of(a); got != a {
		t.Errorf("package Of(%s) = %s, want it unchanged", a, got)
	}
	for in, want := range map[string]string{
		"2001:db8:64::192.0.2.0/120": "192.0.2.0/24",
		"2001:db8:64::/96":           "0.0.0.0/0",
		"2001:db8:64::/95":           "error: mixes NAT64 (2001:db8:64::/96) and plain IPv6 addresses",
		"2001:db8:64::/64":           "error: mixes NAT64 (2001:db8:64::/96) and plain IPv6 addresses",
		"2001:db8::/32":              "error: mixes NAT64 (2001:db8:64::/96) and plain IPv6 addresses", // holds the /96 as 2001:db8:64::/64 does
		"::/0":                       "error: mixes NAT64 (2001:db8:64::/96) and plain IPv6 addresses",
		"2001:db8:65::/48":           "2001:db8:65::/48",
		"64:ff9b::/64":               "error: mixes NAT64 (64:ff9b::/96) and plain IPv6 addresses",
	} {
		got := result(n.Prefix(netip.MustParsePrefix(in)))
		if got != want {
			t.Errorf("Prefix(%s) = %s, want %s", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"2001:db8:64::10.0.0.5":      "10.0.0.5/32",
		"2001:db8:64::10.0.0.0/104":  "10.0.0.0/8",
		"2001:db8:64::1:10.0.0.5":    "2001:db8:64::1:a00:5/128",
		"2001:db8:64::10.0.0.5%eth0": "error: is not an IP address",
	} {
		got := result(n.ParseEntry(in))
		if got != want {
			t.Errorf("ParseEntry(%q) = %s, want %s", in, got, want)
		}
	}
	if p, err := ParseEntry("2001:db8:64::10.0.0.5"); err != nil || p.String() != "2001:db8:64::a00:5/128" {
		t.Errorf("package ParseEntry of a network-specific address = %v, %v; want it as IPv6", p, err)
	}
}

func BenchmarkNAT64Of(b *testing.B) {
	n := NewNAT64([]netip.Prefix{netip.MustParsePrefix("2001:db8:64::/96")})
	for _, s := range []string{"192.0.2.1", "2001:db8:64::192.0.2.1", "2001:db8::1"} {
		a := netip.MustParseAddr(s)
		b.Run(s, func(b *testing.B) {
			for b.Loop() {
				sink = n.Of(a)
			}
		})
	}
}

// TestHeldBy: a prefix shorter than a network-specific prefix that holds
// it is reported with it; one inside it, the well-known prefix's, or one
// apart is not.
func TestHeldBy(t *testing.T) {
	n := NewNAT64([]netip.Prefix{netip.MustParsePrefix("2001:db8:64::/96"), netip.MustParsePrefix("2001:db8:ff::/96")})
	checkHeldBy(t, n, map[string]string{
		"2001:db8:64::/48":           "2001:db8:64::/96",
		"2001:db8:64::/95":           "2001:db8:64::/96",
		"2001:db8::/32":              "2001:db8:64::/96",
		"::/0":                       "2001:db8:64::/96",
		"2001:db8:ff::/64":           "2001:db8:ff::/96",
		"2001:db8:64::/96":           "none",
		"2001:db8:64::192.0.2.0/120": "none",
		"2001:db8:65::/48":           "none",
		"64:ff9b::/64":               "none", // the well-known prefix has always been so
		"0.0.0.0/0":                  "none",
	})
	if p, ok := (NAT64{}).HeldBy(netip.MustParsePrefix("::/0")); ok {
		t.Errorf("zero NAT64: HeldBy(::/0) = %v, want none", p)
	}
}

// checkHeldBy checks n.HeldBy of each prefix of want against the prefix
// it should return, "none" for none.
func checkHeldBy(t *testing.T, n NAT64, want map[string]string) {
	t.Helper()
	for in, w := range want {
		got := "none"
		if p, ok := n.HeldBy(netip.MustParsePrefix(in)); ok {
			got = p.String()
		}
		if got != w {
			t.Errorf("HeldBy(%s) = %s, want %s", in, got, w)
		}
	}
}
