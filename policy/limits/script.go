package limits

import "github.com/redis/go-redis/v9"

// The Redis scripts transliterate bucket.go. Every organization has two keys
// sharing the hash tag {org}, so they live in one Redis Cluster slot:
//
//	<prefix>{<org>}:b  hash: r, ra (requests level, at), t, ta (tokens level, at)
//	<prefix>{<org>}:h  string: hold until (microseconds)
//
// Time is the Redis server's TIME in microseconds (ARGV[1] = "" ; tests pin a
// clock by passing one), so gateway clocks never matter. Numbers are written
// with %d: Lua's default number format keeps only 14 digits.
const scriptPrelude = `
local function clock()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function refill(level, at, cap, rate, now)
  level = tonumber(level)
  if level == nil or level >= cap then return cap end
  at = tonumber(at) or now
  if now <= at then return level end
  local elapsed = now - at
  if elapsed >= math.ceil((cap - level) / rate) then return cap end
  return level + elapsed * rate
end
local function fullin(level, cap, rate)
  if cap == 0 or level >= cap then return 0 end
  return math.ceil((cap - level) / rate)
end
local function int(x) return string.format('%d', x) end
local now = clock()
local rcap, rrate = tonumber(ARGV[2]), tonumber(ARGV[3])
local tcap, trate = tonumber(ARGV[4]), tonumber(ARGV[5])
local s = redis.call('HMGET', KEYS[1], 'r', 'ra', 't', 'ta')
local r, t = 0, 0
if rcap > 0 then r = refill(s[1], s[2], rcap, rrate, now) end
if tcap > 0 then t = refill(s[3], s[4], tcap, trate, now) end
local function expire()
  local ttl = math.max(fullin(r, rcap, rrate), fullin(t, tcap, trate))
  redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000) + 1)
end
`

// admitScript checks and debits both buckets (and checks the hold) in one
// round trip. ARGV: now, rcap, rrate, tcap, trate (units, units/µs; cap 0 is
// off), rcost, tcost (units; negative: not consulted), hold ("1": check it),
// the caller's own hold (µs left). Returns {allowed, r, t, rwait, twait,
// holdwait}.
var admitScript = redis.NewScript(scriptPrelude + `
local rcost, tcost = tonumber(ARGV[6]), tonumber(ARGV[7])
local usereq = rcap > 0 and rcost >= 0
local usetok = tcap > 0 and tcost >= 0
local holdwait, rwait, twait = 0, 0, 0
if ARGV[8] == '1' then
  local h = tonumber(redis.call('GET', KEYS[2]))
  if h and h > now then holdwait = h - now end
  holdwait = math.max(holdwait, tonumber(ARGV[9]))
end
if usereq and r < rcost then rwait = math.ceil((rcost - r) / rrate) end
if usetok and t < tcost then twait = math.ceil((tcost - t) / trate) end
local ok = holdwait == 0 and rwait == 0 and twait == 0
if ok and (usereq or usetok) then
  local f = {}
  if usereq then
    r = r - rcost
    f[#f+1] = 'r'; f[#f+1] = int(r); f[#f+1] = 'ra'; f[#f+1] = int(now)
  end
  if usetok then
    t = t - tcost
    f[#f+1] = 't'; f[#f+1] = int(t); f[#f+1] = 'ta'; f[#f+1] = int(now)
  end
  redis.call('HSET', KEYS[1], unpack(f))
  expire()
end
return {ok and 1 or 0, r, t, rwait, twait, holdwait}
`)

// settleScript charges ARGV[6] units to the token bucket (a refund when
// negative), between one bucket of debt and a full bucket. ARGV[1..5] as
// admitScript. Returns the new token level.
var settleScript = redis.NewScript(scriptPrelude + `
if tcap == 0 then return 0 end
t = math.min(math.max(t - tonumber(ARGV[6]), -tcap), tcap)
redis.call('HSET', KEYS[1], 't', int(t), 'ta', int(now))
expire()
return t
`)

// holdScript refuses evaluations until ARGV[1] (now) + ARGV[2] microseconds,
// unless a longer hold is already in place. KEYS[1] is the hold key.
var holdScript = redis.NewScript(`
local now = tonumber(ARGV[1])
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local d = tonumber(ARGV[2])
local cur = tonumber(redis.call('GET', KEYS[1]))
if cur == nil or cur < now + d then
  redis.call('SET', KEYS[1], string.format('%d', now + d), 'PX', math.ceil(d / 1000) + 1)
end
return 0
`)
