package aggregator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	emf "github.com/ratewarden/ratewarden/embedded-metrics"
	"github.com/ratewarden/ratewarden/embedded-metrics/agenttest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// encodeDocuments encodes a partial's documents as JSON lines.
func encodeDocuments(t *testing.T, opts EMFOptions, out Output) []byte {
	t.Helper()
	var b []byte
	for _, d := range Documents(opts, "log", out) {
		var err error
		if b, err = emf.AppendDocuments(b, &d, emf.Limits{IgnoreTimestampWindow: true}); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// TestDocumentsGolden: the documents of a fixed window of generated
// traffic, compared with testdata/emf/window.jsonl (-update rewrites it);
// every line passes the EMF validator, and the Requests of every
// dimension set add up to the window's decisions.
func TestDocumentsGolden(t *testing.T) {
	p := NewPartial(t0, time.Minute, 10)
	var originErrors, ruled float64
	for _, d := range decisiontest.NewGenerator(4, t0).Batch(3000) {
		p.Update(&d)
		if strings.HasPrefix(d.ResponseError, "upstream_") {
			originErrors++
		}
		if d.Kind == decisions.KindDecision && d.Rule != "" {
			ruled++
		}
	}
	out := Output{Partial: p, From: 0, To: 2999}
	got := encodeDocuments(t, EMFOptions{Source: "test", RuleBudget: 8}, out)
	golden := filepath.Join("testdata", "emf", "window.jsonl")
	if *update {
		os.MkdirAll(filepath.Dir(golden), 0o755)
		os.WriteFile(golden, got, 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("documents differ from %s (run with -update after checking)", golden)
	}
	sums := map[string]float64{} // Requests by dimension keys
	for i, line := range bytes.Split(bytes.TrimSpace(got), []byte("\n")) {
		if vs := emf.Validate(line, t0, emf.ValidateOptions{}); len(vs) > 0 {
			t.Errorf("line %d: %v", i+1, vs)
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		dims := m["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Dimensions"].([]any)
		key := "[]"
		if len(dims) > 0 {
			b, _ := json.Marshal(dims[0])
			key = string(b)
		}
		if m["rw_key"] != fmt.Sprintf("test/log/%d/0-2999", t0.UnixMilli()) {
			t.Fatalf("line %d: rw_key %v", i+1, m["rw_key"])
		}
		if v, ok := m["Requests"].(float64); ok {
			sums[key] += v
		}
		if v, ok := m["OriginErrors"].(float64); ok && key == "[]" {
			sums["origin"] += v
		}
	}
	total := float64(p.Counts.Total())
	for _, key := range []string{`[]`, `["Tier"]`, `["Outcome"]`, `["Node"]`} {
		if sums[key] != total {
			t.Errorf("Requests by %s add up to %v, the window holds %v decisions", key, sums[key], total)
		}
	}
	if originErrors == 0 || sums["origin"] != originErrors {
		t.Errorf("service-wide OriginErrors %v, the window's events have %v", sums["origin"], originErrors)
	}
	// With __other__, the [Tier, Rule] documents hold every decision that
	// names a rule (lists decide without one).
	if sums[`["Tier","Rule"]`] != ruled || !bytes.Contains(got, []byte(`"Rule":"`+OtherRule+`"`)) {
		t.Errorf("Requests by tier and rule add up to %v, the window holds %v decisions with a rule (folded: %v)",
			sums[`["Tier","Rule"]`], ruled, bytes.Contains(got, []byte(OtherRule)))
	}
}

// TestDocumentsDeterministic: the same output gives the same bytes, and a
// correction says so in its key's companion property.
func TestDocumentsDeterministic(t *testing.T) {
	p := NewPartial(t0, time.Minute, 10)
	for _, d := range decisiontest.NewGenerator(6, t0).Batch(500) {
		p.Update(&d)
	}
	a := encodeDocuments(t, EMFOptions{}, Output{Partial: p, From: 3, To: 9})
	b := encodeDocuments(t, EMFOptions{}, Output{Partial: p, From: 3, To: 9})
	if !bytes.Equal(a, b) {
		t.Fatal("two encodings of one output differ")
	}
	c := encodeDocuments(t, EMFOptions{}, Output{Partial: p, From: 3, To: 9, Correction: true})
	if !bytes.Contains(c, []byte(`"rw_correction":"true"`)) || bytes.Contains(a, []byte(`rw_correction`)) {
		t.Error("only a correction carries rw_correction")
	}
}

// TestDocumentsOfHostileNames: tier, rule and node names that EMF would
// refuse as dimension values (non-ASCII, control bytes, blank, too long)
// still give valid documents, so a name cannot wedge the aggregator on an
// output it can never deliver.
func TestDocumentsOfHostileNames(t *testing.T) {
	p := NewPartial(t0, time.Minute, 10)
	for _, n := range []struct{ tier, rule, node string }{
		{"tëst", "tëst:/api/caf\u00e9", "ноде-1"},
		{"bad\x00tier", "r\nule", "   "},
		{"", "", strings.Repeat("n", 2000)},
	} {
		d := decisions.Decision{Time: t0, Tier: n.tier, Rule: n.rule, Node: n.node, Outcome: decisions.Block,
			ClientIP: netip.MustParseAddr("192.0.2.1")}
		p.Update(&d)
	}
	b := encodeDocuments(t, EMFOptions{}, Output{Partial: p, To: 2})
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) < 8 {
		t.Fatalf("%d documents", len(lines))
	}
	for i, line := range lines {
		if vs := emf.Validate(line, t0, emf.ValidateOptions{}); len(vs) > 0 {
			t.Errorf("line %d: %v\n%s", i+1, vs, line)
		}
	}
	if !bytes.Contains(b, []byte(`"Tier":"t%C3%ABst"`)) {
		t.Errorf("non-ASCII tier not percent-encoded:\n%s", b)
	}
}

// downSink is an EMF sink whose every write fails.
type downSink struct{}

func (downSink) Write(context.Context, []byte) error { return errors.New("agent away") }
func (downSink) Flush(context.Context) error         { return nil }
func (downSink) Close(context.Context) error         { return nil }
func (downSink) Stats() emf.SinkStats                { return emf.SinkStats{} }

// TestEMFSinkSkipsWhatCanNeverBeValid: a document the specification
// refuses is counted and skipped, since a retry would refuse it again and
// hold the aggregator on that output for ever; a sink that fails fails the
// write, so that the output is delivered again.
func TestEMFSinkSkipsWhatCanNeverBeValid(t *testing.T) {
	p := NewPartial(t0, time.Minute, 10)
	d := decisions.Decision{Time: t0, Tier: "anonymous", Outcome: decisions.Allow, ClientIP: netip.MustParseAddr("192.0.2.1")}
	p.Update(&d)
	out := Output{Partial: p}
	now := func() time.Time { return t0 }
	w, _ := emf.NewWriter(emf.WriterOptions{}, emf.NewStdoutSink(io.Discard))
	bad := &EMFSink{W: w, Opts: EMFOptions{Namespace: "a namespace\x00with a NUL"}, Now: now}
	if err := bad.Write(context.Background(), "log", out); err != nil {
		t.Fatalf("an invalid document failed the write: %v", err)
	}
	if w.Stats().Rejected == 0 {
		t.Fatal("the invalid documents were not counted")
	}
	down, _ := emf.NewWriter(emf.WriterOptions{}, downSink{})
	if err := (&EMFSink{W: down, Now: now}).Write(context.Background(), "log", out); err == nil {
		t.Fatal("a failing sink did not fail the write")
	}
}

// TestEMFSinkWaitsForFullSink: an output's documents, many times what the
// sink's buffer holds, go to a real agent sink on loopback. With the
// agent reading, the writer waits for room whenever the buffer is full,
// and every document arrives once, none dropped, where the sink refused
// them (ErrSinkFull) and the output failed, to be delivered again with
// the documents the sink had already taken. With the agent hung, each
// wait ends after the sink's flush timeout, which drops what it holds:
// the documents are dropped and counted, and the output still goes on.
func TestEMFSinkWaitsForFullSink(t *testing.T) {
	p := NewPartial(t0, time.Minute, 10)
	for _, d := range decisiontest.NewGenerator(6, t0).Batch(3000) {
		p.Update(&d)
	}
	out := Output{Partial: p, From: 0, To: 2999}
	opts := EMFOptions{Source: "test", RuleBudget: 20}
	want := strings.Split(strings.TrimSuffix(string(encodeDocuments(t, opts, out)), "\n"), "\n")
	longest := 0
	for _, d := range want {
		longest = max(longest, len(d)+1)
	}
	buffer := longest // the least that takes every document
	if total := len(strings.Join(want, "\n")); total < 4*buffer {
		t.Fatalf("%d bytes of documents in a buffer of %d: not what this test needs", total, buffer)
	}
	f := func(name string, agent string, check func(t *testing.T, st emf.SinkStats)) {
		t.Run(name, func(t *testing.T) {
			sink, err := emf.NewAgentSink(emf.AgentOptions{Address: agent, BufferBytes: buffer, FlushTimeout: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sink.Close(context.Background()) })
			w, err := emf.NewWriter(emf.WriterOptions{IgnoreTimestampWindow: true, WaitForRoom: true}, sink)
			if err != nil {
				t.Fatal(err)
			}
			s := &EMFSink{W: w, Opts: opts, Now: func() time.Time { return t0 }}
			if err := s.Write(context.Background(), "log", out); err != nil {
				t.Fatalf("the output failed: %v", err)
			}
			s.Flush(context.Background())
			check(t, sink.Stats())
		})
	}
	agent := agenttest.Listen(t)
	f("agent reading", agent.Addr, func(t *testing.T, st emf.SinkStats) {
		if st.Written != uint64(len(want)) || st.Dropped != 0 || st.Buffered != 0 {
			t.Errorf("stats %+v, want %d written, none dropped", st, len(want))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if got := agent.Docs(ctx, len(want)); !slices.Equal(got, want) {
			t.Errorf("the agent received %d documents, want the %d of the output, once each", len(got), len(want))
		}
	})
	f("agent hung", agenttest.Hung(t), func(t *testing.T, st emf.SinkStats) {
		if st.Written+st.Dropped != uint64(len(want)) || st.Dropped == 0 {
			t.Errorf("stats %+v, want the %d documents written or dropped, some dropped", st, len(want))
		}
	})
}

// TestEMFSinkCountsRejected: the documents of a window CloudWatch would
// refuse are counted by why: stamped more than 14 days before the sink's
// clock (an old log read again), more than 2 hours after it, or invalid
// otherwise; Warn is called once for each reason, however many
// documents, and a window CloudWatch accepts counts none.
func TestEMFSinkCountsRejected(t *testing.T) {
	p := NewPartial(t0, time.Minute, 10)
	for _, d := range decisiontest.NewGenerator(3, t0).Batch(200) {
		d.Time = t0
		p.Update(&d)
	}
	out := Output{Partial: p, From: 0, To: 199}
	n := uint64(len(Documents(EMFOptions{}, "log", out)))
	if n < 2 {
		t.Fatalf("%d documents: not what this test needs", n)
	}
	w, _ := emf.NewWriter(emf.WriterOptions{}, emf.NewStdoutSink(io.Discard))
	var warned []string
	s := &EMFSink{W: w, Warn: func(reason string, err error) {
		if err == nil {
			t.Errorf("warned %q without the error", reason)
		}
		warned = append(warned, reason)
	}}
	write := func(now time.Time, opts EMFOptions) {
		t.Helper()
		s.Now, s.Opts = func() time.Time { return now }, opts
		if err := s.Write(context.Background(), "log", out); err != nil {
			t.Fatalf("a rejected document failed the write: %v", err)
		}
	}
	write(t0.Add(time.Minute), EMFOptions{})
	if got := s.Rejected(); got != (EMFRejected{}) || len(warned) > 0 {
		t.Fatalf("a window of a minute ago: rejected %+v, warned %q", got, warned)
	}
	write(t0.Add(15*24*time.Hour), EMFOptions{}) // the log read again 15 days on
	write(t0.Add(20*24*time.Hour), EMFOptions{})
	write(t0.Add(-3*time.Hour), EMFOptions{}) // a clock 3 h behind the edges'
	write(t0, EMFOptions{Namespace: "a namespace\x00with a NUL"})
	want := EMFRejected{TooOld: 2 * n, TooNew: n, Invalid: n}
	if got := s.Rejected(); got != want {
		t.Errorf("rejected %+v, want %+v", got, want)
	}
	if fmt.Sprint(warned) != "[older than 14 days over 2h ahead invalid]" {
		t.Errorf("warned %q, want each reason once", warned)
	}
	if got, wantS := want.String(), fmt.Sprintf("emf rejected %d (older than 14 days %d, over 2h ahead %d, invalid %d)", 4*n, 2*n, n, n); got != wantS {
		t.Errorf("String() = %q, want %q", got, wantS)
	}
}

// TestDocumentsResolution: the metrics of 1 s and 10 s windows are
// high-resolution (StorageResolution 1 on every metric of every
// document), or CloudWatch would fold a minute's windows into one
// datapoint; those of 1 min and longer windows say nothing (standard).
// Every document passes the validator either way.
func TestDocumentsResolution(t *testing.T) {
	f := func(size time.Duration, high bool) {
		t.Helper()
		p := NewPartial(t0, size, 10)
		for _, d := range decisiontest.NewGenerator(8, t0).Batch(400) {
			d.Time = t0 // every event in the window, however short
			p.Update(&d)
		}
		b := encodeDocuments(t, EMFOptions{RuleBudget: 3}, Output{Partial: p, To: 399})
		lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
		metrics := 0
		for i, line := range lines {
			if vs := emf.Validate(line, t0, emf.ValidateOptions{}); len(vs) > 0 {
				t.Errorf("%v: line %d: %v", size, i+1, vs)
			}
			var doc struct {
				AWS struct {
					CloudWatchMetrics []struct {
						Metrics []struct {
							Name              string
							StorageResolution *int
						}
					}
				} `json:"_aws"`
			}
			if err := json.Unmarshal(line, &doc); err != nil {
				t.Fatal(err)
			}
			for _, m := range doc.AWS.CloudWatchMetrics[0].Metrics {
				metrics++
				if got := m.StorageResolution != nil && *m.StorageResolution == 1; got != high {
					t.Errorf("%v: line %d: %s has StorageResolution %v, want high resolution %v", size, i+1, m.Name, m.StorageResolution, high)
				}
			}
		}
		if len(lines) < 8 || metrics < 50 {
			t.Fatalf("%v: %d documents, %d metrics", size, len(lines), metrics)
		}
	}
	f(time.Second, true)
	f(10*time.Second, true)
	f(time.Minute, false)
	f(5*time.Minute, false)
}

// ruleRequests returns the Requests of the [Tier, Rule] documents of b by
// "tier rule", each line checked by the validator.
func ruleRequests(t *testing.T, b []byte) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for i, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if vs := emf.Validate(line, t0, emf.ValidateOptions{}); len(vs) > 0 {
			t.Errorf("line %d: %v", i+1, vs)
		}
		var doc struct {
			AWS struct {
				CloudWatchMetrics []struct{ Dimensions [][]string }
			} `json:"_aws"`
			Tier, Rule string
			Requests   float64
		}
		if err := json.Unmarshal(line, &doc); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(doc.AWS.CloudWatchMetrics[0].Dimensions) != "[[Tier Rule]]" {
			continue
		}
		key := doc.Tier + " " + doc.Rule
		if _, dup := out[key]; dup {
			t.Errorf("two [Tier, Rule] documents for %s", key)
		}
		out[key] = doc.Requests
	}
	return out
}

// ruleTraffic returns a partial of the window at t0 holding, for each
// "tier rule" of counts, that many blocked decisions.
func ruleTraffic(counts map[string]int) *Partial {
	p := NewPartial(t0, time.Minute, 10)
	for key, n := range counts {
		tier, rule, _ := strings.Cut(key, " ")
		for i := range n {
			d := decisions.Decision{Time: t0, Tier: tier, Rule: rule, Outcome: decisions.Block,
				ClientIP: netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})}
			p.Update(&d)
		}
	}
	return p
}

