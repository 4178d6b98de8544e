-- The batch script's dispatch: each item's body by its kind (script.go:
-- batchScript, callKind), the bodies put in place of their names in
-- double braces when the package loads.
local bodies = {}
bodies['{{KIND_ADMIT}}'] = function(KEYS, ARGV)
{{PRELUDE}}
{{ADMIT}}
end
bodies['{{KIND_SETTLE}}'] = function(KEYS, ARGV)
{{PRELUDE}}
{{SETTLE}}
end
bodies['{{KIND_LEASE}}'] = function(KEYS, ARGV)
{{PRELUDE}}
{{LEASE}}
end
bodies['{{KIND_HOLD}}'] = function(KEYS, ARGV)
{{HOLD}}
end
{{EXACT}}
-- One pair of tables for every item's KEYS and ARGV, refilled, with what
-- the item before left past its own cleared (so # counts the item's own);
-- an admission without a budget reads its own from KEYS and ARGV.
local out, ki, ai = {}, 1, 2
local keys, args, nkeys, nargs = {}, {}, 0, 0
for i = 1, tonumber(ARGV[1]) do
  local kind, nk, na = ARGV[ai], 1, 9
  local ok, res
  if kind == '{{KIND_EXACT}}' then
    ok, res = pcall(exact, KEYS[ki], ai + 3)
  else
    nk, na = tonumber(ARGV[ai + 1]), tonumber(ARGV[ai + 2])
    for j = 1, nk do keys[j] = KEYS[ki + j - 1] end
    for j = nk + 1, nkeys do keys[j] = nil end
    for j = 1, na do args[j] = ARGV[ai + 2 + j] end
    for j = na + 1, nargs do args[j] = nil end
    nkeys, nargs = nk, na
    ok, res = pcall(bodies[kind], keys, args)
  end
  ki, ai = ki + nk, ai + 3 + na
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
