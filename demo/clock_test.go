package demo

import (
	"testing"
	"time"
)

// TestStory: story time runs speed times as fast as wall time, stops
// ahead past the last CaughtUp, counting the wall time it waits (Held, and
// Stalled for the present wait alone), and goes on from where it stopped
// (no jump) once caught up; with ahead 0 it never waits, and at speed 1 it
// is wall time.
func TestStory(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	type step struct {
		wall  time.Duration  // since start
		then  func(s *Story) // before Now
		story time.Duration  // Now, since start
		held  time.Duration  // Held
		stall time.Duration  // Stalled
	}
	run, caughtUp := func(*Story) {}, (*Story).CaughtUp
	for _, c := range []struct {
		name  string
		speed float64
		ahead time.Duration
		steps []step
	}{
		{"speed 10, 5 s ahead", 10, 5 * time.Second, []step{
			{200 * time.Millisecond, run, 2 * time.Second, 0, 0},
			{500 * time.Millisecond, run, 5 * time.Second, 0, 0},
			{time.Second, run, 5 * time.Second, 500 * time.Millisecond, 500 * time.Millisecond},
			{1200 * time.Millisecond, run, 5 * time.Second, 700 * time.Millisecond, 700 * time.Millisecond},
			{1500 * time.Millisecond, caughtUp, 5 * time.Second, time.Second, 0},
			{1600 * time.Millisecond, run, 6 * time.Second, time.Second, 0},
			{3 * time.Second, run, 10 * time.Second, 2 * time.Second, time.Second},
			{3 * time.Second, caughtUp, 10 * time.Second, 2 * time.Second, 0},
			{3100 * time.Millisecond, run, 11 * time.Second, 2 * time.Second, 0},
		}},
		{"speed 10, never waiting", 10, 0, []step{
			{6 * time.Second, caughtUp, time.Minute, 0, 0},
			{7 * time.Second, run, 70 * time.Second, 0, 0},
		}},
		{"speed 1", 1, time.Hour, []step{
			{3 * time.Second, run, 3 * time.Second, 0, 0},
		}},
	} {
		wall := start
		s := NewStory(start, c.speed, c.ahead, func() time.Time { return wall })
		for _, st := range c.steps {
			wall = start.Add(st.wall)
			st.then(s)
			if got, held, stall := s.Now().Sub(start), s.Held(), s.Stalled(); got != st.story || held != st.held || stall != st.stall {
				t.Errorf("%s: %v of wall time: %v of story time, held %v, stalled %v; want %v, held %v, stalled %v",
					c.name, st.wall, got, held, stall, st.story, st.held, st.stall)
			}
		}
	}
}
