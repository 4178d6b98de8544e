package inredis

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/systemone/systemone-gateway/internal/faultproxy"
	"github.com/systemone/systemone-gateway/internal/redispool"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/testclock"
	"github.com/systemone/systemone-gateway/internal/ttlstore"
	"github.com/systemone/systemone-gateway/internal/wait"
)

// newClient is a client tuned as the gateway's (context deadlines bound
// its commands), counting the round trips it sends.
func newClient(t *testing.T, addr string) (redis.UniversalClient, *redistest.CountHook) {
	rdb, err := redispool.NewClient([]string{"redis://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	hook := new(redistest.CountHook)
	rdb.AddHook(hook)
	return rdb, hook
}

func entry(key, value string) ttlstore.Entry { return ttlstore.Entry{Key: key, Value: []byte(value)} }

// Values live under the prefix with the store's ttl and come back whole;
// several keys are read, and written, in one round trip.
func TestStoreInRedis(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb, sent := newClient(t, srv.Addr)
	s := New(rdb, Options{Prefix: "systemone:cache:", TTL: 10 * time.Minute, Timeout: time.Second})
	if v := s.Get(ctx, "k"); v[0] != nil {
		t.Fatal("a hit in an empty Redis")
	}
	value := []byte{1, 0, 2, 0xff}
	s.Set(ctx, ttlstore.Entry{Key: "k", Value: value})
	if got := s.Get(ctx, "k")[0]; !bytes.Equal(got, value) {
		t.Fatalf("Get = %v", got)
	}
	pttl, err := srv.Do("PTTL", "systemone:cache:k")
	if err != nil {
		t.Fatal(err)
	}
	if ms, _ := strconv.Atoi(strings.TrimPrefix(pttl, ":")); ms <= 9*60*1000 || ms > 10*60*1000 {
		t.Errorf("PTTL %s ms, want about 10 minutes", pttl)
	}

	s.Set(ctx, entry("a", "1"), entry("b", "2"))
	got := s.Get(ctx, "b", "missing", "a")
	if string(got[0]) != "2" || got[1] != nil || string(got[2]) != "1" {
		t.Errorf("Get = %q", got)
	}
	before := sent.Sent.Load() // the connections are open
	for range 10 {
		s.Set(ctx, entry("a", "1"), entry("b", "2"))
		s.Get(ctx, "b", "missing", "a")
	}
	if n := sent.Sent.Load() - before; n != 20 {
		t.Errorf("%d round trips for 10 Sets and 10 Gets of several keys, want 20", n)
	}
	s.Delete(ctx, "a", "b")
	if got := s.Get(ctx, "a", "b"); got[0] != nil || got[1] != nil {
		t.Errorf("after Delete: %q", got)
	}
}

// messages are the log's messages, in order.
func messages(logs *observer.ObservedLogs) []string {
	var msgs []string
	for _, e := range logs.All() {
		msgs = append(msgs, e.Message)
	}
	return msgs
}

// A Redis that is gone, or that hangs, is a miss within the timeout, never
// an error. After a run of failures the store rests Redis: requests send
// nothing and wait for nothing, a probe in the background brings it back,
// and an outage that comes and goes logs one warning and one recovery.
func TestRestingCostsRequestsNothing(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr)
	core, logs := observer.New(zap.InfoLevel)
	clock := testclock.New(time.Unix(1_800_000_000, 0))
	rdb, sent := newClient(t, proxy.Addr())
	s := New(rdb, Options{Prefix: "p:", TTL: time.Minute, Timeout: 100 * time.Millisecond, Logger: zap.New(core),
		Name: "answer cache", Degraded: "answering misses", Now: clock.Now})
	s.Set(ctx, entry("k", "v"))
	if s.Get(ctx, "k")[0] == nil {
		t.Fatal("no hit through the proxy")
	}

	proxy.BlackHole()
	for i := range failuresToRest {
		if s.Get(ctx, "k")[0] != nil {
			t.Fatal("a hit from a hanging Redis")
		}
		if resting := s.resting.Load(); resting != (i == failuresToRest-1) {
			t.Fatalf("after %d failures: resting %v", i+1, resting)
		}
	}
	// Resting: no command is sent, however many requests come, until the
	// probe is due; the probe's failure is the store's alone.
	before := sent.Sent.Load()
	for range 5 {
		if s.Get(ctx, "k")[0] != nil {
			t.Fatal("a hit while resting")
		}
		s.Set(ctx, entry("k2", "v"))
	}
	if n := sent.Sent.Load() - before; n != 0 {
		t.Fatalf("%d commands sent while resting", n)
	}
	clock.Advance(probeWait)
	s.Get(ctx, "k") // starts a probe, which fails
	wait.Until(t, "the failed probe", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return !s.probing })
	if !s.resting.Load() || sent.Sent.Load() == before {
		t.Fatalf("after a failed probe: resting %v, probe sent %v", s.resting.Load(), sent.Sent.Load() != before)
	}

	proxy.Pass()
	clock.Advance(probeWait)
	s.Get(ctx, "k") // a miss still: the probe answers in the background
	wait.Until(t, "the probe that finds Redis back", func() bool { return !s.resting.Load() })
	if s.Get(ctx, "k")[0] == nil {
		t.Fatal("no hit once Redis answers again")
	}
	if s.Get(ctx, "k2")[0] != nil {
		t.Error("a store sent while resting")
	}

	// Redis fails again before the outage settled: the same outage, a
	// longer rest, no second warning.
	proxy.Refuse()
	for range failuresToRest {
		s.Get(ctx, "k")
	}
	if !s.resting.Load() {
		t.Fatal("not resting after a second run of failures")
	}
	proxy.Pass()
	clock.Advance(probeWait)
	s.Get(ctx, "k")
	if !s.resting.Load() {
		t.Fatal("the second rest of an outage was as short as the first")
	}
	clock.Advance(probeWait)
	s.Get(ctx, "k")
	wait.Until(t, "the end of the second rest", func() bool { return !s.resting.Load() })
	s.Get(ctx, "k")
	if msgs := messages(logs); len(msgs) != 1 {
		t.Fatalf("log %q before the outage settled, want its one warning", msgs)
	}
	clock.Advance(outageSettles)
	s.Get(ctx, "k")
	s.Get(ctx, "k")
	if msgs := messages(logs); len(msgs) != 2 || msgs[0] != "answer cache: redis failing, answering misses" || msgs[1] != "answer cache: redis answering again" {
		t.Errorf("log %q, want one failure and one recovery", msgs)
	}

	// One failure between successes is its request's miss, no rest.
	proxy.Refuse()
	if s.Get(ctx, "k")[0] != nil {
		t.Fatal("a hit from a refusing Redis")
	}
	proxy.Pass()
	if s.Get(ctx, "k")[0] == nil || s.resting.Load() {
		t.Fatalf("after one failure: resting %v", s.resting.Load())
	}
}

