package guardrails

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/testclock"
	"github.com/systemone/systemone-gateway/internal/wait"
)

func newRedis(t *testing.T, srv *redistest.Server) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func TestCacheRedisShared(t *testing.T) {
	srv := redistest.Start(t)
	svc := newService(t, answer(verdictJSON("中风险", []string{"色情"}, nil, "代答", "抱歉")))
	cfg := Config{URL: svc.URL, APIKey: testKey, Cache: caddy.Duration(time.Minute)}
	// Two gateway instances, each with its own client, one Redis.
	one, err := New(cfg, newRedis(t, srv), "systemone:", nil)
	if err != nil {
		t.Fatal(err)
	}
	two, err := New(cfg, newRedis(t, srv), "systemone:", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const state = `"秘密 secret-text"`
	first := one.Check(ctx, []byte(state))
	second := two.Check(ctx, []byte(state))
	if n := svc.calls.Load(); n != 1 {
		t.Fatalf("service called %d times, want 1", n)
	}
	if first.Cached || !second.Cached || second.Action != ActionReview || second.SuggestAnswer != "抱歉" || second.Categories[0] != "pornography" {
		t.Errorf("first %+v\nsecond %+v", first, second)
	}

	// The key is the prefix and a hash, the value holds no request text,
	// and both expire with the TTL.
	rdb := newRedis(t, srv)
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || !regexp.MustCompile(`^systemone:guardrails:[0-9a-f]{64}$`).MatchString(keys[0]) {
		t.Fatalf("keys %q", keys)
	}
	value, _ := rdb.Get(ctx, keys[0]).Result()
	if strings.Contains(value, "secret-text") || strings.Contains(value, "秘密") {
		t.Errorf("cached value holds request text: %s", value)
	}
	if ttl := rdb.PTTL(ctx, keys[0]).Val(); ttl <= 50*time.Second || ttl > time.Minute {
		t.Errorf("PTTL %v, want about a minute", ttl)
	}

	// Another prefix is another cache; a garbled entry is a miss (to an
	// instance that holds no copy in process).
	other, _ := New(cfg, rdb, "tenant2:", nil)
	other.Check(ctx, []byte(state))
	rdb.Set(ctx, keys[0], "garbage", time.Minute)
	three, _ := New(cfg, rdb, "systemone:", nil)
	if v := three.Check(ctx, []byte(state)); v.Cached || v.Action != ActionReview {
		t.Errorf("verdict %+v after garbage in the cache", v)
	}
	if n := svc.calls.Load(); n != 3 {
		t.Errorf("service called %d times, want 3", n)
	}
}

// Redis that stops is a miss for every check, never a failed check; after
// a run of failures the cache rests Redis (no command at all), a probe in
// the background brings it back, and the outage logs one warning and one
// recovery.
func TestCacheRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	svc := newService(t, answer(passAnswer))
	core, logs := observer.New(zapcore.DebugLevel)
	rdb := newRedis(t, srv)
	sent := new(redistest.CountHook)
	rdb.AddHook(sent)
	c, err := New(Config{URL: svc.URL, APIKey: testKey, Cache: caddy.Duration(time.Minute)}, rdb, "p:", zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	clock := testclock.New(time.Unix(1_700_000_000, 0))
	c.cache = newVerdictCache(rdb, "p:guardrails:", time.Minute, zap.New(core), clock.Now)
	ctx := context.Background()
	asked := 0
	// Each check asks for a text not asked before: the instance's own
	// in-process front would answer a repeated one, Redis down or not.
	check := func() {
		t.Helper()
		asked++
		if v := c.Check(ctx, fmt.Appendf(nil, `"x%d"`, asked)); v.Action != ActionPass || v.Err != nil || v.Cached {
			t.Fatalf("verdict %+v, want a pass, not cached", v)
		}
	}
	// Redis holds a verdict once an instance with nothing in process finds
	// it there.
	other := newChecker(t, Config{URL: svc.URL, APIKey: testKey, Cache: caddy.Duration(time.Minute)})
	other.cache = newVerdictCache(newRedis(t, srv), "p:guardrails:", time.Minute, nil, clock.Now)
	inRedis := func() bool { return other.Check(ctx, fmt.Appendf(nil, `"x%d"`, asked)).Cached }

	srv.Stop()
	check() // GET and SET fail
	check() // GET fails: three in a row, Redis rests
	before := sent.Sent.Load()
	check()
	check()
	if n := sent.Sent.Load() - before; n != 0 {
		t.Errorf("%d Redis commands while resting, want none", n)
	}
	if n := svc.calls.Load(); n != 4 {
		t.Errorf("service called %d times, want 4", n)
	}

	srv.Restart()
	clock.Advance(time.Second)
	check() // starts the probe, in the background
	wait.Until(t, "the probe to find Redis back", func() bool {
		check()
		return inRedis()
	})
	clock.Advance(time.Minute) // the outage settles
	check()
	if !inRedis() {
		t.Error("a verdict stored after the outage is not in Redis")
	}
	if n := logs.FilterMessageSnippet("redis failing").FilterLevelExact(zapcore.WarnLevel).Len(); n != 1 {
		t.Errorf("%d warnings that Redis fails, want 1", n)
	}
	if n := logs.FilterMessageSnippet("redis answering again").Len(); n != 1 {
		t.Errorf("%d entries that Redis is back, want 1", n)
	}
	assertNoSecrets(t, logs)
}

// A client that hangs up mid-check is not a Redis failure: however many
// checks are cancelled, the shared cache stays on and logs nothing.
func TestCancelledCheckLeavesTheSharedCacheOn(t *testing.T) {
	srv := redistest.Start(t)
	svc := newService(t, answer(passAnswer))
	core, logs := observer.New(zapcore.DebugLevel)
	rdb := newRedis(t, srv)
	c, err := New(Config{URL: svc.URL, APIKey: testKey, Cache: caddy.Duration(time.Minute)}, rdb, "p:", zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 10 {
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		// Each another text: the in-process front would answer a repeat.
		if v := c.Check(cancelled, fmt.Appendf(nil, `"another %d"`, i)); !v.Unavailable {
			t.Fatalf("a cancelled check: %+v", v)
		}
	}
	// What the instance stores now reaches Redis, where another instance
	// finds it: the shared tier is on.
	c.Check(ctx, []byte(`"shared"`))
	other, _ := New(Config{URL: svc.URL, APIKey: testKey, Cache: caddy.Duration(time.Minute)}, rdb, "p:", nil)
	if v := other.Check(ctx, []byte(`"shared"`)); !v.Cached {
		t.Errorf("the shared cache is off after cancelled checks: %+v", v)
	}
	if n := logs.FilterMessageSnippet("redis").Len(); n != 0 {
		t.Errorf("%d log entries about Redis", n)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// heldService is an in-memory service for synctest bubbles: every call waits
// for release (or its context), then passes.
func heldService(c *Checker, calls *atomic.Int64, release <-chan struct{}) {
	c.client = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		calls.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(passAnswer))}, nil
	})}
}

func TestConcurrentChecksShareOneCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newChecker(t, Config{URL: "http://guardrails.test"})
		var calls atomic.Int64
		release := make(chan struct{})
		heldService(c, &calls, release)

		verdicts := make([]Verdict, 8)
		var wg sync.WaitGroup
		for i := range verdicts {
			state := `"same"`
			if i == len(verdicts)-1 {
				state = `"different"`
			}
			wg.Go(func() { verdicts[i] = c.Check(context.Background(), []byte(state)) })
		}
		// One caller going away does not fail the others sharing its call.
		ctx, cancel := context.WithCancel(context.Background())
		var gone Verdict
		wg.Go(func() { gone = c.Check(ctx, []byte(`"same"`)) })
		synctest.Wait() // everyone is waiting on a call
		cancel()
		synctest.Wait()
		close(release)
		wg.Wait()

		if n := calls.Load(); n != 2 {
			t.Errorf("%d calls for two distinct states", n)
		}
		for i, v := range verdicts {
			if v.Action != ActionPass || v.Err != nil {
				t.Errorf("check %d: %+v", i, v)
			}
		}
		if !gone.Unavailable {
			t.Errorf("the caller that went away got %+v", gone)
		}
	})
}

func TestTimeoutBoundsWholeCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newChecker(t, Config{URL: "http://guardrails.test", Timeout: caddy.Duration(1500 * time.Millisecond)})
		var calls atomic.Int64
		heldService(c, &calls, nil) // never answers
		v := c.Check(context.Background(), []byte(`"x"`))
		if v.Elapsed != 1500*time.Millisecond || !v.Unavailable {
			t.Errorf("verdict %+v, want unavailable after exactly the timeout", v)
		}
		// A caller's earlier deadline wins.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if v := c.Check(ctx, []byte(`"y"`)); v.Elapsed != 100*time.Millisecond {
			t.Errorf("elapsed %v, want the caller's 100ms", v.Elapsed)
		}
		time.Sleep(1500 * time.Millisecond) // the abandoned call ends at its own timeout
		synctest.Wait()
		if n := calls.Load(); n != 2 {
			t.Errorf("%d calls, want 2", n)
		}
	})
}

