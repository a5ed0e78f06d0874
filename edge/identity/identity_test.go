package identity

import (
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/decisions"
)

var now = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

var trustedProxies = []string{"10.0.0.0/8", "192.0.2.1", "2001:db8:ffff::/48", "::ffff:172.16.0.0/108", "64:ff9b::172.20.0.0/112"}

func mustNew(t testing.TB, cfg config.Identity, env map[string]string) *Resolver {
	t.Helper()
	r, err := New(cfg, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

// hdr builds a header from name, value pairs; a name may repeat to add lines.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func addr(s string) netip.Addr {
	if s == "" {
		return netip.Addr{}
	}
	return netip.MustParseAddr(s)
}

type resolveCase struct {
	name   string
	remote string
	h      http.Header
	ip     string // want ClientIP, "" for zero
	key    string // want Addr; "" means the same as ip
	user   string
	plan   string
	source string
}

func runResolve(t *testing.T, r *Resolver, cases []resolveCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := r.Resolve(c.remote, c.h, now)
			key := c.key
			if key == "" {
				key = c.ip
			}
			want := Identity{ClientIP: addr(c.ip), Addr: addr(key), User: c.user, Plan: c.plan, Source: c.source}
			if got != want {
				t.Errorf("Resolve(%q, %v)\n got %+v\nwant %+v", c.remote, c.h, got, want)
			}
		})
	}
}

