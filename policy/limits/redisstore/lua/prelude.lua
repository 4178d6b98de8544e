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
