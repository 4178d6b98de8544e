package limits

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
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

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func i64(v int64) *int64 { return &v }

// newLimiter builds a Limiter on clk (in process, and for Redis's scripts
// too when pinRedis), in a key namespace of its own unless cfg names one.
func newLimiter(t testing.TB, cfg Config, clk *fakeClock, pinRedis bool) (*Limiter, *observer.ObservedLogs) {
	t.Helper()
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = t.Name() + ":"
	}
	core, logs := observer.New(zap.DebugLevel)
	l, err := New(cfg, zap.New(core))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		_ = l.Close()
		if t.Failed() {
			for _, e := range logs.All() {
				t.Logf("log: %s %q %v", e.Level, e.Message, e.ContextMap())
			}
		}
	})
	if clk != nil {
		l.now = clk.now
		if pinRedis && l.redis != nil {
			l.redis.now = clk.now
		}
	}
	if l.redis != nil {
		l.redis.probeMin, l.redis.probeMax = time.Millisecond, 10*time.Millisecond
	}
	return l, logs
}

// ownProcess gives l in-process buckets of its own, as if it ran in another
// gateway process: only Redis connects it to the other limiters.
func ownProcess(t testing.TB, l *Limiter) *Limiter {
	l.local = newLocalStore()
	t.Cleanup(func() { _ = l.local.Destruct() })
	return l
}
