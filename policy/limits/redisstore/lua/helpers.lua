-- The functions and shared item state of the batch script's bodies
-- (script.go: scriptHelpers).
local servernow
local function servertime()
  if servernow == nil then
    local t = redis.call('TIME')
    servernow = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return servernow
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
-- The item's clock, buckets and levels, which scriptPrelude sets: one set
-- of upvalues for every item, and the functions below made once per call,
-- not once per item (closures and tables are most of an item's cost in
-- Lua).
local KEYS1, now, onserver, rcap, rrate, tcap, trate, s, r, t
-- expiry is how long the key is to be kept from now (ms), and the time
-- to record in its field x, or nil for each when its expiry stands. It
-- keeps the key until both buckets are full again, when a missing key
-- reads the same, and the hold is over, and at least a second: Redis expires by its own clock,
-- and a clock the caller pins (tests) does not move with it, so a key
-- must not vanish between two calls made at one pinned time. On the
-- server's clock it keeps the key twice that long and a second more, and
-- records until when in x, so that the saves in the next ttl need no
-- PEXPIRE (a command per save cost Redis more than the save's
-- arithmetic): it renews once less than the time needed and a second of
-- margin (for a replica's clock after a failover) is left.
local function expiry()
  local ttl = math.max(math.ceil(math.max(fullin(r, rcap, rrate), fullin(t, tcap, trate)) / 1000) + 1, 1000)
  local hold = tonumber(s[6])
  if hold and hold > now then ttl = math.max(ttl, math.ceil((hold - now) / 1000) + 1) end
  if not onserver then return ttl, nil end
  local x = tonumber(s[5])
  if x and x >= now + (ttl + 1000) * 1000 then return nil, nil end
  ttl = 2 * ttl + 1000
  return ttl, int(now + ttl * 1000)
end
-- since is the time a save records for a level last written at at: now,
-- never earlier than at. A script whose clock is behind the one that
-- wrote the level (a replica's after a failover, or a pinned clock a test
-- read before another script ran) refills nothing and must not move the
-- level's time back either, or the next script would refill that span a
-- second time.
local function since(at)
  at = tonumber(at)
  if at and at > now then return at end
  return now
end
-- save writes the levels of the buckets asked for (r, t) as of now, and
-- the key's expiry.
local function save(wr, wt)
  local f = {}
  if wr then f[1] = 'r'; f[2] = int(r); f[3] = 'ra'; f[4] = int(since(s[2])) end
  if wt then f[#f+1] = 't'; f[#f+1] = int(t); f[#f+1] = 'ta'; f[#f+1] = int(since(s[4])) end
  local ttl, x = expiry()
  if x then f[#f+1] = 'x'; f[#f+1] = x end
  redis.call('HSET', KEYS1, unpack(f))
  if ttl then redis.call('PEXPIRE', KEYS1, ttl) end
end
