// Package inredis is the caches' store in Redis, shared by every
// gateway instance: a lookup is one GET (several keys: one pipeline, one
// round trip), a store one SET with the time to live, each bounded by a
// timeout.
//
// It never fails a request, and one health rule keeps a failing Redis from
// costing requests anything:
//
//   - A command that fails or times out is its own request's miss. A
//     command cut short because its request's client went away (the
//     request's context cancelled or past its deadline) says nothing about
//     Redis and never counts.
//   - After failuresToRest real failures in a row the store rests Redis:
//     requests send nothing to Redis and wait for nothing (a lookup is a
//     miss, a store is forgotten).
//   - While it rests, a probe in the background (one keyed command, to the
//     key that last failed, so that on a Redis Cluster it asks the node that
//     failed) decides when Redis is back: the first probe a second after the
//     rest began, then one a second; requests never wait for it.
//   - One outage logs one warning when the store first rests and one
//     recovery once Redis has answered for outageSettles without another
//     rest: a Redis that comes and goes (a cluster still electing a master)
//     is one outage, not a warning per flap. Each rest within one outage
//     waits twice as long as the last before its first probe, up to
//     maxProbeWait.
package inredis

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/internal/ttlstore"
)

// The health rule's numbers. One slow command (a loaded machine) is only its
// own request's miss: resting on it would turn a second of every
// instance's hits into misses.
const (
	failuresToRest = 3
	probeWait      = time.Second
	maxProbeWait   = 16 * time.Second
	outageSettles  = 10 * time.Second
)

// Client is the part of a go-redis client the store uses; a
// redis.UniversalClient (a server or a cluster) is one. Each command names
// one key, so a cluster routes it to the key's node, and a pipeline is
// split by node.
type Client interface {
	Get(ctx context.Context, key string) *redis.StringCmd
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	Exists(ctx context.Context, keys ...string) *redis.IntCmd
	Pipeline() redis.Pipeliner
}