// TestDocumentsRuleFolding: past the budget, the least busy (tier, rule)
// pairs are folded into their tier's __other__, which holds exactly the
// tier's decisions less those of its kept rules; with the configured
// rules, those are kept whatever their traffic, and every other pair (a
// rule the configuration does not have, or a configured rule under a tier
// that is not its own) is folded, however busy.
func TestDocumentsRuleFolding(t *testing.T) {
	counts := map[string]int{
		"anonymous anonymous:global": 50, "anonymous anonymous:/api": 40, "anonymous anonymous:/b": 2,
		"anonymous hostile-1": 30, "anonymous hostile-2": 30, "anonymous __other__": 7,
		"free free:global": 20, "free free:/x": 1, "free anonymous:global": 9,
	}
	p := ruleTraffic(counts)
	f := func(opts EMFOptions, want map[string]float64) {
		t.Helper()
		got := ruleRequests(t, encodeDocuments(t, opts, Output{Partial: p, To: 188}))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%+v: [Tier, Rule] Requests\n got %v\nwant %v", opts, got, want)
		}
		var sum float64
		for _, n := range got {
			sum += n
		}
		if sum != float64(p.Counts.Total()) {
			t.Errorf("%+v: [Tier, Rule] Requests add up to %v of %d", opts, sum, p.Counts.Total())
		}
	}
	// The budget: the three busiest pairs; anonymous's __other__ is its
	// 159 decisions less the 120 of its kept rules.
	f(EMFOptions{RuleBudget: 3}, map[string]float64{
		"anonymous anonymous:/api": 40, "anonymous anonymous:global": 50, "anonymous hostile-1": 30,
		"anonymous __other__": 159 - 120, "free __other__": 30,
	})
	// The configuration: its rules, however quiet, and nothing else.
	f(EMFOptions{RuleBudget: 3, Rules: []string{"anonymous:global", "anonymous:/api", "anonymous:/b", "free:global", "free:/x", "free:/unused"}},
		map[string]float64{
			"anonymous anonymous:/api": 40, "anonymous anonymous:/b": 2, "anonymous anonymous:global": 50,
			"anonymous __other__": 159 - 92, "free free:/x": 1, "free free:global": 20, "free __other__": 9,
		})
}

