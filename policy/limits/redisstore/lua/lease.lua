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
