package redisstore

import "github.com/redis/go-redis/v9"

// The scripts keep every value they compute below 2⁵³, where a Lua number
// (a double) is still an exact integer: instants travel as a window index
// and the nanoseconds into the window, or as unix seconds and nanoseconds,
// never as unix nanoseconds (about 1.9×10¹⁸ in 2030), and a product that
// would need more bits is divided a hexadecimal digit at a time (muldiv).
// A token bucket's backlog travels as whole emission intervals and a
// remainder.
//
// Each script takes one key, so it runs on Redis Cluster; the key is its own
// hash tag. It returns three integers whose last is the server time in
// microseconds when it read the clock, otherwise 0. The arithmetic is the
// arithmetic of package limit, line for line where it can be; the Go side
// turns the integers into a limit.Result with int64 arithmetic.

// prelude is shared by every script.
const prelude = `
-- floor(a / b) for integers with |a| < 2^53 and b > 0. It is exact: the
-- true quotient is at least 1/b from the next integer up, more than half
-- the double spacing at a / b < 2^53 / b, so the rounded quotient never
-- reaches it, and an exact integer quotient is representable.
local function fdiv(a, b)
  return math.floor(a / b)
end

-- ceil(a / b) for b > 0, and 0 for a <= 0.
local function cdiv(a, b)
  if a <= 0 then return 0 end
  return fdiv(a - 1, b) + 1
end

-- muldiv returns floor(a * b / c) and a * b mod c for integers 0 <= a <
-- 2^53, 0 <= b <= 2^47 and 0 < c <= 2^47, exactly while the quotient is
-- below 2^53: the product may need 100 bits, so it is divided a
-- hexadecimal digit of a at a time, every value staying below 2^52.
local function muldiv(a, b, c)
  local q, r = 0, 0
  for i = 13, 0, -1 do
    local v = r * 16 + math.floor(a / 16 ^ i) % 16 * b
    local d = math.floor(v / c)
    q, r = q * 16 + d, v - d * c
  end
  return q, r
end

-- px is the TTL in whole milliseconds of a key that expires in ns
-- nanoseconds, plus the allowance for the callers' clocks.
local function px(ns, skew)
  return cdiv(ns + skew, 1000000)
end

-- window returns the index of the window now falls in, the nanoseconds of
-- it elapsed, and the server time in microseconds (0 under the caller's
-- clock, whose index and elapsed nanoseconds ARGV[1] and ARGV[2] carry).
-- Under the server clock the window w is a whole number of microseconds.
local function window(w)
  if ARGV[1] ~= '' then return tonumber(ARGV[1]), tonumber(ARGV[2]), 0 end
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local wus = w / 1000
  local idx = fdiv(us, wus)
  return idx, (us - idx * wus) * 1000, us
end
`

// fixedSrc is limit.Rule.fixed. The value is "window:count".
// ARGV: window index, elapsed ns (empty for the server clock), window ns, n, max count, TTL allowance ns.
const fixedSrc = prelude + `
local w, n, maxc = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local idx, el, us = window(w)
local a, b = 0, 0
local v = redis.call('GET', KEYS[1])
if v then
  local x, y = string.match(v, '^(%-?%d+):(%-?%d+)$')
  a, b = tonumber(x), tonumber(y)
end
-- A hit stamped in the window before the state's counts in the state's.
local eff = idx
if idx == a - 1 then eff = a end
local a0, b0 = a, b
if a ~= eff then a, b = eff, 0 end
local count = math.max(b + n, 0)
if maxc <= 0 or b + n <= maxc or n <= 0 then b = count end
if not v or a ~= a0 or b ~= b0 then
  -- Expires is the window's end.
  redis.call('SET', KEYS[1], string.format('%d:%d', a, b), 'PX', px((eff - idx + 1) * w - el, tonumber(ARGV[6])))
end
return {eff, count, us}
`

// weighFn is the sliding window's weighting of the previous window.
const weighFn = `
-- ceil(p * x / w) for integers 0 <= p < 2^32 and 0 <= x <= w < 2^47.
local function weigh(p, x, w)
  if p == 0 or x == 0 then return 0 end
  local px = p * x
  if px < 4503599627370496 then return cdiv(px, w) end
  local q, r = muldiv(p, x, w)
  if r > 0 then q = q + 1 end
  return q
end
`

// slidingSrc is limit.Rule.sliding. The value is "window:previous:current".
// ARGV: window index, elapsed ns (empty for the server clock), window ns, n, max count, TTL allowance ns.
const slidingSrc = prelude + weighFn + `
local w, n, maxc = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local idx, el, us = window(w)
local a, p, c = 0, 0, 0
local v = redis.call('GET', KEYS[1])
if v then
  local x, y, z = string.match(v, '^(%-?%d+):(%d+):(%d+)$')
  a, p, c = tonumber(x), tonumber(y), tonumber(z)
end
local eff = idx
if idx == a - 1 then eff = a end
local a0, p0, c0 = a, p, c
if a == eff then
elseif a == eff - 1 then p, c = c, 0
else p, c = 0, 0 end
local elapsed = 0 -- for a hit stamped in the window before
if eff == idx then elapsed = el end
-- The previous window still covers (w - elapsed) / w of the sliding window.
local weighted = weigh(p, w - elapsed, w)
local count = weighted + math.max(c + n, 0)
if maxc <= 0 or weighted + c + n <= maxc or n <= 0 then
  c = math.min(math.max(c + n, 0), 4294967295)
end
a = eff
if not v or a ~= a0 or p ~= p0 or c ~= c0 then
  -- Expires is a window after the window's end.
  redis.call('SET', KEYS[1], string.format('%d:%d:%d', a, p, c), 'PX', px((eff - idx + 2) * w - el, tonumber(ARGV[6])))
end
return {eff, count, us}
`

