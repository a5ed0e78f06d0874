package decisions

import (
	"net/netip"
	"strings"
	"testing"
)

func TestPrivacy(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	cases := []struct {
		addrMode, userMode string
		ip, user           string
		wantIP, wantUser   string // "" for a pseudonym (checked separately)
		label              string
	}{
		{"keep", "keep", "203.0.113.77", "u_1", "203.0.113.77", "u_1", "keep/keep"},
		{"truncate", "keep", "203.0.113.77", "u_1", "203.0.113.0", "u_1", "truncate/keep"},
		{"truncate", "keep", "2001:db8:1:2:3:4:5:6", "", "2001:db8:1::", "", "truncate/keep"},
		{"hmac", "hmac", "203.0.113.77", "u_1", "", "", "hmac/hmac"},
		{"keep", "hmac", "203.0.113.77", "u_1", "203.0.113.77", "", "keep/hmac"},
	}
	for _, c := range cases {
		p, err := NewPrivacy(c.addrMode, c.userMode, key)
		if err != nil {
			t.Fatal(err)
		}
		d := Decision{ClientIP: netip.MustParseAddr(c.ip), UserID: c.user}
		p.Apply(&d)
		if d.Privacy != c.label {
			t.Errorf("%s/%s: label %q, want %q", c.addrMode, c.userMode, d.Privacy, c.label)
		}
		if c.wantIP != "" && d.ClientIP.String() != c.wantIP {
			t.Errorf("%s/%s: ip %v, want %s", c.addrMode, c.userMode, d.ClientIP, c.wantIP)
		}
		if c.wantIP == "" && (d.ClientIP.As16()[0] != 0xfd || d.ClientIP.String() == c.ip) {
			t.Errorf("%s/%s: pseudonym %v not in fd00::/8", c.addrMode, c.userMode, d.ClientIP)
		}
		if c.user != "" && c.wantUser == "" && (!strings.HasPrefix(d.UserID, "h:") || len(d.UserID) != 24) {
			t.Errorf("%s/%s: user pseudonym %q", c.addrMode, c.userMode, d.UserID)
		}
		if c.wantUser != "" && d.UserID != c.wantUser {
			t.Errorf("%s/%s: user %q, want %q", c.addrMode, c.userMode, d.UserID, c.wantUser)
		}
	}
	// Pseudonyms are stable per key, differ between keys and clients, and
	// an IPv4 address maps alike however it is written.
	p1, _ := NewPrivacy("hmac", "hmac", key)
	p2, _ := NewPrivacy("hmac", "hmac", []byte(strings.Repeat("x", 32)))
	pa := func(p *Privacy, ip string) netip.Addr {
		d := Decision{ClientIP: netip.MustParseAddr(ip)}
		p.Apply(&d)
		return d.ClientIP
	}
	if pa(p1, "203.0.113.77") != pa(p1, "203.0.113.77") || pa(p1, "203.0.113.77") != pa(p1, "::ffff:203.0.113.77") {
		t.Error("pseudonyms are not stable")
	}
	if pa(p1, "203.0.113.77") == pa(p2, "203.0.113.77") || pa(p1, "203.0.113.77") == pa(p1, "203.0.113.78") {
		t.Error("pseudonyms collide across keys or clients")
	}
	// Drop reports are left alone.
	d := Decision{Kind: KindDrops, Dropped: 3}
	p1.Apply(&d)
	if d.Privacy != "" {
		t.Error("a drop report was labelled")
	}
	for _, bad := range [][3]string{{"scramble", "keep", "k"}, {"keep", "truncate", "k"}, {"hmac", "keep", "short"}} {
		if _, err := NewPrivacy(bad[0], bad[1], []byte(bad[2])); err == nil {
			t.Errorf("NewPrivacy(%q, %q, short key) accepted", bad[0], bad[1])
		}
	}
}
