package assemble_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/config"
	"github.com/ratewarden/ratewarden/edge/lists"
)

// nat64Lists is listsEdgeConfig of a store of kind whose edge names
// prefixes as identity.nat64_prefixes.
func nat64Lists(t *testing.T, kind string, prefixes ...string) (*assemble.Edge, assemble.ListStore, *config.Config) {
	t.Helper()
	e, store, cfg := listsEdgeConfig(t, kind, filepath.Join(t.TempDir(), "log"), time.Hour, nil,
		func(c *config.Config) { c.Identity.NAT64Prefixes = prefixes })
	t.Cleanup(func() { e.Close(context.Background()) })
	return e, store, cfg
}

// sitePrefixes are the NAT64 prefixes of the site in these tests: two
// translators, so that one client has two NAT64 spellings besides its
// IPv4 one.
var sitePrefixes = []string{"2001:db8:64::/96", "2001:db8:46::/96"}

// listStates returns "target state" for each entry of list in store, in
// the order the store returns them.
func listStates(t *testing.T, store assemble.ListStore, list string) []string {
	t.Helper()
	es, err := store.Entries(context.Background(), list)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Target+" "+e.State(time.Now()))
	}
	slices.Sort(out)
	return out
}

// denied reports whether the edge refuses the client at addr after
// reading its deny list again.
func denied(t *testing.T, e *assemble.Edge, addr string) bool {
	t.Helper()
	if err := e.Lists[lists.Deny].Reload(); err != nil {
		t.Fatal(err)
	}
	return statusOf(e.Handler(), addr) == http.StatusForbidden
}

