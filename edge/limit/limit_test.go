package limit_test

import (
	"math"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/edge/limit"
)

// base is a fixed instant at the start of a UTC day, so that it is aligned
// to every window that divides 24 hours.
var base = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

const (
	ms = time.Millisecond
	s  = time.Second
	m  = time.Minute
	h  = time.Hour
)

// step is one Take at base+at and the result it must see.
type step struct {
	at      time.Duration
	n       int64
	want    limit.Result
	allowed bool
}

// res is a Result whose Expires is given as an offset from base.
func res(count, remaining int64, reset, expires time.Duration) limit.Result {
	return limit.Result{Count: count, Remaining: remaining, Reset: reset, Expires: base + int64(expires)}
}

// resNever is a Result whose state never expires.
func resNever(count, remaining int64) limit.Result {
	return limit.Result{Count: count, Remaining: remaining, Expires: math.MaxInt64}
}

type algorithmCase struct {
	name  string
	rule  limit.Rule
	steps []step
}

// run plays each case's steps on one State from zero.
func run(t *testing.T, cases []algorithmCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var st limit.State
			for i, sp := range c.steps {
				got := c.rule.Take(&st, base+int64(sp.at), sp.n)
				if got != sp.want {
					t.Errorf("step %d: Take(at %v, n %d) = %+v, want %+v", i, sp.at, sp.n, got, sp.want)
				}
				if a := c.rule.Allowed(got); a != sp.allowed {
					t.Errorf("step %d: Allowed(%+v) = %v, want %v", i, got, a, sp.allowed)
				}
			}
		})
	}
}

func TestFixedWindow(t *testing.T) {
	minute := limit.Rule{Algorithm: limit.FixedWindow, Limit: 3, Window: m}
	run(t, []algorithmCase{
		{"counts_and_resets_at_the_boundary", minute, []step{
			{0, 1, res(1, 2, 60*s, 60*s), true},
			{10 * s, 1, res(2, 1, 50*s, 60*s), true},
			{20 * s, 1, res(3, 0, 40*s, 60*s), true},
			{30 * s, 1, res(4, 0, 30*s, 60*s), false},
			{60*s - 1, 1, res(5, 0, 1, 60*s), false},
			{60 * s, 1, res(1, 2, 60*s, 120*s), true},
			{119 * s, 1, res(2, 1, 1*s, 120*s), true},
		}},
		{"n_hits", minute, []step{
			{0, 2, res(2, 1, 60*s, 60*s), true},
			{0, 0, res(2, 1, 60*s, 60*s), true}, // n = 0 looks without counting
			{0, 2, res(4, 0, 60*s, 60*s), false},
			{0, 0, res(4, 0, 60*s, 60*s), false}, // refused hits are recorded without MaxCount
		}},
		{"negative_n_refunds_down_to_zero", minute, []step{
			{0, 2, res(2, 1, 60*s, 60*s), true},
			{1 * s, -1, res(1, 2, 59*s, 60*s), true},
			{2 * s, -3, res(0, 3, 58*s, 60*s), true},
			{3 * s, 1, res(1, 2, 57*s, 60*s), true},
		}},
		{"max_count_stops_recording", limit.Rule{Algorithm: limit.FixedWindow, Limit: 2, Window: m, MaxCount: 3}, []step{
			{0, 1, res(1, 1, 60*s, 60*s), true},
			{0, 1, res(2, 0, 60*s, 60*s), true},
			{0, 1, res(3, 0, 60*s, 60*s), false},
			{0, 1, res(4, 0, 60*s, 60*s), false}, // beyond MaxCount: not recorded
			{0, 1, res(4, 0, 60*s, 60*s), false},
			{0, 0, res(3, 0, 60*s, 60*s), false},
			{60 * s, 1, res(1, 1, 60*s, 120*s), true},
		}},
		{"1s_window", limit.Rule{Algorithm: limit.FixedWindow, Limit: 1, Window: s}, []step{
			{0, 1, res(1, 0, 1*s, 1*s), true},
			{999 * ms, 1, res(2, 0, 1*ms, 1*s), false},
			{1 * s, 1, res(1, 0, 1*s, 2*s), true},
			{5*s + 500*ms, 1, res(1, 0, 500*ms, 6*s), true},
		}},
		{"24h_window", limit.Rule{Algorithm: limit.FixedWindow, Limit: 2, Window: 24 * h}, []step{
			{0, 1, res(1, 1, 24*h, 24*h), true},
			{12 * h, 1, res(2, 0, 12*h, 24*h), true},
			{24*h - s, 1, res(3, 0, s, 24*h), false},
			{24 * h, 1, res(1, 1, 24*h, 48*h), true},
		}},
		// A hit stamped just before the boundary that reaches the state
		// after one stamped just after it counts in the new window instead
		// of reopening the old one.
		{"late_hit_from_the_previous_window", minute, []step{
			{60 * s, 1, res(1, 2, 60*s, 120*s), true},
			{60*s - 1*ms, 1, res(2, 1, 60*s+1*ms, 120*s), true},
			{60*s + 1*ms, 1, res(3, 0, 60*s-1*ms, 120*s), true},
			{60*s + 2*ms, 1, res(4, 0, 60*s-2*ms, 120*s), false},
		}},
		{"hit_two_windows_back_starts_afresh", minute, []step{
			{120 * s, 1, res(1, 2, 60*s, 180*s), true},
			{59 * s, 1, res(1, 2, 1*s, 60*s), true},
		}},
	})
}

