package guardrails

import (
	"encoding/json"
	"time"

	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/internal/ttlstore"
	"github.com/systemone/systemone-gateway/internal/ttlstore/memstore"
	"github.com/systemone/systemone-gateway/internal/ttlstore/redisstore"
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
type RedisClient = redisstore.Client

// newVerdictStore is the verdict cache's store: in Redis under prefix
// when rdb is not nil, else in process; entries live ttl.
func newVerdictStore(rdb RedisClient, prefix string, ttl time.Duration, logger *zap.Logger, now func() time.Time) ttlstore.Store {
	if rdb == nil {
		return memstore.New(memstore.Limits{Entries: defaultCacheEntries, Bytes: defaultCacheBytes, TTL: ttl}, now)
	}
	return redisstore.New(rdb, redisstore.Options{
		Prefix: prefix, TTL: ttl, Timeout: redisCacheTimeout, Logger: logger, Now: now,
		Name: "guardrails verdict cache", Degraded: "checking without it",
	})
}

// encodeVerdict lays out what the service said, for the store. It holds
// the service's risk, categories and suggested answer: never the request's
// text.
func encodeVerdict(a assessment) []byte {
	data, _ := json.Marshal(a) // strings and a string slice: never fails
	return data
}

// decodeVerdict reads a stored verdict; false for a missing value, or one
// that is not a verdict of this layout (ask the service again).
func decodeVerdict(data []byte) (assessment, bool) {
	var a assessment
	if data == nil || json.Unmarshal(data, &a) != nil || a.Risk == "" {
		return assessment{}, false
	}
	return a, true
}
