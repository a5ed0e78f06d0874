// Package clientip puts a client's address in the one form the edge
// counts, lists and records it in.
//
// An IPv6 address that carries an IPv4 address is that IPv4 address:
// IPv4-mapped (::ffff:192.0.2.1, what a dual-stack socket reports for an
// IPv4 peer), and NAT64's (RFC 6052), which an IPv6-only host behind a
// stateless translator (SIIT-DC, RFC 7755) sees for every IPv4 client:
// the well-known prefix 64:ff9b::/96 always, and a site's own
// network-specific prefixes when configured (NAT64), of any length RFC
// 6052 defines (32, 40, 48, 56, 64 or 96 bits). Without that, every IPv4
// client of such a host would be one client: the edge counts an IPv6
// client by its /64, and a /96 is inside one /64.
//
// Under a prefix shorter than /96 the IPv4 address is split around bits
// 64 to 71, the u octet, which must be zero (RFC 6052, section 2.2): an
// address of the prefix whose u octet is not zero is not a translated
// address, and is read as the plain IPv6 address it is. The suffix after
// the IPv4 address is ignored, as the RFC says translators should.
package clientip

import (
	"cmp"
	"errors"
	"net/netip"
	"slices"
	"strings"
)

// wellKnown is the well-known prefix of NAT64 (RFC 6052): the last 32 bits
// of an address in it are an IPv4 address.
var wellKnown = netip.MustParsePrefix("64:ff9b::/96")

// errLength is the error for a prefix of a length RFC 6052 does not define.
var errLength = errors.New("is not a /32, /40, /48, /56, /64 or /96")

// NAT64 is the NAT64 prefixes whose addresses carry an IPv4 address: the
// well-known prefix 64:ff9b::/96, and the network-specific prefixes of the
// site's stateless translators (identity.nat64_prefixes), each of 32, 40,
// 48, 56, 64 or 96 bits, the IPv4 address embedded as RFC 6052 says for
// that length. The zero NAT64 has the well-known prefix alone; it is what
// the package's functions use. A NAT64 is safe for concurrent use.
type NAT64 struct {
	specific []netip.Prefix // masked, without the well-known one, longest first
}

// ParseNAT64Prefix parses a network-specific NAT64 prefix: an IPv6 prefix
// of one of the lengths RFC 6052 defines, 32, 40, 48, 56, 64 or 96 bits
// (sites deploy /96 and /64 most). It is masked. A prefix that holds other
// kinds of address is refused: IPv4-mapped addresses, the loopback
// address ::1 (::/96, ::/64 and the like), and the well-known prefix
// 64:ff9b::/96, whose addresses always carry their IPv4 address in their
// last 32 bits (64:ff9b::/96 itself is accepted, and needs no entry).
func ParseNAT64Prefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		return netip.Prefix{}, errors.New("is not a valid CIDR")
	case !p.Addr().Is6() || p.Addr().Is4In6():
		return netip.Prefix{}, errors.New("is not an IPv6 prefix")
	case !nat64Length(p.Bits()):
		return netip.Prefix{}, errLength
	}
	p = p.Masked()
	switch {
	case p.Addr().IsUnspecified():
		return netip.Prefix{}, errors.New("holds the loopback and unspecified addresses")
	case p != wellKnown && p.Overlaps(wellKnown):
		return netip.Prefix{}, errors.New("holds the well-known prefix " + wellKnown.String())
	}
	return p, nil
}

// nat64Length reports whether RFC 6052 defines NAT64 prefixes of bits.
func nat64Length(bits int) bool {
	switch bits {
	case 32, 40, 48, 56, 64, 96:
		return true
	}
	return false
}

// Overlapping returns the index of the first of ps, network-specific
// prefixes, that overlaps p, or -1. The prefixes of a NAT64 must lie
// apart: an address in two would carry a different IPv4 address in each.
// Configuration refuses such a pair with this; an invalid prefix overlaps
// none.
func Overlapping(ps []netip.Prefix, p netip.Prefix) int { return slices.IndexFunc(ps, p.Overlaps) }

// NewNAT64 returns the NAT64 of the well-known prefix and the
// network-specific prefixes ps, as ParseNAT64Prefix returns them. Of two
// that overlap (which configuration refuses: Overlapping), the longer
// reads the addresses of both.
func NewNAT64(ps []netip.Prefix) NAT64 {
	var n NAT64
	for _, p := range ps {
		if p != wellKnown {
			n.specific = append(n.specific, p)
		}
	}
	slices.SortStableFunc(n.specific, func(a, b netip.Prefix) int { return cmp.Compare(b.Bits(), a.Bits()) })
	return n
}

// Embed returns the address that a translator of the NAT64 prefix p gives
// the IPv4 address a (RFC 6052, section 2.2): under a /96, a in the last
// 32 bits; under a shorter prefix, a's bits after the prefix, skipping
// bits 64 to 71, which are zero, as is the suffix after a. p is masked;
// its length must be one RFC 6052 defines.
func Embed(p netip.Prefix, a netip.Addr) (netip.Addr, error) {
	switch {
	case !p.Addr().Is6() || !nat64Length(p.Bits()):
		return netip.Addr{}, errLength
	case !a.Is4():
		return netip.Addr{}, errors.New(a.String() + " is not an IPv4 address")
	}
	b, v := p.Masked().Addr().As16(), a.As4()
	for k, x := range v {
		b[v4Byte(p.Bits(), k)] = x
	}
	return netip.AddrFrom16(b), nil
}

