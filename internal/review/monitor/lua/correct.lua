local out = {}
local target, alpha = tonumber(ARGV[2]), tonumber(ARGV[3])
for i = 4, #ARGV, 2 do
  local r = guarantee_correct(KEYS, ARGV[1], ARGV[i], tonumber(ARGV[i + 1]), target, alpha)
  if r then
    out[#out + 1] = r[1]
    out[#out + 1] = r[2]
    if r[3] then out[#out + 1] = '1' else out[#out + 1] = '0' end
  end
end
return out
