package aggregator

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/decisions"
)

// TestRollupQuietReleasesCorrections: a late event of a partition that
// then goes quiet (a Kinesis shard whose edge lingered past lateness and
// idle time, then stopped) leaves as a correction once the partition is
// quiet again, not only with a window that closes later, which on a quiet
// shard never comes. While events still arrive, it waits for a closing
// window as before.
func TestRollupQuietReleasesCorrections(t *testing.T) {
	r := NewRollup(Options{Window: time.Second, Lateness: 100 * time.Millisecond})
	d := decisions.Decision{Time: t0.Add(200 * time.Millisecond), Tier: "anonymous", Outcome: decisions.Allow,
		ClientIP: netip.MustParseAddr("192.0.2.1")}
	r.Add(&d, 0)
	wall := t0.Add(2 * time.Second)
	f := func(step string, advance bool, wantWindows, wantCorrections int) {
		t.Helper()
		if advance {
			r.Advance(wall)
			wall = wall.Add(time.Second) // each Advance a second after the last: the Idle
		}
		var windows, corrections int
		for _, o := range r.take(false, nil) {
			if o.Correction {
				corrections++
				if o.Partial.Events != 1 || !o.Partial.Start.Equal(t0) {
					t.Errorf("%s: a correction of %v holding %d events", step, o.Partial.Start, o.Partial.Events)
				}
			} else {
				windows++
			}
		}
		if windows != wantWindows || corrections != wantCorrections {
			t.Errorf("%s: %d windows and %d corrections, want %d and %d", step, windows, corrections, wantWindows, wantCorrections)
		}
	}
	f("the event seen", true, 0, 0)
	f("quiet for a second: the window closes", true, 1, 0)
	late := d
	r.Add(&late, 1)
	f("the late event", false, 0, 0)
	f("the late event seen", true, 0, 0)
	f("quiet again: its correction leaves", true, 0, 1)
	f("nothing more", true, 0, 0)
	if st := r.Stats(); st.Late != 1 || st.Corrections != 1 {
		t.Errorf("stats %+v", st)
	}
}
