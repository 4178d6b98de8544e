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

// Stats is what a limiter did that its decisions do not show, for metrics.
// The counts start at zero with each Limiter.
type Stats struct {
	// LeasesTaken counts the lease calls that granted something
	// (local_allowance; 0 without it).
	LeasesTaken int64
	// SettlementsDropped counts settlements and holds never sent: Redis
	// was lost and the queue full.
	SettlementsDropped int64
	// SettlementsUnanswered counts settlements, holds and lease
	// give-backs sent whose answer was lost (a timeout, a connection
	// closed mid-pipeline): they may or may not have run, and are not
	// sent again.
	SettlementsUnanswered int64
}

// Stats returns the limiter's counts; a few atomic loads.
func (l *Limiter) Stats() Stats {
	var st Stats
	if l.redis != nil {
		st.SettlementsDropped = l.redis.dropped.Load()
		st.SettlementsUnanswered = l.redis.lostAnswers.Load()
	}
	if l.leases != nil {
		st.LeasesTaken = l.leases.taken.Load()
	}
	return st
}
