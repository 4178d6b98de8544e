package simulator

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// tokenBurst is the capacity of the input-token bucket.
const tokenBurst = 64000

// limiter holds the per-key buckets of POST /v1/systemone: requests (capacity
// rpm, refilled at rpm/60 per second) and input tokens (capacity tokenBurst,
// refilled at tps per second). A zero rate turns its bucket off.
type limiter struct {
	rpm, tps int64
	now      func() time.Time

	mu    sync.Mutex
	keys  map[string]*buckets
	swept time.Time
}

type buckets struct {
	requests, tokens float64
	at               time.Time
}

func newLimiter(rpm, tps int64, now func() time.Time) *limiter {
	return &limiter{rpm: rpm, tps: tps, now: now, keys: make(map[string]*buckets), swept: now()}
}

// admit debits one request costing cost input tokens from key's buckets, or
// debits nothing and returns the whole seconds to wait (at least 1) and the
// 429 detail. A cost above the token capacity is charged the capacity, so a
// large request is slowed, never refused forever.
func (l *limiter) admit(key string, cost int64) (ok bool, retryAfter int64, detail string) {
	if l.rpm == 0 && l.tps == 0 {
		return true, 0, ""
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)

	b := l.keys[key]
	if b == nil {
		b = &buckets{requests: float64(l.rpm), tokens: tokenBurst, at: now}
		l.keys[key] = b
	} else if elapsed := now.Sub(b.at).Seconds(); elapsed > 0 {
		b.requests = min(float64(l.rpm), b.requests+elapsed*float64(l.rpm)/60)
		b.tokens = min(tokenBurst, b.tokens+elapsed*float64(l.tps))
		b.at = now
	}

	charge := float64(min(cost, tokenBurst))
	if l.rpm > 0 && b.requests < 1 {
		wait := (1 - b.requests) * 60 / float64(l.rpm)
		return false, wholeSeconds(wait), fmt.Sprintf("Rate limit exceeded: %d requests per minute", l.rpm)
	}
	if l.tps > 0 && b.tokens < charge {
		wait := (charge - b.tokens) / float64(l.tps)
		return false, wholeSeconds(wait), fmt.Sprintf("Rate limit exceeded: %d tokens per second", l.tps)
	}
	if l.rpm > 0 {
		b.requests--
	}
	if l.tps > 0 {
		b.tokens -= charge
	}
	return true, 0, ""
}

// sweep forgets, at most once a minute, keys whose buckets have refilled: a
// fresh bucket is the same, and any bearer key may be accepted, so the map
// must not grow with every key ever seen.
func (l *limiter) sweep(now time.Time) {
	if now.Sub(l.swept) < time.Minute {
		return
	}
	l.swept = now
	full := time.Minute
	if l.tps > 0 {
		full = max(full, time.Duration(float64(tokenBurst)/float64(l.tps)*float64(time.Second)))
	}
	for key, b := range l.keys {
		if now.Sub(b.at) >= full {
			delete(l.keys, key)
		}
	}
}

// wholeSeconds rounds a wait up to whole seconds, at least 1, as retry-after
// carries.
func wholeSeconds(seconds float64) int64 {
	return max(1, int64(math.Ceil(seconds)))
}
