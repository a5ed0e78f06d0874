package alerts_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/aggregator/alerts"
)

// FuzzLoadState: whatever the state file holds, loading it either fails
// with an error or gives an engine that runs windows.
func FuzzLoadState(f *testing.F) {
	f.Add([]byte(`{"version":1,"window":60000000000,"series":{"a":null,"b":{"recent":[1,2],"seasonal":[1]}},"open":{"x":null}}`))
	f.Add([]byte(`{"version":1,"window":60000000000,"last":"2026-11-02T00:00:00Z","quiet":{"k":"2026-11-02T01:00:00Z"}}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`not json`))
	cfg := testConfig(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, alerts.StateFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := alerts.NewRunner(alerts.RunnerOptions{Engine: alerts.Options{Config: cfg.Alerts, Window: time.Minute}, StateDir: dir})
		if err != nil {
			return
		}
		for i := range 3 {
			p := aggregator.NewPartial(t0.Add(time.Duration(i)*time.Minute), time.Minute, 10)
			d := decisionOf(p.Start, "192.0.2.1", "anonymous:global", i)
			p.Update(&d)
			if err := r.Window(t.Context(), p); err != nil {
				t.Fatal(err)
			}
		}
	})
}
