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
  slot = math.floor(now / {{SLOT_MICROS}})
  local h = redis.call('HGETALL', bkey)
  local lapsed = {}
  -- a period's key expires at its end (and the margin), set when it is
  -- made: here when it was missing or emptied below, else by a settlement.
  fresh = #h == 0
  for i = 1, #h, 2 do
    local f, v = h[i], tonumber(h[i + 1])
    if f == 's' then
      spent = v
    elseif tonumber(string.sub(f, 2)) > slot - {{LEASE_SLOTS}} then
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
  if fresh then redis.call('PEXPIRE', bkey, math.ceil((bend - now) / 1000) + {{PERIOD_MARGIN_MS}}) end
  resv = resv + bcost
end
return {ok and 1 or 0, r, t, rwait, twait, holdwait, bidx, spent, resv, slot, 0}
