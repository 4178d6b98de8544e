-- An admission without a budget (script.go: exactBody): the buckets and
-- the hold, its arguments read from ARGV[a] on, where the dispatch would
-- copy them into a table of their own; a reply of three numbers when it
-- admits, six when it refuses.
local function exact(key, a)
  KEYS1, now = key, tonumber(ARGV[a])
  onserver = now == nil
  if onserver then now = servertime() end
  rcap, rrate = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  tcap, trate = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local rcost, tcost = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
  s = rcall('HMGET', key, 'r', 'ra', 't', 'ta', 'x', 'h')
  r, t = 0, 0
  if rcap > 0 then r = refill(s[1], s[2], rcap, rrate, now) end
  if tcap > 0 then t = refill(s[3], s[4], tcap, trate, now) end
  local usereq = rcap > 0 and rcost >= 0
  local usetok = tcap > 0 and tcost >= 0
  local holdwait, rwait, twait = 0, 0, 0
  if ARGV[a + 7] == '1' then
    local h = tonumber(s[6])
    if h and h > now then holdwait = h - now end
    holdwait = max(holdwait, tonumber(ARGV[a + 8]))
  end
  if usereq and r < rcost then rwait = ceil((rcost - r) / rrate) end
  if usetok and t < tcost then twait = ceil((tcost - t) / trate) end
  if holdwait == 0 and rwait == 0 and twait == 0 then
    if usereq or usetok then
      if usereq then r = r - rcost end
      if usetok then t = t - tcost end
      save(usereq, usetok)
    end
    return {1, r, t}
  end
  if usereq and rwait == 0 then
    -- refused by the tokens or a hold: the request still counts one request
    r = r - rcost
    save(true, false)
  end
  return {0, r, t, rwait, twait, holdwait}
end
