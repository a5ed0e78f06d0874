package decisiontest

import (
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

var start = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

func TestDeterministic(t *testing.T) {
	a := NewGenerator(42, start).Batch(5000)
	g := NewGenerator(42, start)
	for i := range a {
		if b := g.Next(); a[i] != b {
			t.Fatalf("event %d differs between two generators of one seed:\n%s", i, Diff(b, a[i]))
		}
	}
	other := NewGenerator(43, start).Batch(100)
	same := 0
	for i := range other {
		if other[i].ClientIP == a[i].ClientIP {
			same++
		}
	}
	if same > 20 {
		t.Errorf("seeds 42 and 43 share %d of 100 addresses", same)
	}
}

// TestRealistic checks the shape of 200,000 events against the model in
// the package documentation.
func TestRealistic(t *testing.T) {
	const n = 200_000
	ds := NewGenerator(1, start).Batch(n)
	var (
		kinds    [3]int
		outcomes [decisions.NumOutcomes]int
		v6       int
		addrs    = map[netip.Addr]int{}
		users    = map[string]bool{}
		paths    = map[string]bool{}
		reasons  = map[string]bool{}
		nodes    = map[string]bool{}
		tiers    = map[string]int{}
		maxGap   time.Duration
	)
	ridRe := regexp.MustCompile(`^[0-9a-f]{12}-[0-9a-z]{4,}$`)
	rules := map[string]bool{}
	for i, d := range ds {
		kinds[d.Kind]++
		if i > 0 {
			gap := d.Time.Sub(ds[i-1].Time)
			if gap <= 0 {
				t.Fatalf("event %d: time %v not after %v", i, d.Time, ds[i-1].Time)
			}
			maxGap = max(maxGap, gap)
		}
		nodes[d.Node] = true
		reasons[d.Reason] = true
		if d.Kind == decisions.KindFeedback {
			if d.List == "" || d.Action == "" || d.Target == "" || (d.Action == "add") != (d.TTL > 0) {
				t.Errorf("event %d: feedback %+v", i, d)
			}
			continue
		}
		if d.Kind == decisions.KindDrops {
			if d.Dropped == 0 {
				t.Errorf("event %d: drop report of nothing", i)
			}
			continue
		}
		outcomes[d.Outcome]++
		if !ridRe.MatchString(d.RequestID) {
			t.Fatalf("event %d: request id %q", i, d.RequestID)
		}
		if !d.ClientIP.IsValid() {
			t.Fatalf("event %d: no client address", i)
		}
		if d.ClientIP.Is6() {
			v6++
		}
		addrs[d.ClientIP]++
		paths[d.Path] = true
		tiers[d.Tier]++
		if (d.Tier == "anonymous") != (d.UserID == "") {
			t.Fatalf("event %d: tier %q for user %q", i, d.Tier, d.UserID)
		}
		if d.UserID != "" {
			users[d.UserID] = true
		}
		if d.Rule != "" {
			rules[d.Rule] = true
			if !strings.HasPrefix(d.Rule, d.Tier+":") {
				t.Fatalf("event %d: rule %q in tier %q", i, d.Rule, d.Tier)
			}
			if (d.Algorithm == "concurrency") != (d.Window == 0) {
				t.Fatalf("event %d: %s with window %v", i, d.Algorithm, d.Window)
			}
		}
		if d.Outcome == decisions.Allow && d.Remaining != d.Limit-d.Count {
			t.Fatalf("event %d: allowed with count %d, limit %d, remaining %d", i, d.Count, d.Limit, d.Remaining)
		}
	}
	between := func(name string, got, lo, hi float64) {
		t.Helper()
		if got < lo || got > hi {
			t.Errorf("%s: %.4g, want %.4g to %.4g", name, got, lo, hi)
		}
	}
	between("feedback share", float64(kinds[decisions.KindFeedback])/n, 0.0005, 0.002)
	between("drop reports", float64(kinds[decisions.KindDrops]), 1, 40)
	between("allow share", float64(outcomes[decisions.Allow])/n, 0.85, 0.97)
	between("IPv6 share", float64(v6)/n, 0.05, 0.15)
	between("distinct addresses", float64(len(addrs)), 20_000, 100_000)
	between("distinct users", float64(len(users)), 3_000, 20_000)
	between("distinct paths", float64(len(paths)), 24, 600)
	between("distinct reasons", float64(len(reasons)), 5, 20)
	between("anonymous share", float64(tiers["anonymous"])/n, 0.55, 0.75)
	between("mean gap (µs)", float64(ds[n-1].Time.Sub(ds[0].Time).Microseconds())/n, 250, 450)
	for o := decisions.Allow; int(o) < decisions.NumOutcomes; o++ {
		if outcomes[o] == 0 {
			t.Errorf("no %v outcome in %d events", o, n)
		}
	}
	if len(nodes) != 5 { // three edge nodes, the aggregator, an operator
		t.Errorf("nodes %v", nodes)
	}
	for _, tier := range []string{"anonymous", "authenticated", "free", "pro"} {
		if tiers[tier] == 0 {
			t.Errorf("no %s tier", tier)
		}
	}
	for _, r := range []string{"anonymous:/api/reports", "pro:global", "free:/api/search", "authenticated:/api/export"} {
		if !rules[r] {
			t.Errorf("no rule %s", r)
		}
	}
	// Zipf: the busiest address makes a few percent of the traffic.
	top := 0
	for _, c := range addrs {
		top = max(top, c)
	}
	between("busiest address share", float64(top)/n, 0.005, 0.05)
}

func TestEqual(t *testing.T) {
	d := NewGenerator(1, start).Next()
	e := d
	e.Time = d.Time.In(time.FixedZone("X", 3600))
	if !Equal(d, e) || Diff(d, e) != "" {
		t.Errorf("the same instant in another zone: Equal false, diff %q", Diff(d, e))
	}
	e.Path += "x"
	e.Time = e.Time.Add(time.Nanosecond)
	diff := Diff(e, d)
	if Equal(d, e) || !strings.Contains(diff, "Path: got ") || !strings.Contains(diff, "Time: got ") {
		t.Errorf("different path and time: Equal %v, diff %q", Equal(d, e), diff)
	}
}

func TestEdgeCases(t *testing.T) {
	cases := EdgeCases()
	var kinds, outcomes, zeroAddr, v6, zoned int
	for _, d := range cases {
		if d.Kind != decisions.KindDecision {
			kinds++
		}
		if d.Outcome != decisions.Allow {
			outcomes++
		}
		switch {
		case !d.ClientIP.IsValid():
			zeroAddr++
		case d.ClientIP.Zone() != "":
			zoned++
		case d.ClientIP.Is6():
			v6++
		}
	}
	if kinds < 3 || outcomes < decisions.NumOutcomes || zeroAddr == 0 || v6 < 2 || zoned == 0 {
		t.Errorf("edge cases lack variety: %d other kinds, %d outcomes, %d zero, %d IPv6, %d zoned addresses", kinds, outcomes, zeroAddr, v6, zoned)
	}
}

func BenchmarkNext(b *testing.B) {
	g := NewGenerator(1, start)
	b.ReportAllocs()
	for b.Loop() {
		_ = g.Next()
	}
}

func TestBatches(t *testing.T) {
	f := func(name string, sizes []int, n int, lo, hi float64) {
		t.Helper()
		total := 0
		for _, s := range sizes {
			total += s
		}
		mean := float64(total) / float64(len(sizes))
		if total != n || mean < lo || mean > hi {
			t.Errorf("%s: %d decisions in %d batches, mean %.1f, want %d with a mean of %.1f to %.1f", name, total, len(sizes), mean, n, lo, hi)
		}
	}
	// 19 a second: about 1 + 19 × 5 in 5 s of linger; about 19 × 0.2,
	// and never none, in 200 ms ticks.
	f("linger", LingerBatches(100_000, 19, 5*time.Second, 1024, 1), 100_000, 90, 102)
	f("linger_max", LingerBatches(100_000, 19, time.Hour, 1024, 1), 100_000, 1000, 1024)
	f("ticks", TickBatches(100_000, 19, 200*time.Millisecond, 1), 100_000, 3.8, 4.6)
}