func TestSlidingWindow(t *testing.T) {
	ten := limit.Rule{Algorithm: limit.SlidingWindow, Limit: 10, Window: m}
	run(t, []algorithmCase{
		// 8 hits in the previous window, 15 s into the current one: the
		// previous window still covers 45/60 = 0.75 of the sliding window,
		// so it weighs ⌈8 × 0.75⌉ = 6.
		{"weights_the_previous_window", ten, []step{
			{10 * s, 8, res(8, 2, 50*s, 120*s), true},
			{75 * s, 1, res(7, 3, 45*s, 180*s), true},
			{75 * s, 3, res(10, 0, 45*s, 180*s), true},
			{75 * s, 1, res(11, 0, 45*s, 180*s), false}, // recorded: current is 5
			{90 * s, 1, res(10, 0, 30*s, 180*s), true},  // ⌈8 × 0.5⌉ + 5 + 1
			{120 * s, 1, res(7, 3, 60*s, 240*s), true},  // the current 6 becomes the previous, whole
			{150 * s, 0, res(4, 6, 30*s, 240*s), true},  // ⌈6 × 0.5⌉ + 1
			{240 * s, 1, res(1, 9, 60*s, 360*s), true},  // two windows later: nothing left
		}},
		{"rounds_the_weight_up", limit.Rule{Algorithm: limit.SlidingWindow, Limit: 10, Window: m}, []step{
			{0, 3, res(3, 7, 60*s, 120*s), true},
			{80 * s, 0, res(2, 8, 40*s, 180*s), true},      // 3 × 40/60 = 2
			{81 * s, 0, res(2, 8, 39*s, 180*s), true},      // 3 × 39/60 = 1.95
			{100 * s, 0, res(1, 9, 20*s, 180*s), true},     // 3 × 20/60 = 1
			{100*s + 1, 0, res(1, 9, 20*s-1, 180*s), true}, // just under 1
			{120*s - 1, 0, res(1, 9, 1, 180*s), true},      // 3 × 1ns/60s
		}},
		// 1001 × (24h - e)/24h is 475 + 1/86400e9 here: a float64 product
		// rounds it to 475 exactly, and the count came out one short.
		{"exact_weight_in_a_24h_window", limit.Rule{Algorithm: limit.SlidingWindow, Limit: 2000, Window: 24 * h}, []step{
			{0, 1001, res(1001, 999, 24*h, 48*h), true},
			{24*h + 45400999000999, 0, res(476, 1524, 24*h-45400999000999, 72*h), true},
		}},
		{"1s_window", limit.Rule{Algorithm: limit.SlidingWindow, Limit: 4, Window: s}, []step{
			{0, 4, res(4, 0, 1*s, 2*s), true},
			{500 * ms, 1, res(5, 0, 500*ms, 2*s), false},
			{1*s + 250*ms, 1, res(5, 0, 750*ms, 3*s), false}, // ⌈5 × 0.75⌉ + 1
			{1*s + 750*ms, 0, res(3, 1, 250*ms, 3*s), true},  // ⌈5 × 0.25⌉ + 1
			{3 * s, 1, res(1, 3, 1*s, 5*s), true},
		}},
		{"negative_n_refunds_the_current_window", ten, []step{
			{0, 4, res(4, 6, 60*s, 120*s), true},
			{90 * s, 2, res(4, 6, 30*s, 180*s), true}, // ⌈4 × 0.5⌉ + 2
			{90 * s, -1, res(3, 7, 30*s, 180*s), true},
			{90 * s, -5, res(2, 8, 30*s, 180*s), true}, // the previous window is not refunded
		}},
		{"max_count_stops_recording", limit.Rule{Algorithm: limit.SlidingWindow, Limit: 2, Window: m, MaxCount: 3}, []step{
			{0, 3, res(3, 0, 60*s, 120*s), false},
			{0, 1, res(4, 0, 60*s, 120*s), false},
			{0, 0, res(3, 0, 60*s, 120*s), false},
			{60 * s, 1, res(4, 0, 60*s, 180*s), false}, // 3 + 1: not recorded
			{60 * s, 0, res(3, 0, 60*s, 180*s), false},
		}},
		// A late hit from the previous window neither reopens it nor drops
		// the count it carries into this one.
		{"late_hit_from_the_previous_window", limit.Rule{Algorithm: limit.SlidingWindow, Limit: 20, Window: m}, []step{
			{30 * s, 10, res(10, 10, 30*s, 120*s), true},
			{60 * s, 1, res(11, 9, 60*s, 180*s), true},
			{60*s - 1*ms, 1, res(12, 8, 60*s+1*ms, 180*s), true},
			{90 * s, 0, res(7, 13, 30*s, 180*s), true}, // ⌈10 × 0.5⌉ + 2
		}},
	})
}

