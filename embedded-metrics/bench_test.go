package emf

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// discardSink accepts every document and keeps none.
type discardSink struct{ n, bytes int }

func (s *discardSink) Write(_ context.Context, doc []byte) error {
	s.n++
	s.bytes += len(doc)
	return nil
}
func (s *discardSink) Flush(context.Context) error { return nil }
func (s *discardSink) Close(context.Context) error { return nil }
func (s *discardSink) Stats() SinkStats            { return SinkStats{Sink: "discard", Written: uint64(s.n)} }

func benchLogger(b *testing.B) (*Logger, *discardSink) {
	sink := &discardSink{}
	l, err := New(Config{MaxBufferedValues: 1 << 20}, nil, sink)
	if err != nil {
		b.Fatal(err)
	}
	if err := l.PutDimensions(Dimension{"Tier", "free"}, Dimension{"Path", "/api/v1/login"}); err != nil {
		b.Fatal(err)
	}
	if err := l.SetProperty("requestId", "989ffbf8-9ace-4817-a57c-e4dd734019ee"); err != nil {
		b.Fatal(err)
	}
	return l, sink
}

// BenchmarkEncode puts and flushes one document of 10 metrics with 10
// values each, as an aggregator emitting one window would.
func BenchmarkEncode(b *testing.B) {
	l, sink := benchLogger(b)
	names := make([]string, 10)
	for i := range names {
		names[i] = "Metric" + strconv.Itoa(i)
	}
	ctx, now := context.Background(), time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for _, name := range names {
			for j := range 10 {
				if err := l.PutMetric(name, float64(i+j)*1.25, Milliseconds); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := l.FlushAt(ctx, now); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "values/s")
	b.ReportMetric(float64(sink.bytes)/float64(sink.n), "bytes/doc")
}

// BenchmarkFlushSplit flushes 200 metrics of 250 values: 6 documents.
func BenchmarkFlushSplit(b *testing.B) {
	l, sink := benchLogger(b)
	ctx, now := context.Background(), time.Now()
	names := make([]string, 200)
	for i := range names {
		names[i] = "Metric" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for _, name := range names {
			for j := range 250 {
				l.PutMetric(name, float64(j), Count)
			}
		}
		if err := l.FlushAt(ctx, now); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*200*250)/b.Elapsed().Seconds(), "values/s")
	b.ReportMetric(float64(sink.n)/float64(b.N), "docs/op")
}

func BenchmarkPutMetric(b *testing.B) {
	l, _ := benchLogger(b)
	ctx, now := context.Background(), time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l.PutMetric("Latency", float64(i&1023), Milliseconds)
		if i&0xffff == 0xffff {
			l.FlushAt(ctx, now)
		}
	}
}

func BenchmarkPutMetricParallel(b *testing.B) {
	l, _ := benchLogger(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if l.PutMetric("Latency", float64(i&1023), Milliseconds) != nil {
				l.Flush(context.Background())
			}
			i++
		}
	})
}

func BenchmarkValidate(b *testing.B) {
	l, _ := benchLogger(b)
	mem := &memSink{}
	l.w.sinks = append(l.w.sinks, &sinkState{sink: mem})
	now := time.Now()
	for i := range 100 {
		l.PutMetric("Metric"+strconv.Itoa(i%10), float64(i), Count)
	}
	if err := l.FlushAt(context.Background(), now); err != nil {
		b.Fatal(err)
	}
	doc := mem.docs[0]
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if vs := Validate(doc, now, ValidateOptions{}); len(vs) > 0 {
			b.Fatal(vs)
		}
	}
}