// With Redis, a verdict this instance used lately is answered from its
// in-process front without a round trip; a verdict another instance stored
// is fetched once; and neither tier answers a verdict past the ttl from
// when the service gave it, though the front took it later.
func TestVerdictCacheFront(t *testing.T) {
	srv := redistest.Start(t)
	svc := newService(t, answer(passAnswer))
	clock := testclock.New(time.Unix(1_700_000_000, 0))
	instance := func() (*Checker, *redistest.CountHook) {
		c := newChecker(t, Config{URL: svc.URL, Cache: caddy.Duration(time.Minute)})
		rdb := newRedis(t, srv)
		rdb.Ping(context.Background()) // the connection's own handshake is not counted
		sent := new(redistest.CountHook)
		rdb.AddHook(sent)
		c.cache = newVerdictCache(rdb, "p:guardrails:", time.Minute, nil, clock.Now)
		return c, sent
	}
	one, sentOne := instance()
	two, sentTwo := instance()
	ctx := context.Background()
	state := []byte(`"hot"`)

	one.Check(ctx, state) // asks the service, stores in both tiers
	before := sentOne.Sent.Load()
	for range 5 {
		if v := one.Check(ctx, state); !v.Cached {
			t.Fatalf("a hot verdict was not cached: %+v", v)
		}
	}
	if n := sentOne.Sent.Load() - before; n != 0 {
		t.Errorf("a hot verdict sent %d Redis commands, want none", n)
	}

	clock.Advance(50 * time.Second)
	before = sentTwo.Sent.Load()
	for range 3 {
		if v := two.Check(ctx, state); !v.Cached {
			t.Fatalf("the other instance did not find the stored verdict: %+v", v)
		}
	}
	if n := sentTwo.Sent.Load() - before; n != 1 {
		t.Errorf("the other instance sent %d Redis commands for three checks, want 1", n)
	}
	if n := svc.calls.Load(); n != 1 {
		t.Fatalf("service called %d times, want 1", n)
	}

	// A minute after the service gave it, the verdict is stale everywhere,
	// the second instance's front (which took it 50 s in) included.
	clock.Advance(15 * time.Second)
	if v := two.Check(ctx, state); v.Cached {
		t.Errorf("a verdict past its ttl was answered: %+v", v)
	}
	if n := svc.calls.Load(); n != 2 {
		t.Errorf("service called %d times, want 2", n)
	}
}
