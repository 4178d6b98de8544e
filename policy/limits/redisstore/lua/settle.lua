-- A settlement, run once (script.go: settleBody, its KEYS, ARGV and answer).
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', {{SETTLED_FOR_MS}}) then return t end
for i = 3, #KEYS do
  local k, a = KEYS[i], 8 + (i - 3) * 4
  local charge, release = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  if redis.call('EXISTS', k) == 1 then
    if charge > 0 then
      local s = redis.call('HINCRBY', k, 's', ARGV[a])
      if s > {{MAX_SPENT}} then redis.call('HSET', k, 's', {{MAX_SPENT}}) end
    end
    local f = 'r' .. ARGV[a + 2]
    local left = tonumber(redis.call('HGET', k, f))
    if left then
      left = left - release
      if left > 0 then redis.call('HSET', k, f, int(left)) else redis.call('HDEL', k, f) end
    end
  elseif charge > 0 then
    local ttl = math.ceil((tonumber(ARGV[a + 3]) - now) / 1000) + {{PERIOD_MARGIN_MS}}
    if ttl > 0 then
      redis.call('HSET', k, 's', int(math.min(charge, {{MAX_SPENT}})))
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
