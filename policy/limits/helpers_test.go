package limits

import (
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/systemone/systemone-gateway/internal/redispool"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Now().Round(0)} // wall clock only: the test moves it
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func i64(v int64) *int64 { return &v }

// shared is what the handler hands a limiter: its Redis client and key
// prefix.
type shared struct {
	urls   []string
	prefix string
}

// option sets what the test's handler would hand the limiter.
type option func(*shared)

// onRedis gives the limiter a Redis client for urls (one server, or a
// cluster's seed nodes), closed when the test ends.
func onRedis(urls ...string) option { return func(s *shared) { s.urls = urls } }

// prefixed names the key namespace.
func prefixed(prefix string) option { return func(s *shared) { s.prefix = prefix } }

// newLimiter builds a Limiter on clk (in process, and for Redis's scripts
// too when pinRedis), in a key namespace of its own unless an option names
// one.
func newLimiter(t testing.TB, cfg Config, clk *fakeClock, pinRedis bool, opts ...option) (*Limiter, *observer.ObservedLogs) {
	t.Helper()
	sh := shared{prefix: t.Name() + ":"}
	for _, o := range opts {
		o(&sh)
	}
	var rdb redis.UniversalClient
	if len(sh.urls) > 0 {
		var err error
		if rdb, err = redispool.NewClient(sh.urls); err != nil {
			t.Fatalf("redis client: %v", err)
		}
	}
	core, logs := observer.New(zap.DebugLevel)
	var client RedisClient
	if rdb != nil {
		client = rdb
	}
	l, err := New(cfg, client, sh.prefix, zap.New(core))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		_ = l.Close()
		if rdb != nil {
			_ = rdb.Close()
		}
		if t.Failed() {
			for _, e := range logs.All() {
				t.Logf("log: %s %q %v", e.Level, e.Message, e.ContextMap())
			}
		}
	})
	if clk != nil {
		l.now = clk.now
		if pinRedis && l.shared != nil {
			redisOf(l).now = clk.now
		}
	}
	if l.shared != nil {
		redisOf(l).probeMin, redisOf(l).probeMax = time.Millisecond, 10*time.Millisecond
	}
	return l, logs
}

// ownProcess gives l in-process buckets of its own, as if it ran in another
// gateway process: only Redis connects it to the other limiters.
func ownProcess(t testing.TB, l *Limiter) *Limiter {
	s := newLocalStore()
	l.local = localRef{s, func() error { return nil }} // the cleanup stops it
	t.Cleanup(func() { _ = s.Destruct() })
	return l
}

// redisOf is l's Redis store, nil without Redis.
func redisOf(l *Limiter) *redisStore {
	switch s := l.shared.(type) {
	case *redisStore:
		return s
	case *leases:
		return s.s
	}
	return nil
}

// leasesOf is l's leases (local_allowance), nil without them.
func leasesOf(l *Limiter) *leases {
	ls, _ := l.shared.(*leases)
	return ls
}

// localOf is l's in-process store.
func localOf(l *Limiter) *localStore { return l.local.(localRef).localStore }

// universal is the test's view of the limiter's Redis client, for hooks.
func universal(l *Limiter) redis.UniversalClient { return redisOf(l).client.(redis.UniversalClient) }
