package demo

import (
	"sync"
	"time"
)

// Story is the demo's story clock. From its start story time runs speed
// times as fast as wall time, but it waits for the pipeline: it runs at
// most ahead past the story time of the last CaughtUp, and stays there
// until the next. What the pipeline spends in wall time (the aggregator's
// batches, longer on a busy machine) then slows the story down instead
// of costing speed times as much story time while the story runs on. It
// is safe for concurrent use; the zero value is not usable: use NewStory.
type Story struct {
	speed float64
	ahead time.Duration // ≤ 0: the story never waits
	wall  func() time.Time

	mu         sync.Mutex
	at, atWall time.Time     // story time was at when wall time was atWall
	until      time.Time     // story time does not pass it
	held       time.Duration // wall time spent waiting
	heldSince  time.Time     // wall time the story reached until, zero while it runs
}

// NewStory returns a story clock that starts at start (story time is wall
// time then), runs speed times as fast as wall (at least as fast), and
// waits ahead past each CaughtUp; ahead ≤ 0 never waits.
func NewStory(start time.Time, speed float64, ahead time.Duration, wall func() time.Time) *Story {
	return &Story{speed: max(speed, 1), ahead: ahead, wall: wall, at: start, atWall: start, until: start.Add(ahead)}
}

// Now returns story time.
func (s *Story) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now()
}

// CaughtUp says the pipeline has done everything the story gave it so
// far: story time may run ahead past now.
func (s *Story) CaughtUp() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.until = s.now().Add(s.ahead)
	s.heldSince = time.Time{}
}

// Held returns the wall time the story has spent waiting so far.
func (s *Story) Held() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now()
	return s.held
}

// Stalled returns the wall time the story has been waiting since the
// pipeline last caught up: 0 while it runs.
func (s *Story) Stalled() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now()
	if s.heldSince.IsZero() {
		return 0
	}
	return s.wall().Sub(s.heldSince)
}

// now is Now with s.mu held. A story past until is held there, and goes on
// from there at the wall time of the call that finds until moved.
func (s *Story) now() time.Time {
	w := s.wall()
	t := s.at.Add(time.Duration(float64(w.Sub(s.atWall)) * s.speed))
	if s.ahead <= 0 || !t.After(s.until) {
		return t
	}
	reached := s.atWall.Add(time.Duration(float64(s.until.Sub(s.at)) / s.speed))
	s.held += max(w.Sub(reached), 0)
	if s.heldSince.IsZero() {
		s.heldSince = reached
	}
	s.at, s.atWall = s.until, w
	return s.until
}