func TestTokenBucket(t *testing.T) {
	// One hit refills per second; up to 5 at once.
	bucket := limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Window: 10 * s, Burst: 5, MaxCount: 5}
	run(t, []algorithmCase{
		{"burst_then_one_per_interval", bucket, []step{
			{0, 1, res(1, 4, 1*s, 1*s), true},
			{0, 4, res(5, 0, 5*s, 5*s), true},
			{0, 1, res(6, 0, 5*s, 5*s), false}, // beyond MaxCount: not recorded
			{1 * s, 1, res(5, 0, 5*s, 6*s), true},
			{1 * s, 1, res(6, 0, 5*s, 6*s), false},
			{1500 * ms, 1, res(6, 0, 4500*ms, 6*s), false}, // half an interval is not enough
			{2 * s, 1, res(5, 0, 5*s, 7*s), true},
			{7 * s, 1, res(1, 4, 1*s, 8*s), true}, // refilled
			{20 * s, 0, res(0, 5, 0, 20*s), true},
		}},
		{"burst_defaults_to_limit", limit.Rule{Algorithm: limit.TokenBucket, Limit: 3, Window: 3 * s}, []step{
			{0, 3, res(3, 0, 3*s, 3*s), true},
			{0, 1, res(4, 0, 4*s, 4*s), false},
		}},
		// Without MaxCount refused hits are recorded and push the refill
		// back: a client that keeps knocking stays out.
		{"refused_hits_recorded_without_max_count", limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Window: 10 * s, Burst: 5}, []step{
			{0, 5, res(5, 0, 5*s, 5*s), true},
			{0, 1, res(6, 0, 6*s, 6*s), false},
			{1 * s, 1, res(6, 0, 6*s, 7*s), false},
			{3 * s, 1, res(5, 0, 5*s, 8*s), true},
		}},
		// With MaxCount a flood is recorded up to it, so recovery takes at
		// most MaxCount intervals however long the flood.
		{"max_count_bounds_recovery", limit.Rule{Algorithm: limit.TokenBucket, Limit: 1, Window: m, MaxCount: 3}, []step{
			{0, 1, res(1, 0, 1*m, 1*m), true},
			{0, 2, res(3, 0, 3*m, 3*m), false},
			{0, 100, res(103, 0, 3*m, 3*m), false},
			{0, 1, res(4, 0, 3*m, 3*m), false},
			{3 * m, 1, res(1, 0, 1*m, 4*m), true},
		}},
		{"negative_n_refunds_down_to_empty", bucket, []step{
			{0, 3, res(3, 2, 3*s, 3*s), true},
			{0, -1, res(2, 3, 2*s, 2*s), true},
			{500 * ms, -5, res(0, 5, 0, 500*ms), true},
			{500 * ms, 1, res(1, 4, 1*s, 1500*ms), true},
		}},
		{"1s_window", limit.Rule{Algorithm: limit.TokenBucket, Limit: 4, Window: s}, []step{
			{0, 4, res(4, 0, 1*s, 1*s), true},
			{0, 1, res(5, 0, 1250*ms, 1250*ms), false},
			{500 * ms, 1, res(4, 0, 1*s, 1500*ms), true}, // ⌈(1250+250-500)/250⌉
		}},
		{"24h_window", limit.Rule{Algorithm: limit.TokenBucket, Limit: 24, Window: 24 * h, Burst: 2}, []step{
			{0, 2, res(2, 0, 2*h, 2*h), true},
			{30 * m, 0, res(2, 0, 90*m, 2*h), true}, // ⌈1.5⌉
			{1 * h, 1, res(2, 0, 2*h, 3*h), true},
		}},
		// Limit above Window's nanoseconds: the interval is 1 ns, not 0.
		{"interval_at_least_1ns", limit.Rule{Algorithm: limit.TokenBucket, Limit: 2e9, Window: s}, []step{
			{0, 1, res(1, 2e9-1, 1, 1), true},
			{0, 3, res(4, 2e9-4, 4, 4), true},
		}},
		// A flood without MaxCount saturates the arrival time; it used to
		// wrap it into the past, which emptied the bucket.
		{"flood_saturates", limit.Rule{Algorithm: limit.TokenBucket, Limit: 1, Window: 24 * h}, []step{
			{0, 1, res(1, 0, 24*h, 24*h), true},
			{0, 110_000, limit.Result{Count: ceilDiv(math.MaxInt64-base, int64(24*h)), Reset: time.Duration(math.MaxInt64 - base), Expires: math.MaxInt64}, false},
			{1 * s, 1, limit.Result{Count: ceilDiv(math.MaxInt64-base-int64(s), int64(24*h)), Reset: time.Duration(math.MaxInt64 - base - int64(s)), Expires: math.MaxInt64}, false},
		}},
	})
}

