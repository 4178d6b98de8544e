package limits

import (
	"sync"
	"sync/atomic"
	"time"
)

// maxOverLimit bounds the organizations an instance remembers as over their
// requests limit. Org ids come from clients (a key's fingerprint names an
// org), so the table must not grow with them; past the bound, expired entries
// are swept, and if none has expired the newcomer is not remembered: its next
// request pays a round trip, as without the table.
const maxOverLimit = 100_000

// overLimit remembers the organizations an admission refused on their
// requests bucket, until that bucket has refilled one request: their
// requests are refused before the body is read, without a round trip (the
// local over-limit cache of envoyproxy/ratelimit). It only ever refuses what
// the store would refuse too, since nothing but time refills a requests
// bucket.
type overLimit struct {
	max   int
	size  atomic.Int64 // len(orgs): lookups skip the lock while nobody is over
	mu    sync.RWMutex
	orgs  map[string]overEntry
	swept time.Time // the last sweep: at most one a second, each O(max)
}

type overEntry struct {
	until time.Time
	d     Decision // the refusal; lookup sets its RetryAfter
}

func newOverLimit(max int) *overLimit {
	return &overLimit{max: max, orgs: make(map[string]overEntry)}
}

// note remembers at now that org is refused until until, with d's answer.
func (o *overLimit) note(org string, now, until time.Time, d Decision) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.orgs[org]; !ok && len(o.orgs) >= o.max {
		if now.Sub(o.swept) >= time.Second {
			o.swept = now
			for k, e := range o.orgs {
				if !now.Before(e.until) {
					delete(o.orgs, k)
				}
			}
		}
		if len(o.orgs) >= o.max {
			return
		}
	}
	o.orgs[org] = overEntry{until: until, d: d}
	o.size.Store(int64(len(o.orgs)))
}

// lookup returns org's refusal while it lasts at now. An entry that has
// expired stays until a later note sweeps or replaces it: lookups only read.
func (o *overLimit) lookup(org string, now time.Time) (Decision, bool) {
	if o.size.Load() == 0 {
		return Decision{}, false
	}
	o.mu.RLock()
	e, ok := o.orgs[org]
	o.mu.RUnlock()
	if !ok || !now.Before(e.until) {
		return Decision{}, false
	}
	d := e.d
	d.RetryAfter = max((e.until.Sub(now)+time.Second-1)/time.Second, 1) * time.Second
	return d, true
}
