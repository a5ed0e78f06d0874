package aggregator

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
)

// v6FixtureDecisions are the decisions of testdata/partial-v5.rwp: a
// client rotating over 400 addresses of 2001:db8:1:2::/64, its
// neighbour /64 with one address, IPv4 clients, an IPv4-mapped and a
// zoned IPv6 address, and a user, in one minute.
func v6FixtureDecisions() []decisions.Decision {
	var ds []decisions.Decision
	add := func(i int, ip, user string, oc decisions.Outcome) {
		d := decisions.Decision{Time: t0.Add(time.Duration(i) * 100 * time.Millisecond), Kind: decisions.KindDecision,
			Tier: "anonymous", Rule: "anonymous:global", Outcome: oc, Reason: "limit", Node: "edge-1", UserID: user}
		if ip != "" {
			d.ClientIP = netip.MustParseAddr(ip)
		}
		ds = append(ds, d)
	}
	for i := range 400 {
		oc := decisions.Allow
		if i%2 == 1 {
			oc = decisions.Block
		}
		add(i, fmt.Sprintf("2001:db8:1:2::%x", i+1), "", oc)
		if i%10 == 0 {
			add(i, "2001:db8:1:3::1", "", decisions.Allow)
			add(i, fmt.Sprintf("198.51.100.%d", i/10), "", decisions.Allow)
			add(i, "::ffff:198.51.100.200", "", decisions.Challenge)
			add(i, "fe80::1%eth0", "", decisions.Allow)
			add(i, "", "u1", decisions.Allow)
		}
	}
	return ds
}

// rollV6 rolls ds (one window of a minute from t0) up with o, event by
// event (Rollup.Add) or through record batches (AddBatch), and returns
// the window's partial, checking the two make the same bytes.
func rollV6(t *testing.T, ds []decisions.Decision, o Options) *Partial {
	t.Helper()
	o.Window = time.Minute
	roll := func(columns bool) *Partial {
		r := NewRollup(o)
		addAll(t, r, ds, columns, 97, 1000)
		var out *Partial
		if err := r.Flush(true, func(o Output) error {
			if out != nil {
				return fmt.Errorf("a second window at %v", o.Partial.Start)
			}
			out = o.Partial
			return nil
		}); err != nil || out == nil {
			t.Fatalf("flush: %v, partial %v", err, out)
		}
		return out
	}
	p, q := roll(false), roll(true)
	if !bytes.Equal(encode(t, p), encode(t, q)) {
		t.Errorf("IPv6 prefix %d: the columnar path's partial differs from the per-event one", o.IPv6Prefix)
	}
	return p
}

// topOf returns the n heaviest clients of tk as "client count-err".
func topOf(tk *TopK, n int) []string {
	var out []string
	for _, h := range tk.Top(n) {
		out = append(out, fmt.Sprintf("%s %d", h.Client, h.Count-h.Err))
	}
	return out
}

// TestIPv6ClientByPrefix: a scraper that takes a new address of its /64
// for each of its 400 requests, among 300 IPv4 clients of 3 requests
// each, is counted as the edge counts it (identity.ipv6_prefix, 64 by
// default): one client, 2001:db8:1:2::/64, the heaviest of every list it
// is in, with its 400 requests and 200 refusals; the distinct clients
// count it once. Before, each address was a client of one request that
// never entered a full list of 100, and the distinct clients were 700.
// An IPv4 client stays its address.
func TestIPv6ClientByPrefix(t *testing.T) {
	var ds []decisions.Decision
	for i := range 400 {
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		oc := decisions.Allow
		if i%2 == 1 {
			oc = decisions.Block
		}
		a := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2, 8: byte(i >> 8), 9: byte(i), 15: byte(i * 7)})
		ds = append(ds, decisions.Decision{Time: at, Kind: decisions.KindDecision, Tier: "anonymous", Rule: "anonymous:global", ClientIP: a, Outcome: oc})
		if i < 300 {
			for range 3 {
				ds = append(ds, decisions.Decision{Time: at, Kind: decisions.KindDecision, Tier: "anonymous", Rule: "anonymous:global",
					ClientIP: netip.AddrFrom4([4]byte{198, 51, byte(100 + i/200), byte(i)}), Outcome: decisions.Allow})
			}
		}
		if i%4 == 0 {
			ds = append(ds, decisions.Decision{Time: at, Kind: decisions.KindDecision, Tier: "anonymous", Rule: "anonymous:global",
				ClientIP: netip.MustParseAddr("203.0.113.7"), Outcome: decisions.Block})
		}
	}
	p := rollV6(t, ds, Options{TopK: 100})
	o := p.Offenders
	for _, c := range []struct {
		name string
		tk   *TopK
		want string
	}{
		{"requests", o.Requests, "[2001:db8:1:2::/64 400 203.0.113.7 100]"},
		{"requests by rule", o.RequestsByRule["anonymous:global"], "[2001:db8:1:2::/64 400 203.0.113.7 100]"},
		{"refusals", o.Refusals, "[2001:db8:1:2::/64 200 203.0.113.7 100]"},
		{"refusals by rule", o.RefusalsByRule["anonymous:global"], "[2001:db8:1:2::/64 200 203.0.113.7 100]"},
	} {
		if got := fmt.Sprint(topOf(c.tk, 2)); got != c.want {
			t.Errorf("%s: heaviest %s, want %s", c.name, got, c.want)
		}
	}
	if n := Estimate(p.Clients.All); n < 290 || n > 315 {
		t.Errorf("distinct clients %d, want about 302: the /64, 300 IPv4 clients and 203.0.113.7", n)
	}
	if n := Estimate(p.Clients.Refused); n != 2 {
		t.Errorf("distinct refused clients %d, want 2", n)
	}
}

