-- The monitor's functions, which each script that uses them starts with
-- (scripts.go names them and their arguments).
local function guarantee_fmt(v) return string.format('%.17g', v) end
local function guarantee_encode(t, seq, e, n, k, ev, bet, curv, alarm)
  return guarantee_fmt(t) .. ' ' .. string.format('%d', seq) .. ' ' .. string.format('%d', e) .. ' ' ..
    string.format('%d', n) .. ' ' .. string.format('%d', k) .. ' ' .. guarantee_fmt(ev) .. ' ' ..
    guarantee_fmt(bet) .. ' ' .. guarantee_fmt(curv) .. ' ' .. alarm
end
local function guarantee_fresh(target)
  return guarantee_encode(target, 1, 0, 0, 0, 1, 0, 1, '0')
end
local function guarantee_fields(state)
  local f = {}
  for w in string.gmatch(state, '%S+') do f[#f + 1] = w end
  return tonumber(f[1]), tonumber(f[2]), tonumber(f[3]), tonumber(f[4]), tonumber(f[5]), tonumber(f[6]), tonumber(f[7]), tonumber(f[8]), f[9]
end
-- The first millisecond after now on Redis's clock (Unix ms): the clock
-- of the stream's entry ids, so that the ids at or after an alarm's
-- raised_at are exactly entries queued after it.
local function guarantee_clock()
  local t = redis.call('TIME')
  return string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + 1)
end
local function guarantee_next_sequence(seq)
  if seq + 1 > 1000 then return 1000 end
  return seq + 1
end
local function guarantee_update(state, agree, labels, target, alpha, max_bet, gain, maxq)
  local t, seq, e, n, k, ev, bet, curv, alarm = target, 1, 0, 0, 0, 1, 0, 1, '0'
  if state and state ~= '' then
    t, seq, e, n, k, ev, bet, curv, alarm = guarantee_fields(state)
  end
  if t ~= target then
    t, seq, e, n, k, ev, bet, curv = target, guarantee_next_sequence(seq), 0, 0, 0, 1, 0, 1
  end
  e = e + 1
  n = n + labels
  k = k + agree
  local y
  if maxq and maxq > 0 then
    y = (target * labels - agree) / maxq
  else
    y = target - agree / labels
  end
  local f = 1 + bet * y
  ev = ev * f
  if ev > 1e300 then ev = 1e300 end
  local z = y / f
  curv = curv + z * z
  bet = bet + gain * z / curv
  if bet < 0 then bet = 0 elseif bet > max_bet then bet = max_bet end
  local raised = false
  local level = alpha / (2 ^ seq)
  if alarm == '0' and ev >= 1 / level then alarm = '1'; raised = true end
  return guarantee_encode(t, seq, e, n, k, ev, bet, curv, alarm), raised
end
local function guarantee_note(K, entry, due, request_id, question, member, agree, total, at)
  if redis.call('SISMEMBER', K[7], entry) == 1 then return end
  local raw = redis.call('HGET', K[6], entry)
  local o
  if raw then o = cjson.decode(raw) else o = {r = request_id, q = {}} end
  o.q['q' .. question] = {agree, member}
  o.n = total or 0
  o.t = math.max(o.t or 0, at or 0)
  redis.call('HSET', K[6], entry, cjson.encode(o))
  redis.call('ZADD', K[4], 0, entry)
  redis.call('HSETNX', K[5], entry, due)
end
local function guarantee_state(K, member, target)
  local state = redis.call('HGET', K[1], member)
  if not state and redis.call('SISMEMBER', K[2], member) == 1 then
    -- An alarm that outlived its state (restored by a gateway after
    -- Redis lost its data) stays raised.
    local _, seq, e, n, k, ev, bet, curv = guarantee_fields(guarantee_fresh(target))
    state = guarantee_encode(target, seq, e, n, k, ev, bet, curv, '1')
  end
  return state
end
local function guarantee_bet_of(state, target)
  -- The bet the next observation of a group is taken at: its state's, or
  -- 0 for a group never seen or one whose state runs at another target
  -- (guarantee_update starts it afresh).
  if not state or state == '' then return 0 end
  local t, _, _, _, _, _, bet = guarantee_fields(state)
  if t ~= target then return 0 end
  return bet
