package report

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator"
	"github.com/ratewarden/ratewarden/decisions/decisiontest"
	"github.com/ratewarden/ratewarden/internal/rusage"
)

// dayDirs holds the stored days of partials the benchmarks read, by
// window length, made once per run and removed by TestMain.
var (
	dayMu   sync.Mutex
	dayDirs = map[time.Duration]string{}
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range dayDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

// storedDay stores a day of partials of windows of size: 60 distinct
// windows rolled up by the aggregator from perWindow realistic events each
// (decisiontest's day: Zipf clients, scrapers, the seed's tiers; top-K of
// 100), repeated with their starts moved to fill the day, so that every
// file is a real partial of real size.
func storedDay(b *testing.B, size time.Duration, perWindow int) string {
	dayMu.Lock()
	defer dayMu.Unlock()
	if d := dayDirs[size]; d != "" {
		return d
	}
	dir, err := os.MkdirTemp("", "report-bench-")
	if err != nil {
		b.Fatal(err)
	}
	g := decisiontest.NewGenerator(5, t0)
	var tmpl []*aggregator.Partial
	for w := range 60 {
		p := aggregator.NewPartial(t0.Add(time.Duration(w)*size), size, 100)
		for _, d := range g.Batch(perWindow) {
			d.Time = p.Start
			p.Update(&d)
		}
		tmpl = append(tmpl, p)
	}
	sink := &aggregator.PartialsDir{Dir: dir}
	n := int(24 * time.Hour / size)
	var bytes int64
	for i := range n {
		p := tmpl[i%len(tmpl)]
		p.Start = t0.Add(time.Duration(i) * size)
		if err := sink.Write(context.Background(), "log", aggregator.Output{Partial: p, From: uint64(i), To: uint64(i)}); err != nil {
			b.Fatal(err)
		}
	}
	filepath.Walk(dir, func(_ string, fi os.FileInfo, _ error) error {
		if fi != nil && !fi.IsDir() {
			bytes += fi.Size()
		}
		return nil
	})
	b.Logf("a day of %v windows: %d files, %d MiB, %d events each", size, n, bytes>>20, perWindow)
	dayDirs[size] = dir
	return dir
}

// BenchmarkReportDay reads a stored day of partials and renders its
// report: what `ratewarden report --partials dir:… --from … --to …`
// spends, but for process start and writing the output.
func BenchmarkReportDay(b *testing.B) {
	for _, c := range []struct {
		size      time.Duration
		perWindow int
		formats   []Format
	}{
		{time.Minute, 2000, []Format{Markdown, HTML, JSON, CSV}},
		{time.Second, 100, []Format{Markdown}},
	} {
		for _, f := range c.formats {
			b.Run(fmt.Sprintf("window=%v/format=%v", c.size, f), func(b *testing.B) {
				dir := storedDay(b, c.size, c.perWindow)
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := rusage.CPU()
				for range b.N {
					w, err := ReadDir(b.Context(), dir, c.size, t0, t0.Add(24*time.Hour), nil)
					if err != nil || len(w.Problems) > 0 {
						b.Fatal(err, w.Problems)
					}
					r := Build(w, nil, Options{From: t0, To: t0.Add(24 * time.Hour)})
					if err := r.Render(io.Discard, f); err != nil {
						b.Fatal(err)
					}
					if r.Coverage.Read != int(24*time.Hour/c.size) {
						b.Fatalf("read %d windows", r.Coverage.Read)
					}
				}
				b.ReportMetric(float64(24*time.Hour/c.size)*float64(b.N)/b.Elapsed().Seconds(), "windows/s")
				// The machine is shared: CPU time says what the report
				// costs whatever else runs, wall time what it took.
				b.ReportMetric((rusage.CPU()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
			})
		}
	}
}
