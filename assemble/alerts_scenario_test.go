package assemble_test

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"time"
)

// traffic is the legitimate background: requests per second by kind, at
// full volume (a diurnal shape scales them).
type traffic struct {
	anon, login, users, pro float64
	diurnal                 bool // scale by 1 + 0.7·sin over the day
}

// background is the traffic of every test: anonymous clients among 60
// addresses, a few logins, free users and pro users, all well within
// their limits.
var background = traffic{anon: 2, login: 0.15, users: 1, pro: 0.5}

// run drives [from, to) second by second: the background at its rates
// (a fractional rate is drawn), and each, if set, for whatever the
// scenario adds in that second. The rollup is flushed at the end.
func (s *sim) run(from, to time.Time, rng *rand.Rand, bg traffic, each func(sec time.Time)) {
	for sec := from; sec.Before(to); sec = sec.Add(time.Second) {
		scale := 1.0
		if bg.diurnal {
			day := float64(sec.Sub(t0)%(24*time.Hour)) / float64(24*time.Hour)
			scale = 1 + 0.7*math.Sin(2*math.Pi*day)
		}
		n := func(rate float64) int { return int(rate*scale + rng.Float64()) }
		for i := range n(bg.anon) {
			s.do(sec.Add(time.Duration(i)*time.Millisecond), "198.51.100."+strconv.Itoa(1+rng.IntN(60)), "", "", "/")
		}
		for range n(bg.login) {
			s.do(sec.Add(100*time.Millisecond), "198.51.100."+strconv.Itoa(100+rng.IntN(10)), "", "", "/api/login")
		}
		for range n(bg.users) {
			u := rng.IntN(40)
			s.do(sec.Add(200*time.Millisecond), "192.0.2."+strconv.Itoa(1+u), "u-"+strconv.Itoa(u), "free", "/api/items")
		}
		for range n(bg.pro) {
			u := rng.IntN(10)
			s.do(sec.Add(300*time.Millisecond), "192.0.2."+strconv.Itoa(100+u), "p-"+strconv.Itoa(u), "pro", "/api/items")
		}
		if each != nil {
			each(sec)
		}
	}
	s.flush(true)
}

// addr returns the i-th address of 10.0.0.0/16.
func addr(i int) string { return netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}).String() }

// windowsAfter is how many windows of size from start the alert's
// evidence ends: 1 when it fired on the first window of the attack.
func windowsAfter(start, end time.Time, size time.Duration) int {
	return int((end.Sub(start) + size - 1) / size)
}
