package decisiontest

import (
	"math/rand/v2"
	"time"
)

// LingerBatches returns the sizes of the batches an emitter that lingers
// hands its writer when n decisions arrive at rate a second, as a Poisson
// process drawn from seed: a batch starts with the first decision after
// the previous batch, and takes every decision that arrives within linger
// of it, up to max. With linger the emitter's flush interval, it gives the
// batches of an emitter that does not linger, near enough. Sizes of
// records and log entries at a given rate are measured by writing batches
// of these sizes.
func LingerBatches(n int, rate float64, linger time.Duration, max int, seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, seed^0x6c696e676572))
	var out []int
	var start, now float64
	size := 0
	for range n {
		now += r.ExpFloat64() / rate
		if size > 0 && (now-start >= linger.Seconds() || size == max) {
			out = append(out, size)
			size = 0
		}
		if size == 0 {
			start = now
		}
		size++
	}
	if size > 0 {
		out = append(out, size)
	}
	return out
}

// TickBatches returns the sizes of the batches an emitter that does not
// linger hands its writer: every decision that arrived since the last
// tick, ticks interval apart, with n decisions arriving as in
// LingerBatches. Ticks with nothing make no batch.
func TickBatches(n int, rate float64, interval time.Duration, seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, seed^0x6c696e676572))
	var out []int
	var now float64
	tick, size := -1, 0
	for range n {
		now += r.ExpFloat64() / rate
		if t := int(now / interval.Seconds()); t != tick {
			if size > 0 {
				out = append(out, size)
			}
			tick, size = t, 0
		}
		size++
	}
	if size > 0 {
		out = append(out, size)
	}
	return out
}
