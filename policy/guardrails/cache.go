package guardrails

import (
	"context"
	"encoding/json"
	"time"

	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/internal/ttlstore"
	"github.com/systemone/systemone-gateway/internal/ttlstore/inprocess"
	"github.com/systemone/systemone-gateway/internal/ttlstore/inredis"
)

// The verdict cache is a codec over the store both caches share (package
// ttlstore): its health rule, its bounds, its Redis layout.

// Bounds of the in-process verdict cache.
const (
	defaultCacheEntries = 10_000
	defaultCacheBytes   = 32 << 20
)

// redisCacheTimeout bounds one cache lookup or store: a slow Redis must not
// eat the check's own time.
const redisCacheTimeout = 100 * time.Millisecond

// RedisClient is the part of a go-redis client the verdict cache uses; a
// redis.UniversalClient (single server or cluster) is one.
type RedisClient = inredis.Client

// verdictCache is the verdict cache: what the service said, by cacheKey,
// for ttl from when it said it. With Redis it is two tiers, a bounded
// in-process store in front of the shared one, so that a hot verdict costs
// no round trip; each stored verdict carries the time it was given, so that
// neither tier answers it past ttl.
type verdictCache struct {
	store ttlstore.Store
	ttl   time.Duration
	now   func() time.Time
}

// newVerdictCache is the verdict cache: in Redis under prefix, behind an
// in-process front, when rdb is not nil; else in process only.
func newVerdictCache(rdb RedisClient, prefix string, ttl time.Duration, logger *zap.Logger, now func() time.Time) *verdictCache {
	inProcess := inprocess.New(inprocess.Limits{Entries: defaultCacheEntries, Bytes: defaultCacheBytes, TTL: ttl}, now)
	c := &verdictCache{store: inProcess, ttl: ttl, now: now}
	if rdb != nil {
		c.store = ttlstore.Tiered{Front: inProcess, Back: inredis.New(rdb, inredis.Options{
			Prefix: prefix, TTL: ttl, Timeout: redisCacheTimeout, Logger: logger, Now: now,
			Name: "guardrails verdict cache", Degraded: "checking without it",
		})}
	}
	return c
}

// get returns the verdict stored under key, if one younger than ttl is.
func (c *verdictCache) get(ctx context.Context, key string) (assessment, bool) {
	s, ok := decodeVerdict(c.store.Get(ctx, key)[0])
	if !ok || c.now().Sub(time.UnixMilli(s.GivenAt)) >= c.ttl {
		return assessment{}, false
	}
	return s.assessment, true
}

// set stores the verdict the service just gave.
func (c *verdictCache) set(ctx context.Context, key string, a assessment) {
	c.store.Set(ctx, ttlstore.Entry{Key: key, Value: encodeVerdict(a, c.now())})
}

// storedVerdict is a verdict's stored layout: what the service said and
// when, in Unix milliseconds.
type storedVerdict struct {
	assessment
	GivenAt int64 `json:"given_at"`
}

// encodeVerdict lays out what the service said at a time, for the store.
// It holds the service's risk, categories and suggested answer: never the
// request's text.
func encodeVerdict(a assessment, at time.Time) []byte {
	data, _ := json.Marshal(storedVerdict{a, at.UnixMilli()}) // strings, a string slice, a number: never fails
	return data
}

// decodeVerdict reads a stored verdict; false for a missing value, or one
// that is not a verdict of this layout (ask the service again).
func decodeVerdict(data []byte) (storedVerdict, bool) {
	var s storedVerdict
	if data == nil || json.Unmarshal(data, &s) != nil || s.Risk == "" || s.GivenAt == 0 {
		return storedVerdict{}, false
	}
	return s, true
}
