package demo

import "time"

// StoryClock returns the demo's accelerated clock: from start, story time
// runs speed times as fast as wall (story = start + (wall − start) ×
// speed). At speed 1 it is wall itself.
func StoryClock(start time.Time, speed float64, wall func() time.Time) func() time.Time {
	if speed <= 1 {
		return wall
	}
	return func() time.Time {
		return start.Add(time.Duration(float64(wall().Sub(start)) * speed))
	}
}
