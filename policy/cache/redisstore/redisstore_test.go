package redisstore

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
)

// newClient is a client tuned as the gateway's (context deadlines bound
// its commands).
func newClient(t *testing.T, addr string) redis.UniversalClient {
	rdb, err := redispool.NewClient([]string{"redis://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Values live under the prefix with the store's ttl, and come back whole.
func TestStoreInRedis(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	s := New(newClient(t, srv.Addr), "systemone:cache:", 10*time.Minute, time.Second, zap.NewNop())
	if _, ok := s.Get(ctx, "k"); ok {
		t.Fatal("a hit in an empty Redis")
	}
	value := []byte{1, 0, 2, 0xff}
	s.Set(ctx, "k", value)
	got, ok := s.Get(ctx, "k")
	if !ok || !bytes.Equal(got, value) {
		t.Fatalf("Get = %v %v", got, ok)
	}
	pttl, err := srv.Do("PTTL", "systemone:cache:k")
	if err != nil {
		t.Fatal(err)
	}
	if ms, _ := strconv.Atoi(strings.TrimPrefix(pttl, ":")); ms <= 9*60*1000 || ms > 10*60*1000 {
		t.Errorf("PTTL %s ms, want about 10 minutes", pttl)
	}
}

// A Redis that is gone, or that hangs, is a miss within the timeout, never
// an error; the store then leaves Redis alone for a second, logs the
// failure once, and the recovery once.
func TestRedisFailureIsAMiss(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr)
	core, logs := observer.New(zap.InfoLevel)
	s := New(newClient(t, proxy.Addr()), "p:", time.Minute, 100*time.Millisecond, zap.New(core))
	now := time.Unix(1_800_000_000, 0)
	s.now = func() time.Time { return now }
	s.Set(ctx, "k", []byte("v"))
	if _, ok := s.Get(ctx, "k"); !ok {
		t.Fatal("no hit through the proxy")
	}

	proxy.BlackHole()
	for i := range failuresToRest {
		began := time.Now()
		if _, ok := s.Get(ctx, "k"); ok {
			t.Fatal("a hit from a hanging Redis")
		}
		if waited := time.Since(began); waited > 2*time.Second {
			t.Errorf("a hanging Redis held the lookup %v", waited)
		}
		if resting := s.resting(); resting != (i == failuresToRest-1) {
			t.Fatalf("after %d failures: resting %v", i+1, resting)
		}
	}
	// Resting: no command is sent, however many requests come.
	for range 5 {
		if _, ok := s.Get(ctx, "k"); ok {
			t.Fatal("a hit while resting")
		}
		s.Set(ctx, "k2", []byte("v"))
	}

	proxy.Pass()
	now = now.Add(restAfterFailure)
	if _, ok := s.Get(ctx, "k"); !ok {
		t.Fatal("no hit once Redis answers again")
	}
	if _, ok := s.Get(ctx, "k2"); ok {
		t.Error("a store sent while resting")
	}
	var msgs []string
	for _, e := range logs.All() {
		msgs = append(msgs, e.Message)
	}
	if len(msgs) != 2 || msgs[0] != "answer cache: redis failing, answering misses" || msgs[1] != "answer cache: redis answering again" {
		t.Errorf("log %q, want one failure and one recovery", msgs)
	}

	// One failure between successes is its request's miss, no rest.
	proxy.Refuse()
	if _, ok := s.Get(ctx, "k"); ok {
		t.Fatal("a hit from a refusing Redis")
	}
	proxy.Pass()
	if _, ok := s.Get(ctx, "k"); !ok || s.resting() {
		t.Fatalf("after one failure: hit %v, resting %v", ok, s.resting())
	}

	srv.Stop()
	if _, ok := s.Get(ctx, "k"); ok {
		t.Fatal("a hit from a stopped Redis")
	}
}

// A lookup whose client went away says nothing about Redis: no rest, no log.
func TestCancelledLookupIsNotAFailure(t *testing.T) {
	srv := redistest.Start(t)
	core, logs := observer.New(zap.InfoLevel)
	s := New(newClient(t, srv.Addr), "p:", time.Minute, time.Second, zap.New(core))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := s.Get(ctx, "k"); ok {
		t.Fatal("a hit")
	}
	if s.resting() || logs.Len() != 0 {
		t.Errorf("resting %v, %d log entries", s.resting(), logs.Len())
	}
}

// Through a Redis Cluster each entry goes to its key's node: entries
// spread over the masters, and each comes back whole.
func TestStoreInRedisCluster(t *testing.T) {
	ctx := context.Background()
	cluster := redistest.StartCluster(t, 3)
	rdb, err := redispool.NewClient(cluster.URLs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	s := New(rdb, "systemone:cache:", time.Minute, 2*time.Second, zap.NewNop())
	for i := range 30 {
		s.Set(ctx, strconv.Itoa(i), []byte{byte(i)})
	}
	for i := range 30 {
		if v, ok := s.Get(ctx, strconv.Itoa(i)); !ok || len(v) != 1 || v[0] != byte(i) {
			t.Fatalf("entry %d: %v %v", i, v, ok)
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
}
