package guardrails

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Bounds of the in-process verdict cache.
const (
	defaultCacheEntries = 10_000
	defaultCacheBytes   = 32 << 20
)

// redisCacheTimeout bounds one cache lookup or store: a slow Redis must not
// eat the check's own time.
const redisCacheTimeout = 100 * time.Millisecond

// redisRetryAfter is how long the cache is left alone after Redis failed:
// a client redialling a dead server would otherwise spend the whole
// redisCacheTimeout of every check, twice.
const redisRetryAfter = time.Second

// verdictCache keeps what the service said about a message list, by key. It
// never fails a check: an error is a miss.
type verdictCache interface {
	get(ctx context.Context, key string) (assessment, bool)
	set(ctx context.Context, key string, a assessment)
}

// memoryCache is a size-bounded LRU with a fixed time to live.
type memoryCache struct {
	maxEntries, maxBytes int
	ttl                  time.Duration
	now                  func() time.Time

	mu    sync.Mutex
	bytes int
	order *list.List // of *memoryEntry, most recently used first
	items map[string]*list.Element
}

type memoryEntry struct {
	key     string
	a       assessment
	size    int
	expires time.Time
}

func newMemoryCache(maxEntries, maxBytes int, ttl time.Duration, now func() time.Time) *memoryCache {
	return &memoryCache{
		maxEntries: maxEntries, maxBytes: maxBytes, ttl: ttl, now: now,
		order: list.New(), items: make(map[string]*list.Element),
	}
}

func (m *memoryCache) get(_ context.Context, key string) (assessment, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.items[key]
	if !ok {
		return assessment{}, false
	}
	e := el.Value.(*memoryEntry)
	if !m.now().Before(e.expires) {
		m.remove(el)
		return assessment{}, false
	}
	m.order.MoveToFront(el)
	return e.a, true
}

func (m *memoryCache) set(_ context.Context, key string, a assessment) {
	size := len(key) + len(a.Risk) + len(a.ServiceAction) + len(a.SuggestAnswer) + 64
	for _, c := range a.Categories {
		size += len(c) + 16
	}
	if size > m.maxBytes {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.items[key]; ok {
		m.remove(el)
	}
	m.items[key] = m.order.PushFront(&memoryEntry{key: key, a: a, size: size, expires: m.now().Add(m.ttl)})
	m.bytes += size
	for m.order.Len() > m.maxEntries || m.bytes > m.maxBytes {
		m.remove(m.order.Back())
	}
}

func (m *memoryCache) remove(el *list.Element) {
	e := m.order.Remove(el).(*memoryEntry)
	delete(m.items, e.key)
	m.bytes -= e.size
}

// RedisClient is the part of a go-redis client the verdict cache uses; a
// redis.UniversalClient (single server or cluster) is one.
type RedisClient interface {
	Get(ctx context.Context, key string) *redis.StringCmd
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
}

// redisCache shares verdicts between gateway instances.
type redisCache struct {
	rdb    RedisClient
	prefix string
	ttl    time.Duration
	logger *zap.Logger
	now    func() time.Time
	// failing is whether the last Redis command failed, so that only
	// changes are logged, not every request.
	failing atomic.Bool
	// retryAt is when (Unix nanoseconds) to use Redis again after a failure.
	retryAt atomic.Int64
}

func newRedisCache(rdb RedisClient, prefix string, ttl time.Duration, logger *zap.Logger) *redisCache {
	return &redisCache{rdb: rdb, prefix: prefix, ttl: ttl, logger: logger, now: time.Now}
}

// resting reports whether Redis failed a moment ago.
func (r *redisCache) resting() bool {
	return r.now().UnixNano() < r.retryAt.Load()
}

func (r *redisCache) get(ctx context.Context, key string) (assessment, bool) {
	if r.resting() {
		return assessment{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, redisCacheTimeout)
	defer cancel()
	data, err := r.rdb.Get(ctx, r.prefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		r.noteHealth(nil)
		return assessment{}, false
	}
	r.noteHealth(err)
	if err != nil {
		return assessment{}, false
	}
	var a assessment
	if err := json.Unmarshal(data, &a); err != nil || a.Risk == "" {
		return assessment{}, false // not ours, or an older format: ask again
	}
	return a, true
}

func (r *redisCache) set(ctx context.Context, key string, a assessment) {
	if r.resting() {
		return
	}
	data, err := json.Marshal(a)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), redisCacheTimeout)
	defer cancel()
	r.noteHealth(r.rdb.Set(ctx, r.prefix+key, data, r.ttl).Err())
}

func (r *redisCache) noteHealth(err error) {
	if err == nil {
		if r.failing.CompareAndSwap(true, false) {
			r.logger.Info("guardrails verdict cache: redis answering again")
		}
		return
	}
	r.retryAt.Store(r.now().Add(redisRetryAfter).UnixNano())
	if r.failing.CompareAndSwap(false, true) {
		r.logger.Warn("guardrails verdict cache: redis failing, checking without it", zap.Error(err))
	}
}
