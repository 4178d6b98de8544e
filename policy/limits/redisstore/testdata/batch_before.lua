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
-- The batch script's dispatch: each item's body by its kind (script.go:
-- batchScript, callKind), the bodies put in place of their names in
-- double braces when the package loads.
local bodies = {}
bodies['a'] = function(KEYS, ARGV)
-- The start of the admission, settlement and lease bodies: the item's
-- clock and buckets (script.go: scriptPrelude).
KEYS1, now = KEYS[1], tonumber(ARGV[1])
onserver = now == nil
if onserver then now = servertime() end
rcap, rrate = tonumber(ARGV[2]), tonumber(ARGV[3])
tcap, trate = tonumber(ARGV[4]), tonumber(ARGV[5])
s = redis.call('HMGET', KEYS1, 'r', 'ra', 't', 'ta', 'x', 'h')
r, t = 0, 0
if rcap > 0 then r = refill(s[1], s[2], rcap, rrate, now) end
if tcap > 0 then t = refill(s[3], s[4], tcap, trate, now) end

-- An admission (script.go: admitBody, its KEYS, ARGV and answer).
local rcost, tcost = tonumber(ARGV[6]), tonumber(ARGV[7])
local usereq = rcap > 0 and rcost >= 0
local usetok = tcap > 0 and tcost >= 0
local holdwait, rwait, twait = 0, 0, 0
local blim, bcost = tonumber(ARGV[10]) or 0, tonumber(ARGV[11]) or -1
local bidx, spent, resv, slot, bref = 0, 0, 0, 0, 0
local bkey, bend, fresh
if blim > 0 then
  local b1, b2 = tonumber(ARGV[12]), tonumber(ARGV[13])
  bidx, bend = 2, b2
  if now < b1 then bidx, bend = 1, b1 elseif now >= b2 then bidx, bend = 3, tonumber(ARGV[14]) end
  bkey = KEYS[1 + bidx]
  slot = math.floor(now / 60000000)
  local h = redis.call('HGETALL', bkey)
  local lapsed = {}
  -- a period's key expires at its end (and the margin), set when it is
  -- made: here when it was missing or emptied below, else by a settlement.
  fresh = #h == 0
  for i = 1, #h, 2 do
    local f, v = h[i], tonumber(h[i + 1])
    if f == 's' then
      spent = v
    elseif tonumber(string.sub(f, 2)) > slot - 11 then
      resv = resv + v
    else
      lapsed[#lapsed + 1] = f
    end
  end
  if #lapsed > 0 then
    redis.call('HDEL', bkey, unpack(lapsed))
    fresh = 2 * #lapsed == #h
  end
  if bcost >= 0 and spent + resv >= blim then bref = 1 end
end
if bref == 1 then
  if usereq then
    if r < rcost then
      rwait = math.ceil((rcost - r) / rrate)
    else
      r = r - rcost
      save(true, false)
    end
  end
  return {0, r, t, rwait, 0, 0, bidx, spent, resv, slot, 1}
end
if ARGV[8] == '1' then
  local h = tonumber(s[6])
  if h and h > now then holdwait = h - now end
  holdwait = math.max(holdwait, tonumber(ARGV[9]))
end
if usereq and r < rcost then rwait = math.ceil((rcost - r) / rrate) end
if usetok and t < tcost then twait = math.ceil((tcost - t) / trate) end
local ok = holdwait == 0 and rwait == 0 and twait == 0
if not ok and usereq and rwait == 0 then
  -- refused by the tokens or a hold: the request still counts one request
  r = r - rcost
  save(true, false)
end
if ok and (usereq or usetok) then
  if usereq then r = r - rcost end
  if usetok then t = t - tcost end
  save(usereq, usetok)
end
if ok and bidx > 0 and bcost > 0 then
  redis.call('HINCRBY', bkey, 'r' .. int(slot), ARGV[11])
  if fresh then redis.call('PEXPIRE', bkey, math.ceil((bend - now) / 1000) + 3600000) end
  resv = resv + bcost
end
return {ok and 1 or 0, r, t, rwait, twait, holdwait, bidx, spent, resv, slot, 0}

end
bodies['s'] = function(KEYS, ARGV)
-- The start of the admission, settlement and lease bodies: the item's
-- clock and buckets (script.go: scriptPrelude).
KEYS1, now = KEYS[1], tonumber(ARGV[1])
onserver = now == nil
if onserver then now = servertime() end
rcap, rrate = tonumber(ARGV[2]), tonumber(ARGV[3])
tcap, trate = tonumber(ARGV[4]), tonumber(ARGV[5])
s = redis.call('HMGET', KEYS1, 'r', 'ra', 't', 'ta', 'x', 'h')
r, t = 0, 0
if rcap > 0 then r = refill(s[1], s[2], rcap, rrate, now) end
if tcap > 0 then t = refill(s[3], s[4], tcap, trate, now) end

-- A settlement, run once (script.go: settleBody, its KEYS, ARGV and answer).
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', 120000) then return t end
for i = 3, #KEYS do
  local k, a = KEYS[i], 8 + (i - 3) * 4
  local charge, release = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  if redis.call('EXISTS', k) == 1 then
    if charge > 0 then
      local s = redis.call('HINCRBY', k, 's', ARGV[a])
      if s > 4000000000000000 then redis.call('HSET', k, 's', 4000000000000000) end
    end
    local f = 'r' .. ARGV[a + 2]
    local left = tonumber(redis.call('HGET', k, f))
    if left then
      left = left - release
      if left > 0 then redis.call('HSET', k, f, int(left)) else redis.call('HDEL', k, f) end
    end
  elseif charge > 0 then
    local ttl = math.ceil((tonumber(ARGV[a + 3]) - now) / 1000) + 3600000
    if ttl > 0 then
      redis.call('HSET', k, 's', int(math.min(charge, 4000000000000000)))
      redis.call('PEXPIRE', k, ttl)
    end
  end
end
local wr = rcap > 0 and tonumber(ARGV[7]) > 0
local wt = tcap > 0 and tonumber(ARGV[6]) ~= 0
if wr then r = math.min(r + tonumber(ARGV[7]), rcap) end
if wt then t = math.min(math.max(t - tonumber(ARGV[6]), -tcap), tcap) end
if not (wr or wt) then return t end
save(wr, wt)
return t

end
bodies['l'] = function(KEYS, ARGV)
-- The start of the admission, settlement and lease bodies: the item's
-- clock and buckets (script.go: scriptPrelude).
KEYS1, now = KEYS[1], tonumber(ARGV[1])
onserver = now == nil
if onserver then now = servertime() end
rcap, rrate = tonumber(ARGV[2]), tonumber(ARGV[3])
tcap, trate = tonumber(ARGV[4]), tonumber(ARGV[5])
s = redis.call('HMGET', KEYS1, 'r', 'ra', 't', 'ta', 'x', 'h')
r, t = 0, 0
if rcap > 0 then r = refill(s[1], s[2], rcap, rrate, now) end
if tcap > 0 then t = refill(s[3], s[4], tcap, trate, now) end

-- A lease given back and a new one taken (script.go: leaseBody).
local rneed, tneed = tonumber(ARGV[6]), tonumber(ARGV[7])
local rslice, tslice = tonumber(ARGV[8]), tonumber(ARGV[9])
local rback, tback = tonumber(ARGV[10]), tonumber(ARGV[11])
local changed = false
if rcap > 0 and rback > 0 then r = math.min(r + rback, rcap); changed = true end
if tcap > 0 and tback > 0 then t = math.min(t + tback, tcap); changed = true end
local holdwait = 0
local h = tonumber(s[6])
if h and h > now then holdwait = h - now end
local rg, tg, rwait, twait = 0, 0, 0, 0
if rcap > 0 and rneed >= 0 then
  if r < rneed then rwait = math.ceil((rneed - r) / rrate) else rg = math.min(math.max(rslice, rneed), r) end
end
if rwait == 0 and holdwait == 0 and tcap > 0 then
  if tneed >= 0 then
    if t < tneed then twait = math.ceil((tneed - t) / trate) else tg = math.min(math.max(tslice, tneed), t) end
  elseif t > 0 then
    tg = math.min(tslice, t)
  end
end
if changed or rg > 0 or tg > 0 then
  if rcap > 0 then r = r - rg end
  if tcap > 0 then t = t - tg end
  save(rcap > 0, tcap > 0)
end
return {rg, tg, r, t, rwait, twait, holdwait}

end
bodies['h'] = function(KEYS, ARGV)
-- The upstream's hold (script.go: holdBody).
local now = tonumber(ARGV[1]) or servertime()
local d = tonumber(ARGV[2])
local cur = tonumber(redis.call('HGET', KEYS[1], 'h'))
if cur == nil or cur < now + d then
  cur = now + d
  redis.call('HSET', KEYS[1], 'h', int(cur))
end
-- the hold in place, new or longer, keeps the key (a TTL another writer
-- left shorter is mended here too)
local want = math.ceil((cur - now) / 1000) + 1
if redis.call('PTTL', KEYS[1]) < want then redis.call('PEXPIRE', KEYS[1], want) end
return 0

end
-- One pair of tables for every item's KEYS and ARGV, refilled, with what
-- the item before left past its own cleared (so # counts the item's own).
local out, ki, ai = {}, 1, 2
local keys, args, nkeys, nargs = {}, {}, 0, 0
for i = 1, tonumber(ARGV[1]) do
  local body, nk, na = bodies[ARGV[ai]], tonumber(ARGV[ai + 1]), tonumber(ARGV[ai + 2])
  for j = 1, nk do keys[j] = KEYS[ki + j - 1] end
  for j = nk + 1, nkeys do keys[j] = nil end
  for j = 1, na do args[j] = ARGV[ai + 2 + j] end
  for j = na + 1, nargs do args[j] = nil end
  nkeys, nargs = nk, na
  ki, ai = ki + nk, ai + 3 + na
  local ok, res = pcall(body, keys, args)
  if ok then
    if res == nil then res = false end -- a hole would end the array early
    out[i] = res
  elseif type(res) == 'table' and res.err then
    out[i] = res
  elseif type(res) == 'string' and string.find(res, '^%u+ ') then
    out[i] = {err = res} -- a Redis error reply, its code first: OOM, READONLY, ...
  else
    out[i] = {err = 'ERR ' .. tostring(res)}
  end
end
return out
