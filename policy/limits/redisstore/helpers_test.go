package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/systemone/systemone-gateway/internal/redispool"
	"github.com/systemone/systemone-gateway/internal/wait"
	"github.com/systemone/systemone-gateway/policy/limits/store"
)

var bg = context.Background()

// slow is store_timeout for tests about anything but timeouts.
const slow = 5 * time.Second

// The Limiter's default buckets: 300 requests a minute, 1,000 tokens a
// second with a burst of 64,000.
var (
	defReq = store.RequestsPerMinute(300)
	defTok = store.TokensPerSecond(1000, 64_000)
)

// testStore is a Store on a Redis client of the test's own, which the test
// can hook and read.
type testStore struct {
	*Store
	client redis.UniversalClient
	logs   *observer.ObservedLogs
	prefix string
}

// newStore returns a Store in url's Redis with key prefix "t:" and o, whose
// Timeout defaults to slow; both close when the test ends.
func newStore(t *testing.T, url string, o Options) *testStore {
	t.Helper()
	return newStoreAt(t, url, "t:", o)
}

// newStoreAt is newStore with the key prefix prefix.
func newStoreAt(t *testing.T, url, prefix string, o Options) *testStore {
	t.Helper()
	client, err := redispool.NewClient([]string{url})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.DebugLevel)
	o.Logger = zap.New(core)
	if o.Timeout == 0 {
		o.Timeout = slow
	}
	s := New(client, prefix, o)
	t.Cleanup(func() {
		_ = s.Close()
		_ = client.Close()
	})
	return &testStore{s, client, logs, prefix}
}

// admission is the Limiter's check of an evaluation estimated at tokens.
func admission(req, tok store.Spec, tokens int64) store.Check {
	c := store.Check{Req: req, Tok: tok, ReqCost: store.Unit, TokCost: -1, Hold: true}
	if tok.On() {
		c.TokCost = min(tokens*store.Unit, tok.Capacity)
	}
	return c
}

// drain waits until Redis has answered every settlement and hold s has
// queued.
func (s *testStore) drain(t *testing.T) {
	t.Helper()
	wait.Until(t, "the settlements sent", func() bool { return s.Stats().Pending == 0 })
}

// markLost counts s's one node lost without starting its probe: nothing
// is sent until the test says so.
func (s *testStore) markLost() {
	h := &s.batcher(s.client.(*redis.Client)).health
	h.lost.Store(true)
	s.health.mu.Lock()
	s.health.lostNodes++
	s.health.nodesLost.Add(1)
	s.health.down.Store(true)
	s.health.mu.Unlock()
}
