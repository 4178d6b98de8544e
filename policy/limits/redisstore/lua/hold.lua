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
