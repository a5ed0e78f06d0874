package aggregator

import (
	"bytes"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// TestDecodePartialV1: a partial of encoding version 1 (written by the
// aggregator before version 2, kept in testdata) still decodes, with the
// per-rule and challenge lists empty, and encodes again as the current
// version.
func TestDecodePartialV1(t *testing.T) {
	p := decodeFixture(t, "testdata/partial-v1.rwp", 1)
	if p.Events != 50 || p.Counts.Total() != 50 || p.Offenders.Requests.Len() != 7 {
		t.Errorf("events %d, counted %d, top requesters %d: want 50, 50, 7", p.Events, p.Counts.Total(), p.Offenders.Requests.Len())
	}
	if len(p.Clients.ByRule) != 0 || len(p.Offenders.RequestsByRule) != 0 || p.Offenders.Challenged.Len() != 0 ||
		len(p.Offenders.RefusalsByTier) != 0 {
		t.Error("a version 1 partial has per-rule, per-tier refusal or challenge lists")
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

// TestDecodePartialV2: a partial of encoding version 2 (kept in testdata,
// of fixtureDecisions) still decodes to every aggregate the same events
// make now but the refusals by tier, which version 3 added; it merges with
// a partial of the current version into what two current partials merge
// into, but the refusals by tier, which only the current one holds.
func TestDecodePartialV2(t *testing.T) {
	old := decodeFixture(t, "testdata/partial-v2.rwp", 2)
	if len(old.Offenders.RefusalsByTier) != 0 {
		t.Error("a version 2 partial has refusals by tier")
	}
	roll := func() *Partial {
		p := NewPartial(t0, time.Hour, 4)
		for _, d := range fixtureDecisions() {
			p.Update(&d)
		}
		return p
	}
	now := roll()
	if len(now.Offenders.RefusalsByTier) != 2 || len(now.Offenders.RequestsByRule) == 0 || now.Offenders.Challenged.Len() == 0 {
		t.Fatalf("the fixture's decisions fill %d tiers of refusals, %d rules of requests, %d challenged",
			len(now.Offenders.RefusalsByTier), len(now.Offenders.RequestsByRule), now.Offenders.Challenged.Len())
	}
	withoutTierRefusals := func(p *Partial) []byte {
		q := *p
		o := *p.Offenders
		o.RefusalsByTier, o.TiersUnlisted = map[string]*TopK{}, nil
		q.Offenders = &o
		return encode(t, &q)
	}
	if got, want := withoutTierRefusals(old), withoutTierRefusals(now); !bytes.Equal(got, want) {
		t.Errorf("the version 2 partial decodes to %d bytes that differ from the same events' %d now", len(got), len(want))
	}

	// Old into new and new into old: the same partial.
	merged, twice := roll(), roll()
	if err := merged.Merge(old, false); err != nil {
		t.Fatal(err)
	}
	if err := twice.Merge(roll(), false); err != nil {
		t.Fatal(err)
	}
	if got, want := withoutTierRefusals(merged), withoutTierRefusals(twice); !bytes.Equal(got, want) {
		t.Error("a version 2 partial merged into a current one differs from two current ones merged")
	}
	if got, want := merged.Offenders.appendTopKs(nil, merged.Offenders.RefusalsByTier, false), now.Offenders.appendTopKs(nil, now.Offenders.RefusalsByTier, false); !bytes.Equal(got, want) {
		t.Error("merging a version 2 partial changed the refusals by tier")
	}
	again, err := DecodePartial(encode(t, old))
	if err != nil {
		t.Fatal(err)
	}
	// Its tiers that refused are unlisted, and stay so encoded again.
	want := map[string]bool{"anonymous": true, "authenticated": true}
	if !maps.Equal(old.Offenders.TiersUnlisted, want) || !maps.Equal(again.Offenders.TiersUnlisted, want) {
		t.Errorf("unlisted tiers %v, encoded and decoded again %v; want %v", old.Offenders.TiersUnlisted, again.Offenders.TiersUnlisted, want)
	}
	if err := again.Merge(now, false); err != nil {
		t.Fatal(err)
	}
	if got, want := encode(t, again), encode(t, merged); !bytes.Equal(got, want) {
		t.Error("new into old differs from old into new")
	}
}

// TestRestoreV2Partial: a Rollup snapshot taken before partial encoding
// version 3 (its open window's partial of version 2; the snapshot's own
// layout did not change) restores, and its window goes on counting and
// is emitted in the current version with the refusals by tier of the
// events added after the restore.
func TestRestoreV2Partial(t *testing.T) {
	ds := fixtureDecisions()
	r := NewRollup(Options{Window: time.Hour, TopK: 4})
	for i := range ds {
		r.Add(&ds[i], uint64(i))
	}
	snap, err := r.AppendSnapshot(nil)
	if err != nil {
		t.Fatal(err)
	}
	snap = snapshotV3(t, r, snap) // the last version without top-K filters
	// The same snapshot with the window's partial as version 2 wrote it.
	// A snapshot holds its lists in their own order (TopK's layout).
	v3, err := r.open[t0.UnixNano()].p.appendBinary(nil, true)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := os.ReadFile("testdata/partial-v2.rwp")
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(snap, appendBytes(nil, v3))
	if at < 0 || bytes.Count(snap, v3) != 1 {
		t.Fatal("the snapshot does not hold the window's partial once")
	}
	old := slices.Concat(snap[:at], appendBytes(nil, v2), snap[at+len(appendBytes(nil, v3)):])

	restored := NewRollup(Options{Window: time.Hour, TopK: 4})
	if err := restored.Restore(old); err != nil {
		t.Fatal(err)
	}
	more := decisions.Decision{Time: t0.Add(10 * time.Minute), Tier: "anonymous", Rule: "anonymous:/api",
		ClientIP: netip.MustParseAddr("192.0.2.9"), Outcome: decisions.Block}
	restored.Add(&more, uint64(len(ds)))
	var got []Output
	if err := restored.Flush(true, func(o Output) error { got = append(got, o); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Partial.Events != uint64(len(ds))+1 || got[0].From != 0 || got[0].To != uint64(len(ds)) {
		t.Fatalf("outputs %+v: want the window of %d events", got, len(ds)+1)
	}
	b := encode(t, got[0].Partial)
	if b[len(partialMagic)] != partialVersion {
		t.Errorf("emitted as version %d", b[len(partialMagic)])
	}
	tiers := got[0].Partial.Offenders.RefusalsByTier
	if len(tiers) != 1 || tiers["anonymous"].Top(10)[0].Count != 1 {
		t.Errorf("refusals by tier %v: want the one refusal added after the restore", tiers)
	}
	// The lists hold only the refusals after the restore: the tiers that
	// refused before it stay unlisted in the output, as stored.
	stored, err := DecodePartial(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]bool{"anonymous": true, "authenticated": true}; !maps.Equal(stored.Offenders.TiersUnlisted, want) {
		t.Errorf("the output's unlisted tiers %v, want %v", stored.Offenders.TiersUnlisted, want)
	}
}

// TestRefusalsByTier: the refusals by tier count the refused decisions of
// each tier only, whatever their rule (the lists' decisions too), and
// merge per tier.
func TestRefusalsByTier(t *testing.T) {
	a, b := netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("203.0.113.2")
	u := Client{User: "carol"}
	add := func(p *Partial, c Client, tier, rule string, o decisions.Outcome, n int) {
		for range n {
			p.Update(&decisions.Decision{Time: t0, Tier: tier, Rule: rule, ClientIP: c.Addr, UserID: c.User, Outcome: o})
		}
	}
	p, q := NewPartial(t0, time.Minute, 10), NewPartial(t0, time.Minute, 10)
	add(p, Client{Addr: a}, "anonymous", "anonymous:/api", decisions.Block, 4)
	add(p, Client{Addr: a}, "anonymous", "anonymous:/api", decisions.Allow, 9)
	add(p, Client{Addr: b}, "anonymous", "", decisions.DenyListed, 2)
	add(p, u, "authenticated", "authenticated:/api", decisions.Challenge, 3)
	add(q, u, "authenticated", "authenticated:/api", decisions.LocalLimit, 1)
	add(q, Client{Addr: b}, "anonymous", "anonymous:/api", decisions.ShadowBlock, 5) // passed: not refused
	add(q, Client{Addr: a}, "anonymous", "anonymous:/login", decisions.FailClosed, 1)
	if err := p.Merge(q, false); err != nil {
		t.Fatal(err)
	}
	r, err := DecodePartial(encode(t, p))
	if err != nil {
		t.Fatal(err)
	}
	for tier, want := range map[string][]Hitter{
		"anonymous":     {{Client: Client{Addr: a}, Count: 5}, {Client: Client{Addr: b}, Count: 2}},
		"authenticated": {{Client: u, Count: 4}},
	} {
		if got := r.Offenders.RefusalsByTier[tier].Top(10); !equalHitters(got, want) {
			t.Errorf("%s: %v, want %v", tier, got, want)
		}
	}
	if len(r.Offenders.RefusalsByTier) != 2 {
		t.Errorf("refusals in %d tiers, want 2", len(r.Offenders.RefusalsByTier))
	}
}

// TestDecodePartialV4: a partial of encoding version 4 (kept in testdata,
// of fixtureDecisions, written by the aggregator before version 5) holds
// the bytes of version 5 without the checksum, and decodes to the partial
// the same events make now; so does a version 5 encoding made version 4
// by hand (asV4).
func TestDecodePartialV4(t *testing.T) {
	old := decodeFixture(t, "testdata/partial-v4.rwp", 4)
	now := NewPartial(t0, time.Hour, 4)
	for _, d := range fixtureDecisions() {
		now.Update(&d)
	}
	want := encode(t, now)
	b, err := os.ReadFile("testdata/partial-v4.rwp")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(asV4(want), b) {
		t.Error("version 5 less its checksum differs from the version 4 fixture of the same events")
	}
	byHand, err := DecodePartial(asV4(want))
	if err != nil {
		t.Fatal(err)
	}
	if got := encode(t, old); !bytes.Equal(got, want) {
		t.Errorf("the version 4 fixture decodes to %d bytes differing from the same events' %d now", len(got), len(want))
	}
	if got := encode(t, byHand); !bytes.Equal(got, want) {
		t.Errorf("a version 4 encoding made by hand decodes to %d bytes differing from %d", len(got), len(want))
	}
}

// TestPartialChecksum: flipping any one bit of a version 5 partial makes
// it fail to decode, with a checksum mismatch past the magic and version;
// without the checksum (version 4) some of the same flips decode, as
// other figures.
func TestPartialChecksum(t *testing.T) {
	p := NewPartial(t0, time.Minute, 4)
	ds := fixtureDecisions()
	for i := range ds[:40] {
		p.Update(&ds[i])
	}
	b := encode(t, p)
	flipped := func(b []byte, bit int) []byte {
		c := bytes.Clone(b)
		c[bit/8] ^= 1 << (bit % 8)
		return c
	}
	header := 8 * (len(partialMagic) + 1)
	for bit := range header {
		if _, err := DecodePartial(flipped(b, bit)); err == nil {
			t.Errorf("bit %d (byte %d) flipped: decoded", bit, bit/8)
		}
	}
	for bit := header; bit < 8*len(b); bit++ {
		if _, err := DecodePartial(flipped(b, bit)); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
			t.Errorf("bit %d (byte %d of %d) flipped: %v, want a checksum mismatch", bit, bit/8, len(b), err)
		}
	}
	v4 := asV4(b)
	someDecode := func() bool {
		for bit := header; bit < 8*len(v4); bit++ {
			if _, err := DecodePartial(flipped(v4, bit)); err == nil {
				return true
			}
		}
		return false
	}
	if !someDecode() {
		t.Error("no flip of the partial's version 4 encoding decodes: the test tests nothing")
	}
}

// asV4 returns the partial b (version 6) as version 4 wrote it: as
// version 5 (asV5), without its checksum, its version byte 4.
func asV4(b []byte) []byte {
	v5 := asV5(b)
	c := bytes.Clone(v5[:len(v5)-sumLen])
	c[len(partialMagic)] = 4
	return c
}

// asV5 returns the partial b (version 6), whose lists hold no prefix
// (every Client.Bits 0), as version 5 wrote it: each client of a list
// without its prefix length, the checksum made again. It panics on bytes
// it cannot walk: a test's own encoding.
func asV5(b []byte) []byte {
	if b[len(partialMagic)] != 6 {
		panic(fmt.Sprintf("asV5 of a partial of version %d", b[len(partialMagic)]))
	}
	body := b[:len(b)-sumLen]
	r := &reader{b: body[len(partialMagic)+1:]}
	r.uvarint() // start
	r.uvarint() // length
	r.uvarint() // events
	var p Partial
	parts := p.parts()
	for _, a := range parts[:len(parts)-1] {
		if err := a.decode(r); err != nil {
			panic(err)
		}
	}
	out := bytes.Clone(body[:len(body)-len(r.b)])
	out[len(partialMagic)] = 5
	copyTo := func(rest []byte) { // the bytes read since rest
		out = append(out, rest[:len(rest)-len(r.b)]...)
	}
	list := func() {
		at := r.b
		r.uvarint() // k
		n := r.uvarint()
		copyTo(at)
		for range n {
			at = r.b
			r.string()
			r.bytes()
			copyTo(at)
			if bits := r.byte(); bits != 0 {
				panic(fmt.Sprintf("asV5 of a list holding a prefix of %d bits", bits))
			}
			at = r.b
			r.uvarint()
			r.uvarint()
			copyTo(at)
		}
	}
	lists := func() {
		at := r.b
		n := r.uvarint()
		copyTo(at)
		for range n {
			at = r.b
			r.string()
			copyTo(at)
			list()
		}
	}
	at := r.b
	r.uvarint() // the offenders' k
	copyTo(at)
	for _, f := range []func(){list, list, lists, lists, lists, list, list, lists} {
		f()
	}
	out = append(out, r.b...) // the unlisted tiers
	if r.err != nil {
		panic(r.err)
	}
	return appendSum(out, 0)
}

// eventsFlipped returns the encoded partial b (version 5) with the low bit
// of its event count flipped: bytes that version 4 would have read as a
// window of one event more or fewer.
func eventsFlipped(t testing.TB, b []byte) []byte {
	t.Helper()
	r := &reader{b: b[len(partialMagic)+1:]}
	r.uvarint() // start
	r.uvarint() // length
	c := bytes.Clone(b)
	c[len(b)-len(r.b)] ^= 1
	p, err := DecodePartial(b)
	if err != nil {
		t.Fatal(err)
	}
	if q, err := DecodePartial(asV4(c)); err != nil || q.Events != p.Events^1 {
		t.Fatalf("the flip is not a well-formed change of the events: %v", err)
	}
	return c
}

// decodeFixture decodes the partial of encoding version v in the file
// named name.
func decodeFixture(t *testing.T, name string, v byte) *Partial {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if b[len(partialMagic)] != v {
		t.Fatalf("%s holds version %d, want %d", name, b[len(partialMagic)], v)
	}
	p, err := DecodePartial(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
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

// fixtureDecisions are the decisions of testdata/partial-v2.rwp (a
// partial of top-K lists of 4 clients of them, encoding version 2): 240
// decisions of 12 clients (addresses and users) over two tiers, three
// rules and the lists, refused and challenged in turn.
func fixtureDecisions() []decisions.Decision {
	tiers := []string{"anonymous", "authenticated"}
	rules := []string{"anonymous:/api", "anonymous:/login", "global:burst", ""}
	outcomes := []decisions.Outcome{decisions.Allow, decisions.Block, decisions.Challenge,
		decisions.TokenPass, decisions.Allow, decisions.DenyListed, decisions.LocalLimit}
	ds := make([]decisions.Decision, 240)
	for i := range ds {
		d := decisions.Decision{Time: t0.Add(time.Duration(i) * time.Second), Kind: decisions.KindDecision,
			Tier: tiers[i%7%2], Rule: rules[i%5%4], Outcome: outcomes[i%11%7], Reason: "limit",
			Node: "edge-1", StoreLatency: time.Duration(1+i%13) * time.Millisecond}
		if c := i * i % 12; c < 8 {
			d.ClientIP = netip.AddrFrom4([4]byte{198, 51, 100, byte(c)})
		} else {
			d.UserID = "user-" + string(rune('a'+c))
		}
		ds[i] = d
	}
	return ds
}