// TestListsRemoveThroughNAT64: `lists remove` of a client removes every
// entry that an edge with the configuration's identity.nat64_prefixes
// reads as that client, in whichever spelling it was stored and is typed
// (IPv4, a site's NAT64 prefix, the well-known prefix, IPv4-mapped, in
// capitals or written out), and says which stored spellings it removed:
// before, it removed the one spelling typed, reported success, and the
// edge went on refusing the client. An entry the edge reads as other
// clients (outside the prefixes, a prefix that holds the client, a /64
// that holds a translator's prefix) is not removed, and when nothing
// matches it says so as it always did.
func TestListsRemoveThroughNAT64(t *testing.T) {
	const client = "203.0.113.66:1"
	const (
		readAs64  = ": an edge with this configuration reads it as 203.0.113.66 (identity.nat64_prefixes)"
		notFound  = "remove 203.0.113.66 from deny: no such entry"
		notFound6 = "remove 2001:db8:64::cb00:7142 from deny: no such entry"
	)
	cases := []struct {
		name     string
		plain    bool     // the edge has no identity.nat64_prefixes
		stored   []string // deny entries put, in order
		gone     []string // of those, removed before the case
		target   string   // what `lists remove` is given
		out, err string   // what it prints, or the error it returns
		left     []string // what the list holds after, with states
		denied   bool     // whether the edge refuses 203.0.113.66 after
	}{{
		name:   "IPv4 removes the NAT64 spelling",
		stored: []string{"2001:db8:64::cb00:7142"}, target: "203.0.113.66",
		out:  "deny: remove 2001:db8:64::cb00:7142" + readAs64 + "\n",
		left: []string{"2001:db8:64::cb00:7142 removed"},
	}, {
		name:   "the NAT64 spelling removes IPv4",
		stored: []string{"203.0.113.66"}, target: "2001:db8:64::cb00:7142",
		out:  "deny: remove 203.0.113.66: an edge with this configuration reads 2001:db8:64::cb00:7142 as it (identity.nat64_prefixes)\n",
		left: []string{"203.0.113.66 removed"},
	}, {
		name:   "the well-known spelling in capitals removes every spelling",
		stored: []string{"2001:db8:46::203.0.113.66", "203.0.113.66", "2001:db8:64::cb00:7142"}, target: "64:FF9B::CB00:7142",
		out: "deny: remove 203.0.113.66\n" +
			"deny: remove 2001:db8:46::cb00:7142" + readAs64 + "\n" +
			"deny: remove 2001:db8:64::cb00:7142" + readAs64 + "\n",
		left: []string{"2001:db8:46::cb00:7142 removed", "2001:db8:64::cb00:7142 removed", "203.0.113.66 removed"},
	}, {
		name:   "IPv4-mapped in capitals",
		stored: []string{"2001:db8:64:0:0:0:cb00:7142"}, target: "::FFFF:203.0.113.66",
		out:  "deny: remove 2001:db8:64::cb00:7142" + readAs64 + "\n",
		left: []string{"2001:db8:64::cb00:7142 removed"},
	}, {
		name:   "a site prefix written out in capitals with a dotted tail",
		stored: []string{"203.0.113.66"}, target: "2001:DB8:46:0:0::203.0.113.66",
		out:  "deny: remove 203.0.113.66: an edge with this configuration reads 2001:db8:46::cb00:7142 as it (identity.nat64_prefixes)\n",
		left: []string{"203.0.113.66 removed"},
	}, {
		name:   "a prefix removes the NAT64 prefix of the same clients and not an address inside",
		stored: []string{"2001:db8:64::cb00:7100/120", "203.0.113.66"}, target: "203.0.113.0/24",
		out:  "deny: remove 2001:db8:64::cb00:7100/120: an edge with this configuration reads it as 203.0.113.0/24 (identity.nat64_prefixes)\n",
		left: []string{"2001:db8:64::cb00:7100/120 removed", "203.0.113.66 active"}, denied: true,
	}, {
		name:   "an address does not remove the prefix that holds it",
		stored: []string{"2001:db8:64::cb00:7100/120"}, target: "203.0.113.66",
		err:  notFound,
		left: []string{"2001:db8:64::cb00:7100/120 active"}, denied: true,
	}, {
		name:   "addresses outside the prefixes are other clients",
		stored: []string{"2001:db8:65::cb00:7142", "2001:db8:64:1::cb00:7142", "::cb00:7142", "2001:db8:64::/64"}, target: "203.0.113.66",
		err:  notFound,
		left: []string{"2001:db8:64:1::cb00:7142 active", "2001:db8:64::/64 active", "2001:db8:65::cb00:7142 active", "::cb00:7142 active"},
	}, {
		name:   "IPv4 removed and an address outside the prefixes kept",
		stored: []string{"2001:db8:65::cb00:7142", "203.0.113.66"}, target: "203.0.113.66",
		out:  "deny: remove 203.0.113.66\n",
		left: []string{"2001:db8:65::cb00:7142 active", "203.0.113.66 removed"},
	}, {
		name:   "a removed spelling is not removed again",
		stored: []string{"2001:db8:64::cb00:7142", "203.0.113.66"}, gone: []string{"2001:db8:64::cb00:7142"}, target: "203.0.113.66",
		out:  "deny: remove 203.0.113.66\n",
		left: []string{"2001:db8:64::cb00:7142 removed", "203.0.113.66 removed"},
	}, {
		name:   "nothing left to remove",
		stored: []string{"2001:db8:64::cb00:7142"}, gone: []string{"2001:db8:64::cb00:7142"}, target: "203.0.113.66",
		err:  notFound,
		left: []string{"2001:db8:64::cb00:7142 removed"},
	}, {
		name:  "without the setting the NAT64 spelling is another client",
		plain: true, stored: []string{"2001:db8:64::cb00:7142", "203.0.113.66"}, target: "2001:db8:64::cb00:7142",
		out:  "deny: remove 2001:db8:64::cb00:7142\n",
		left: []string{"2001:db8:64::cb00:7142 removed", "203.0.113.66 active"}, denied: true,
	}, {
		name:  "without the setting nothing is removed for another client",
		plain: true, stored: []string{"203.0.113.66"}, target: "2001:db8:64::cb00:7142",
		err:  notFound6,
		left: []string{"203.0.113.66 active"}, denied: true,
	}}
	for _, kind := range []string{"file", "table"} {
		for _, c := range cases {
			t.Run(kind+"/"+c.name, func(t *testing.T) {
				ctx := context.Background()
				prefixes := sitePrefixes
				if c.plain {
					prefixes = nil
				}
				e, store, cfg := nat64Lists(t, kind, prefixes...)
				for _, target := range c.stored {
					if err := store.Put(ctx, lists.Entry{List: lists.Deny, Target: target, By: "alice"}); err != nil {
						t.Fatal(err)
					}
				}
				for _, target := range c.gone {
					if err := store.Remove(ctx, lists.Deny, target, "alice", ""); err != nil {
						t.Fatal(err)
					}
				}
				var out strings.Builder
				err := assemble.ListsAction{Action: "remove", List: lists.Deny, Target: c.target, By: "bob"}.Run(ctx, cfg, nil, &out)
				if errText(err) != c.err || out.String() != c.out {
					t.Errorf("lists remove %s: printed %q, error %q; want %q, error %q", c.target, out.String(), errText(err), c.out, c.err)
				}
				if got := listStates(t, store, lists.Deny); !slices.Equal(got, c.left) {
					t.Errorf("after lists remove %s the list holds %q, want %q", c.target, got, c.left)
				}
				if got := denied(t, e, client); got != c.denied {
					t.Errorf("after lists remove %s the edge refuses 203.0.113.66: %v, want %v", c.target, got, c.denied)
				}
			})
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestListsApproveThroughNAT64: `lists approve` of a client approves the
// pending entry an edge with identity.nat64_prefixes reads as that client
// when the spelling typed is not stored (before, it said "no such entry"
// of a proposal the edge would apply to that client), and says which. The
// spelling typed, when stored, is approved as before; two other spellings
// pending are refused by name rather than both approved; an entry outside
// the prefixes is another client's.
func TestListsApproveThroughNAT64(t *testing.T) {
	cases := []struct {
		name     string
		pending  []string // deny entries proposed, in order
		active   []string // deny entries that apply
		target   string   // what `lists approve` is given
		out, err string   // what it prints, or the error it returns
		left     []string // what the list holds after, with states
		denied   bool     // whether the edge refuses 203.0.113.66 after
	}{{
		name:    "IPv4 approves the NAT64 spelling",
		pending: []string{"2001:db8:64::cb00:7142"}, target: "203.0.113.66",
		out:  "deny: approve 2001:db8:64::cb00:7142: an edge with this configuration reads it as 203.0.113.66 (identity.nat64_prefixes)\n",
		left: []string{"2001:db8:64::cb00:7142 active"}, denied: true,
	}, {
		name:    "IPv4-mapped approves the NAT64 spelling",
		pending: []string{"2001:db8:64::cb00:7142"}, target: "::ffff:cb00:7142",
		out:  "deny: approve 2001:db8:64::cb00:7142: an edge with this configuration reads it as 203.0.113.66 (identity.nat64_prefixes)\n",
		left: []string{"2001:db8:64::cb00:7142 active"}, denied: true,
	}, {
		name:    "a NAT64 spelling approves IPv4",
		pending: []string{"203.0.113.66"}, target: "2001:DB8:46::CB00:7142",
		out:  "deny: approve 203.0.113.66: an edge with this configuration reads 2001:db8:46::cb00:7142 as it (identity.nat64_prefixes)\n",
		left: []string{"203.0.113.66 active"}, denied: true,
	}, {
		name:    "the spelling typed is approved alone",
		pending: []string{"2001:db8:64::cb00:7142", "203.0.113.66"}, target: "203.0.113.66",
		out:  "deny: approve 203.0.113.66\n",
		left: []string{"2001:db8:64::cb00:7142 pending", "203.0.113.66 active"}, denied: true,
	}, {
		name:    "two other spellings are refused by name",
		pending: []string{"2001:db8:64::cb00:7142", "2001:db8:46::cb00:7142"}, target: "203.0.113.66",
		err:  "approve 203.0.113.66 on deny: an edge with this configuration reads 2 pending entries as it (identity.nat64_prefixes): 2001:db8:46::cb00:7142, 2001:db8:64::cb00:7142; approve one by its target as stored",
		left: []string{"2001:db8:46::cb00:7142 pending", "2001:db8:64::cb00:7142 pending"},
	}, {
		name:   "an applying spelling typed is not pending as before",
		active: []string{"203.0.113.66"}, pending: []string{"2001:db8:64::cb00:7142"}, target: "203.0.113.66",
		err:  "approve 203.0.113.66 on deny: entry is not pending",
		left: []string{"2001:db8:64::cb00:7142 pending", "203.0.113.66 active"}, denied: true,
	}, {
		name:    "outside the prefixes is another client",
		pending: []string{"2001:db8:65::cb00:7142", "2001:db8:64::/64"}, target: "203.0.113.66",
		err:  "approve 203.0.113.66 on deny: no such entry",
		left: []string{"2001:db8:64::/64 pending", "2001:db8:65::cb00:7142 pending"},
	}}
	for _, kind := range []string{"file", "table"} {
		for _, c := range cases {
			t.Run(kind+"/"+c.name, func(t *testing.T) {
				ctx := context.Background()
				e, store, cfg := nat64Lists(t, kind, sitePrefixes...)
				for _, target := range c.active {
					if err := store.Put(ctx, lists.Entry{List: lists.Deny, Target: target, By: "alice"}); err != nil {
						t.Fatal(err)
					}
				}
				for _, target := range c.pending {
					if err := store.Put(ctx, lists.Entry{List: lists.Deny, Target: target, By: "policy:p", Pending: true}); err != nil {
						t.Fatal(err)
					}
				}
				var out strings.Builder
				err := assemble.ListsAction{Action: "approve", List: lists.Deny, Target: c.target, By: "bob"}.Run(ctx, cfg, nil, &out)
				if errText(err) != c.err || out.String() != c.out {
					t.Errorf("lists approve %s: printed %q, error %q; want %q, error %q", c.target, out.String(), errText(err), c.out, c.err)
				}
				if got := listStates(t, store, lists.Deny); !slices.Equal(got, c.left) {
					t.Errorf("after lists approve %s the list holds %q, want %q", c.target, got, c.left)
				}
				if got := denied(t, e, "203.0.113.66:1"); got != c.denied {
					t.Errorf("after lists approve %s the edge refuses 203.0.113.66: %v, want %v", c.target, got, c.denied)
				}
			})
		}
	}
}

// TestListsShowThroughNAT64: `lists show` says how an edge with
// identity.nat64_prefixes reads an entry stored in one of them (the IPv4
// client or prefix it carries), in the table and in --json; an entry
// outside them, or one the edge reads as written, has none. In --json, a
// reason's format characters (a bidirectional override that reorders
// what a terminal or a browser shows, a line separator) are escapes, as
// they are in the table: before, encoding/json wrote U+202E raw.
func TestListsShowThroughNAT64(t *testing.T) {
	for _, kind := range []string{"file", "table"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			_, store, cfg := nat64Lists(t, kind, sitePrefixes...)
			const reason = "alert heavy_hitter/anonymous:global/user:\u202etsinimda\u2028x\u200b\U000e0041"
			for _, e := range []lists.Entry{
				{List: lists.Deny, Target: "2001:db8:64::cb00:7142", By: "policy:\u202eevil", Reason: reason},
				{List: lists.Deny, Target: "2001:db8:46::198.51.100.0/120", By: "alice"},
				{List: lists.Deny, Target: "2001:db8:65::cb00:7142", By: "alice"},
				{List: lists.Deny, Target: "203.0.113.7", By: "alice"},
			} {
				if err := store.Put(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			show := func(asJSON bool) string {
				var out strings.Builder
				if err := (assemble.ListsAction{Action: "show", List: lists.Deny, JSON: asJSON}).Run(ctx, cfg, nil, &out); err != nil {
					t.Fatal(err)
				}
				return out.String()
			}

			table := show(false)
			readAs := map[string]string{}
			for i, line := range strings.Split(strings.TrimSpace(table), "\n") {
				f := strings.Fields(line)
				if i == 0 {
					if len(f) < 3 || f[1] != "TARGET" || f[2]+" "+f[3] != "READ AS" {
						t.Fatalf("lists show header %q, want LIST TARGET READ AS ...", line)
					}
					continue
				}
				readAs[f[1]] = f[2]
			}
			want := map[string]string{"2001:db8:64::cb00:7142": "203.0.113.66", "2001:db8:46::c633:6400/120": "198.51.100.0/24",
				"2001:db8:65::cb00:7142": "-", "203.0.113.7": "-"}
			if len(readAs) != len(want) {
				t.Errorf("lists show:\n%s\nwant READ AS %v", table, want)
			}
			for target, as := range want {
				if readAs[target] != as {
					t.Errorf("lists show: %s read as %q, want %q:\n%s", target, readAs[target], as, table)
				}
			}

			js := show(true)
			if strings.ContainsFunc(js, func(r rune) bool { return r > 0x7e }) {
				t.Errorf("lists show --json holds characters that are not ASCII:\n%s", js)
			}
			for _, esc := range []string{`\u202e`, `\u2028`, `\u200b`, `\udb40\udc41`} {
				if !strings.Contains(js, esc) {
					t.Errorf("lists show --json does not escape %s:\n%s", esc, js)
				}
			}
			var got []struct {
				Target string `json:"target"`
				ReadAs string `json:"read_as"`
				State  string `json:"state"`
				By     string `json:"by"`
				Reason string `json:"reason"`
			}
			if err := json.Unmarshal([]byte(js), &got); err != nil {
				t.Fatalf("lists show --json: %v\n%s", err, js)
			}
			n := 0
			for _, e := range got {
				if e.ReadAs != strings.ReplaceAll(want[e.Target], "-", "") || e.State != "active" {
					t.Errorf("lists show --json: %s read_as %q state %q, want %q active", e.Target, e.ReadAs, e.State, want[e.Target])
				}
				if e.Target == "2001:db8:64::cb00:7142" && (e.Reason != reason || e.By != "policy:\u202eevil") {
					t.Errorf("lists show --json: reason %q by %q, want %q by %q", e.Reason, e.By, reason, "policy:\u202eevil")
				}
				n++
			}
			if n != len(want) {
				t.Errorf("lists show --json: %d entries, want %d", n, len(want))
			}
		})
	}
}
