package seglog

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"time"
)

// benchRecord is a record of 256 events of about 40 bytes each: 10 KiB of
// random-ish bytes, as a compressed batch would be.
func benchRecord() Record {
	p := make([]byte, 256*40)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	return Record{Count: 256, MinTime: t0, MaxTime: t0.Add(time.Second), Codec: 1, Payload: p}
}

func BenchmarkAppend(b *testing.B) {
	rec := benchRecord()
	for _, c := range []struct {
		name string
		sync SyncPolicy
	}{
		{"sync=10ms", SyncPolicy{Mode: SyncInterval, Interval: 10 * time.Millisecond}},
		{"sync=every_batch", SyncPolicy{Mode: SyncEveryBatch}},
		{"sync=never", SyncPolicy{Mode: SyncNever}},
	} {
		b.Run(c.name, func(b *testing.B) {
			l, err := Open(b.TempDir(), Options{Sync: c.sync})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(rec.Payload)))
			for b.Loop() {
				if _, err := l.Append(rec); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(l.NextOffset())/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(l.Stats().Syncs), "syncs")
			if err := l.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkAppendParallel appends from many goroutines under
// SyncEveryBatch: they share syncs.
func BenchmarkAppendParallel(b *testing.B) {
	rec := benchRecord()
	l, err := Open(b.TempDir(), Options{Sync: SyncPolicy{Mode: SyncEveryBatch}})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.ReportAllocs()
	b.SetBytes(int64(len(rec.Payload)))
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := l.Append(rec); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(l.NextOffset())/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(l.Stats().Appends)/float64(max(l.Stats().Syncs, 1)), "appends/sync")
}

func BenchmarkRead(b *testing.B) {
	rec := benchRecord()
	dir := b.TempDir()
	l, err := Open(dir, Options{SegmentBytes: 8 << 20, Sync: SyncPolicy{Mode: SyncNever}})
	if err != nil {
		b.Fatal(err)
	}
	for range 2000 { // 20 MiB in 3 segments
		if _, err := l.Append(rec); err != nil {
			b.Fatal(err)
		}
	}
	l.Close()
	ctx := context.Background()
	r, err := OpenReader(dir, 0, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(rec.Payload)))
	var events uint64
	for b.Loop() {
		got, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			r.Close()
			if r, err = OpenReader(dir, 0, Options{}); err != nil {
				b.Fatal(err)
			}
			got, err = r.Next(ctx)
		}
		if err != nil {
			b.Fatal(err)
		}
		events += uint64(got.Count)
	}
	r.Close()
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}