func ceilDiv(a, b int64) int64 { return (a-1)/b + 1 }

func TestConcurrency(t *testing.T) {
	three := limit.Rule{Algorithm: limit.Concurrency, Limit: 3}
	run(t, []algorithmCase{
		{"acquire_refuse_release", three, []step{
			{0, 1, resNever(1, 2), true},
			{0, 2, resNever(3, 0), true},
			{1 * s, 1, resNever(4, 0), false}, // refused: not recorded
			{2 * s, 0, resNever(3, 0), true},
			{3 * s, -1, resNever(2, 1), true},
			{4 * s, 1, resNever(3, 0), true},
			{5 * s, -3, res(0, 3, 0, 5*s), true}, // nothing in flight: the state is zero again
			{6 * s, -1, res(0, 3, 0, 6*s), true}, // never below 0
			{7 * s, 2, resNever(2, 1), true},
		}},
		{"refused_n_hits", three, []step{
			{0, 2, resNever(2, 1), true},
			{0, 2, resNever(4, 0), false},
			{0, 1, resNever(3, 0), true},
		}},
		{"window_and_clock_unused", limit.Rule{Algorithm: limit.Concurrency, Limit: 1, Window: s}, []step{
			{0, 1, resNever(1, 0), true},
			{48 * h, 1, resNever(2, 0), false},
		}},
	})
}

