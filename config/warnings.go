package config

import (
	"errors"
	"net/netip"
	"strconv"
)

// Trusted proxy ranges wider than these are reported by Warnings, unless
// they hold only private or special-use addresses: no provider's proxy
// fleet is that wide (CloudFront's widest IPv6 range is a /28), and a
// trusted range is one whose every address may set a client's address,
// user and plan.
const (
	WidestTrustedIPv4 = 8
	WidestTrustedIPv6 = 24
)

// privateSpace is the address space no client on the internet holds.
var privateSpace = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
}

// Warnings returns what is valid but most likely a mistake, each naming the
// file, line, key path and value like a validation error: trusted proxy
// ranges that take in every address, or more than any proxy fleet. It does
// not fail anything; `ratewarden config check` prints them. It is safe for
// concurrent use as long as nothing modifies c.
func (c *Config) Warnings() ErrorList {
	v := &validator{collector: collector{file: c.file}, lines: c.lines}
	nat := c.Identity.NAT64()
	for i, s := range c.Identity.TrustedProxies {
		p, ok := parseProxy(nat, s)
		if !ok {
			continue // Validate reports it
		}
		segs := key("identity", "trusted_proxies", index(i))
		widest := WidestTrustedIPv4
		if p.Addr().Is6() {
			widest = WidestTrustedIPv6
		}
		switch {
		case p.Bits() == 0:
			v.report(segs, s, "trusts every address: any client can claim any address, user and plan", "the addresses of your proxies or load balancers only, such as 10.0.0.0/16")
		case p.Bits() < widest && !private(p):
			v.report(segs, s, "is wider than /"+strconv.Itoa(widest)+" and holds public addresses: any client in it can claim any address, user and plan",
				"the published ranges of your proxies or load balancers")
		}
	}
	var list ErrorList
	errors.As(v.err(), &list)
	return list
}

// private reports whether p lies inside private or special-use space.
func private(p netip.Prefix) bool {
	for _, q := range privateSpace {
		if q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
			return true
		}
	}
	return false
}