// Options configure a Store.
type Options struct {
	// Prefix starts every key the store writes.
	Prefix string
	// TTL is how long each value lives.
	TTL time.Duration
	// Timeout bounds each command.
	Timeout time.Duration
	// Logger logs the outages; nil logs nothing.
	Logger *zap.Logger
	// Name names the cache in its log entries ("answer cache"), and
	// Degraded says what it does while Redis rests ("answering misses").
	Name, Degraded string
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Store keeps values in Redis under Prefix + key.
type Store struct {
	rdb  Client
	opts Options

	// resting is whether requests leave Redis alone; failures counts the
	// real failures in a row. Both are read on every command.
	resting  atomic.Bool
	failures atomic.Int64
	// inOutage is whether the outage's warning was logged and its
	// recovery not yet.
	inOutage atomic.Bool

	mu        sync.Mutex
	probing   bool
	nextProbe time.Time
	rests     int       // the rests of this outage
	backAt    time.Time // when the last rest ended
	lastFail  string    // the key of the last failed command, which the probe asks for
}

// New returns a store on rdb (the caller keeps owning it).
func New(rdb Client, opts Options) *Store {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Store{rdb: rdb, opts: opts}
}

// Get returns the values under keys, nil for a missing one; while Redis
// rests, or when it fails, every value is missing.
func (s *Store) Get(ctx context.Context, keys ...string) [][]byte {
	values := make([][]byte, len(keys))
	if len(keys) == 0 || s.skip() {
		return values
	}
	cmdCtx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	cmds := make([]*redis.StringCmd, len(keys))
	if len(keys) == 1 {
		cmds[0] = s.rdb.Get(cmdCtx, s.opts.Prefix+keys[0])
	} else {
		pipe := s.rdb.Pipeline()
		for i, key := range keys {
			cmds[i] = pipe.Get(cmdCtx, s.opts.Prefix+key)
		}
		_, _ = pipe.Exec(cmdCtx) // each command carries its own error
	}
	var failed error
	for i, cmd := range cmds {
		v, err := cmd.Bytes()
		switch {
		case err == nil:
			values[i] = v
		case !errors.Is(err, redis.Nil):
			failed, values[i] = err, nil
		}
	}
	if failed != nil {
		clear(values) // a partial answer is no answer
	}
	s.note(ctx, failed, keys[0])
	return values
}

// Set stores the entries for the store's ttl. A failure is forgotten: the
// next request for them is a miss and stores them again.
func (s *Store) Set(ctx context.Context, entries ...ttlstore.Entry) {
	if len(entries) == 0 || s.skip() {
		return
	}
	// Whoever asked has its answer: a client that leaves now does not
	// cancel the store.
	cmdCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
	defer cancel()
	var err error
	if len(entries) == 1 {
		err = s.rdb.Set(cmdCtx, s.opts.Prefix+entries[0].Key, entries[0].Value, s.opts.TTL).Err()
	} else {
		pipe := s.rdb.Pipeline()
		for _, e := range entries {
			pipe.Set(cmdCtx, s.opts.Prefix+e.Key, e.Value, s.opts.TTL)
		}
		_, err = pipe.Exec(cmdCtx)
	}
	s.note(context.WithoutCancel(ctx), err, entries[0].Key)
}

// Delete removes the keys, each with its own DEL (so that a cluster routes
// each to its node).
func (s *Store) Delete(ctx context.Context, keys ...string) {
	if len(keys) == 0 || s.skip() {
		return
	}
	cmdCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
	defer cancel()
	pipe := s.rdb.Pipeline()
	for _, key := range keys {
		pipe.Del(cmdCtx, s.opts.Prefix+key)
	}
	_, err := pipe.Exec(cmdCtx)
	s.note(context.WithoutCancel(ctx), err, keys[0])
}

// skip reports whether Redis rests; a request that finds it resting may
// start the background probe, and never waits for it.
func (s *Store) skip() bool {
	if !s.resting.Load() {
		return false
	}
	s.mu.Lock()
	due := !s.probing && !s.opts.Now().Before(s.nextProbe)
	s.probing = s.probing || due
	key := s.lastFail
	s.mu.Unlock()
	if due {
		go s.probe(key)
	}
	return true
}

// probe asks Redis for key; an answer, even "no such key", ends the rest.
func (s *Store) probe(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	err := s.rdb.Exists(ctx, s.opts.Prefix+key).Err()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.probing = false
	if err != nil {
		s.nextProbe = s.opts.Now().Add(probeWait)
		return
	}
	s.backAt = s.opts.Now()
	s.failures.Store(0)
	s.resting.Store(false)
}

// note records a command's outcome. ctx is the request's context for a
// lookup, and for a store one that is never cancelled: the command's own
// timeout is a failure, the request's end is not.
func (s *Store) note(ctx context.Context, err error, key string) {
	switch {
	case err == nil:
		if s.failures.Load() != 0 {
			s.failures.Store(0)
		}
		if s.inOutage.Load() {
			s.mu.Lock()
			s.endOutageIfSettled()
			s.mu.Unlock()
		}
		return
	case ctx.Err() != nil:
		// The request's client went away, or the request's own deadline
		// passed (the store's timeout is on the command's context, not on
		// this one): nothing is known of Redis.
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastFail = key
	if s.failures.Add(1) < failuresToRest || s.resting.Load() {
		return
	}
	s.endOutageIfSettled() // an earlier outage that had settled ends first
	s.rests++
	s.nextProbe = s.opts.Now().Add(min(probeWait<<(s.rests-1), maxProbeWait))
	s.resting.Store(true)
	if s.inOutage.CompareAndSwap(false, true) {
		s.opts.Logger.Warn(s.opts.Name+": redis failing, "+s.opts.Degraded, zap.Error(err))
	}
}

// endOutageIfSettled logs the recovery of an outage once Redis has
// answered for outageSettles since its last rest. Call with s.mu held.
func (s *Store) endOutageIfSettled() {
	if !s.inOutage.Load() || s.resting.Load() || s.opts.Now().Before(s.backAt.Add(outageSettles)) {
		return
	}
	s.inOutage.Store(false)
	s.rests = 0
	s.opts.Logger.Info(s.opts.Name + ": redis answering again")
}

var _ ttlstore.Store = (*Store)(nil)
