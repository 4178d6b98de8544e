package store

import "sync/atomic"

// Stats is what a store did that its decisions do not show, for metrics.
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
	// Pending is a gauge, not a count: the settlements and holds queued
	// for Redis now (one per organization and kind), or taken by a flush
	// that is not done with them yet (0 in process). An organization may
	// count twice while a flush puts back what it could not send. It
	// grows while Redis is lost. ProcessStats leaves it 0.
	Pending int64
}

// process adds up the counts of every store of the process, as they
// happen: a store that a reload released goes on counting what it still
// sends or drops (the settlements of its last requests), which a copy of
// its Stats taken at the release would miss.
var process struct {
	leasesTaken, settlementsDropped, settlementsUnanswered atomic.Int64
}

// Count adds s to the process's counts; a store calls it as it counts.
func Count(s Stats) {
	if s.LeasesTaken != 0 {
		process.leasesTaken.Add(s.LeasesTaken)
	}
	if s.SettlementsDropped != 0 {
		process.settlementsDropped.Add(s.SettlementsDropped)
	}
	if s.SettlementsUnanswered != 0 {
		process.settlementsUnanswered.Add(s.SettlementsUnanswered)
	}
}

// ProcessStats returns the counts of every store this process has run,
// released ones included: what counters that outlive reloads report.
func ProcessStats() Stats {
	return Stats{
		LeasesTaken:           process.leasesTaken.Load(),
		SettlementsDropped:    process.settlementsDropped.Load(),
		SettlementsUnanswered: process.settlementsUnanswered.Load(),
	}
}