// TestDocumentsRulesAcrossPartitions: two partitions of one window whose
// busiest rules differ. With the configured rules, the sum of Rule=X over
// both partitions' documents (what CloudWatch adds up) is X's count in the
// merged partial for every rule; with a budget alone, ranked per
// partition, it is not (the fallback's documented limit).
func TestDocumentsRulesAcrossPartitions(t *testing.T) {
	a := ruleTraffic(map[string]int{"anonymous anonymous:global": 9, "anonymous anonymous:/a": 8, "anonymous anonymous:/b": 1, "pro pro:global": 2})
	b := ruleTraffic(map[string]int{"anonymous anonymous:global": 1, "anonymous anonymous:/a": 2, "anonymous anonymous:/b": 9, "pro pro:global": 7})
	merged := ruleTraffic(nil)
	for _, p := range []*Partial{a, b} {
		if err := merged.Merge(p, true); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]float64{}
	for k, n := range merged.Counts.Cells {
		want[k.Tier+" "+k.Rule] += float64(n)
	}
	sum := func(opts EMFOptions) map[string]float64 {
		out := map[string]float64{}
		for _, p := range []*Partial{a, b} {
			for k, n := range ruleRequests(t, encodeDocuments(t, opts, Output{Partial: p, To: 19})) {
				out[k] += n
			}
		}
		return out
	}
	configured := sum(EMFOptions{RuleBudget: 2, Rules: []string{"anonymous:global", "anonymous:/a", "anonymous:/b", "pro:global"}})
	if fmt.Sprint(configured) != fmt.Sprint(want) {
		t.Errorf("Rule=X over both partitions\n got %v\nwant %v (the merged partial)", configured, want)
	}
	if ranked := sum(EMFOptions{RuleBudget: 2}); fmt.Sprint(ranked) == fmt.Sprint(want) {
		t.Errorf("the per-partition budget kept the same rules in both partitions (%v): the traffic does not test the configured set", ranked)
	}
}

