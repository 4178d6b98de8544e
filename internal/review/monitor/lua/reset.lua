return guarantee_reset(KEYS, ARGV[1], tonumber(ARGV[2]), ARGV[3])
