package assemble_test

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/aggregator/alerts"
)

// BenchmarkAlertLatency measures, in windows, how long each attack of the
// scenarios takes to raise its alert: from the window the attack begins
// in to the end of the window whose alert fired (1: the first window of
// the attack). Each iteration runs the three attacks of
// TestScraperIsAHeavyHitter, TestCredentialStuffing and
// TestProUserRefusedIsAFalsePositive with another seed for the
// background; the metrics are the worst over the iterations. Windows are
// 1 minute; a window closes 1 s of event time after its end.
func BenchmarkAlertLatency(b *testing.B) {
	worst := map[string]int{}
	seed := uint64(100)
	for b.Loop() {
		seed++
		for _, sc := range []struct {
			name, key string
			at        time.Duration
			each      func(s *sim, sec time.Time)
		}{
			{"heavy_hitter", "heavy_hitter/anonymous:global/203.0.113.7", 10 * time.Minute, func(s *sim, sec time.Time) {
				for i := range 800 {
					s.do(sec.Add(time.Duration(i)*time.Second/800), "203.0.113.7", "", "", "/")
				}
			}},
			{"credential_stuffing", "credential_stuffing/anonymous/anonymous:/api/login", 10 * time.Minute, func(s *sim, sec time.Time) {
				for i := range 500 {
					if (i+int(sec.Unix()))%12 == 0 {
						s.do(sec, addr(i), "", "", "/api/login")
					}
				}
			}},
			{"false_positive", "false_positive/pro/pro:/api/export", 10*time.Minute + 30*time.Second, func(s *sim, sec time.Time) {
				if sec.Second() == 30 {
					for range 8 {
						s.do(sec, "192.0.2.107", "p-7", "pro", "/api/export")
					}
				}
			}},
		} {
			var out bytes.Buffer
			s := newSim(b, loadSimConfig(b, ""), time.Minute, &out, "", nil)
			at := t0.Add(sc.at)
			s.run(t0, t0.Add(14*time.Minute), rand.New(rand.NewPCG(seed, 1)), background, func(sec time.Time) {
				if !sec.Before(at) && sec.Before(at.Add(2*time.Minute)) {
					sc.each(s, sec)
				}
			})
			as, _ := records(b, out.Bytes())
			a, ok := find(as, sc.key, alerts.Firing)
			if !ok {
				b.Fatalf("%s: no alert:%s", sc.name, keys(as))
			}
			worst[sc.name] = max(worst[sc.name], windowsAfter(at.Truncate(time.Minute), a.WindowEnd, time.Minute))
		}
	}
	for name, w := range worst {
		b.ReportMetric(float64(w), "windows/"+name)
	}
}