end
local function guarantee_take(K, now, limit, target, alpha, max_bet, gain, window, horizon, maxq)
  local entries = redis.call('ZRANGE', K[4], '-', '+', 'BYLEX', 'LIMIT', 0, limit)
  local taken, out = 0, {}
  window, horizon = window or 0, horizon or ''
  for _, entry in ipairs(entries) do
    local due = tonumber(redis.call('HGET', K[5], entry))
    if due and due > now then break end
    if horizon ~= '' and entry >= horizon then break end
    local raw = redis.call('HGET', K[6], entry)
    if raw then
      local o = cjson.decode(raw)
      local noted = 0
      for _ in pairs(o.q) do noted = noted + 1 end
      if noted < (o.n or 0) or now - (o.t or 0) < window then break end
    end
    taken = taken + 1
    redis.call('ZREM', K[4], entry)
    redis.call('HDEL', K[5], entry)
    redis.call('HDEL', K[6], entry)
    redis.call('SADD', K[7], entry)
    if raw then
      local o = cjson.decode(raw)
      local counts, members, counted = {}, {}, {}
      for q, v in pairs(o.q) do
        local member = v[2]
        local model = string.match(member, '^[^:]*:(.*)$')
        local first = true
        if o.r ~= '' then
          first = redis.call('SADD', K[8], #model .. ':' .. model .. #o.r .. ':' .. o.r .. string.sub(q, 2)) == 1
        end
        if first then
          if counts[member] == nil then
            counts[member] = {0, 0}
            counted[member] = {}
            members[#members + 1] = member
          end
          table.insert(counted[member], q)
          counts[member][1] = counts[member][1] + v[1]
          counts[member][2] = counts[member][2] + 1
        end
      end
      table.sort(members)
      -- What the observation was taken with, per group, and each counted
      -- question's agreement: a late correction to a disagreement is
      -- applied at the bet the entry was taken at (guarantee_correct).
      local kept = {m = {}, q = {}}
      for _, member in ipairs(members) do
        if maxq and maxq > 0 and counts[member][2] > maxq then
          -- More questions of the group than max_questions: refused.
          redis.call('HINCRBY', K[1] .. ':refused', member, 1)
        else
        local before = guarantee_state(K, member, target)
        local state, raised = guarantee_update(before, counts[member][1], counts[member][2], target, alpha, max_bet, gain, maxq)
        local _, seq = guarantee_fields(state)
        kept.m[member] = {guarantee_fmt(guarantee_bet_of(before, target)), seq, guarantee_fmt(target), counts[member][1], counts[member][2], maxq or 0}
        for _, q in ipairs(counted[member]) do kept.q[q] = {o.q[q][1], member} end
        redis.call('HSET', K[1], member, state)
        local r = '0'
        if raised then
          redis.call('SADD', K[2], member)
          redis.call('HSET', K[1] .. ':raised_at', member, guarantee_clock())
          r = '1'
        end
        out[#out + 1] = member
        out[#out + 1] = state
        out[#out + 1] = r
        end
      end
      if next(kept.m) then redis.call('HSET', K[7] .. ':obs', entry, cjson.encode(kept)) end
    end
  end
  table.insert(out, 1, tostring(taken))
  return out
end
local function guarantee_correct(K, entry, question, agree, target, alpha)
  -- A label given after its entry was taken: a correction to a
  -- disagreement of a question counted as agreeing is applied to the
  -- group's evidence at the bet the entry was taken at, as if the entry
  -- had been observed with it; anything else changes nothing. An entry
  -- noted and not yet taken has its noted label turned to a disagreement.
  if agree ~= 0 then return nil end
  local key = K[7] .. ':obs'
  local raw = redis.call('HGET', key, entry)
  if not raw then
    local pending = redis.call('HGET', K[6], entry)
    if pending then
      local o = cjson.decode(pending)
      local v = o.q['q' .. question]
      if v and v[1] == 1 then
        v[1] = 0
        redis.call('HSET', K[6], entry, cjson.encode(o))
      end
    end
    return nil
  end
  local o = cjson.decode(raw)
  local v = o.q['q' .. question]
  if not v or v[1] ~= 1 then return nil end
  v[1] = 0
  local member = v[2]
  local m = o.m[member]
  local bet, seq, t, k, n, maxq = tonumber(m[1]), m[2], tonumber(m[3]), m[4], m[5], m[6]
  m[4] = k - 1
  redis.call('HSET', key, entry, cjson.encode(o))
  local state = guarantee_state(K, member, target)
  if not state then return nil end
  local st, sseq, e, sn, sk, ev, sbet, curv, alarm = guarantee_fields(state)
  -- The entry's sequence only: a reset or a new target since closed it.
  if st ~= t or sseq ~= seq or t ~= target then return nil end
  local yo, yn
  if maxq > 0 then
    yo = (t * n - k) / maxq
    yn = (t * n - (k - 1)) / maxq
  else
    yo = t - k / n
    yn = t - (k - 1) / n
  end
  ev = ev * ((1 + bet * yn) / (1 + bet * yo))
  if ev > 1e300 then ev = 1e300 end
  local raised = false
  if alarm == '0' and ev >= 1 / (alpha / (2 ^ sseq)) then alarm = '1'; raised = true end
  state = guarantee_encode(st, sseq, e, sn, sk - 1, ev, sbet, curv, alarm)
  redis.call('HSET', K[1], member, state)
  if raised then redis.call('SADD', K[2], member) end
  return {member, state, raised}
end
local function guarantee_reset(K, member, target, token)
  local state = guarantee_state(K, member, target)
  if not state then return false end
  local _, seq = guarantee_fields(state)
  local _, _, e, n, k, ev, bet, curv = guarantee_fields(guarantee_fresh(target))
  state = guarantee_encode(target, guarantee_next_sequence(seq), e, n, k, ev, bet, curv, '0')
  redis.call('HSET', K[1], member, state)
  redis.call('SREM', K[2], member)
  redis.call('HSET', K[3], member, token)
  redis.call('HDEL', K[1] .. ':raised_at', member)
  redis.call('HSET', K[1] .. ':reset_at', member, guarantee_clock())
  return state
end