func TestResolveForwardedFor(t *testing.T) {
	r := mustNew(t, config.Identity{TrustedProxies: trustedProxies}, nil)
	const (
		peer     = decisions.SourcePeer
		fwd      = decisions.SourceForwarded
		client   = "203.0.113.7"
		trusted1 = "10.0.0.1:443"
	)
	manyTrusted := make([]string, 70)
	for i := range manyTrusted {
		manyTrusted[i] = "10.0.1." + strconv.Itoa(i)
	}
	runResolve(t, r, []resolveCase{
		{name: "untrusted peer", remote: "198.51.100.1:5000", h: hdr(), ip: "198.51.100.1", source: peer},
		{name: "untrusted peer XFF ignored", remote: "198.51.100.1:5000", h: hdr("X-Forwarded-For", client), ip: "198.51.100.1", source: peer},
		{name: "bare IP peer", remote: "198.51.100.1", h: hdr(), ip: "198.51.100.1", source: peer},
		{name: "bare IPv6 peer", remote: "2001:db8::1", h: hdr(), ip: "2001:db8::1", key: "2001:db8::", source: peer},
		{name: "unparsable peer", remote: "@", h: hdr("X-Forwarded-For", client), source: peer},
		{name: "empty peer", remote: "", h: hdr(), source: peer},
		{name: "IPv6 peer with zone", remote: "[fe80::1%eth0]:80", h: hdr(), ip: "fe80::1", key: "fe80::", source: peer},
		{name: "trusted peer no header", remote: trusted1, h: hdr(), ip: "10.0.0.1", source: peer},
		{name: "trusted peer empty header", remote: trusted1, h: hdr("X-Forwarded-For", ""), ip: "10.0.0.1", source: peer},
		{name: "trusted peer one hop", remote: trusted1, h: hdr("X-Forwarded-For", client), ip: client, source: fwd},
		{name: "trusted single address peer", remote: "192.0.2.1:1", h: hdr("X-Forwarded-For", client), ip: client, source: fwd},
		{name: "chain with trusted hops", remote: trusted1, h: hdr("X-Forwarded-For", client+", 10.0.0.5, 10.0.0.6"), ip: client, source: fwd},
		{name: "spoofed leftmost", remote: trusted1, h: hdr("X-Forwarded-For", "6.6.6.6, "+client+", 10.0.0.5"), ip: client, source: fwd},
		{name: "spoofed leftmost trusted", remote: trusted1, h: hdr("X-Forwarded-For", "10.9.9.9, "+client), ip: client, source: fwd},
		{name: "all trusted gives leftmost", remote: trusted1, h: hdr("X-Forwarded-For", "10.0.0.9,10.0.0.8"), ip: "10.0.0.9", source: fwd},
		{name: "lines joined", remote: trusted1, h: hdr("X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", client+", 10.0.0.2"), ip: client, source: fwd},
		{name: "client on earlier line", remote: trusted1, h: hdr("X-Forwarded-For", "6.6.6.6, "+client, "X-Forwarded-For", "10.0.0.2"), ip: client, source: fwd},
		{name: "whitespace trimmed", remote: trusted1, h: hdr("X-Forwarded-For", " \t"+client+" \t,\t10.0.0.2 "), ip: client, source: fwd},
		{name: "empty elements skipped", remote: trusted1, h: hdr("X-Forwarded-For", ","+client+",, 10.0.0.5,"), ip: client, source: fwd},
		{name: "unparsable stops at last good", remote: trusted1, h: hdr("X-Forwarded-For", client+", garbage, 10.0.0.5"), ip: "10.0.0.5", source: fwd},
		{name: "unparsable rightmost keeps peer", remote: trusted1, h: hdr("X-Forwarded-For", client+", garbage"), ip: "10.0.0.1", source: peer},
		{name: "zone is unparsable", remote: trusted1, h: hdr("X-Forwarded-For", "fe80::1%eth0"), ip: "10.0.0.1", source: peer},
		{name: "entry with port", remote: trusted1, h: hdr("X-Forwarded-For", client+":5555"), ip: client, source: fwd},
		{name: "IPv6 entry with port", remote: trusted1, h: hdr("X-Forwarded-For", "[2001:db8:1::7]:80"), ip: "2001:db8:1::7", key: "2001:db8:1::", source: fwd},
		{name: "mapped entry unmapped", remote: trusted1, h: hdr("X-Forwarded-For", "::ffff:"+client), ip: client, source: fwd},
		{name: "mapped peer unmapped and trusted", remote: "[::ffff:10.0.0.1]:443", h: hdr("X-Forwarded-For", client), ip: client, source: fwd},
		{name: "mapped trusted prefix", remote: "172.16.3.4:1", h: hdr("X-Forwarded-For", client), ip: client, source: fwd},
		{name: "NAT64 entry as its IPv4 address", remote: trusted1, h: hdr("X-Forwarded-For", "64:ff9b::"+client), ip: client, source: fwd},
		{name: "NAT64 peer as its IPv4 address, and trusted", remote: "[64:ff9b::10.0.0.1]:443", h: hdr("X-Forwarded-For", client), ip: client, source: fwd},
		{name: "NAT64 hop trusted", remote: trusted1, h: hdr("X-Forwarded-For", client+", 64:ff9b::10.0.0.5"), ip: client, source: fwd},
		{name: "NAT64 trusted prefix", remote: "[64:ff9b::172.20.3.4]:1", h: hdr("X-Forwarded-For", client), ip: client, source: fwd},
		{name: "untrusted NAT64 peer is its IPv4 address", remote: "[64:ff9b::203.0.113.99]:1", h: hdr("X-Forwarded-For", client), ip: "203.0.113.99", source: peer},
		{name: "outside NAT64's /96 is IPv6", remote: "[64:ff9b::1:cb00:7163]:1", h: hdr(), ip: "64:ff9b::1:cb00:7163", key: "64:ff9b::", source: peer},
		{name: "IPv6 trusted peer", remote: "[2001:db8:ffff::2]:443", h: hdr("X-Forwarded-For", client), ip: client, source: fwd},
		{name: "entries beyond 64 ignored", remote: trusted1,
			h:  hdr("X-Forwarded-For", client+", "+strings.Join(manyTrusted, ", ")),
			ip: "10.0.1.6", source: fwd},
		{name: "spoofed padding beyond 64", remote: trusted1,
			h:  hdr("X-Forwarded-For", strings.Repeat("6.6.6.6, ", 200)+client),
			ip: client, source: fwd},
		{name: "bytes beyond 8 KiB ignored", remote: trusted1,
			h:  hdr("X-Forwarded-For", client+","+strings.Repeat(" ", MaxForwardedBytes)+",10.0.0.5"),
			ip: "10.0.0.5", source: fwd},
		{name: "CloudFront header ignored in XFF mode", remote: trusted1, h: hdr("Cloudfront-Viewer-Address", client+":1"), ip: "10.0.0.1", source: peer},
	})
}