// TestIPv6PrefixConfigured: the prefix an IPv6 client is counted under is
// Options.IPv6Prefix (the edges' identity.ipv6_prefix): a client moving
// over the /64s of its /56 is one client at 56 and one per /64 at 64 (as
// the edge counts them), and 128 counts each address. An IPv4-mapped
// address stays its own client; a zone goes with the address's prefix.
func TestIPv6PrefixConfigured(t *testing.T) {
	var ds []decisions.Decision
	add := func(i int, ip string) {
		ds = append(ds, decisions.Decision{Time: t0.Add(time.Duration(i) * 10 * time.Millisecond), Kind: decisions.KindDecision,
			Tier: "anonymous", Rule: "anonymous:global", ClientIP: netip.MustParseAddr(ip), Outcome: decisions.Block})
	}
	for i := range 1024 {
		add(i, fmt.Sprintf("2001:db8:1:2%02x:%x::1", i%4, i)) // four /64s of 2001:db8:1:200::/56
		if i%16 == 0 {
			add(i, "::ffff:198.51.100.9")
			add(i, "fe80::1%eth0")
			add(i, "198.51.100.10")
		}
	}
	for _, c := range []struct {
		prefix int
		want   string
	}{
		{0, "[2001:db8:1:200::/64 256 2001:db8:1:201::/64 256 2001:db8:1:202::/64 256 2001:db8:1:203::/64 256 198.51.100.10 64 ::ffff:198.51.100.9 64 fe80::/64 64]"},
		{64, "[2001:db8:1:200::/64 256 2001:db8:1:201::/64 256 2001:db8:1:202::/64 256 2001:db8:1:203::/64 256 198.51.100.10 64 ::ffff:198.51.100.9 64 fe80::/64 64]"},
		{56, "[2001:db8:1:200::/56 1024 198.51.100.10 64 ::ffff:198.51.100.9 64 fe80::/56 64]"},
		{128, "198.51.100.10 64 ::ffff:198.51.100.9 64 fe80::1%eth0 64"},
	} {
		p := rollV6(t, ds, Options{TopK: 2000, IPv6Prefix: c.prefix})
		got := fmt.Sprint(topOf(p.Offenders.Refusals, 7))
		if c.prefix == 128 {
			if all := topOf(p.Offenders.Refusals, 2000); len(all) != 1027 || !strings.HasPrefix(fmt.Sprint(all), "["+c.want) {
				t.Errorf("prefix 128: %d clients %.200s, want the 1,024 addresses after %s", len(all), fmt.Sprint(all), c.want)
			}
			continue
		}
		if got != c.want {
			t.Errorf("prefix %d: refusals %s, want %s", c.prefix, got, c.want)
		}
	}
}

// TestDecodePartialV5: a partial of encoding version 5 (kept in testdata,
// of v6FixtureDecisions, written by the aggregator before version 6, each
// IPv6 address its own client) decodes with its IPv6 clients as the
// addresses it listed, and encodes to version 6 bytes that asV5 makes the
// fixture's again: nothing of it is lost or changed.
func TestDecodePartialV5(t *testing.T) {
	p := decodeFixture(t, "testdata/partial-v5.rwp", 5)
	b, err := os.ReadFile("testdata/partial-v5.rwp")
	if err != nil {
		t.Fatal(err)
	}
	if got := asV5(encode(t, p)); !bytes.Equal(got, b) {
		t.Errorf("the version 5 fixture re-encoded and made version 5 again: %d bytes differing from its %d", len(got), len(b))
	}
	want := "[::ffff:198.51.100.200 40 2001:db8:1:3::1 40 fe80::1%eth0 40 user:u1 40 198.51.100.39 1 2001:db8:1:2::18f 1 2001:db8:1:2::190 1 2001:db8:1:2::17f 1]"
	if got := fmt.Sprint(topOf(p.Offenders.Requests, 8)); got != want {
		t.Errorf("the fixture's requests %s, want %s", got, want)
	}
	// The same events now: the rotating client is one /64, at the top.
	now := NewPartial(t0, time.Minute, 8)
	for _, d := range v6FixtureDecisions() {
		now.Update(&d)
	}
	if got := topOf(now.Offenders.Requests, 1); fmt.Sprint(got) != "[2001:db8:1:2::/64 400]" {
		t.Errorf("the fixture's events now: heaviest %v, want 2001:db8:1:2::/64 with 400", got)
	}
}

