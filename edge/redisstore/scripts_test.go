package redisstore

import (
	"context"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/decisions/awstest"
)

// These tests run the scripts' helpers on the server and compare them
// with int64 and 128-bit arithmetic: the bounds they are documented for
// are where a double stops being exact.

func evalInts(t *testing.T, src string, args ...any) []int64 {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: awstest.Endpoint(t, awstest.RedisEnv), ContextTimeoutEnabled: true})
	defer c.Close()
	v, err := c.Eval(context.Background(), src, []string{}, args...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestWeigh(t *testing.T) {
	const maxW = uint64(24 * time.Hour)
	type triple struct{ p, x, w uint64 }
	cases := []triple{
		{1<<32 - 1, maxW, maxW},
		{1<<32 - 1, maxW - 1, maxW},
		{1<<32 - 1, 1, maxW},
		{1<<32 - 1, maxW - 1, maxW - 1},
		{1<<32 - 2, maxW/2 + 1, maxW},
		{4, 1, uint64(time.Second)},
		{0, maxW, maxW},
		{5, 0, maxW},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		w := uint64(time.Second) + rng.Uint64N(maxW-uint64(time.Second)+1)
		cases = append(cases, triple{rng.Uint64N(1 << 32), rng.Uint64N(w + 1), w})
	}
	args := make([]any, 0, 3*len(cases))
	for _, c := range cases {
		args = append(args, c.p, c.x, c.w)
	}
	got := evalInts(t, prelude+weighFn+`
local out = {}
for i = 1, #ARGV, 3 do
  out[#out + 1] = weigh(tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]))
end
return out
`, args...)
	for i, c := range cases {
		hi, lo := bits.Mul64(c.p, c.x)
		q, rem := bits.Div64(hi, lo, c.w)
		if rem != 0 {
			q++
		}
		if uint64(got[i]) != q {
			t.Errorf("weigh(%d, %d, %d) = %d, want %d", c.p, c.x, c.w, got[i], q)
		}
	}
}

func TestMulDiv(t *testing.T) {
	type triple struct{ a, b, c uint64 }
	const maxA, maxB = 1<<53 - 1, 1 << 47
	cases := []triple{{maxA, 1, 1}, {maxA, maxB, maxB}, {maxA, 1e9, maxB}, {maxA - 1, maxB - 1, maxB}, {1, maxB, 1e9}, {0, maxB, 3}}
	rng := rand.New(rand.NewPCG(5, 6))
	for len(cases) < 2000 {
		c := triple{rng.Uint64N(maxA + 1), rng.Uint64N(maxB + 1), 1 + rng.Uint64N(maxB)}
		if hi, lo := bits.Mul64(c.a, c.b); hi < c.c {
			if q, _ := bits.Div64(hi, lo, c.c); q < 1<<53 {
				cases = append(cases, c)
			}
		}
	}
	args := make([]any, 0, 3*len(cases))
	for _, c := range cases {
		args = append(args, c.a, c.b, c.c)
	}
	got := evalInts(t, prelude+`
local out = {}
for i = 1, #ARGV, 3 do
  local q, r = muldiv(tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]))
  out[#out + 1] = q
  out[#out + 1] = r
end
return out
`, args...)
	for i, c := range cases {
		hi, lo := bits.Mul64(c.a, c.b)
		q, rem := bits.Div64(hi, lo, c.c)
		if uint64(got[2*i]) != q || uint64(got[2*i+1]) != rem {
			t.Errorf("muldiv(%d, %d, %d) = %d, %d; want %d, %d", c.a, c.b, c.c, got[2*i], got[2*i+1], q, rem)
		}
	}
}

func TestFloorDivision(t *testing.T) {
	type pair struct{ a, b int64 }
	const top = 1<<53 - 1
	cases := []pair{{top, 1}, {top, 3}, {top - 1, 1 << 47}, {-top, 7}, {0, 5}, {-1, 5}, {1893456000123456, 1_000_000}}
	// Just below a multiple of b the double quotient rounds up to it.
	for _, b := range []int64{3, 1 << 20, 1<<20 + 1, 1 << 30, 12345677, 1 << 47} {
		cases = append(cases, pair{top/b*b - 1, b}, pair{-(top / b * b) + 1, b})
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		b := 1 + rng.Int64N(1<<47)
		cases = append(cases, pair{rng.Int64N(2*top) - top, b})
	}
	args := make([]any, 0, 2*len(cases))
	for _, c := range cases {
		args = append(args, c.a, c.b)
	}
	got := evalInts(t, prelude+`
local out = {}
for i = 1, #ARGV, 2 do
  local a, b = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  out[#out + 1] = fdiv(a, b)
  out[#out + 1] = cdiv(a, b)
end
return out
`, args...)
	for i, c := range cases {
		q := c.a / c.b
		if c.a%c.b != 0 && c.a < 0 {
			q--
		}
		cq := int64(0)
		if c.a > 0 {
			cq = (c.a-1)/c.b + 1
		}
		if got[2*i] != q || got[2*i+1] != cq {
			t.Errorf("fdiv, cdiv(%d, %d) = %d, %d; want %d, %d", c.a, c.b, got[2*i], got[2*i+1], q, cq)
		}
	}
}

// TestServerWindow checks the split of the server's time into a window
// index and the nanoseconds into it.
func TestServerWindow(t *testing.T) {
	windows := []time.Duration{time.Second, 7 * time.Second, 1500 * time.Millisecond, time.Second + time.Microsecond, 24 * time.Hour, 24*time.Hour - time.Microsecond}
	for _, w := range windows {
		got := evalInts(t, prelude+`return {window(tonumber(ARGV[3]))}`, "", "", int64(w))
		idx, el, us := got[0], got[1], got[2]
		if idx*int64(w)+el != us*1000 || el < 0 || el >= int64(w) {
			t.Errorf("window %v at %d µs: index %d, elapsed %d ns", w, us, idx, el)
		}
	}
}