// TestResolveNAT64Specific: behind a translator of the site's own NAT64
// prefix (identity.nat64_prefixes), a peer, a forwarded entry or a trusted
// proxy's entry in it is the IPv4 address it carries, as in the
// well-known prefix; outside its /96 an address is plain IPv6.
func TestResolveNAT64Specific(t *testing.T) {
	r := mustNew(t, config.Identity{NAT64Prefixes: []string{"2001:db8:64::/96"},
		TrustedProxies: []string{"10.0.0.0/8", "2001:db8:64::172.20.0.0/112"}}, nil)
	const (
		peer     = decisions.SourcePeer
		fwd      = decisions.SourceForwarded
		client   = "203.0.113.7"
		trusted1 = "10.0.0.1:443"
	)
	runResolve(t, r, []resolveCase{
		{name: "peer as its IPv4 address", remote: "[2001:db8:64::203.0.113.99]:1", h: hdr("X-Forwarded-For", client), ip: "203.0.113.99", source: peer},
		{name: "peer as its IPv4 address, and trusted", remote: "[2001:db8:64::10.0.0.1]:443", h: hdr("X-Forwarded-For", client), ip: client, source: fwd},
		{name: "entry as its IPv4 address", remote: trusted1, h: hdr("X-Forwarded-For", "2001:db8:64::"+client), ip: client, source: fwd},
		{name: "hop trusted", remote: trusted1, h: hdr("X-Forwarded-For", client+", 2001:db8:64::10.0.0.5"), ip: client, source: fwd},
		{name: "trusted prefix written in it", remote: "172.20.3.4:1", h: hdr("X-Forwarded-For", client), ip: client, source: fwd},
		{name: "well-known prefix still", remote: trusted1, h: hdr("X-Forwarded-For", "64:ff9b::"+client), ip: client, source: fwd},
		{name: "outside the /96 is IPv6", remote: "[2001:db8:64::1:cb00:7163]:1", h: hdr(), ip: "2001:db8:64::1:cb00:7163", key: "2001:db8:64::", source: peer},
	})
	for in, want := range map[string]string{"2001:db8:64::10.1.2.3": "10.1.2.3", "2001:db8:65::a01:203": "2001:db8:65::a01:203", "10.1.2.3": "10.1.2.3"} {
		if got := r.ClientAddr(netip.MustParseAddr(in)); got != netip.MustParseAddr(want) {
			t.Errorf("ClientAddr(%s) = %v, want %s", in, got, want)
		}
	}
	var none *Resolver
	if got := none.ClientAddr(netip.MustParseAddr("64:ff9b::10.1.2.3")); got != netip.MustParseAddr("10.1.2.3") {
		t.Errorf("nil resolver's ClientAddr(64:ff9b::10.1.2.3) = %v, want 10.1.2.3", got)
	}
	// Without the configured prefix, the site's addresses are IPv6, and
	// every IPv4 client of the translator one /64.
	plain := mustNew(t, config.Identity{}, nil)
	if id := plain.Resolve("[2001:db8:64::203.0.113.99]:1", hdr(), time.Time{}); id.Addr != netip.MustParseAddr("2001:db8:64::") {
		t.Errorf("without nat64_prefixes, counted under %v, want 2001:db8:64::", id.Addr)
	}
}

