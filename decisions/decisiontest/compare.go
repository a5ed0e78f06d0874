package decisiontest

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// Equal reports whether a and b are the same event: every field equal,
// with times compared as instants (time.Time.Equal), so that a codec that
// normalises times to UTC or drops the monotonic reading still compares
// equal. Plain == also compares locations and monotonic readings.
func Equal(a, b decisions.Decision) bool {
	if !a.Time.Equal(b.Time) {
		return false
	}
	a.Time, b.Time = time.Time{}, time.Time{}
	return a == b
}

// Diff describes how got differs from want, one field per line as
// "Field: got …, want …", or returns "" when Equal(got, want).
func Diff(got, want decisions.Decision) string {
	if Equal(got, want) {
		return ""
	}
	var b strings.Builder
	if !got.Time.Equal(want.Time) {
		fmt.Fprintf(&b, "Time: got %s, want %s\n", got.Time.Format(time.RFC3339Nano), want.Time.Format(time.RFC3339Nano))
	}
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range gv.NumField() {
		name := gv.Type().Field(i).Name
		if name == "Time" {
			continue
		}
		g, w := gv.Field(i).Interface(), wv.Field(i).Interface()
		if g != w {
			fmt.Fprintf(&b, "%s: got %s, want %s\n", name, show(g), show(w))
		}
	}
	return b.String()
}

func show(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("%q", v)
	case netip.Addr:
		if !v.IsValid() {
			return "invalid Addr"
		}
		return v.String()
	}
	return fmt.Sprintf("%v", v)
}

// EdgeCases returns hand-built events that codecs get wrong: zero values,
// every kind and outcome (including an unknown one), IPv4, IPv6,
// IPv4-mapped IPv6 and zoned addresses, the unspecified addresses, times
// out of UTC, before 1970 and far from now, extreme numbers, and strings
// that are empty, long, or not UTF-8. Codecs that cannot keep a value
// exactly (JSON replaces invalid UTF-8, for one) say so in their tests.
func EdgeCases() []decisions.Decision {
	t0 := time.Date(2026, 11, 30, 3, 0, 1, 123456789, time.UTC)
	full := decisions.Decision{
		Time: t0, RequestID: "3f9a1c2b7d4e-1a2b", Node: "edge-fra-1",
		ClientIP: netip.MustParseAddr("203.0.113.7"), UserID: "u_1", Plan: "pro", Tier: "pro",
		IdentitySource: decisions.SourceJWT, Method: "GET", Host: "api.example.com", Path: "/api/reports",
		Rule: "pro:/api/reports", Algorithm: "fixed_window", Limit: 30, Window: time.Minute, Count: 31,
		Remaining: 0, Reset: 42 * time.Second, Outcome: decisions.Challenge, Reason: "over the limit",
		StoreLatency: 1500 * time.Microsecond, Privacy: "keep/keep",
		Status: 200, UpstreamLatency: 23*time.Millisecond + 7,
	}
	with := func(f func(d *decisions.Decision)) decisions.Decision {
		d := full
		f(&d)
		return d
	}
	paris := time.FixedZone("CET", 3600)
	out := []decisions.Decision{
		{}, // the zero value: zero time, invalid address, outcome 0
		{Time: t0},
		full,
		with(func(d *decisions.Decision) { d.ClientIP = netip.MustParseAddr("2001:db8::7") }),
		with(func(d *decisions.Decision) { d.ClientIP = netip.MustParseAddr("::ffff:203.0.113.7") }),
		with(func(d *decisions.Decision) { d.ClientIP = netip.MustParseAddr("fe80::1%eth0") }),
		with(func(d *decisions.Decision) { d.ClientIP = netip.MustParseAddr("0.0.0.0") }),
		with(func(d *decisions.Decision) { d.ClientIP = netip.MustParseAddr("::") }),
		with(func(d *decisions.Decision) { d.Time = t0.In(paris) }),
		with(func(d *decisions.Decision) { d.Time = time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC) }),
		with(func(d *decisions.Decision) { d.Time = time.Date(2262, 4, 11, 0, 0, 0, 0, time.UTC) }),
		with(func(d *decisions.Decision) { d.Time = time.Date(1677, 9, 22, 0, 0, 0, 0, time.UTC) }),
		with(func(d *decisions.Decision) {
			d.Limit, d.Count, d.Remaining = 1<<63-1, -1<<63, 1
			d.Window, d.Reset, d.StoreLatency = 1<<63-1, -1, -1<<63
			d.Status, d.UpstreamLatency = -1<<31, 1<<63-1
		}),
		with(func(d *decisions.Decision) {
			d.Status, d.UpstreamLatency, d.ResponseError = 504, 30*time.Second, decisions.UpstreamTimeout
		}),
		with(func(d *decisions.Decision) { d.Status, d.ResponseError = 0, decisions.ClientClosed }),
		with(func(d *decisions.Decision) {
			d.Path = "/" + strings.Repeat("long/", 20_000)
			d.UserID = strings.Repeat("ü", decisions.MaxUserIDLen/2) // the longest readers believe
			d.Host = strings.Repeat("h", 70_000)
		}),
		with(func(d *decisions.Decision) {
			d.Path = "/api/reports/\x01\xff\xfe"
			d.UserID = "u_\"abc\"\n\x00"
			d.Reason = "\xc3\x28 not utf-8"
			d.RequestID = "\xff"
		}),
		{Kind: decisions.KindFeedback, Time: t0, Node: "aggregator-1", Reason: "scraper alert", List: "challenge", Action: "add", Target: "203.0.113.0/24", TTL: 30 * time.Minute},
		{Kind: decisions.KindFeedback, Time: t0, Node: "operator", Reason: "expired", List: "deny", Action: "remove", Target: "user:u_1"},
		{Kind: decisions.KindDrops, Time: t0, Node: "edge-fra-1", Reason: "decision queue full", Dropped: decisions.MaxDropped}, // the most readers believe
		{Kind: 200, Time: t0, Outcome: 250}, // from a newer writer
	}
	for o := decisions.Outcome(0); int(o) < decisions.NumOutcomes; o++ {
		out = append(out, with(func(d *decisions.Decision) { d.Outcome = o }))
	}
	return out
}