// v4Byte returns where byte k of the IPv4 address lies in an address of a
// NAT64 prefix of bits bits: right after the prefix, past bits 64 to 71
// (the u octet, zero) under a prefix shorter than /96.
func v4Byte(bits, k int) int {
	i := bits/8 + k
	if bits < 96 && i >= 8 {
		i++
	}
	return i
}

// carried returns the IPv4 address that b, an address in a NAT64 prefix of
// bits bits, carries (the inverse of Embed), and false when b's u octet is
// not zero: such an address is not a translated address.
func carried(b *[16]byte, bits int) (netip.Addr, bool) {
	if bits == 96 {
		return netip.AddrFrom4([4]byte(b[12:])), true
	}
	if b[8] != 0 {
		return netip.Addr{}, false
	}
	var v [4]byte
	for k := range v {
		v[k] = b[v4Byte(bits, k)]
	}
	return netip.AddrFrom4(v), true
}

// carriedBits returns how many bits of the IPv4 address the first bits
// bits of an address in a NAT64 prefix of n bits fix, bits being n or
// more.
func carriedBits(n, bits int) int {
	if n == 96 {
		return bits - 96
	}
	return min(bits, 64) - n + min(max(bits-72, 0), 32-(64-n))
}

// Of returns a as the edge counts it: without a zone, and an address that
// carries an IPv4 address (IPv4-mapped, or in the well-known NAT64
// prefix) as that address.
func Of(a netip.Addr) netip.Addr { return NAT64{}.Of(a) }

// Of returns a as the edge counts it: without a zone, and an address that
// carries an IPv4 address (IPv4-mapped, or in one of n's prefixes with a
// u octet of zero) as that address.
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
	if wellKnown.Contains(a) {
		b := a.As16()
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	if i := n.specificOf(a); i >= 0 {
		if bits := n.specific[i].Bits(); bits != 96 {
			return split(a, bits)
		}
		b := a.As16()
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return a
}

// split returns the IPv4 address that a, in a NAT64 prefix of bits bits
// shorter than 96, carries, or a when its u octet is not zero. It is apart
// from of6 so that a /96, the common length, costs what it did.
func split(a netip.Addr, bits int) netip.Addr {
	b := a.As16()
	if v, ok := carried(&b, bits); ok {
		return v
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
// bits, if any, such as 2001:db8:64::/96 for 2001:db8::/32, 2001:db8:64::/64
// or ::/0. Such a p is plain IPv6, and Prefix refuses it: it holds none of
// the IPv4 clients that n reads the addresses of that prefix as, and read
// as IPv4 it would have to hold every IPv4 client.
func (n NAT64) HeldBy(p netip.Prefix) (netip.Prefix, bool) {
	if !p.Addr().Is6() {
		return netip.Prefix{}, false
	}
	for _, s := range n.specific {
		if p.Bits() < s.Bits() && p.Contains(s.Addr()) {
			return s, true
		}
	}
	return netip.Prefix{}, false
}

// Prefix returns p as the zero NAT64's Prefix does.
func Prefix(p netip.Prefix) (netip.Prefix, error) { return NAT64{}.Prefix(p) }

// Prefix returns p, a configured or listed prefix, masked, and as the IPv4
// prefix it is when it lies inside ::ffff:0:0/96 or one of n's NAT64
// prefixes, so that it matches addresses as Of returns them: the IPv4
// bits its own bits fix (2001:db8:122:344:c0:2::/96 inside
// 2001:db8:122:344::/64 is 192.0.2.0/24, and the /64 itself 0.0.0.0/0).
// One that fixes a u octet other than zero holds no translated address,
// and is the plain IPv6 prefix it is. A prefix with fewer bits than one
// of those it overlaps holds IPv6 addresses around it, and is an error:
// the IPv4 clients inside could not be matched by one prefix, and read as
// IPv4 it would hold every IPv4 client. (Around the well-known prefix
// alone, a wider prefix that merely holds it, such as ::/0, is plain IPv6,
// and does not match its clients, as it never matched IPv4 peers.)
func (n NAT64) Prefix(p netip.Prefix) (netip.Prefix, error) {
	a := p.Addr()
	switch {
	case !a.Is6():
		return p.Masked(), nil
	case a.Is4In6():
		if p.Bits() < 96 {
			return netip.Prefix{}, errors.New("mixes IPv4-mapped and plain IPv6 addresses")
		}
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked(), nil
	}
	m := p.Masked()
	h, ok := n.HeldBy(m)
	if !ok {
		if h, ok = n.holder(m.Addr()); !ok {
			return m, nil
		}
	}
	if m.Bits() < h.Bits() {
		return netip.Prefix{}, errors.New("mixes NAT64 (" + h.String() + ") and plain IPv6 addresses")
	}
	b := m.Addr().As16()
	v, ok := carried(&b, h.Bits())
	if !ok {
		return m, nil // masked, so a u octet other than zero is in m's bits
	}
	return netip.PrefixFrom(v, carriedBits(h.Bits(), m.Bits())).Masked(), nil
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