func TestNewRefusesNAT64Prefix(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{[]string{"2001:db8:64::/80"}, `identity.nat64_prefixes[0]: "2001:db8:64::/80" is not a /32, /40, /48, /56, /64 or /96; want an IPv6 prefix of 32, 40, 48, 56, 64 or 96 bits (RFC 6052) such as 2001:db8:64::/96 or 2001:db8:122:344::/64`},
		{[]string{"::/96"}, `identity.nat64_prefixes[0]: "::/96" holds the loopback and unspecified addresses; want`},
		{[]string{"10.0.0.0/8"}, `identity.nat64_prefixes[0]: "10.0.0.0/8" is not an IPv6 prefix; want`},
		{[]string{"64:ff9b::/64"}, `identity.nat64_prefixes[0]: "64:ff9b::/64" holds the well-known prefix 64:ff9b::/96; want`},
		{[]string{"2001:db8::/32", " 2001:db8:64::/96"}, `identity.nat64_prefixes[1]: " 2001:db8:64::/96" overlaps identity.nat64_prefixes[0] (2001:db8::/32); want prefixes apart`},
	} {
		_, err := New(config.Identity{NAT64Prefixes: tc.in}, nil)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("New with nat64_prefixes %q: %v, want %s…", tc.in, err, tc.want)
		}
	}
	// A trusted proxy prefix wider than a configured prefix is refused,
	// whether its first address lies inside it or not.
	for _, tc := range []struct{ nat, proxy string }{
		{"2001:db8:64::/96", "2001:db8:64::/80"},
		{"2001:db8:64::/96", "2001:db8::/32"},
		{"2001:db8:122:344::/64", "2001:db8:122:344::/63"},
		{"2001:db8:122:344::/64", "2001:db8:122::/48"},
	} {
		_, err := New(config.Identity{NAT64Prefixes: []string{tc.nat}, TrustedProxies: []string{tc.proxy}}, nil)
		if want := "mixes NAT64 (" + tc.nat + ") and plain IPv6 addresses"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New with nat64_prefixes %s and trusted %s: %v, want %s", tc.nat, tc.proxy, err, want)
		}
	}
}

// TestResolveNAT64Lengths: behind a translator of a /64 (or /32) prefix,
// a peer or forwarded address is the IPv4 client RFC 6052 embeds in it;
// one whose u octet (bits 64 to 71) is not zero is a plain IPv6 client,
// counted by its /64.
func TestResolveNAT64Lengths(t *testing.T) {
	r := mustNew(t, config.Identity{NAT64Prefixes: []string{"2001:db8:122:344::/64", "2001:db9::/32"},
		TrustedProxies: []string{"2001:db8:122:344:a::/80"}}, nil)
	const (
		peer   = decisions.SourcePeer
		fwd    = decisions.SourceForwarded
		client = "203.0.113.7"
	)
	runResolve(t, r, []resolveCase{
		{name: "peer as its IPv4 address", remote: "[2001:db8:122:344:c0:2:2100::]:1", h: hdr("X-Forwarded-For", client), ip: "192.0.2.33", source: peer},
		{name: "peer of a /32 as its IPv4 address", remote: "[2001:db9:c000:221::]:1", h: hdr(), ip: "192.0.2.33", source: peer},
		{name: "trusted peer (10.1.2.3)", remote: "[2001:db8:122:344:a:102:300::]:443", h: hdr("X-Forwarded-For", client), ip: client, source: fwd},
		{name: "forwarded entry as its IPv4 address", remote: "[2001:db8:122:344:a:102:300::]:443", h: hdr("X-Forwarded-For", "2001:db8:122:344:cb:71:700:0"), ip: client, source: fwd},
		{name: "u octet not zero is IPv6", remote: "[2001:db8:122:344:1c0:2:2100::]:1", h: hdr("X-Forwarded-For", client), ip: "2001:db8:122:344:1c0:2:2100::", key: "2001:db8:122:344::", source: peer},
		{name: "next /64 is IPv6", remote: "[2001:db8:122:345:c0:2:2100::]:1", h: hdr(), ip: "2001:db8:122:345:c0:2:2100::", key: "2001:db8:122:345::", source: peer},
	})
}

