package tests

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
)

// TestLambdaAggregateIPv6Prefix: `lambda --aggregate` counts an IPv6
// client in its lists by the prefix its --config says the edges count it
// under (identity.ipv6_prefix), and by its /64 without one, as aggregate
// does. The event holds one request from each of 256 /64s of one /56:
// with ipv6_prefix 56 they are one client of 256 requests; without
// --config, 256 clients of one.
func TestLambdaAggregateIPv6Prefix(t *testing.T) {
	bin := buildBinary(t)
	_, ev := readKinesisEvent(t)
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	ds := allowed(t0, 256, time.Millisecond, func(i int) netip.Addr {
		return netip.MustParseAddr(fmt.Sprintf("2001:db8:1:2%02x::%x", i, i+1))
	})
	payload := oneRecordEvent(t, ev, ds)
	cfg56 := filepath.Join(t.TempDir(), "56.yaml")
	if err := os.WriteFile(cfg56, []byte("edge: {upstream: \"http://127.0.0.1:1\"}\nidentity: {ipv6_prefix: 56}\ntiers:\n  anonymous:\n    global: {limit: 120, window: 1m}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"--config", []string{"--config", cfg56}, "1 clients: 2001:db8:1:200::/56 256"},
		{"neither", nil, "256 clients: 2001:db8:1:200::/64 1"},
	} {
		partials := t.TempDir()
		f := startLambda(t, bin, append([]string{"--aggregate", "--partials", "dir:" + partials, "--ignore-time", "--top-k", "1000"}, c.args...)...)
		if fails := batchItemFailures(t, f.invoke(t, payload)); len(fails) != 0 {
			t.Fatalf("%s: batch item failures %v\n%s", c.name, fails, readFile(t, f.stderr))
		}
		ps := readPartials(t, partials, time.Minute)
		p := ps[t0]
		if len(ps) != 1 || p == nil {
			t.Fatalf("%s: %d windows, want one at %v", c.name, len(ps), t0)
		}
		top := p.Offenders.Requests.Top(1000)
		got := fmt.Sprintf("%d clients: %s %d", len(top), top[0].Client, top[0].Count-top[0].Err)
		if got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// oneRecordEvent returns an invocation's event of one record holding ds,
// in the envelope of ev's first record (a real one).
func oneRecordEvent(t *testing.T, ev events.KinesisEvent, ds []decisions.Decision) []byte {
	t.Helper()
	data, err := columnar.Encode([]byte{byte(columnar.CodecArrow)}, ds, columnar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := ev.Records[0]
	rec.Kinesis.Data = data
	payload, err := json.Marshal(events.KinesisEvent{Records: []events.KinesisEventRecord{rec}})
	if err != nil {
		t.Fatal(err)
	}
	return payload
}

// allowed returns n requests the edge allowed, from t0 on, step apart,
// request i from the address addr(i).
func allowed(t0 time.Time, n int, step time.Duration, addr func(i int) netip.Addr) []decisions.Decision {
	ds := make([]decisions.Decision, n)
	for i := range ds {
		ds[i] = decisions.Decision{Kind: decisions.KindDecision, Time: t0.Add(time.Duration(i) * step), Node: "edge-1",
			ClientIP: addr(i), Tier: "anonymous", Rule: "anonymous:global",
			Method: "GET", Host: "app.example", Path: "/", Outcome: decisions.Allow, Status: 200}
	}
	return ds
}
