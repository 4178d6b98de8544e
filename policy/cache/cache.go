// Package cache is the exact answer cache: an upstream's 200 to an
// evaluation request, kept by org and the request body's exact bytes, and
// answered again to the same org's byte-identical request while it lives.
//
// Only answers from a concrete version are kept: the answer's `model` must
// equal the request's `model` field, so an omitted model or an alias (which
// moves to new versions) is never cached. Nothing about how the answer was
// routed is kept: the gateway routes every hit afresh, under the thresholds
// in force.
//
// Entries live in Redis when the gateway has `redis` (shared by every
// instance, under key_prefix + "cache:"), else in process (memstore,
// bounded by max_entries, kept across reloads that keep the cache
// settings). The cache never fails a request: a store that fails or is
// slow (over StoreTimeout) is a miss, and a store it could not write is
// forgotten.
package cache

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/policy/cache/memstore"
	"github.com/systemone/systemone-gateway/policy/cache/redisstore"
)

// StoreTimeout bounds one Redis command of the cache (a lookup before the
// admission, a store after the answer went to the client): a slow Redis
// costs a request at most this, then it is a miss; after three failures in
// a row the next second's requests skip Redis. The same bound as the
// guardrails verdict cache's.
const StoreTimeout = 100 * time.Millisecond

// Store keeps encoded entries by key for the cache's TTL. It never fails a
// request: Get reports a miss for anything it cannot read, Set forgets
// what it cannot write.
type Store interface {
	Get(ctx context.Context, key string) ([]byte, bool)
	Set(ctx context.Context, key string, value []byte)
}

// RedisClient is the part of a go-redis client the cache uses; the
// handler's redis.UniversalClient (a server or a cluster) is one. Each
// command names one key, so a cluster routes it to the key's node.
type RedisClient = redisstore.Client

// Cache is one config's answer cache. It is safe for concurrent use.
type Cache struct {
	store     Store
	maxSize   int64
	release   func() error
	closeOnce sync.Once
	closeErr  error
}

// New validates cfg, applies its defaults and returns the cache. With rdb
// (the gateway's client; the caller keeps owning it) entries live in Redis
// under prefix + "cache:"; without, in process, shared with every config of
// the same prefix and settings (so a reload that keeps them keeps the
// entries). A nil logger logs nothing. Call Close when the config is
// retired.
func New(cfg Config, rdb RedisClient, prefix string, logger *zap.Logger) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	cfg = cfg.withDefaults()
	ttl := time.Duration(cfg.TTL)
	c := &Cache{maxSize: cfg.MaxSize, release: func() error { return nil }}
	if rdb != nil {
		c.store = redisstore.New(rdb, prefix+"cache:", ttl, StoreTimeout, logger)
	} else {
		name := fmt.Sprintf("%s|ttl=%v|max_entries=%d|max_size=%d", prefix, ttl, cfg.MaxEntries, cfg.MaxSize)
		c.store, c.release = memstore.Acquire(name, cfg.MaxEntries, ttl)
	}
	return c, nil
}

// newWithStore is a cache over any store, for tests.
func newWithStore(s Store, maxSize int64) *Cache {
	return &Cache{store: s, maxSize: maxSize, release: func() error { return nil }}
}

// Lookup returns the answer stored for org's request body, if one lives.
func (c *Cache) Lookup(ctx context.Context, org string, body []byte) (Answer, bool) {
	data, ok := c.store.Get(ctx, Key(org, body))
	if !ok {
		return Answer{}, false
	}
	owner, a, err := decode(data)
	if err != nil || owner != org {
		return Answer{}, false
	}
	return a, true
}

// Cacheable reports whether a request can ever be answered from the cache:
// it names a model (a version or an alias; only a version's answers are
// ever stored). A request that is not needs no lookup.
func Cacheable(requestedModel string) bool { return requestedModel != "" }

// Takes reports whether the cache stores an answer: a 200 whose body was
// read (answeredModel is its `model`; empty when it could not be read),
// answered by the concrete version the request named (requestedModel, the
// request's `model` field), of at most max_size bytes as sent.
func (c *Cache) Takes(status int, requestedModel, answeredModel string, size int) bool {
	return status == http.StatusOK && Cacheable(requestedModel) && answeredModel == requestedModel && int64(size) <= c.maxSize
}

// Keep stores the answer to org's request body when the cache takes it
// (Takes), and reports whether it did; the answer's bytes are copied.
func (c *Cache) Keep(ctx context.Context, org string, body []byte, requestedModel, answeredModel string, a Answer) bool {
	if !c.Takes(a.Status, requestedModel, answeredModel, len(a.Body)) {
		return false
	}
	c.store.Set(ctx, Key(org, body), encode(org, a))
	return true
}

// Close releases the in-process entries, unless a newer config with the
// same settings holds them too. Calling it again does nothing.
func (c *Cache) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.release() })
	return c.closeErr
}
