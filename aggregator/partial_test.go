package aggregator

import (
	"bytes"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// TestDecodePartialV1: a partial of encoding version 1 (written by the
// aggregator before version 2, kept in testdata) still decodes, with the
// per-rule and challenge lists empty, and encodes again as version 2.
func TestDecodePartialV1(t *testing.T) {
	b, err := os.ReadFile("testdata/partial-v1.rwp")
	if err != nil {
		t.Fatal(err)
	}
	if b[len(partialMagic)] != 1 {
		t.Fatalf("testdata holds version %d", b[len(partialMagic)])
	}
	p, err := DecodePartial(b)
	if err != nil {
		t.Fatal(err)
	}
	if p.Events != 50 || p.Counts.Total() != 50 || p.Offenders.Requests.Len() != 7 {
		t.Errorf("events %d, counted %d, top requesters %d: want 50, 50, 7", p.Events, p.Counts.Total(), p.Offenders.Requests.Len())
	}
	if len(p.Clients.ByRule) != 0 || len(p.Offenders.RequestsByRule) != 0 || p.Offenders.Challenged.Len() != 0 {
		t.Error("a version 1 partial has per-rule or challenge lists")
	}
	again, err := p.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	if again[len(partialMagic)] != partialVersion {
		t.Errorf("re-encoded as version %d", again[len(partialMagic)])
	}
	q, err := DecodePartial(again)
	if err != nil {
		t.Fatal(err)
	}
	if q.Counts.Total() != 50 {
		t.Errorf("re-decoded counts %d", q.Counts.Total())
	}
	bad := bytes.Clone(again)
	bad[len(partialMagic)] = partialVersion + 1
	if _, err := DecodePartial(bad); err == nil {
		t.Error("a version from the future decoded")
	}
}

// TestPartialChallengeLists: challenges and token passes are counted per
// client, requests and distinct clients per rule; decisions without a rule
// (the lists) have no per-rule entry.
func TestPartialChallengeLists(t *testing.T) {
	p := NewPartial(t0, time.Minute, 10)
	a, b := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2")
	add := func(ip netip.Addr, rule string, o decisions.Outcome, n int) {
		for range n {
			p.Update(&decisions.Decision{Time: t0, Tier: "anonymous", Rule: rule, ClientIP: ip, Outcome: o})
		}
	}
	add(a, "anonymous:/api", decisions.Challenge, 5)
	add(b, "anonymous:/api", decisions.Challenge, 2)
	add(b, "anonymous:/api", decisions.TokenPass, 3)
	add(a, "", decisions.AllowListed, 4)
	enc, err := p.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	q, err := DecodePartial(enc)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		top  *TopK
		want []Hitter
	}{
		{"challenged", q.Offenders.Challenged, []Hitter{{Client: Client{Addr: a}, Count: 5}, {Client: Client{Addr: b}, Count: 2}}},
		{"token passed", q.Offenders.TokenPassed, []Hitter{{Client: Client{Addr: b}, Count: 3}}},
		{"rule requests", q.Offenders.RequestsByRule["anonymous:/api"], []Hitter{{Client: Client{Addr: a}, Count: 5}, {Client: Client{Addr: b}, Count: 5}}},
	} {
		if got := c.top.Top(10); !equalHitters(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if _, ok := q.Offenders.RequestsByRule[""]; ok {
		t.Error("the lists' decisions have a per-rule list")
	}
	if n := Estimate(q.Clients.ByRule["anonymous:/api"]); n != 2 {
		t.Errorf("distinct clients of the rule: %d, want 2", n)
	}
	if len(q.Clients.ByRule) != 1 {
		t.Errorf("distinct clients by rule: %d rules, want 1", len(q.Clients.ByRule))
	}
}

func equalHitters(a, b []Hitter) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
