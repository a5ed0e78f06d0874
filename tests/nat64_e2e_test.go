package tests

import (
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/decisions"
)

// TestEdgeNAT64Clients runs the binary behind a trusted proxy that forwards
// the addresses an IPv6-only host behind a stateless NAT64 translator sees:
// IPv4 clients as 64:ff9b::a.b.c.d (the well-known prefix), or in the
// site's own prefix that identity.nat64_prefixes names, a /96 or a /64
// (where RFC 6052 puts the IPv4 address after the u octet, bits 64 to
// 71). Each is its own client, counted, listed, challenged and recorded
// as its IPv4 address, not as one /64 they would all share; a proxy of
// the site behind the translator is trusted by its IPv4 address. A deny
// entry written in the prefix, as an origin's log shows the client (by
// `ratewarden lists add`, or by hand in capitals), refuses that client
// however its address is spelt.
func TestEdgeNAT64Clients(t *testing.T) {
	t.Run("well-known", func(t *testing.T) {
		testEdgeNAT64Clients(t, nat64Site{in: func(v4 string) string { return "64:ff9b::" + v4 }, denyPrefix: "64:FF9B::198.51.100.0/120",
			apart: func(i int) string { return fmt.Sprintf("64:ff9b::%x:cb00:710a", i) }, neighbour: "64:ff9b::1:cb00:714d"})
	})
	t.Run("network-specific", func(t *testing.T) {
		testEdgeNAT64Clients(t, nat64Site{yaml: `  nat64_prefixes: ["2001:db8:64::/96"]` + "\n",
			in: func(v4 string) string { return "2001:db8:64::" + v4 }, denyPrefix: "2001:DB8:64::198.51.100.0/120",
			apart: func(i int) string { return fmt.Sprintf("2001:db8:64::%x:cb00:710a", i) }, neighbour: "2001:db8:64::1:cb00:714d"})
	})
	t.Run("network-specific /64", func(t *testing.T) {
		testEdgeNAT64Clients(t, nat64Site{yaml: `  nat64_prefixes: ["2001:db8:122:344::/64"]` + "\n",
			// The u octet, zero, then the IPv4 address, then a zero suffix.
			in: func(v4 string) string {
				b := netip.MustParseAddr(v4).As4()
				return fmt.Sprintf("2001:db8:122:344:%x:%x:%x:0", b[0], int(b[1])<<8|int(b[2]), int(b[3])<<8)
			},
			denyPrefix: "2001:DB8:122:344:C6:3364::/96",
			// A u octet other than zero: plain IPv6 addresses of the /64.
			apart:     func(i int) string { return fmt.Sprintf("2001:db8:122:344:%x00:cb:71:a00", i) },
			neighbour: "2001:db8:122:344:1cb:71:4d00:0"})
	})
}

// A nat64Site is how a translator writes its IPv4 clients.
type nat64Site struct {
	yaml       string                 // the identity lines that name its prefix, if any
	in         func(v4 string) string // the address it gives the IPv4 client v4
	denyPrefix string                 // 198.51.100.0/24 written in its prefix, in capitals
	apart      func(i int) string     // plain IPv6 addresses of one /64, for i from 1
	neighbour  string                 // a plain IPv6 address beside in("203.0.113.77")
}