func TestRetryAfter(t *testing.T) {
	cases := []struct {
		name string
		rule limit.Rule
		hits []step // played from zero; the last result is refused
		want time.Duration
		// early: whether a hit 1 ns before want is allowed; false when
		// want is exact.
		early bool
	}{
		{"fixed_window_waits_for_the_reset",
			limit.Rule{Algorithm: limit.FixedWindow, Limit: 2, Window: m},
			[]step{{10 * s, 3, limit.Result{}, false}}, 50 * s, false},
		// All 11 hits in the current window: 11 × (60 - e)/60 ≤ 9 from
		// e = 60 × 2/11 s into the next window.
		{"sliding_window_waits_for_the_current_count_to_slide_out",
			limit.Rule{Algorithm: limit.SlidingWindow, Limit: 10, Window: m},
			[]step{{30 * s, 11, limit.Result{}, false}}, 30*s + 10909090910, false},
		{"sliding_window_limit_1_waits_a_whole_window",
			limit.Rule{Algorithm: limit.SlidingWindow, Limit: 1, Window: m},
			[]step{{30 * s, 2, limit.Result{}, false}}, 90 * s, false},
		{"token_bucket_waits_for_one_interval_after_the_flood",
			limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Window: 10 * s, Burst: 5},
			[]step{{0, 7, limit.Result{}, false}}, 3 * s, false},
		{"token_bucket_unrecorded_refusal",
			limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Window: 10 * s, Burst: 5, MaxCount: 5},
			[]step{{0, 5, limit.Result{}, true}, {0, 1, limit.Result{}, false}}, 1 * s, false},
		// 9 hits at once are refused and not recorded; one would fit now,
		// but RetryAfter is at least one interval.
		{"token_bucket_at_least_one_interval",
			limit.Rule{Algorithm: limit.TokenBucket, Limit: 10, Window: 10 * s, Burst: 5, MaxCount: 5},
			[]step{{0, 9, limit.Result{}, false}}, 1 * s, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var st limit.State
			var r limit.Result
			var at int64
			for _, sp := range c.hits {
				at = base + int64(sp.at)
				r = c.rule.Take(&st, at, sp.n)
			}
			got := c.rule.RetryAfter(r)
			if got != c.want {
				t.Fatalf("RetryAfter(%+v) = %v, want %v", r, got, c.want)
			}
			after, before := st, st
			if res := c.rule.Take(&after, at+int64(got), 1); !c.rule.Allowed(res) {
				t.Errorf("a hit after RetryAfter was refused: %+v", res)
			}
			if res := c.rule.Take(&before, at+int64(got)-1, 1); c.rule.Allowed(res) != c.early {
				t.Errorf("a hit 1ns before RetryAfter saw %+v: allowed %v, want %v", res, !c.early, c.early)
			}
		})
	}

	t.Run("allowed_is_zero", func(t *testing.T) {
		rules := []limit.Rule{
			{Algorithm: limit.FixedWindow, Limit: 1, Window: s},
			{Algorithm: limit.SlidingWindow, Limit: 1, Window: s},
			{Algorithm: limit.TokenBucket, Limit: 1, Window: s},
			{Algorithm: limit.Concurrency, Limit: 1},
		}
		for _, r := range rules {
			var st limit.State
			if got := r.RetryAfter(r.Take(&st, base, 1)); got != 0 {
				t.Errorf("%v: RetryAfter of an allowed hit = %v", r.Algorithm, got)
			}
		}
	})
}

