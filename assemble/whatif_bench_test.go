package assemble_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/assemble"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/seglog"
	"github.com/ratewarden/ratewarden/internal/rusage"
)

// BenchmarkWhatIfReplay replays a log of 200,000 realistic decisions
// (decisiontest's day: Zipf clients, scrapers, the seed's tiers and paths,
// about a minute of event time) through the seed configuration with its
// /api/search limit halved: what `ratewarden whatif` spends per event.
func BenchmarkWhatIfReplay(b *testing.B) {
	const n = 200_000
	dir := filepath.Join(b.TempDir(), "log")
	l, err := seglog.Open(dir, seglog.Options{})
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	ds := decisiontest.NewGenerator(7, t0).Batch(n)
	w := decisionlog.NewWriter(l, decisionlog.WriterOptions{})
	for i := 0; i < n; i += 1024 {
		if err := w.WriteBatch(ds[i:min(i+1024, n)]); err != nil {
			b.Fatal(err)
		}
	}
	l.Close()
	cfg := loadConfig(b, `
edge: {upstream: ORIGIN}
challenge: {enabled: true}
tiers:
  anonymous:
    global: {limit: 60, window: 1m, algorithm: fixed_window}
    paths:
      /api/reports: {limit: 5, window: 1m, algorithm: fixed_window}
      /api/search: {limit: 15, window: 1m, algorithm: fixed_window}
  authenticated:
    global: {limit: 300, window: 1m, algorithm: fixed_window}
    paths:
      /api/search: {limit: 60, window: 1m, algorithm: fixed_window}
  free: {extends: authenticated, global: {limit: 100, window: 1m, algorithm: fixed_window}}
  pro: {extends: authenticated, global: {limit: 1000, window: 1m, algorithm: fixed_window}}
`)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := rusage.CPU()
	var replayed uint64
	for range b.N {
		r, err := assemble.WhatIf(context.Background(), assemble.WhatIfOptions{Config: cfg, DecisionsDir: dir, From: t0, To: t0.Add(24 * time.Hour), Top: 50})
		if err != nil {
			b.Fatal(err)
		}
		replayed += r.Replayed
	}
	b.ReportMetric(float64(replayed)/b.Elapsed().Seconds(), "requests/s")
	b.ReportMetric(float64(replayed)/(rusage.CPU()-cpu0).Seconds(), "requests/cpu-s")
}
