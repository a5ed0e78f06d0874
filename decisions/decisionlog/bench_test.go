package decisionlog_test

import (
	"context"
	"fmt"
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

// BenchmarkLogLaneDrops is the edge's log lane (an Emitter with the
// default queue of 4,096 and 1 s linger, into a Writer on a real log)
// fed at a steady rate for a second an iteration, with records of at most
// 1,024, 3,072 or 4,096 events: it reports the share of decisions
// dropped because the queue was full. A lingering writer is woken when the
// queue holds a batch, so a batch as large as the queue leaves no room
// for the decisions that arrive while it wakes.
func BenchmarkLogLaneDrops(b *testing.B) {
	ds := decisiontest.NewGenerator(1, time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)).Batch(1 << 16)
	for _, rate := range []int{50_000, 100_000, 200_000} {
		for _, batch := range []int{1024, 3072, 4096} {
			b.Run(fmt.Sprintf("rate=%d/batch=%d", rate, batch), func(b *testing.B) {
				var sent, dropped uint64
				for b.Loop() {
					l, err := seglog.Open(b.TempDir(), seglog.Options{Sync: seglog.SyncPolicy{Mode: seglog.SyncNever}})
					if err != nil {
						b.Fatal(err)
					}
					e := decisions.NewEmitter(decisionlog.NewWriter(l, decisionlog.WriterOptions{}),
						decisions.EmitterOptions{Queue: 4096, Batch: batch, Linger: time.Second})
					start := time.Now()
					n := 0
					for el := time.Duration(0); el < time.Second; el = time.Since(start) {
						for want := int(el.Seconds() * float64(rate)); n < want; n++ {
							e.EmitRef(&ds[n&(len(ds)-1)])
						}
						time.Sleep(200 * time.Microsecond)
					}
					if err := e.Close(context.Background()); err != nil {
						b.Fatal(err)
					}
					sent += uint64(n)
					dropped += e.Stats().Dropped
					if err := l.Close(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(100*float64(dropped)/float64(sent), "%dropped")
			})
		}
	}
}
