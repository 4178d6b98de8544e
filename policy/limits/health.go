package limits

import "sync/atomic"

// RedisUp reports how the limiter sees its Redis: up is false from the
// moment it counts Redis as lost (three consecutive outage errors, the
// `redis lost` log entry) until its probe sees Redis answer again (`redis
// back`). usesRedis is false when the buckets are kept in process. It
// costs an atomic load: metrics read it at every scrape.
func (l *Limiter) RedisUp() (up, usesRedis bool) {
	if l.shared == nil {
		return false, false
	}
	return l.shared.up(), true
}

// Stats is what a limiter did that its decisions do not show, for metrics.
// The counts start at zero with each Limiter (Stats), or with the process
// (ProcessStats).
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

// processStats adds up the counts of every limiter of the process, as
// they happen: a limiter that a reload released goes on counting what it
// still sends or drops (the settlements of its last requests), which a
// copy of its Stats taken at the release would miss.
var processStats struct {
	leasesTaken, settlementsDropped, settlementsUnanswered atomic.Int64
}

// ProcessStats returns the counts of every limiter this process has run,
// released ones included: what counters that outlive reloads report.
func ProcessStats() Stats {
	return Stats{
		LeasesTaken:           processStats.leasesTaken.Load(),
		SettlementsDropped:    processStats.settlementsDropped.Load(),
		SettlementsUnanswered: processStats.settlementsUnanswered.Load(),
	}
}

// Stats returns the limiter's counts; a few atomic loads.
func (l *Limiter) Stats() Stats {
	var st Stats
	if l.shared != nil {
		st = l.shared.stats()
	}
	return st
}

func (s *redisStore) stats() Stats {
	return Stats{SettlementsDropped: s.dropped.Load(), SettlementsUnanswered: s.lostAnswers.Load()}
}

// countDropped counts n settlements or holds never sent.
func (s *redisStore) countDropped(n int64) {
	s.dropped.Add(n)
	processStats.settlementsDropped.Add(n)
}

// countUnanswered counts n settlements, holds or give-backs whose answer
// was lost.
func (s *redisStore) countUnanswered(n int64) {
	s.lostAnswers.Add(n)
	processStats.settlementsUnanswered.Add(n)
}

// countTaken counts a lease call that granted something.
func (ls *leases) countTaken() {
	ls.taken.Add(1)
	processStats.leasesTaken.Add(1)
}
