package monitor

import (
	"context"
	"strconv"
)

// Refused reads each group's count of refused entries: those with more of
// its questions than max_questions, which the take counts
// (<prefix>review:{<stream>}:guarantee:refused) and does not observe.
func (s *Store) Refused(ctx context.Context) (map[Group]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	raw, err := s.client.HGetAll(ctx, s.Keys()[0]+":refused").Result()
	if err != nil {
		return nil, err
	}
	out := make(map[Group]int64, len(raw))
	for m, v := range raw {
		g, ok := ParseMember(m)
		n, err := strconv.ParseInt(v, 10, 64)
		if ok && err == nil {
			out[g] = n
		}
	}
	return out, nil
}
