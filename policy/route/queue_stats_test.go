package route

// The review queue's counters, as the tests read them.

// QueueStats counts review entries since the Router was made.
type QueueStats struct {
	// Enqueued entries were written to the stream.
	Enqueued int64
	// Audited entries were drawn by the audit (whether written or not).
	Audited int64
	// Dropped entries were never sent: too many writes in flight.
	Dropped int64
	// Failed entries were sent and not written (Redis error or timeout).
	Failed int64
}

// QueueStats returns the review queue's counters; zero without a queue.
func (r *Router) QueueStats() QueueStats {
	q := r.queue
	if q == nil {
		return QueueStats{}
	}
	return QueueStats{Enqueued: q.enqueued.Load(), Audited: q.audited.Load(), Dropped: q.dropped.Load(), Failed: q.failed.Load()}
}
