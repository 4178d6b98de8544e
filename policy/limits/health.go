package limits

// RedisUp reports how the limiter sees its Redis: up is false from the
// moment it counts Redis as lost (three consecutive outage errors, the
// `redis lost` log entry) until its probe sees Redis answer again (`redis
// back`). usesRedis is false when the buckets are kept in process. It
// costs an atomic load: metrics read it at every scrape.
func (l *Limiter) RedisUp() (up, usesRedis bool) {
	if l.redis == nil {
		return false, false
	}
	return !l.redis.lost.Load(), true
}
