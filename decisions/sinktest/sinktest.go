// Package sinktest is the conformance suite every decision sink runs: the
// JSON-lines file, the local decision log, and the Kinesis sink. A sink is
// a decisions.BatchWriter whose written events can be read back.
package sinktest

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// Sink is a sink under test.
type Sink interface {
	decisions.BatchWriter
	// ReadBack returns every event written so far, in the order written.
	// It is called after Flush.
	ReadBack() ([]decisions.Decision, error)
}

// Run runs the suite. newSink returns a fresh, empty sink for each subtest
// and arranges its cleanup with t.Cleanup.
func Run(t *testing.T, newSink func(t *testing.T) Sink) {
	start := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	t.Run("round_trip_in_order", func(t *testing.T) {
		s := newSink(t)
		g := decisiontest.NewGenerator(1, start)
		var want []decisions.Decision
		for _, n := range []int{1, 7, 500, 4096} {
			b := g.Batch(n)
			want = append(want, b...)
			if err := s.WriteBatch(clone(b)); err != nil {
				t.Fatalf("write batch of %d: %v", n, err)
			}
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		check(t, s, want)
	})
	t.Run("every_kind_and_edge_values", func(t *testing.T) {
		s := newSink(t)
		want := edgeCases(start)
		if err := s.WriteBatch(clone(want)); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		check(t, s, want)
	})
	t.Run("empty_batch_writes_nothing", func(t *testing.T) {
		s := newSink(t)
		if err := s.WriteBatch(nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		check(t, s, nil)
	})
	t.Run("through_an_emitter_exactly_once", func(t *testing.T) {
		s := newSink(t)
		e := decisions.NewEmitter(s, decisions.EmitterOptions{Queue: 1 << 16, Batch: 256, Interval: 5 * time.Millisecond})
		const writers, each = 8, 1000
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				g := decisiontest.NewGenerator(uint64(100+w), start)
				for i := range each {
					d := g.Next()
					d.Kind, d.RequestID = decisions.KindDecision, fmt.Sprintf("w%d-%d", w, i)
					if d.Outcome == 0 {
						d.Outcome = decisions.Allow
					}
					for !e.Emit(d) {
						// The queue is sized for all of them; a refusal here is a bug.
						t.Errorf("emit refused")
						return
					}
				}
			})
		}
		wg.Wait()
		if err := e.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		got, err := s.ReadBack()
		if err != nil {
			t.Fatal(err)
		}
		seen := make(map[string]int, writers*each)
		for _, d := range got {
			seen[d.RequestID]++
		}
		if len(got) != writers*each || len(seen) != writers*each {
			t.Fatalf("read back %d events, %d distinct; want %d exactly once", len(got), len(seen), writers*each)
		}
	})
}

func clone(ds []decisions.Decision) []decisions.Decision {
	return append([]decisions.Decision(nil), ds...)
}

func check(t *testing.T, s Sink, want []decisions.Decision) {
	t.Helper()
	got, err := s.ReadBack()
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("read back %d events, want %d", len(got), len(want))
	}
	for i := range want {
		if diff := decisiontest.Diff(got[i], want[i]); diff != "" {
			t.Fatalf("event %d differs:\n%s", i, diff)
		}
	}
}

// edgeCases are events at the edges of the schema: every kind and outcome,
// zero values, IPv6 and IPv4-mapped addresses, sub-millisecond durations,
// times in another zone, long and non-ASCII strings. Strings are valid
// UTF-8: the JSON form replaces invalid bytes, by design of JSON.
func edgeCases(start time.Time) []decisions.Decision {
	long := strings.Repeat("/segment", 200)
	zone := time.FixedZone("UTC-3", -3*3600)
	out := []decisions.Decision{
		{Time: start, Outcome: decisions.Allow}, // zero values everywhere else
		{Time: start.In(zone).Add(1), RequestID: "r-1", Node: "edge-é", ClientIP: netip.MustParseAddr("2001:db8::1"),
			UserID: "ü_ser", Plan: "pro", Tier: "pro", IdentitySource: decisions.SourceJWT, Method: "PATCH", Host: "api.example.com",
			Path: long, Rule: "pro:" + long, Algorithm: "token_bucket", Limit: 1_000_000_000, Window: 24 * time.Hour,
			Count: -1, Remaining: 0, Reset: 1, Outcome: decisions.TokenPass, Reason: "quote \" and \\ and \n", StoreLatency: 49*time.Millisecond + 999,
			Privacy: "truncate/hmac", Status: 504, UpstreamLatency: 30*time.Second + 1, ResponseError: decisions.UpstreamTimeout},
		{Time: start.Add(2), ClientIP: netip.MustParseAddr("::ffff:203.0.113.9"), Outcome: decisions.Allow},
		{Kind: decisions.KindFeedback, Time: start.Add(3), Node: "aggregator-1", Reason: "scraper: 800 req/s",
			List: "challenge", Action: "add", Target: "203.0.113.0/24", TTL: 30 * time.Minute},
		{Kind: decisions.KindFeedback, Time: start.Add(4), Node: "operator", List: "allow", Action: "remove", Target: "user:partner"},
		{Kind: decisions.KindDrops, Time: start.Add(5), Node: "edge-1", Reason: "decision queue full", Dropped: 1 << 40},
	}
	for o := decisions.Outcome(1); int(o) < decisions.NumOutcomes; o++ {
		out = append(out, decisions.Decision{Time: start.Add(time.Duration(10 + o)), Outcome: o, ClientIP: netip.MustParseAddr("198.51.100.7")})
	}
	return out
}
