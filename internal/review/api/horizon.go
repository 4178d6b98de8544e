package api

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/review/monitor"
	"github.com/systemone/systemone-gateway/internal/review/record"
)

// The monitor's horizon: the first audited entry with a question routed
// auto that has no label the monitor noted (neither pending nor taken).
// The take stops before it, so that the monitor, like calibrate, takes its
// evidence only from the complete prefix: an audited entry nobody has
// labelled holds every later one back until it is labelled or passed.

// horizonScan bounds the stream entries one horizon search reads, so that
// a long stretch of labelled entries never holds a take for long; the
// search goes on from there at the next take.
const horizonScan = 5000

// horizonCursor remembers, per store, the entry before which every
// audited entry is noted: they stay so (pending, then taken), so each
// search starts there.
type horizonCursor struct {
	mu    sync.Mutex
	after string
}

// horizon returns the index member of the first audited entry with an
// auto question and no noted label, or of the entry just after the last
// one searched when the search stops at horizonScan; "" when every
// audited entry in the stream is noted.
func (s *store) horizon(ctx context.Context) (string, error) {
	s.cursor.mu.Lock()
	after := s.cursor.after
	s.cursor.mu.Unlock()
	keys := monitor.LuaKeys(s.base)
	pendingKey, takenKey := keys[3], keys[6]
	for read := 0; read < horizonScan; {
		entries, err := s.scan(ctx, after, 200)
		if err != nil {
			return "", err
		}
		if len(entries) == 0 {
			return "", nil
		}
		read += len(entries)
		members := make([]string, len(entries))
		pending := make([]*redis.FloatCmd, len(entries))
		taken := make([]*redis.BoolCmd, len(entries))
		step, cancel := context.WithTimeout(ctx, s.timeout)
		_, err = s.client.Pipelined(step, func(p redis.Pipeliner) error {
			for i := range entries {
				id, ok := record.ParseID(entries[i].ID)
				if !ok || !feedsMonitor(&entries[i]) {
					continue
				}
				members[i] = indexMember(id)
				pending[i] = p.ZScore(step, pendingKey, members[i])
				taken[i] = p.SIsMember(step, takenKey, members[i])
			}
			return nil
		})
		cancel()
		if err != nil && err != redis.Nil {
			return "", err
		}
		for i := range entries {
			if members[i] != "" && pending[i].Err() == redis.Nil && !taken[i].Val() {
				return members[i], nil
			}
			after = entries[i].ID
			s.cursor.mu.Lock()
			s.cursor.after = after
			s.cursor.mu.Unlock()
		}
	}
	id, _ := record.ParseID(after)
	return indexMember(record.ID{Ms: id.Ms, Seq: id.Seq + 1}), nil
}

// feedsMonitor reports whether an entry's labels feed the monitor: drawn
// by audit, with a question routed auto.
func feedsMonitor(e *record.Entry) bool {
	if !e.Audit {
		return false
	}
	for _, q := range e.Questions {
		if q.Route == record.RouteAuto {
			return true
		}
	}
	return false
}

// monitorQuestions counts the distinct questions of e whose labels feed
// the monitor: its auto questions when it was drawn by audit.
func monitorQuestions(e *record.Entry) int {
	if !e.Audit {
		return 0
	}
	seen := map[string]bool{}
	for _, q := range e.Questions {
		if q.Route == record.RouteAuto {
			seen[q.ID] = true
		}
	}
	return len(seen)
}
