-- The functions and shared item state of the batch script's bodies
-- (script.go: scriptHelpers).
-- The globals every item reads, as locals: a global is a table lookup.
local tonumber, unpack, fmt = tonumber, unpack, string.format
local max, min, ceil = math.max, math.min, math.ceil
local rcall = redis.call
local servernow, servernowtext
local function servertime()
  if servernow == nil then
    local t = rcall('TIME')
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
  if elapsed >= ceil((cap - level) / rate) then return cap end
  return level + elapsed * rate
end
local function fullin(level, cap, rate)
  if cap == 0 or level >= cap then return 0 end
  return ceil((cap - level) / rate)
end
local function int(x) return fmt('%d', x) end
-- attext is int(at) for a time, with the server's clock written once per
-- call rather than twice per save.
local function attext(at)
  if at ~= servernow then return int(at) end
  if servernowtext == nil then servernowtext = int(servernow) end
  return servernowtext
end
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
  local ttl = max(ceil(max(fullin(r, rcap, rrate), fullin(t, tcap, trate)) / 1000) + 1, 1000)
  local hold = tonumber(s[6])
  if hold and hold > now then ttl = max(ttl, ceil((hold - now) / 1000) + 1) end
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
-- the key's expiry, in one HSET whose arguments fill one table for every
-- item (its first n entries are this item's).
local saved = {}
local function save(wr, wt)
  local n = 0
  if wr then saved[1] = 'r'; saved[2] = int(r); saved[3] = 'ra'; saved[4] = attext(since(s[2])); n = 4 end
  if wt then saved[n+1] = 't'; saved[n+2] = int(t); saved[n+3] = 'ta'; saved[n+4] = attext(since(s[4])); n = n + 4 end
  local ttl, x = expiry()
  if x then saved[n+1] = 'x'; saved[n+2] = x; n = n + 2 end
  rcall('HSET', KEYS1, unpack(saved, 1, n))
  if ttl then rcall('PEXPIRE', KEYS1, ttl) end
end