// TestDecodeRefusesBadPrefix: a list's client with a prefix length is an
// IPv6 prefix's first address, nothing else; a partial that says
// otherwise is refused, not read as some other client.
func TestDecodeRefusesBadPrefix(t *testing.T) {
	for _, c := range []Client{
		{Addr: netip.MustParseAddr("2001:db8:1:2::1"), Bits: 64},
		{Addr: netip.MustParseAddr("198.51.100.1"), Bits: 24},
		{Addr: netip.MustParseAddr("::ffff:198.51.100.0"), Bits: 120},
		{Addr: netip.MustParseAddr("2001:db8::"), Bits: 128},
		{Addr: netip.MustParseAddr("2001:db8::"), Bits: 200},
		{User: "u1", Bits: 64},
	} {
		p := NewPartial(t0, time.Minute, 4)
		p.Offenders.Challenged.Add(c, 1)
		if _, err := DecodePartial(encode(t, p)); err == nil {
			t.Errorf("%+v: decoded", c)
		}
	}
	p := NewPartial(t0, time.Minute, 4)
	p.Offenders.Challenged.Add(Client{Addr: netip.MustParseAddr("2001:db8:1::"), Bits: 48}, 1)
	if q, err := DecodePartial(encode(t, p)); err != nil || fmt.Sprint(topOf(q.Offenders.Challenged, 1)) != "[2001:db8:1::/48 1]" {
		t.Errorf("a /48: %v, %v", q, err)
	}
}

// TestRestoredWindowKeepsPrefix: a window restored from a snapshot counts
// its events to come by the configured prefix, as before the restart.
func TestRestoredWindowKeepsPrefix(t *testing.T) {
	o := Options{Window: time.Minute, IPv6Prefix: 56}
	d := func(i int) decisions.Decision {
		return decisions.Decision{Time: t0.Add(time.Duration(i) * time.Second), Kind: decisions.KindDecision, Tier: "anonymous",
			Rule: "anonymous:global", ClientIP: netip.MustParseAddr(fmt.Sprintf("2001:db8:1:2%02x::%x", i, i)), Outcome: decisions.Block}
	}
	r := NewRollup(o)
	for i := range 10 {
		ev := d(i)
		r.Add(&ev, uint64(i))
	}
	r = restarted(t, r)
	for i := 10; i < 20; i++ {
		ev := d(i)
		r.Add(&ev, uint64(i))
	}
	var got []string
	if err := r.Flush(true, func(out Output) error {
		got = append(got, topOf(out.Partial.Offenders.Refusals, 5)...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[2001:db8:1:200::/56 20]" {
		t.Errorf("refusals %v, want 2001:db8:1:200::/56 with all 20", got)
	}
}

// BenchmarkAddrClient: the cost of counting an IPv6 client by its /64,
// once per row of a batch that identify makes a client of (the rest of
// a row's cost: BenchmarkColumnsPartialWindows).
func BenchmarkAddrClient(b *testing.B) {
	addrs := make([]netip.Addr, 1024)
	for i := range addrs {
		addrs[i] = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 8: byte(i >> 8), 9: byte(i), 15: byte(i * 7)})
	}
	for _, bits := range []int{64, 128} {
		b.Run(fmt.Sprint(bits), func(b *testing.B) {
			b.ReportAllocs()
			var c Client
			for i := 0; b.Loop(); i++ {
				c = AddrClient(addrs[i&1023], bits)
			}
			_ = c
		})
	}
}

// addAll adds ds to r, numbered from 0: through record batches of sizes
// in turn (AddBatch) with columns, else event by event (Add).
func addAll(t *testing.T, r *Rollup, ds []decisions.Decision, columns bool, sizes ...int) {
	t.Helper()
	if !columns {
		for i := range ds {
			r.Add(&ds[i], uint64(i))
		}
		return
	}
	dec := columnar.NewDecoder()
	var seq uint64
	for _, data := range encodeBatches(t, ds, sizes...) {
		if err := dec.DecodeColumns(data, func(c *columnar.Columns) error {
			r.AddBatch(c, seq)
			seq += uint64(c.Len)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}
