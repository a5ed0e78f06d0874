// Package loopback tells whether a Host header names the machine itself,
// for the listeners that answer only on it (the live dashboard without a
// token, the edge's pprof): a page on another site can point its own name
// at 127.0.0.1 (DNS rebinding) and reach such a listener from the
// operator's browser, but the Host header it sends is still its own name.
package loopback

import (
	"net"
	"net/netip"
	"strings"
)

// Host reports whether host (a Host header, with or without a port)
// names a loopback address or localhost.
func Host(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}