func TestResolveCloudFront(t *testing.T) {
	r := mustNew(t, config.Identity{TrustedProxies: trustedProxies, ClientIPHeader: "CloudFront-Viewer-Address"}, nil)
	const (
		peer    = decisions.SourcePeer
		fwd     = decisions.SourceForwarded
		trusted = "10.0.0.1:443"
	)
	runResolve(t, r, []resolveCase{
		{name: "v4", remote: trusted, h: hdr("CloudFront-Viewer-Address", "198.51.100.10:46532"), ip: "198.51.100.10", source: fwd},
		{name: "v6", remote: trusted, h: hdr("CloudFront-Viewer-Address", "2001:db8::1:46532"), ip: "2001:db8::1", key: "2001:db8::", source: fwd},
		{name: "v6 bracketed", remote: trusted, h: hdr("CloudFront-Viewer-Address", "[2001:db8:0:1::1]:443"), ip: "2001:db8:0:1::1", key: "2001:db8:0:1::", source: fwd},
		{name: "mapped", remote: trusted, h: hdr("CloudFront-Viewer-Address", "::ffff:198.51.100.10:1"), ip: "198.51.100.10", source: fwd},
		{name: "NAT64", remote: trusted, h: hdr("CloudFront-Viewer-Address", "64:ff9b::198.51.100.10:1"), ip: "198.51.100.10", source: fwd},
		{name: "untrusted peer", remote: "198.51.100.1:1", h: hdr("CloudFront-Viewer-Address", "198.51.100.10:46532"), ip: "198.51.100.1", source: peer},
		{name: "missing", remote: trusted, h: hdr(), ip: "10.0.0.1", source: peer},
		{name: "no port", remote: trusted, h: hdr("CloudFront-Viewer-Address", "198.51.100.10"), ip: "10.0.0.1", source: peer},
		{name: "bad port", remote: trusted, h: hdr("CloudFront-Viewer-Address", "198.51.100.10:65536"), ip: "10.0.0.1", source: peer},
		{name: "empty port", remote: trusted, h: hdr("CloudFront-Viewer-Address", "198.51.100.10:"), ip: "10.0.0.1", source: peer},
		{name: "garbage", remote: trusted, h: hdr("CloudFront-Viewer-Address", "nonsense:1"), ip: "10.0.0.1", source: peer},
		{name: "last line wins", remote: trusted, h: hdr("CloudFront-Viewer-Address", "6.6.6.6:1", "CloudFront-Viewer-Address", "198.51.100.10:2"), ip: "198.51.100.10", source: fwd},
		{name: "XFF ignored", remote: trusted, h: hdr("X-Forwarded-For", "198.51.100.10"), ip: "10.0.0.1", source: peer},
	})
}

func TestResolveIPv6Prefix(t *testing.T) {
	const remote = "[2001:db8:1:2:3:4:5:6]:443"
	f := func(prefix int, wantKey string) {
		t.Helper()
		r := mustNew(t, config.Identity{IPv6Prefix: prefix}, nil)
		got := r.Resolve(remote, http.Header{}, now)
		if got.ClientIP != addr("2001:db8:1:2:3:4:5:6") || got.Addr != addr(wantKey) {
			t.Errorf("ipv6_prefix %d: got ClientIP %v Addr %v, want Addr %v", prefix, got.ClientIP, got.Addr, wantKey)
		}
	}
	f(0, "2001:db8:1:2::")
	f(64, "2001:db8:1:2::")
	f(56, "2001:db8:1::")
	f(48, "2001:db8:1::")
	f(128, "2001:db8:1:2:3:4:5:6")

	// Two addresses inside one /64 share a key; one outside does not.
	r := mustNew(t, config.Identity{}, nil)
	a := r.Resolve("[2001:db8:1:2::1]:1", nil, now).Addr
	b := r.Resolve("[2001:db8:1:2:ffff:ffff:ffff:ffff]:1", nil, now).Addr
	c := r.Resolve("[2001:db8:1:3::1]:1", nil, now).Addr
	if a != b || a == c {
		t.Errorf("keys: %v %v %v; want the first two equal and the third different", a, b, c)
	}
}

