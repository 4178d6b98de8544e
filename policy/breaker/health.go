package breaker

import "github.com/sony/gobreaker/v2"

// NotClosed returns the models whose breaker is open or half-open, with
// that state ("open", "half-open"), for a readiness check to report; nil
// when every breaker is closed or the Set is nil. The states are read
// outside the table's lock, as the metric reads them: reading one may move
// it to half-open, which is logged.
func (s *Set) NotClosed() map[string]string {
	if s == nil {
		return nil
	}
	s.table.mu.RLock()
	breakers := make([]*breaker, 0, len(s.table.models))
	for _, b := range s.table.models {
		breakers = append(breakers, b)
	}
	s.table.mu.RUnlock()
	var out map[string]string
	for _, b := range breakers {
		if st := b.cb.State(); st != gobreaker.StateClosed {
			if out == nil {
				out = map[string]string{}
			}
			out[b.model] = st.String()
		}
	}
	return out
}
