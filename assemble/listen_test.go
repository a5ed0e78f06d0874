package assemble

import (
	"bytes"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/config"
)

// TestPeerKey holds the per-address connection cap to the rate limit's
// idea of a client: an IPv6 client's whole prefix is one key (or an
// attacker rotating addresses in its /64 would get a cap per address),
// IPv4 addresses are keyed apart (also behind a NAT64 translator), and
// trusted proxies are not capped.
func TestPeerKey(t *testing.T) {
	key := peerKey(&config.Identity{TrustedProxies: []string{"10.0.0.0/8", "2001:db8:ff::1"}, IPv6Prefix: 48, NAT64Prefixes: []string{"2001:db8:64::/96"}})
	for _, c := range []struct {
		addr, key string // key "": not capped
	}{
		{"192.0.2.1", "192.0.2.1"},
		{"192.0.2.2", "192.0.2.2"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1::"},
		{"2001:db8:1:ffff::9", "2001:db8:1::"},
		{"2001:db8:2::1", "2001:db8:2::"},
		{"10.1.2.3", ""},
		{"2001:db8:ff::1", ""},
		{"2001:db8:ff::2", "2001:db8:ff::"},
		// IPv4 clients behind a translator of identity.nat64_prefixes are
		// keyed apart, by their IPv4 address, not as one /48.
		{"2001:db8:64::192.0.2.1", "192.0.2.1"},
		{"2001:db8:64::192.0.2.2", "192.0.2.2"},
		{"2001:db8:64::10.0.0.9", ""},
		{"2001:db8:64::1:c000:201", "2001:db8:64::"},
	} {
		k, capped := key(netip.MustParseAddr(c.addr))
		if got := map[bool]string{true: k.String(), false: ""}[capped]; got != c.key {
			t.Errorf("%s: key %q, want %q", c.addr, got, c.key)
		}
	}
}

// TestRefusalLog logs the first refusal and then at most one a period,
// with the count so far.
func TestRefusalLog(t *testing.T) {
	var buf bytes.Buffer
	refused := refusalLog(slog.New(slog.NewTextHandler(&buf, nil)), time.Hour)
	for i := range int64(5) {
		refused(netip.MustParseAddr("192.0.2.7"), i+1)
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 || !strings.Contains(buf.String(), `msg="connections refused" addr=192.0.2.7 over=edge.client.max_connections_per_address refused_total=1`) {
		t.Errorf("%d lines:\n%s", n, buf.String())
	}
	buf.Reset()
	refused = refusalLog(slog.New(slog.NewTextHandler(&buf, nil)), time.Nanosecond)
	for i := range int64(3) {
		refused(netip.MustParseAddr("192.0.2.7"), i+1)
		time.Sleep(time.Millisecond)
	}
	if n := strings.Count(buf.String(), "\n"); n != 3 {
		t.Errorf("a period of 1ns: %d lines, want 3:\n%s", n, buf.String())
	}
	if refusalLog(nil, time.Minute) != nil {
		t.Error("a nil log gives a func")
	}
}
