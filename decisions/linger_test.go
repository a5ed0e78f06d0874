package decisions

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// stamped records each batch written and the (bubble's) time of writing.
type stamped struct {
	mu      sync.Mutex
	batches [][]Decision
	at      []time.Time
}

func (s *stamped) WriteBatch(ds []Decision) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, append([]Decision(nil), ds...))
	s.at = append(s.at, time.Now())
	return nil
}

func (s *stamped) Flush() error { return nil }

// TestEmitterLinger runs the lingering writer under testing/synctest: at
// a low rate each batch waits for others, never more than Linger; at a
// high rate full batches go at once; Close writes what lingers.
func TestEmitterLinger(t *testing.T) {
	const linger = time.Second
	f := func(name string, every time.Duration, n, batch, minBatches, maxBatches int, closeEarly bool) {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := &stamped{}
				e := NewEmitter(w, EmitterOptions{Queue: 4096, Batch: batch, Linger: linger, DropReport: time.Hour})
				t0 := time.Now()
				for i := range n {
					d := sample()
					d.Time = time.Now()
					d.Count = int64(i)
					if !e.Emit(d) {
						t.Fatalf("emit %d dropped", i)
					}
					if every > 0 {
						time.Sleep(every)
					}
				}
				if !closeEarly {
					time.Sleep(2 * linger)
				}
				closedAt := time.Now()
				if err := e.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
				total := 0
				for i, b := range w.batches {
					for _, d := range b {
						wait := w.at[i].Sub(d.Time)
						if wait > linger {
							t.Errorf("decision %d waited %v, more than the linger", d.Count, wait)
						}
						if every == 0 && i < len(w.batches)-1 && wait != 0 {
							t.Errorf("decision %d waited %v though batches were full", d.Count, wait)
						}
						if d.Count != int64(total) {
							t.Fatalf("decision %d written as #%d", d.Count, total)
						}
						total++
					}
				}
				if total != n || len(w.batches) < minBatches || len(w.batches) > maxBatches {
					t.Errorf("%d decisions in %d batches, want %d in %d to %d", total, len(w.batches), n, minBatches, maxBatches)
				}
				for i, b := range w.batches {
					if len(b) > batch {
						t.Errorf("batch %d holds %d decisions, more than %d", i, len(b), batch)
					}
				}
				if closeEarly && (len(w.at) == 0 || !w.at[len(w.at)-1].Equal(closedAt) || closedAt.Sub(t0) >= linger) {
					t.Errorf("Close did not write what lingered at once: batches at %v, closed at %v", w.at, closedAt)
				}
			})
		})
	}
	// About 9 a second (every 110 ms, so that no decision arrives at the
	// instant a wait ends): a batch of 10 a second, not 50 of 2.
	f("low_rate", 110*time.Millisecond, 100, 1024, 10, 10, false)
	// 1000 at once, batches of 100: written as they fill, without waiting
	// (what arrives while a batch is written may make a short one).
	f("high_rate", 0, 1000, 100, 10, 20, false)
	f("close_flushes", 100*time.Millisecond, 5, 1024, 1, 1, true)
}

// TestFanoutFlushLingering: Flush writes what lingers in every lane at
// once (Lambda flushes before each response), without waiting for the
// linger.
func TestFanoutFlushLingering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := &stamped{}, &stamped{}
		opts := EmitterOptions{Batch: 1024, Linger: time.Minute, DropReport: time.Hour}
		f := NewFanout(Lane{Name: "a", Writer: a, Options: opts}, Lane{Name: "b", Writer: b, Options: opts})
		t0 := time.Now()
		for range 3 {
			f.Emit(sample())
		}
		if err := f.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		for name, w := range map[string]*stamped{"a": a, "b": b} {
			if len(w.batches) != 1 || len(w.batches[0]) != 3 || !w.at[0].Equal(t0) {
				t.Errorf("lane %s: batches %v at %v, want the 3 decisions at once", name, len(w.batches), w.at)
			}
		}
		if err := f.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