func TestResolveUserHeaders(t *testing.T) {
	r := mustNew(t, config.Identity{TrustedProxies: trustedProxies}, nil)
	const (
		trusted   = "10.0.0.1:443"
		untrusted = "198.51.100.1:5000"
	)
	long := strings.Repeat("u", MaxUserLen+1)
	runResolve(t, r, []resolveCase{
		{name: "spoofed user from untrusted peer", remote: untrusted, h: hdr("X-User-Id", "admin", "X-User-Plan", "enterprise"),
			ip: "198.51.100.1", source: decisions.SourceUntrustedHeader},
		{name: "spoofed plan only from untrusted peer", remote: untrusted, h: hdr("X-User-Plan", "enterprise"),
			ip: "198.51.100.1", source: decisions.SourceUntrustedHeader},
		{name: "spoofed empty user from untrusted peer", remote: untrusted, h: hdr("X-User-Id", ""),
			ip: "198.51.100.1", source: decisions.SourceUntrustedHeader},
		{name: "trusted peer user and plan", remote: trusted, h: hdr("X-User-Id", "alice", "X-User-Plan", "pro"),
			ip: "10.0.0.1", user: "alice", plan: "pro", source: decisions.SourceHeader},
		{name: "trusted peer user only", remote: trusted, h: hdr("X-User-Id", " alice "),
			ip: "10.0.0.1", user: "alice", source: decisions.SourceHeader},
		{name: "trusted peer with XFF and user", remote: trusted, h: hdr("X-Forwarded-For", "203.0.113.7", "x-user-id", "bob"),
			ip: "203.0.113.7", user: "bob", source: decisions.SourceHeader},
		{name: "trusted peer plan only", remote: trusted, h: hdr("X-User-Plan", "pro"),
			ip: "10.0.0.1", source: decisions.SourcePeer},
		{name: "trusted peer empty user", remote: trusted, h: hdr("X-User-Id", " "),
			ip: "10.0.0.1", source: decisions.SourcePeer},
		{name: "trusted peer oversized user", remote: trusted, h: hdr("X-User-Id", long),
			ip: "10.0.0.1", source: decisions.SourcePeer},
		{name: "trusted peer oversized user forwarded", remote: trusted, h: hdr("X-Forwarded-For", "203.0.113.7", "X-User-Id", long),
			ip: "203.0.113.7", source: decisions.SourceForwarded},
		{name: "trusted peer oversized plan", remote: trusted, h: hdr("X-User-Id", "alice", "X-User-Plan", long),
			ip: "10.0.0.1", source: decisions.SourcePeer},
		{name: "trusted peer longest user", remote: trusted, h: hdr("X-User-Id", long[1:]),
			ip: "10.0.0.1", user: long[1:], source: decisions.SourceHeader},
		{name: "trusted peer user with a no-break space", remote: trusted, h: hdr("X-User-Id", "\u00a0victim"),
			ip: "10.0.0.1", source: decisions.SourcePeer},
		{name: "trusted peer user with an em space", remote: trusted, h: hdr("X-User-Id", "victim\u2003"),
			ip: "10.0.0.1", source: decisions.SourcePeer},
		{name: "trusted peer user with a control character", remote: trusted, h: hdr("X-User-Id", "mallory\x7f"),
			ip: "10.0.0.1", source: decisions.SourcePeer},
		{name: "trusted peer user of invalid UTF-8", remote: trusted, h: hdr("X-User-Id", "mallory\xff"),
			ip: "10.0.0.1", source: decisions.SourcePeer},
		{name: "trusted peer user with inner space", remote: trusted, h: hdr("X-User-Id", "a b"),
			ip: "10.0.0.1", user: "a b", source: decisions.SourceHeader},
		{name: "trusted peer two user lines", remote: trusted, h: hdr("X-User-Id", "mallory", "X-User-Id", "alice"),
			ip: "10.0.0.1", source: decisions.SourcePeer},
		{name: "bearer ignored without JWT config", remote: untrusted, h: hdr("Authorization", "Bearer a.b.c"),
			ip: "198.51.100.1", source: decisions.SourcePeer},
	})

	custom := mustNew(t, config.Identity{TrustedProxies: trustedProxies, UserHeader: "x-auth-user", PlanHeader: "X-Auth-Plan"}, nil)
	runResolve(t, custom, []resolveCase{
		{name: "custom headers", remote: trusted, h: hdr("X-Auth-User", "carol", "X-Auth-Plan", "free"),
			ip: "10.0.0.1", user: "carol", plan: "free", source: decisions.SourceHeader},
		{name: "default header not read", remote: trusted, h: hdr("X-User-Id", "carol"),
			ip: "10.0.0.1", source: decisions.SourcePeer},
	})
}

