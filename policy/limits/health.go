package limits

import "github.com/systemone/systemone-gateway/policy/limits/store"

// RedisUp reports how the limiter sees its Redis: up is false from the
// moment it counts a Redis node lost (three consecutive outage errors of
// that node's calls, the `redis lost` log entry) until every lost node's
// keyed probe sees it serve again (`redis back`): once per outage, on a
// Redis Cluster however many masters it takes down. Meanwhile only the
// organizations of a lost node take the on_store_error path. usesRedis is
// false when the buckets are kept in process. It costs an atomic load:
// metrics read it at every scrape.
func (l *Limiter) RedisUp() (up, usesRedis bool) {
	if l.shared == nil {
		return false, false
	}
	return l.shared.Up(), true
}

// Stats is what a limiter did that its decisions do not show, for metrics
// (see store.Stats). The counts start at zero with each Limiter (Stats),
// or with the process (ProcessStats).
type Stats = store.Stats

// ProcessStats returns the counts of every limiter this process has run,
// released ones included: what counters that outlive reloads report.
func ProcessStats() Stats { return store.ProcessStats() }

// Stats returns the limiter's counts, and its settlements pending for
// Redis; a few atomic loads and a lock.
func (l *Limiter) Stats() Stats {
	if l.shared == nil {
		return Stats{}
	}
	return l.shared.Stats()
}
