package assemble

import (
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
)

// TestAggregatorMetrics: /metrics shows the latest progress report, and the
// lag is the wall clock less the watermark.
func TestAggregatorMetrics(t *testing.T) {
	var latest atomic.Pointer[aggregator.RunStats]
	wm := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	latest.Store(&aggregator.RunStats{Rollup: aggregator.RollupStats{Events: 42, Late: 3, Windows: 5}, Outputs: 6, Watermark: wm})
	h, err := AggregatorMetrics(&latest, nil, func() time.Time { return wm.Add(90 * time.Second) })
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
	values := map[string]string{} // metric name: value, labels aside
	for _, line := range strings.Split(string(b), "\n") {
		if name, rest, ok := strings.Cut(line, "{"); ok && !strings.HasPrefix(line, "#") {
			values[name] = rest[strings.LastIndexByte(rest, ' ')+1:]
		}
	}
	for name, want := range map[string]string{
		"ratewarden_aggregator_events_total": "42", "ratewarden_aggregator_late_total": "3", "ratewarden_aggregator_windows_total": "5",
		"ratewarden_aggregator_outputs_total": "6", "ratewarden_aggregator_lag_seconds": "90", "ratewarden_aggregator_emf_written_total": "0",
	} {
		if values[name] != want {
			t.Errorf("%s = %q, want %s", name, values[name], want)
		}
	}
}