// TestExpires checks that at Expires a state is equivalent to the zero State.
func TestExpires(t *testing.T) {
	rules := []limit.Rule{
		{Algorithm: limit.FixedWindow, Limit: 3, Window: s},
		{Algorithm: limit.FixedWindow, Limit: 3, Window: 24 * h},
		{Algorithm: limit.SlidingWindow, Limit: 3, Window: s},
		{Algorithm: limit.SlidingWindow, Limit: 3, Window: 24 * h},
		{Algorithm: limit.TokenBucket, Limit: 3, Window: s, Burst: 2},
		{Algorithm: limit.TokenBucket, Limit: 3, Window: 24 * h, MaxCount: 6},
		{Algorithm: limit.Concurrency, Limit: 3},
	}
	for _, r := range rules {
		t.Run(r.Algorithm.String()+"_"+r.Window.String(), func(t *testing.T) {
			var st limit.State
			now := base + int64(r.Window)/3
			var last limit.Result
			// Concurrency: 2 in flight, 5 refused, 3, 2, then none, so
			// the state expires at once.
			for _, n := range []int64{2, 5, 1, -1, -2} {
				last = r.Take(&st, now, n)
			}
			at := last.Expires
			seen, fresh := st, limit.State{}
			got, want := r.Take(&seen, at, 1), r.Take(&fresh, at, 1)
			if got != want || seen != fresh {
				t.Errorf("at Expires: state %+v gave %+v → %+v, the zero State %+v → %+v", st, got, seen, want, fresh)
			}
		})
	}
}

func TestCapacity(t *testing.T) {
	cases := []struct {
		rule limit.Rule
		want int64
	}{
		{limit.Rule{Algorithm: limit.FixedWindow, Limit: 5, Burst: 9}, 5},
		{limit.Rule{Algorithm: limit.TokenBucket, Limit: 5}, 5},
		{limit.Rule{Algorithm: limit.TokenBucket, Limit: 5, Burst: 9}, 9},
		{limit.Rule{Algorithm: limit.Concurrency, Limit: 5, Burst: 9}, 5},
	}
	for _, c := range cases {
		if got := c.rule.Capacity(); got != c.want {
			t.Errorf("%+v.Capacity() = %d, want %d", c.rule, got, c.want)
		}
	}
}

