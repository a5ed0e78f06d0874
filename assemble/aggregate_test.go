package assemble

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/seglog"
	emf "github.com/ratewarden/ratewarden/embedded-metrics"
	"github.com/ratewarden/ratewarden/embedded-metrics/agenttest"
)

// TestAggregatorMetrics: /metrics shows the latest progress report, and the
// lag is the wall clock less the watermark.
func TestAggregatorMetrics(t *testing.T) {
	wm := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	st := aggregator.RunStats{Rollup: aggregator.RollupStats{Events: 42, Late: 3, Future: 7, Folded: 9, Windows: 5, AheadDropped: 11, CorrectionsDropped: 13, BadTime: 17, BadLatency: 19}, Outputs: 6, Watermark: wm,
		Shards: []aggregator.ShardStats{
			{Shard: "shardId-000000000000", Behind: 1500 * time.Millisecond, Read: true, Watermark: wm.Add(2 * time.Second)},
			{Shard: "shardId-000000000001"}, // taken, not read yet
		}}
	h, err := AggregatorMetrics(func() aggregator.RunStats { return st }, nil, func() time.Time { return wm.Add(90 * time.Second) })
	if err != nil {
		t.Fatal(err)
	}
	values := scrapeAggregator(t, h)
	for _, absent := range []string{"ratewarden_aggregator_shard_behind_milliseconds/shardId-000000000001", "ratewarden_aggregator_shard_lag_milliseconds/shardId-000000000001"} {
		if v, ok := values[absent]; ok {
			t.Errorf("%s = %s, want no value before a read or an event", absent, v)
		}
	}
	for name, want := range map[string]string{
		"ratewarden_aggregator_events_total": "42", "ratewarden_aggregator_late_total": "3", "ratewarden_aggregator_future_total": "7", "ratewarden_aggregator_folded_total": "9", "ratewarden_aggregator_windows_total": "5",
		"ratewarden_aggregator_ahead_dropped_total": "11", "ratewarden_aggregator_corrections_dropped_total": "13", "ratewarden_aggregator_bad_time_total": "17", "ratewarden_aggregator_bad_latency_total": "19",
		"ratewarden_aggregator_outputs_total": "6", "ratewarden_aggregator_lag_seconds": "90", "ratewarden_aggregator_emf_written_total": "0",
		"ratewarden_aggregator_shard_behind_milliseconds/shardId-000000000000": "1500",
		"ratewarden_aggregator_shard_lag_milliseconds/shardId-000000000000":    "88000",
	} {
		if values[name] != want {
			t.Errorf("%s = %q, want %s", name, values[name], want)
		}
	}
}

// TestAggregatorMetricsEMFLater: the EMF counts on /metrics are the
// sink's own. Documents the CloudWatch agent's sink accepted and then
// dropped, when a flush ran out of time with the agent away, are dropped
// (they were counted written before), beside the one document refused as
// invalid, counted once.
func TestAggregatorMetricsEMFLater(t *testing.T) {
	sink, err := emf.NewAgentSink(emf.AgentOptions{Address: agenttest.Closed(t), FlushTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(context.Background())
	w, err := emf.NewWriter(emf.WriterOptions{}, sink)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	doc := func(ns string) *emf.Document {
		return &emf.Document{Namespace: ns, Timestamp: now, Dimensions: [][]emf.Dimension{{}},
			Metrics: []emf.Metric{{Name: "Requests", Unit: emf.Count, Values: []float64{1}}}}
	}
	const accepted = 3
	for range accepted {
		if err := w.Write(context.Background(), doc("Ratewarden"), now); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Write(context.Background(), doc(":Ratewarden"), now); err == nil {
		t.Fatal("an invalid namespace was written")
	}
	if err := w.Flush(context.Background()); !errors.Is(err, emf.ErrSinkBehind) {
		t.Fatalf("flush with the agent away: %v, want ErrSinkBehind", err)
	}
	h, err := AggregatorMetrics(func() aggregator.RunStats { return aggregator.RunStats{} }, w, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	values := scrapeAggregator(t, h)
	for name, want := range map[string]string{
		"ratewarden_aggregator_emf_written_total":     "0",
		"ratewarden_aggregator_emf_dropped_total":     fmt.Sprint(accepted + 1),
		"ratewarden_aggregator_emf_buffered":          "0",
		"ratewarden_aggregator_emf_unconfirmed_total": "0", // nothing was sent
	} {
		if values[name] != want {
			t.Errorf("%s = %q, want %s", name, values[name], want)
		}
	}
}

// scrapeAggregator returns the values h serves on /metrics, by metric name
// with the shard label, other labels aside.
func scrapeAggregator(t *testing.T, h http.Handler) map[string]string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	values := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if name, rest, ok := strings.Cut(line, "{"); ok && !strings.HasPrefix(line, "#") {
			if _, shard, ok := strings.Cut(rest, `shard="`); ok {
				name += "/" + shard[:strings.IndexByte(shard, '"')]
			}
			values[name] = rest[strings.LastIndexByte(rest, ' ')+1:]
		}
	}
	return values
}

// TestAggregatorMetricsLoss: what the log reader could not read is on
// /metrics: corrupt regions and bytes, the events lost in them and in
// missing segments, the missing segments, and the events removed before
// they were read, each apart from the undecodable records' events.
func TestAggregatorMetricsLoss(t *testing.T) {
	st := aggregator.RunStats{Read: decisionlog.ReadStats{BadBatch: 1, BadEvents: 7},
		Lost: seglog.Loss{Problems: 3, Bytes: 960, Events: 402, Gaps: 1, Removed: 1200, Start: 4200}}
	h, err := AggregatorMetrics(func() aggregator.RunStats { return st }, nil, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	values := scrapeAggregator(t, h)
	for name, want := range map[string]string{
		"ratewarden_aggregator_corrupt_events_total": "7", "ratewarden_aggregator_corrupt_regions_total": "2",
		"ratewarden_aggregator_corrupt_bytes_total": "960", "ratewarden_aggregator_lost_events_total": "402",
		"ratewarden_aggregator_missing_segments_total": "1", "ratewarden_aggregator_removed_events_total": "1200",
	} {
		if values[name] != want {
			t.Errorf("%s = %q, want %s", name, values[name], want)
		}
	}
}

// TestProblemLogLimits: a burst of 20 problems printed, then 2 a second;
// the others are counted as held back.
func TestProblemLogLimits(t *testing.T) {
	var out []string
	clock := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	p := NewProblemLog(func(err error) { out = append(out, err.Error()) }, func() time.Time { return clock })
	for i := range 100 {
		p.Problem(fmt.Errorf("problem %d", i))
	}
	clock = clock.Add(time.Second)
	for i := range 10 {
		p.Problem(fmt.Errorf("later %d", i))
	}
	if len(out) != 22 || out[19] != "problem 19" || out[21] != "later 1" || p.Held() != 88 {
		t.Fatalf("printed %d, held %d: %q", len(out), p.Held(), out)
	}
}
