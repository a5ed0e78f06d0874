package decisionlog_test

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
	"github.com/ratewarden/ratewarden/decisions/columnar"
	"github.com/ratewarden/ratewarden/decisions/decisionlog"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/decisions/seglog"
)

// BenchmarkWriteBatch is the decision log's whole write path: a batch of
// 4096 realistic events encoded (Arrow+zstd or JSON lines) and appended,
// fsync every 10 ms. It reports events/s and bytes per event on disk.
func BenchmarkWriteBatch(b *testing.B) {
	g := decisiontest.NewGenerator(3, time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	batch := g.Batch(4096)
	for _, c := range []struct {
		name  string
		codec columnar.Codec
	}{{"arrow_zstd", columnar.CodecArrow}, {"json_lines", columnar.CodecJSON}} {
		b.Run(c.name, func(b *testing.B) {
			l, err := seglog.Open(b.TempDir(), seglog.Options{Sync: seglog.SyncPolicy{Mode: seglog.SyncInterval, Interval: 10 * time.Millisecond}})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			w := decisionlog.NewWriter(l, decisionlog.WriterOptions{Codec: c.codec})
			work := make([]decisions.Decision, len(batch))
			b.ReportAllocs()
			start := time.Now()
			for b.Loop() {
				copy(work, batch)
				if err := w.WriteBatch(work); err != nil {
					b.Fatal(err)
				}
			}
			el := time.Since(start)
			st := l.Stats()
			b.ReportMetric(float64(b.N*len(batch))/el.Seconds(), "events/s")
			b.ReportMetric(float64(st.Bytes)/float64(st.Events), "B/event")
		})
	}
}