func TestResolveNil(t *testing.T) {
	var r *Resolver
	got := r.Resolve("198.51.100.1:1", hdr("X-User-Id", "x"), now)
	want := Identity{ClientIP: addr("198.51.100.1"), Addr: addr("198.51.100.1"), Source: decisions.SourcePeer}
	if got != want {
		t.Errorf("nil resolver: got %+v, want %+v", got, want)
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	keys := writeKeys(t, dir)
	cases := []struct {
		name string
		cfg  config.Identity
		want string
	}{
		{"bad CIDR", config.Identity{TrustedProxies: []string{"10.0.0.0/8", "10.0.0.0/33"}}, `identity.trusted_proxies[1]: "10.0.0.0/33"`},
		{"bad address", config.Identity{TrustedProxies: []string{"10.0.0.300"}}, `identity.trusted_proxies[0]: "10.0.0.300" is not an IP address`},
		{"zone", config.Identity{TrustedProxies: []string{"fe80::1%eth0"}}, `identity.trusted_proxies[0]`},
		{"empty proxy", config.Identity{TrustedProxies: []string{""}}, `identity.trusted_proxies[0]`},
		{"client_ip_header", config.Identity{ClientIPHeader: "x-real-ip"}, `identity.client_ip_header: "x-real-ip" is not supported; want x-forwarded-for or cloudfront-viewer-address`},
		{"user_header", config.Identity{UserHeader: "X User"}, `identity.user_header: "X User" is not a valid header name`},
		{"same headers", config.Identity{UserHeader: "X-A", PlanHeader: "x-a"}, `identity.plan_header`},
		{"ipv6_prefix high", config.Identity{IPv6Prefix: 129}, `identity.ipv6_prefix: 129 is out of range; want 1 to 128`},
		{"ipv6_prefix negative", config.Identity{IPv6Prefix: -1}, `identity.ipv6_prefix: -1`},
		{"algorithm", config.Identity{JWT: &config.JWT{Algorithm: "HS512", KeyEnv: "K"}}, `identity.jwt.algorithm: "HS512" is not supported; want HS256, RS256 or ES256`},
		{"algorithm none", config.Identity{JWT: &config.JWT{Algorithm: "none"}}, `identity.jwt.algorithm: "none"`},
		{"key_env empty", config.Identity{JWT: &config.JWT{Algorithm: "HS256"}}, `identity.jwt.key_env: empty`},
		{"key_env unset", config.Identity{JWT: &config.JWT{Algorithm: "HS256", KeyEnv: "UNSET"}}, `identity.jwt.key_env: the key in $UNSET is 0 bytes; HS256 needs at least 32`},
		{"key_env short", config.Identity{JWT: &config.JWT{Algorithm: "HS256", KeyEnv: "SHORT"}}, `identity.jwt.key_env: the key in $SHORT is 11 bytes`},
		{"public_key_file empty", config.Identity{JWT: &config.JWT{Algorithm: "RS256"}}, `identity.jwt.public_key_file: empty; RS256 needs`},
		{"public_key_file missing", config.Identity{JWT: &config.JWT{Algorithm: "ES256", PublicKeyFile: dir + "/nope.pem"}}, `identity.jwt.public_key_file: open `},
		{"RS256 with EC key", config.Identity{JWT: &config.JWT{Algorithm: "RS256", PublicKeyFile: keys.ecPath}}, `not a PEM RSA public key`},
		{"ES256 with RSA key", config.Identity{JWT: &config.JWT{Algorithm: "ES256", PublicKeyFile: keys.rsaPath}}, `not a PEM ECDSA public key`},
		{"ES256 with P-384", config.Identity{JWT: &config.JWT{Algorithm: "ES256", PublicKeyFile: keys.p384Path}}, `ECDSA key on P-384; ES256 needs P-256`},
		{"RS256 small key", config.Identity{JWT: &config.JWT{Algorithm: "RS256", PublicKeyFile: keys.rsaSmallPath}}, `RSA key of 1024 bits; want at least 2048`},
		{"not PEM", config.Identity{JWT: &config.JWT{Algorithm: "RS256", PublicKeyFile: keys.garbagePath}}, `not a PEM RSA public key`},
		{"leeway", config.Identity{JWT: &config.JWT{Algorithm: "HS256", KeyEnv: "K", Leeway: new(-time.Second)}}, `identity.jwt.leeway: -1s is negative`},
		{"same claims", config.Identity{JWT: &config.JWT{Algorithm: "HS256", KeyEnv: "K", UserClaim: "sub", PlanClaim: "sub"}}, `identity.jwt.plan_claim`},
	}
	env := map[string]string{"K": hsKey, "SHORT": "short-s3cr3"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.cfg, func(k string) string { return env[k] })
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New: got error %v, want one containing %q", err, c.want)
			}
			if strings.Contains(err.Error(), "s3cr3") || strings.Contains(err.Error(), hsKey) {
				t.Errorf("error %q shows key material", err)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	r := mustNew(t, config.Identity{}, nil)
	if r.ipHeader != "X-Forwarded-For" || r.userHeader != "X-User-Id" || r.planHeader != "X-User-Plan" || r.ipv6Bits != 64 || r.jwt != nil {
		t.Errorf("defaults: %+v", r)
	}
	r = mustNew(t, config.Identity{JWT: &config.JWT{Algorithm: "hs256", KeyEnv: "K"}}, map[string]string{"K": hsKey})
	if r.jwt.userClaim != "sub" || r.jwt.planClaim != "plan" {
		t.Errorf("JWT defaults: %+v", r.jwt)
	}
}

func TestResolveDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	r := mustNew(t, config.Identity{TrustedProxies: trustedProxies, JWT: &config.JWT{Algorithm: "HS256", KeyEnv: "K"}}, map[string]string{"K": hsKey})
	f := func(name, remote string, h http.Header) {
		t.Helper()
		if n := testing.AllocsPerRun(100, func() { r.Resolve(remote, h, now) }); n != 0 {
			t.Errorf("%s: %v allocations, want 0", name, n)
		}
	}
	f("peer only", "198.51.100.1:5000", http.Header{"User-Agent": {"x"}})
	f("IPv6 peer", "[2001:db8::1]:5000", http.Header{})
	f("trusted XFF", "10.0.0.1:443", http.Header{"X-Forwarded-For": {"203.0.113.7, 10.0.0.5, 10.0.0.6"}})
	f("trusted user header", "10.0.0.1:443", http.Header{"X-User-Id": {"alice"}, "X-User-Plan": {"pro"}})
	f("spoofed user header", "198.51.100.1:5000", http.Header{"X-User-Id": {"alice"}})
}

