// Package redisstore is the answer cache's store in Redis, shared by every
// gateway instance: one GET per lookup and one SET with the entry's time to
// live per store, each bounded by a timeout. It never fails a request: an
// error or a timeout is a miss, and after a run of them the store leaves
// Redis alone for a second, so that a dead or hanging server costs requests
// nothing.
package redisstore

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// After failuresToRest consecutive failed commands, the store leaves Redis
// alone for restAfterFailure: a client redialling a dead server would
// otherwise spend the whole timeout of every lookup. One slow command (a
// loaded machine) is only its own request's miss: resting on it would turn
// a second of every instance's hits into misses.
const (
	failuresToRest   = 3
	restAfterFailure = time.Second
)

// Client is the part of a go-redis client the store uses; a
// redis.UniversalClient (a server or a cluster) is one.
type Client interface {
	Get(ctx context.Context, key string) *redis.StringCmd
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
}

// Store keeps values in Redis under prefix + key.
type Store struct {
	rdb     Client
	prefix  string
	ttl     time.Duration
	timeout time.Duration
	logger  *zap.Logger
	now     func() time.Time
	// failing is whether Redis counts as failing (a run of failures), so
	// that only the changes are logged, never one entry per request.
	failing atomic.Bool
	// failures counts the consecutive failed commands.
	failures atomic.Int64
	// restUntil is when (Unix nanoseconds) to use Redis again after a
	// failure.
	restUntil atomic.Int64
}

// New returns a store on rdb (the caller keeps owning it). Each value
// lives ttl; each command waits at most timeout.
func New(rdb Client, prefix string, ttl, timeout time.Duration, logger *zap.Logger) *Store {
	return &Store{rdb: rdb, prefix: prefix, ttl: ttl, timeout: timeout, logger: logger, now: time.Now}
}

// Get returns the value under key; a missing key, an error or a timeout
// is a miss.
func (s *Store) Get(ctx context.Context, key string) ([]byte, bool) {
	if s.resting() {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	data, err := s.rdb.Get(ctx, s.prefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	s.note(ctx, err)
	return data, err == nil && data != nil
}

// Set stores value under key for the store's ttl. A failure is forgotten:
// the next request for it is a miss and stores it again.
func (s *Store) Set(ctx context.Context, key string, value []byte) {
	if s.resting() {
		return
	}
	// The answer has gone to the client: a client that leaves now does
	// not cancel the store.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	s.note(ctx, s.rdb.Set(ctx, s.prefix+key, value, s.ttl).Err())
}

func (s *Store) resting() bool { return s.now().UnixNano() < s.restUntil.Load() }

// note records a command's outcome. A lookup cancelled because its client
// went away says nothing about Redis.
func (s *Store) note(ctx context.Context, err error) {
	if err == nil {
		s.failures.Store(0)
		if s.failing.CompareAndSwap(true, false) {
			s.logger.Info("answer cache: redis answering again")
		}
		return
	}
	if errors.Is(err, context.Canceled) && ctx.Err() == context.Canceled {
		return
	}
	if s.failures.Add(1) < failuresToRest {
		return
	}
	s.restUntil.Store(s.now().Add(restAfterFailure).UnixNano())
	if s.failing.CompareAndSwap(false, true) {
		s.logger.Warn("answer cache: redis failing, answering misses", zap.Error(err))
	}
}
