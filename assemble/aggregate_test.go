package assemble

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
)

// TestAggregatorMetrics: /metrics shows the latest progress report, and the
// lag is the wall clock less the watermark.
func TestAggregatorMetrics(t *testing.T) {
	wm := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	st := aggregator.RunStats{Rollup: aggregator.RollupStats{Events: 42, Late: 3, Future: 7, Folded: 9, Windows: 5}, Outputs: 6, Watermark: wm,
		Shards: []aggregator.ShardStats{
			{Shard: "shardId-000000000000", Behind: 1500 * time.Millisecond, Read: true, Watermark: wm.Add(2 * time.Second)},
			{Shard: "shardId-000000000001"}, // taken, not read yet
		}}
	h, err := AggregatorMetrics(func() aggregator.RunStats { return st }, nil, func() time.Time { return wm.Add(90 * time.Second) })
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	values := map[string]string{} // metric name (with the shard label): value, other labels aside
	for _, line := range strings.Split(string(b), "\n") {
		if name, rest, ok := strings.Cut(line, "{"); ok && !strings.HasPrefix(line, "#") {
			if _, shard, ok := strings.Cut(rest, `shard="`); ok {
				name += "/" + shard[:strings.IndexByte(shard, '"')]
			}
			values[name] = rest[strings.LastIndexByte(rest, ' ')+1:]
		}
	}
	for _, absent := range []string{"ratewarden_aggregator_shard_behind_milliseconds/shardId-000000000001", "ratewarden_aggregator_shard_lag_milliseconds/shardId-000000000001"} {
		if v, ok := values[absent]; ok {
			t.Errorf("%s = %s, want no value before a read or an event", absent, v)
		}
	}
	for name, want := range map[string]string{
		"ratewarden_aggregator_events_total": "42", "ratewarden_aggregator_late_total": "3", "ratewarden_aggregator_future_total": "7", "ratewarden_aggregator_folded_total": "9", "ratewarden_aggregator_windows_total": "5",
		"ratewarden_aggregator_outputs_total": "6", "ratewarden_aggregator_lag_seconds": "90", "ratewarden_aggregator_emf_written_total": "0",
		"ratewarden_aggregator_shard_behind_milliseconds/shardId-000000000000": "1500",
		"ratewarden_aggregator_shard_lag_milliseconds/shardId-000000000000":    "88000",
	} {
		if values[name] != want {
			t.Errorf("%s = %q, want %s", name, values[name], want)
		}
	}
}