// FuzzTake plays a sequence of hits, some with a clock that steps back, on
// one state and checks the invariants every store relies on.
func FuzzTake(f *testing.F) {
	// alg: 0 fixed window, 1 sliding window, 2 token bucket, 3 concurrency.
	f.Add(uint8(0), uint32(60), int64(10), int64(0), int64(0), int64(base), []byte{0, 4, 10, 4, 200, 1, 255, 6})
	f.Add(uint8(1), uint32(60), int64(10), int64(0), int64(0), int64(base), []byte{1, 6, 130, 4, 140, 3, 0, 0})
	f.Add(uint8(2), uint32(10), int64(10), int64(5), int64(6), int64(base), []byte{0, 6, 0, 6, 0, 6, 70, 4})
	f.Add(uint8(2), uint32(86400), int64(1), int64(0), int64(0), int64(0), []byte{0, 6, 0, 6, 255, 6})
	f.Add(uint8(3), uint32(1), int64(3), int64(0), int64(0), int64(base), []byte{0, 6, 0, 6, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(uint8(1), uint32(86400), int64(math.MaxInt64), int64(0), int64(0), int64(base), []byte{0, 6, 191, 1})
	units := [4]int64{1, int64(ms), int64(s), int64(m)}
	f.Fuzz(func(t *testing.T, alg uint8, windowSec uint32, lim, burst, maxCount, start int64, ops []byte) {
		r := limit.Rule{
			Algorithm: limit.Algorithm(alg%4 + 1),
			Limit:     max(lim&math.MaxInt64, 1),
			Window:    time.Duration(1+windowSec%86400) * s,
			Burst:     burst & math.MaxInt64,
			MaxCount:  maxCount & math.MaxInt64,
		}
		capacity := r.Capacity()
		now := start & (1<<62 - 1)
		var st limit.State
		expires := int64(math.MaxInt64)
		for i := 0; i+1 < len(ops); i += 2 {
			// Op byte: bit 7 steps the clock back, bits 6-5 the unit,
			// bits 4-0 how many units. n byte: -3 to 3.
			dt := int64(ops[i]&31) * units[ops[i]>>5&3]
			if ops[i]&128 != 0 {
				dt = -dt
			}
			now = max(now+dt, 0)
			n := int64(ops[i+1]%7) - 3

			if now >= expires {
				seen, fresh := st, limit.State{}
				if got, want := r.Take(&seen, now, n), r.Take(&fresh, now, n); got != want {
					t.Fatalf("op %d: %+v expired at %d, but at %d it gave %+v where the zero State gives %+v", i/2, st, expires, now, got, want)
				}
			}
			before := st
			res := r.Take(&st, now, n)
			switch {
			case res.Remaining < 0:
				t.Fatalf("op %d: Take(%+v, %d, %d) = %+v: Remaining < 0", i/2, before, now, n, res)
			case res.Remaining > capacity:
				t.Fatalf("op %d: Take(%+v, %d, %d) = %+v: Remaining > capacity %d", i/2, before, now, n, res, capacity)
			case res.Count < 0:
				t.Fatalf("op %d: Take(%+v, %d, %d) = %+v: Count < 0", i/2, before, now, n, res)
			case res.Reset < 0:
				t.Fatalf("op %d: Take(%+v, %d, %d) = %+v: Reset < 0", i/2, before, now, n, res)
			case res.Expires < now:
				t.Fatalf("op %d: Take(%+v, %d, %d) = %+v: Expires before now", i/2, before, now, n, res)
			case r.Allowed(res) && res.Remaining != capacity-res.Count && r.Algorithm != limit.Concurrency:
				t.Fatalf("op %d: Take(%+v, %d, %d) = %+v: allowed, but Remaining is not capacity - Count", i/2, before, now, n, res)
			case r.Algorithm == limit.Concurrency && st.B < 0:
				t.Fatalf("op %d: Take(%+v, %d, %d): in flight %d < 0", i/2, before, now, n, st.B)
			case r.Algorithm == limit.Concurrency && n < 0 && res.Count != st.B:
				t.Fatalf("op %d: release Take(%+v, %d, %d) = %+v: count is not the %d in flight", i/2, before, now, n, res, st.B)
			}
			expires = res.Expires

			// Waiting RetryAfter without further hits lets one hit in.
			// Concurrency slots free on release, not with time: their
			// RetryAfter is 0.
			ra := r.RetryAfter(res)
			if zero := r.Allowed(res) || r.Algorithm == limit.Concurrency; (ra == 0) != zero {
				t.Fatalf("op %d: %+v: allowed %v, RetryAfter %v", i/2, res, r.Allowed(res), ra)
			}
			if ra > 0 && now <= math.MaxInt64-int64(ra) {
				probe := st
				if after := r.Take(&probe, now+int64(ra), 1); !r.Allowed(after) {
					t.Fatalf("op %d: %+v: RetryAfter %v, but a hit then saw %+v", i/2, res, ra, after)
				}
			}
		}
	})
}
