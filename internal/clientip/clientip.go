// Package clientip puts a client's address in the one form the edge
// counts, lists and records it in.
//
// An IPv6 address that carries an IPv4 address is that IPv4 address:
// IPv4-mapped (::ffff:192.0.2.1, what a dual-stack socket reports for an
// IPv4 peer), and NAT64's (RFC 6052), which an IPv6-only host behind a
// stateless translator (SIIT-DC, RFC 7755) sees for every IPv4 client:
// the well-known prefix 64:ff9b::/96 always, and a site's own
// network-specific /96 prefixes when configured (NAT64). Without that,
// every IPv4 client of such a host would be one client: the edge counts
// an IPv6 client by its /64, and a /96 is inside one /64.
package clientip

import (
	"errors"
	"net/netip"
	"strings"
)

// wellKnown is the well-known prefix of NAT64 (RFC 6052): the last 32 bits
// of an address in it are an IPv4 address.
var wellKnown = netip.MustParsePrefix("64:ff9b::/96")

// NAT64 is the NAT64 prefixes whose addresses carry an IPv4 address in
// their last 32 bits: the well-known prefix 64:ff9b::/96, and the
// network-specific /96 prefixes of the site's stateless translators
// (identity.nat64_prefixes). The zero NAT64 has the well-known prefix
// alone; it is what the package's functions use.
type NAT64 struct {
	specific []netip.Prefix // masked /96 prefixes, without the well-known one
}

// ParseNAT64Prefix parses a network-specific NAT64 prefix: an IPv6 /96
// (RFC 6052 defines shorter ones, whose IPv4 bits straddle a reserved
// octet; translators for a data centre use /96). It is masked. A /96
// that holds other kinds of address is refused: IPv4-mapped addresses,
// and ::/96, which holds the loopback address ::1.
func ParseNAT64Prefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		return netip.Prefix{}, errors.New("is not a valid CIDR")
	case !p.Addr().Is6() || p.Addr().Is4In6():
		return netip.Prefix{}, errors.New("is not an IPv6 prefix")
	case p.Bits() != 96:
		return netip.Prefix{}, errors.New("is not a /96")
	}
	p = p.Masked()
	if p.Addr().IsUnspecified() {
		return netip.Prefix{}, errors.New("holds the loopback and unspecified addresses")
	}
	return p, nil
}

// NewNAT64 returns the NAT64 of the well-known prefix and the
// network-specific prefixes ps, as ParseNAT64Prefix returns them.
func NewNAT64(ps []netip.Prefix) NAT64 {
	var n NAT64
	for _, p := range ps {
		if p != wellKnown {
			n.specific = append(n.specific, p)
		}
	}
	return n
}

// Of returns a as the edge counts it: without a zone, and an address that
// carries an IPv4 address (IPv4-mapped, or in the well-known NAT64
// prefix) as that address.
func Of(a netip.Addr) netip.Addr { return NAT64{}.Of(a) }

// Of returns a as the edge counts it: without a zone, and an address that
// carries an IPv4 address (IPv4-mapped, or in one of n's prefixes) as
// that address.
func (n NAT64) Of(a netip.Addr) netip.Addr {
	if a.Is4() {
		return a // the common peer: inlined, one comparison
	}
	return n.of6(a)
}

func (n NAT64) of6(a netip.Addr) netip.Addr {
	if a.Is4In6() {
		return a.Unmap()
	}
	a = a.WithZone("")
	if wellKnown.Contains(a) || n.specificOf(a) >= 0 {
		b := a.As16()
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return a
}

// specificOf returns the index of n's network-specific prefix that holds
// a, or -1.
func (n NAT64) specificOf(a netip.Addr) int {
	for i, p := range n.specific {
		if p.Contains(a) {
			return i
		}
	}
	return -1
}

// holder returns the NAT64 prefix of n that holds a.
func (n NAT64) holder(a netip.Addr) (netip.Prefix, bool) {
	if wellKnown.Contains(a) {
		return wellKnown, true
	}
	if i := n.specificOf(a); i >= 0 {
		return n.specific[i], true
	}
	return netip.Prefix{}, false
}

// HeldBy returns the network-specific prefix of n that p holds with fewer
// bits, if any, such as 2001:db8:64::/96 for 2001:db8::/32 or ::/0. Such a
// p is plain IPv6 (Prefix refuses it, or returns it as it is): it holds
// none of the IPv4 clients that n reads the addresses of that prefix as.
func (n NAT64) HeldBy(p netip.Prefix) (netip.Prefix, bool) {
	if p.Bits() >= 96 || !p.Addr().Is6() {
		return netip.Prefix{}, false
	}
	for _, s := range n.specific {
		if p.Contains(s.Addr()) {
			return s, true
		}
	}
	return netip.Prefix{}, false
}

// Prefix returns p as the zero NAT64's Prefix does.
func Prefix(p netip.Prefix) (netip.Prefix, error) { return NAT64{}.Prefix(p) }

// Prefix returns p, a configured or listed prefix, masked, and as the IPv4
// prefix it is when it lies inside ::ffff:0:0/96 or one of n's NAT64
// prefixes, so that it matches addresses as Of returns them. A prefix of
// one of those shorter than /96 holds IPv6 addresses too, and is an
// error: the IPv4 clients inside it could not be matched by one prefix.
// (A wider prefix that merely holds them, such as ::/0, is plain IPv6,
// and does not match them, as it never matched IPv4 peers.)
func (n NAT64) Prefix(p netip.Prefix) (netip.Prefix, error) {
	a := p.Addr()
	switch {
	case !a.Is6():
		return p.Masked(), nil
	case a.Is4In6():
		if p.Bits() < 96 {
			return netip.Prefix{}, errors.New("mixes IPv4-mapped and plain IPv6 addresses")
		}
	default:
		h, ok := n.holder(p.Masked().Addr())
		if !ok {
			return p.Masked(), nil
		}
		if p.Bits() < 96 {
			return netip.Prefix{}, errors.New("mixes NAT64 (" + h.String() + ") and plain IPv6 addresses")
		}
	}
	return netip.PrefixFrom(n.Of(a), p.Bits()-96).Masked(), nil
}

// ParseEntry parses an entry as the zero NAT64's ParseEntry does.
func ParseEntry(s string) (netip.Prefix, error) { return NAT64{}.ParseEntry(s) }

// ParseEntry parses a configured entry that names clients, such as a
// trusted proxy: an address or a CIDR prefix, without a zone, as Prefix
// puts it (a single address is a prefix of all its bits).
func (n NAT64) ParseEntry(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, errors.New("is not a valid CIDR")
		}
		return n.Prefix(p)
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, errors.New("is not an IP address")
	}
	a = n.Of(a)
	return netip.PrefixFrom(a, a.BitLen()), nil
}
