package decisions

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestFanoutHungLane: one writer hangs (a stream that never answers); the
// other, fed at ten times its queue, loses nothing, while the hung lane
// drops and counts. Through one Emitter and a Tee, both would drop.
func TestFanoutHungLane(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hung := &memWriter{gate: make(chan struct{})}
		local := &memWriter{}
		opts := EmitterOptions{Queue: 256, Batch: 64, Interval: 200 * time.Millisecond, DropReport: time.Hour}
		f := NewFanout(Lane{Name: "kinesis", Writer: hung, Options: opts}, Lane{Name: "log", Writer: local, Options: opts})
		const n = 2560
		for i := range n {
			d := sample()
			d.Count = int64(i)
			f.Emit(d)
			if i%128 == 127 {
				// 128 decisions every 200 ms: 640 a second, three times
				// the rate that dropped from the local log before.
				time.Sleep(200 * time.Millisecond)
				synctest.Wait()
			}
		}
		stats := map[string]EmitterStats{}
		f.Lanes(func(name string, e *Emitter) { stats[name] = e.Stats() })
		if s := stats["log"]; s.Dropped != 0 || s.Emitted != n {
			t.Errorf("local log lane %+v, want all %d and no drop", s, n)
		}
		if s := stats["kinesis"]; s.Dropped == 0 || s.Emitted+s.Dropped != n {
			t.Errorf("hung lane %+v, want drops counted", s)
		}
		close(hung.gate)
		if err := f.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(local.got) != n {
			t.Fatalf("local log has %d decisions, want %d", len(local.got), n)
		}
		for i, d := range local.got {
			if d.Count != int64(i) {
				t.Fatalf("decision %d written as #%d", d.Count, i)
			}
		}
		last := hung.got[len(hung.got)-1]
		if last.Kind != KindDrops || last.Dropped != stats["kinesis"].Dropped {
			t.Errorf("the hung lane's drops are not reported in its own writer: %+v", last)
		}
	})
}

// TestTeeHungWriter shows what Fanout is for: behind one Emitter and a
// Tee, a hung writer makes the local one drop too.
func TestTeeHungWriter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hung := &memWriter{gate: make(chan struct{})}
		local := &memWriter{}
		e := NewEmitter(Tee(hung, local), EmitterOptions{Queue: 256, Batch: 64, DropReport: time.Hour})
		for range 1024 {
			e.Emit(sample())
		}
		synctest.Wait()
		if e.Stats().Dropped == 0 {
			t.Error("no drop behind a hung writer")
		}
		close(hung.gate)
		e.Close(context.Background())
	})
}