// A lookup whose client went away, or whose request's deadline passed,
// says nothing about Redis, however many there are: no rest, no log.
func TestClientHangingUpIsNotAFailure(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr)
	core, logs := observer.New(zap.InfoLevel)
	rdb, _ := newClient(t, proxy.Addr())
	s := New(rdb, Options{Prefix: "p:", TTL: time.Minute, Timeout: 5 * time.Second, Logger: zap.New(core), Name: "answer cache"})
	proxy.BlackHole() // a lookup would hang for the whole timeout
	for range 2 * failuresToRest {
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		s.Get(cancelled, "k")
		past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		s.Get(past, "k")
		cancel()
		// A client that hangs up mid-lookup.
		leaving, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(time.Millisecond); cancel() }()
		s.Get(leaving, "k")
	}
	if s.resting.Load() || s.failures.Load() != 0 || logs.Len() != 0 {
		t.Errorf("resting %v, %d failures, %d log entries", s.resting.Load(), s.failures.Load(), logs.Len())
	}
}

// Through a Redis Cluster each entry goes to its key's node: entries
// spread over the masters, and each comes back whole, read singly or
// several at once.
func TestStoreInRedisCluster(t *testing.T) {
	ctx := context.Background()
	cluster := redistest.StartCluster(t, 3)
	rdb, err := redispool.NewClient(cluster.URLs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	s := New(rdb, Options{Prefix: "systemone:cache:", TTL: time.Minute, Timeout: 2 * time.Second})
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = strconv.Itoa(i)
		s.Set(ctx, ttlstore.Entry{Key: keys[i], Value: []byte{byte(i)}})
	}
	for i, v := range s.Get(ctx, keys...) {
		if len(v) != 1 || v[0] != byte(i) || !bytes.Equal(s.Get(ctx, keys[i])[0], v) {
			t.Fatalf("entry %d: %v", i, v)
		}
	}
	holding := 0
	for _, node := range cluster.Nodes {
		if n, _ := node.Do("DBSIZE"); strings.TrimPrefix(n, ":") != "0" {
			holding++
		}
	}
	if holding < 2 {
		t.Errorf("entries on %d of 3 nodes: the keys share a slot", holding)
	}
	s.Delete(ctx, keys...)
	for i, v := range s.Get(ctx, keys...) {
		if v != nil {
			t.Fatalf("entry %d after Delete", i)
		}
	}
}
