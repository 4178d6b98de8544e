-- Puts a lost alarm back into the alarm set, unless the group was reset
-- meanwhile: it has a reset token other than the one the gateway saw (no
-- token at all is a reset hash lost with the alarm). alarms.go:
-- restoreScript's KEYS and ARGV.
local token = redis.call('HGET', KEYS[2], ARGV[1]) or ''
if token ~= '' and token ~= ARGV[2] then return 0 end
return redis.call('SADD', KEYS[1], ARGV[1])