// gcraSrc is limit.Rule.gcra. The value is the theoretical arrival time
// as "unix seconds:nanoseconds", at most math.MaxInt64 ns as in limit;
// the zero State's is 0:0. The script decides whether the hit is recorded
// from the backlog (the arrival time less now) in whole emission
// intervals t and a remainder, and moves the arrival time by n t in
// seconds and nanoseconds. It returns the arrival time before and after
// the hit; the Go side computes the count from them as limit does, with
// int64s. Exact while the backlog is below 2^53 intervals, which a rule
// with MaxCount below 2^53 never records past.
// ARGV: unix seconds, nanoseconds (empty for the server clock), emission interval ns, n, max count, TTL allowance ns.
const gcraSrc = prelude + `
local s, ns, us
if ARGV[1] ~= '' then
  s, ns, us = tonumber(ARGV[1]), tonumber(ARGV[2]), 0
else
  local tm = redis.call('TIME')
  s, us = tonumber(tm[1]), tonumber(tm[1]) * 1000000 + tonumber(tm[2])
  ns = tonumber(tm[2]) * 1000
end
local t, n, maxc, skew = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local MAXS, MAXN = 9223372036, 854775807 -- math.MaxInt64 ns

-- span divides sec seconds and nsec nanoseconds (sec >= 0, a positive
-- time) by t.
local function span(sec, nsec)
  local q, r = muldiv(sec, 1000000000, t)
  local v = r + nsec
  local d = math.floor(v / t)
  return q + d, v - d * t
end

-- move returns the time sec:nsec moved by k intervals, |k| < 2^53.
local function move(sec, nsec, k)
  local a, b = muldiv(math.abs(k), t, 1000000000)
  if k < 0 then a, b = -a, -b end
  sec, nsec = sec + a, nsec + b
  local carry = math.floor(nsec / 1000000000)
  return sec + carry, nsec - carry * 1000000000
end

local ts0, tn0 = 0, 0
local v = redis.call('GET', KEYS[1])
if v then
  local x, y = string.match(v, '^(%-?%d+):(%d+)$')
  ts0, tn0 = tonumber(x), tonumber(y)
end
-- tat = max(arrival time, now); backlog = q t + r.
local bs, bn, q, r = s, ns, 0, 0
if ts0 > s or (ts0 == s and tn0 > ns) then
  bs, bn = ts0, tn0
  q, r = span(ts0 - s, tn0 - ns)
end
local ts1, tn1 = ts0, tn0
local up = 0
if r > 0 then up = 1 end
if maxc <= 0 or q + up + n <= maxc or n <= 0 then
  if n >= 0 then
    -- limit.advance saturates at math.MaxInt64.
    if n > span(MAXS - bs, MAXN - bn) then
      ts1, tn1 = MAXS, MAXN
    else
      ts1, tn1 = move(bs, bn, n)
    end
  elseif n < -q then
    ts1, tn1 = s, ns -- a bucket holds no more than its capacity
  else
    ts1, tn1 = move(bs, bn, n)
  end
end
if ts1 < s or (ts1 == s and tn1 <= ns) then
  -- The state is the zero State's equal.
  if v then redis.call('DEL', KEYS[1]) end
elseif ts1 ~= ts0 or tn1 ~= tn0 then
  local ms = (ts1 - s) * 1000 - math.floor((ns - tn1 - skew) / 1000000) -- rounded up
  redis.call('SET', KEYS[1], string.format('%d:%d', ts1, tn1), 'PX', string.format('%d', ms))
end
return {ts0, tn0, ts1, tn1, us}
`

// concurrencySrc is limit.Rule.concurrency. The value is the count in
// flight; it has no expiry, and a key with none in flight is deleted.
// ARGV: limit, n, 's' for the server clock.
const concurrencySrc = prelude + `
local lim, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local b = tonumber(redis.call('GET', KEYS[1]) or '0')
local count = b + n
if n < 0 or count <= lim then
  local nb = math.max(count, 0)
  if nb ~= b then
    if nb == 0 then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], string.format('%d', nb)) end
  end
  b, count = nb, nb
end
local us = 0
if b == 0 and ARGV[3] == 's' then
  -- Expires is now.
  local t = redis.call('TIME')
  us = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
return {count, b, us}
`

// script is a Lua script and its SHA-1 digest, the name EVALSHA runs it by.
type script struct {
	src, sha string
}

func newScript(src string) script { return script{src: src, sha: redis.NewScript(src).Hash()} }

var (
	fixedScript       = newScript(fixedSrc)
	slidingScript     = newScript(slidingSrc)
	gcraScript        = newScript(gcraSrc)
	concurrencyScript = newScript(concurrencySrc)
)
