// Package clientip puts a client's address in the one form the edge
// counts, lists and records it in.
//
// An IPv6 address that carries an IPv4 address is that IPv4 address:
// IPv4-mapped (::ffff:192.0.2.1, what a dual-stack socket reports for an
// IPv4 peer), and NAT64's well-known prefix (64:ff9b::192.0.2.1, RFC
// 6052), which an IPv6-only host behind a stateless translator (SIIT-DC,
// RFC 7755) sees for every IPv4 client. Without the second, every IPv4
// client of such a host would be one client: the edge counts an IPv6
// client by its /64, and 64:ff9b::/96 is inside one /64.
package clientip

import (
	"errors"
	"net/netip"
	"strings"
)

// nat64 is the well-known prefix of NAT64 (RFC 6052): the last 32 bits of
// an address in it are an IPv4 address.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// Of returns a as the edge counts it: without a zone, and an address that
// carries an IPv4 address (IPv4-mapped, or in NAT64) as that address.
func Of(a netip.Addr) netip.Addr {
	if a.Is4() {
		return a // the common peer: inlined, one comparison
	}
	return of6(a)
}

func of6(a netip.Addr) netip.Addr {
	if a.Is4In6() {
		return a.Unmap()
	}
	a = a.WithZone("")
	if nat64.Contains(a) {
		b := a.As16()
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return a
}

// Prefix returns p, a configured or listed prefix, masked, and as the IPv4
// prefix it is when it lies inside ::ffff:0:0/96 or NAT64's 64:ff9b::/96,
// so that it matches addresses as Of returns them. A prefix of one of
// those shorter than /96 holds IPv6 addresses too, and is an error: the
// IPv4 clients inside it could not be matched by one prefix. (A wider
// prefix that merely holds them, such as ::/0, is plain IPv6, and does
// not match them, as it never matched IPv4 peers.)
func Prefix(p netip.Prefix) (netip.Prefix, error) {
	a := p.Addr()
	switch {
	case !a.Is6():
		return p.Masked(), nil
	case a.Is4In6():
		if p.Bits() < 96 {
			return netip.Prefix{}, errors.New("mixes IPv4-mapped and plain IPv6 addresses")
		}
	case nat64.Contains(p.Masked().Addr()):
		if p.Bits() < 96 {
			return netip.Prefix{}, errors.New("mixes NAT64 (64:ff9b::/96) and plain IPv6 addresses")
		}
	default:
		return p.Masked(), nil
	}
	return netip.PrefixFrom(Of(a), p.Bits()-96).Masked(), nil
}

// ParseEntry parses a configured entry that names clients, such as a
// trusted proxy: an address or a CIDR prefix, without a zone, as Prefix
// puts it (a single address is a prefix of all its bits).
func ParseEntry(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, errors.New("is not a valid CIDR")
		}
		return Prefix(p)
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, errors.New("is not an IP address")
	}
	a = Of(a)
	return netip.PrefixFrom(a, a.BitLen()), nil
}