func BenchmarkResolve(b *testing.B) {
	r := mustNew(b, config.Identity{TrustedProxies: trustedProxies, JWT: &config.JWT{Algorithm: "HS256", KeyEnv: "K"}}, map[string]string{"K": hsKey})
	tok := signHS(b, []byte(hsKey), claims{"sub": "alice", "plan": "pro", "exp": now.Add(time.Hour).Unix()})
	cases := []struct {
		name   string
		remote string
		h      http.Header
	}{
		{"peer-only", "198.51.100.1:5000", http.Header{"User-Agent": {"bench"}}},
		{"trusted-xff-3", "10.0.0.1:443", http.Header{"X-Forwarded-For": {"203.0.113.7, 10.0.0.5, 10.0.0.6"}}},
		{"trusted-header", "10.0.0.1:443", http.Header{"X-User-Id": {"alice"}, "X-User-Plan": {"pro"}}},
		{"jwt-hs256", "198.51.100.1:5000", http.Header{"Authorization": {"Bearer " + tok}}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r.Resolve(c.remote, c.h, now)
			}
		})
		b.Run(c.name+"-parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r.Resolve(c.remote, c.h, now)
				}
			})
		})
	}
}

func TestTrusts(t *testing.T) {
	r := mustNew(t, config.Identity{TrustedProxies: trustedProxies}, nil)
	for _, c := range []struct {
		remote string
		want   bool
	}{
		{"10.0.0.1:443", true},
		{"[::ffff:10.0.0.1]:443", true},
		{"203.0.113.7:443", false},
		{"", false},
		{"garbage", false},
	} {
		if got := r.Trusts(c.remote); got != c.want {
			t.Errorf("Trusts(%q) = %v, want %v", c.remote, got, c.want)
		}
	}
	if (*Resolver)(nil).Trusts("10.0.0.1:443") {
		t.Error("a nil Resolver trusts a peer")
	}
}

// BenchmarkParsePeer is the peer address parse of every request that
// does not come with its connection's parsed address (Request.Peer),
// beside netip's own parse of the same text.
func BenchmarkParsePeer(b *testing.B) {
	for _, remote := range []string{"203.0.113.7:4711", "[2001:db8::1]:5000"} {
		b.Run(remote, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ParsePeer(remote)
			}
		})
		b.Run(remote+"/netip", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				netip.ParseAddrPort(remote)
			}
		})
	}
}