// TestUnknownOutcomeCounted: decisions of an outcome this reader does not
// know (a newer edge's, kept as its number) are counted as outcome
// "unknown", as `decisions stats` counts them, among the Requests of every
// EMF document that counts them (service, tier, rule, node) and in
// ByOutcome, rather than left out of every total.
func TestUnknownOutcomeCounted(t *testing.T) {
	p := NewPartial(t0, time.Minute, 10)
	for i, o := range []decisions.Outcome{decisions.Allow, 99, decisions.Outcome(decisions.NumOutcomes), decisions.Block} {
		d := decisions.Decision{Time: t0, Tier: "free", Rule: "free:global", Node: "edge-1", Outcome: o,
			ClientIP: netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)})}
		p.Update(&d)
	}
	if oc := p.Counts.ByOutcome(); oc[0] != 2 || oc[decisions.Allow] != 1 || oc[decisions.Block] != 1 {
		t.Errorf("by outcome %v, want 2 unknown, 1 allow, 1 block", oc)
	}
	requests := map[string]float64{}
	for _, d := range Documents(EMFOptions{Rules: []string{"free:global"}}, "log", Output{Partial: p, To: 4}) {
		var dims []string
		for _, set := range d.Dimensions {
			for _, dim := range set {
				dims = append(dims, dim.Name+"="+dim.Value)
			}
		}
		for _, m := range d.Metrics {
			if m.Name == MetricRequests {
				requests[strings.Join(dims, ",")] = m.Values[0]
			}
		}
	}
	want := map[string]float64{"": 4, "Tier=free": 4, "Tier=free,Rule=free:global": 4, "Node=edge-1": 4,
		"Outcome=allow": 1, "Outcome=block": 1, "Outcome=unknown": 2}
	if !maps.Equal(requests, want) {
		t.Errorf("Requests by dimensions %v, want %v", requests, want)
	}
}
