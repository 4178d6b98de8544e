package limits

import (
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/systemone/systemone-gateway/internal/redispool"
	"github.com/systemone/systemone-gateway/internal/testclock"
	"github.com/systemone/systemone-gateway/internal/wait"
	"github.com/systemone/systemone-gateway/policy/limits/memstore"
	"github.com/systemone/systemone-gateway/policy/limits/redisstore"
)

// newFakeClock is a clock the test moves, at the wall clock's now.
func newFakeClock() *testclock.Clock { return testclock.New(time.Time{}) }

func i64(v int64) *int64 { return &v }

// shared is what the test's handler hands a limiter, and how the test
// tunes its Redis store.
type shared struct {
	urls       []string
	prefix     string
	redis      redisstore.Options
	sweepEvery time.Duration
}

// option sets what the test's handler would hand the limiter.
type option func(*shared)

// onRedis gives the limiter a Redis client for urls (one server, or a
// cluster's seed nodes), closed when the test ends.
func onRedis(urls ...string) option { return func(s *shared) { s.urls = urls } }

// prefixed names the key namespace.
func prefixed(prefix string) option { return func(s *shared) { s.prefix = prefix } }

// tuned sets the Redis store's options.
func tuned(f func(*redisstore.Options)) option { return func(s *shared) { f(&s.redis) } }

// clients are the test Redis clients of the limiters newLimiter built,
// with their key prefixes.
var clients sync.Map // *Limiter -> testClient

type testClient struct {
	redis.UniversalClient
	prefix string
}

// newLimiter builds a Limiter on clk (in process, and for Redis's scripts
// too when pinRedis), in a key namespace of its own unless an option names
// one. Its Redis store's probe backs off from 1ms to 10ms.
func newLimiter(t testing.TB, cfg Config, clk *testclock.Clock, pinRedis bool, opts ...option) (*Limiter, *observer.ObservedLogs) {
	t.Helper()
	sh := shared{prefix: t.Name() + ":", redis: redisstore.Options{ProbeMin: time.Millisecond, ProbeMax: 10 * time.Millisecond}}
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
	sh.redis.Logger = zap.New(core)
	if clk != nil && pinRedis {
		sh.redis.Clock = clk.Now
	}
	var client RedisClient
	if rdb != nil {
		client = rdb
	}
	l, err := build(cfg, client, sh.prefix, sh.redis, sh.sweepEvery)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if rdb != nil {
		clients.Store(l, testClient{rdb, sh.prefix})
	}
	t.Cleanup(func() {
		_ = l.Close()
		if rdb != nil {
			clients.Delete(l)
			_ = rdb.Close()
		}
		if t.Failed() {
			for _, e := range logs.All() {
				t.Logf("log: %s %q %v", e.Level, e.Message, e.ContextMap())
			}
		}
	})
	if clk != nil {
		l.now = clk.Now
	}
	return l, logs
}

// ownProcess gives l in-process buckets of its own, as if it ran in another
// gateway process: only Redis connects it to the other limiters.
func ownProcess(t testing.TB, l *Limiter) *Limiter {
	_ = l.local.Close() // the shared one's use
	s := memstore.New()
	l.local = s
	t.Cleanup(func() { _ = s.Close() })
	return l
}

// universal is the test's Redis client of l, for hooks and reads.
func universal(l *Limiter) redis.UniversalClient {
	c, _ := clients.Load(l)
	return c.(testClient).UniversalClient
}

// prefixOf is the key prefix of l, a limiter on Redis.
func prefixOf(l *Limiter) string {
	c, _ := clients.Load(l)
	return c.(testClient).prefix
}

// lost reports whether l counts its Redis as lost.
func lost(l *Limiter) bool {
	up, _ := l.RedisUp()
	return !up
}

// drain waits until Redis has answered every settlement and hold l has
// queued (none pending), at most 10s.
func drain(l *Limiter) {
	deadline := time.Now().Add(10 * time.Second)
	for l.Stats().Pending != 0 {
		if time.Now().After(deadline) {
			panic("settlements still pending after 10s")
		}
		time.Sleep(500 * time.Microsecond)
	}
}

// eventually waits until cond holds.
func eventually(t testing.TB, cond func() bool) {
	t.Helper()
	wait.Until(t, "the condition", cond)
}
