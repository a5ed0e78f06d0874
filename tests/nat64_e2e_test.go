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
// site's own prefix that identity.nat64_prefixes names. Each is its own
// client, counted, listed, challenged and recorded as its IPv4 address,
// not as one /64 they would all share; a proxy of the site behind the
// translator is trusted by its IPv4 address. A deny entry written in the
// prefix, as an origin's log shows the client (by `ratewarden lists add`,
// or by hand in capitals), refuses that client however its address is
// spelt.
func TestEdgeNAT64Clients(t *testing.T) {
	t.Run("well-known", func(t *testing.T) { testEdgeNAT64Clients(t, "64:ff9b::", "") })
	t.Run("network-specific", func(t *testing.T) {
		testEdgeNAT64Clients(t, "2001:db8:64::", `  nat64_prefixes: ["2001:db8:64::/96"]`+"\n")
	})
}

func testEdgeNAT64Clients(t *testing.T, prefix, identityYAML string) {
	bin := buildBinary(t)
	eachServer(t, func(t *testing.T, server string) {
		origin := newRecordingOrigin(t)
		dir := t.TempDir()
		deny := filepath.Join(dir, "deny.txt")
		os.WriteFile(deny, []byte("203.0.113.66\n"+strings.ToUpper(prefix)+"198.51.100.0/120\n"), 0o600)
		cfgPath := seedTrusting(t, "[127.0.0.1, 10.0.0.0/8]", "\nlists:\n  deny_file: "+deny+"\n", "\nidentity:\n", "\nidentity:\n"+identityYAML)
		// 203.0.113.77 as the origin behind the translator logs it.
		out := runBinary(t, bin, []string{"USER=tester"}, "lists", "add", "--config", cfgPath, "--list", "deny", prefix+"cb00:714d")
		if note := "an edge with this configuration reads " + prefix + "cb00:714d as the IPv4 client 203.0.113.77"; identityYAML != "" && !strings.Contains(out, note) {
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
		for _, xff := range []string{prefix + "203.0.113.7", prefix + "203.0.113.8"} {
			for range 4 {
				statuses = append(statuses, export(xff))
			}
		}
		if got := fmt.Sprint(statuses); got != "[200 200 200 302 200 200 200 302]" {
			t.Errorf("two translated clients: %s, want [200 200 200 302 200 200 200 302]", got)
		}
		// The same client written as its IPv4 address is the same client.
		if s := export("203.0.113.7"); s != 302 {
			t.Errorf("203.0.113.7 after four exports as %s203.0.113.7: %d, want 302", prefix, s)
		}
		// A proxy of the site behind the translator (10.0.0.5) is trusted
		// by its IPv4 address: the client is the address before it.
		if s := export("203.0.113.9, " + prefix + "10.0.0.5"); s != 200 {
			t.Errorf("203.0.113.9 through %s10.0.0.5: %d, want 200", prefix, s)
		}
		// An address of the /64 outside the /96 is a plain IPv6 client, and
		// all of that /64 is one.
		for i := range 4 {
			want := 200
			if i == 3 {
				want = 302
			}
			if s := export(fmt.Sprintf("%s%x:cb00:710a", prefix, i+1)); s != want {
				t.Errorf("export %d from %s%x:cb00:710a: %d, want %d", i+1, prefix, i+1, s, want)
			}
		}
		// A token issued for the plain address passes the translated one.
		tok := issueToken(t, client, base, testVerifierSecret, "203.0.113.8")
		if s := export(prefix+"cb00:7108", "Cookie", tok.Cookie+"="+tok.Token); s != 200 {
			t.Errorf("token for 203.0.113.8, presented by %scb00:7108: %d, want 200", prefix, s)
		}
		// The deny list's IPv4 entry holds the translated address.
		if res := get(t, client, base+"/", "X-Forwarded-For", prefix+"203.0.113.66"); res.status != 403 {
			t.Errorf("deny-listed 203.0.113.66 as %s203.0.113.66: %d, want 403", prefix, res.status)
		}
		// The entries written in the prefix hold their client in every
		// spelling of its address, and nothing beside it.
		listed := netip.MustParseAddr(prefix + "cb00:714d")
		spellings := []string{"203.0.113.77", "::ffff:203.0.113.77", "::FFFF:CB00:714D", "64:ff9b::203.0.113.77", "64:FF9B::CB00:714D",
			prefix + "203.0.113.77", strings.ToUpper(listed.String()), listed.StringExpanded(), "[" + listed.String() + "]:4711"}
		for _, xff := range spellings {
			if res := get(t, client, base+"/", "X-Forwarded-For", xff); res.status != 403 {
				t.Errorf("deny-listed %s as %s: %d, want 403", listed, xff, res.status)
			}
		}
		for xff, want := range map[string]int{"198.51.100.200": 403, prefix + "198.51.100.9": 403, prefix + "cb00:714e": 200, prefix + "1:cb00:714d": 200} {
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
			"203.0.113.77": len(spellings), "198.51.100.200": 1, "198.51.100.9": 1, "203.0.113.78": 1, netip.MustParseAddr(prefix + "1:cb00:714d").String(): 1}
		for i := range 4 {
			want[netip.MustParseAddr(fmt.Sprintf("%s%x:cb00:710a", prefix, i+1)).String()] = 1
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
