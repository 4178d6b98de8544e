-- Stores the label records of one entry and notes each label that feeds
-- a group of the guarantee monitor (store.go: putScript's KEYS and ARGV).
local K = {KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]}
local on, due, rid, total, at = ARGV[2] == '1', tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
for i = 7, #ARGV, 4 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  if on and ARGV[i + 2] ~= '' then
    guarantee_note(K, ARGV[1], due, rid, ARGV[i], ARGV[i + 2], tonumber(ARGV[i + 3]), total, at)
  end
end
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return 1
