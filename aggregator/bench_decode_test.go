package aggregator

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions/decisiontest"
)

// BenchmarkDecodePartial is what reading one stored partial costs a
// reader (report, alerts, the dashboard) once its bytes are in memory:
// DecodePartial of a minute's window of the generator's traffic (lists of
// 100), by the events the window holds.
func BenchmarkDecodePartial(b *testing.B) {
	for _, n := range []int{2_000, 65_536} {
		p := NewPartial(t0, time.Minute, 100)
		for _, d := range decisiontest.NewGenerator(1, t0).Batch(n) {
			p.Update(&d)
		}
		enc, err := p.AppendBinary(nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%d-events", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(enc)))
			for b.Loop() {
				if _, err := DecodePartial(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