func testEdgeNAT64Clients(t *testing.T, site nat64Site) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		origin := newRecordingOrigin(t)
		dir := t.TempDir()
		deny := filepath.Join(dir, "deny.txt")
		os.WriteFile(deny, []byte("203.0.113.66\n"+site.denyPrefix+"\n"), 0o600)
		cfgPath := seedTrusting(t, "[127.0.0.1, 10.0.0.0/8]", "\nlists:\n  deny_file: "+deny+"\n", "\nidentity:\n", "\nidentity:\n"+site.yaml)
		// 203.0.113.77 as the origin behind the translator logs it.
		listed := netip.MustParseAddr(site.in("203.0.113.77"))
		out := runBinary(t, bin, []string{"USER=tester"}, "lists", "add", "--config", cfgPath, "--list", "deny", listed.String())
		if note := "an edge with this configuration reads " + listed.String() + " as the IPv4 client 203.0.113.77"; site.yaml != "" && !strings.Contains(out, note) {
			t.Errorf("lists add printed %q, want it to say %q", out, note)
		}
		decisionsFile := filepath.Join(dir, "decisions.jsonl")
		base, _ := startEdge(t, bin, challengeEnv, "--server", server, "--config", cfgPath, "--upstream", origin.URL, "--decisions-file", decisionsFile)
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		export := func(xff string, kv ...string) int {
			return get(t, client, base+"/api/export", append([]string{"X-Forwarded-For", xff}, kv...)...).status
		}

		// Two translated clients: the seed's 3 exports a minute each, then
		// a challenge. Counted as one /64, the second would be challenged at
		// its first.
		var statuses []int
		for _, xff := range []string{site.in("203.0.113.7"), site.in("203.0.113.8")} {
			for range 4 {
				statuses = append(statuses, export(xff))
			}
		}
		if got := fmt.Sprint(statuses); got != "[200 200 200 302 200 200 200 302]" {
			t.Errorf("two translated clients: %s, want [200 200 200 302 200 200 200 302]", got)
		}
		// The same client written as its IPv4 address is the same client.
		if s := export("203.0.113.7"); s != 302 {
			t.Errorf("203.0.113.7 after four exports as %s: %d, want 302", site.in("203.0.113.7"), s)
		}
		// A proxy of the site behind the translator (10.0.0.5) is trusted
		// by its IPv4 address: the client is the address before it.
		if s := export("203.0.113.9, " + site.in("10.0.0.5")); s != 200 {
			t.Errorf("203.0.113.9 through %s: %d, want 200", site.in("10.0.0.5"), s)
		}
		// An address beside the translated ones (of the /64 outside the /96,
		// or with a u octet) is a plain IPv6 client, and all of its /64 is
		// one.
		for i := range 4 {
			want := 200
			if i == 3 {
				want = 302
			}
			if s := export(site.apart(i + 1)); s != want {
				t.Errorf("export %d from %s: %d, want %d", i+1, site.apart(i+1), s, want)
			}
		}
		// A token issued for the plain address passes the translated one.
		tok := issueToken(t, client, base, testVerifierSecret, "203.0.113.8")
		other := netip.MustParseAddr(site.in("203.0.113.8")).StringExpanded()
		if s := export(other, "Cookie", tok.Cookie+"="+tok.Token); s != 200 {
			t.Errorf("token for 203.0.113.8, presented by %s: %d, want 200", other, s)
		}
		// The deny list's IPv4 entry holds the translated address.
		if res := get(t, client, base+"/", "X-Forwarded-For", site.in("203.0.113.66")); res.status != 403 {
			t.Errorf("deny-listed 203.0.113.66 as %s: %d, want 403", site.in("203.0.113.66"), res.status)
		}
		// The entries written in the prefix hold their client in every
		// spelling of its address, and nothing beside it.
		spellings := []string{"203.0.113.77", "::ffff:203.0.113.77", "::FFFF:CB00:714D", "64:ff9b::203.0.113.77", "64:FF9B::CB00:714D",
			site.in("203.0.113.77"), strings.ToUpper(listed.String()), listed.StringExpanded(), "[" + listed.String() + "]:4711"}
		for _, xff := range spellings {
			if res := get(t, client, base+"/", "X-Forwarded-For", xff); res.status != 403 {
				t.Errorf("deny-listed %s as %s: %d, want 403", listed, xff, res.status)
			}
		}
		for xff, want := range map[string]int{"198.51.100.200": 403, site.in("198.51.100.9"): 403, site.in("203.0.113.78"): 200, site.neighbour: 200} {
			if res := get(t, client, base+"/", "X-Forwarded-For", xff); res.status != want {
				t.Errorf("%s: %d, want %d", xff, res.status, want)
			}
		}

		stops[t.Name()]()
		clients, denied := map[string]int{}, map[string]int{}
		for _, d := range readDecisions(t, decisionsFile) {
			if d.Kind == decisions.KindDecision {
				clients[d.ClientIP.String()]++
			}
			if d.Outcome == decisions.DenyListed {
				denied[d.ClientIP.String()]++
			}
		}
		want := map[string]int{"203.0.113.7": 5, "203.0.113.8": 5, "203.0.113.9": 1, "203.0.113.66": 1, "127.0.0.1": 1, // and the verifier's token request
			"203.0.113.77": len(spellings), "198.51.100.200": 1, "198.51.100.9": 1, "203.0.113.78": 1, netip.MustParseAddr(site.neighbour).String(): 1}
		for i := range 4 {
			want[netip.MustParseAddr(site.apart(i+1)).String()] = 1
		}
		if fmt.Sprint(clients) != fmt.Sprint(want) {
			t.Errorf("decisions by client_ip %v, want %v", clients, want)
		}
		wantDenied := map[string]int{"203.0.113.66": 1, "203.0.113.77": len(spellings), "198.51.100.200": 1, "198.51.100.9": 1}
		if fmt.Sprint(denied) != fmt.Sprint(wantDenied) {
			t.Errorf("deny_listed decisions by client_ip %v, want %v", denied, wantDenied)
		}
	})
}
