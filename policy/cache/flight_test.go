package cache

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/redispool"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/ttlstore"
	"github.com/systemone/systemone-gateway/internal/wait"
)

// countingStore counts the lookups of a store; resting answers none, as a
// resting Redis does.
type countingStore struct {
	ttlstore.Store
	gets    atomic.Int64
	resting bool
}

func (s *countingStore) Get(ctx context.Context, keys ...string) [][]byte {
	s.gets.Add(1)
	if s.resting {
		return make([][]byte, len(keys))
	}
	return s.Store.Get(ctx, keys...)
}

var failure = Answer{Status: 503, ContentType: "application/json", RequestID: "failed-1", Body: []byte(`{"detail":"overloaded"}`)}

// Waiters take the leader's outcome without looking again: its stored
// answer as a hit, its failure as theirs, or nothing (they ask the
// upstream). With the store resting (nothing known of any key), a waiter
// with the leader's key still takes it; one with another key waits for
// nothing.
func TestWaitersTakeTheLeadersOutcome(t *testing.T) {
	for _, resting := range []bool{false, true} {
		for _, outcome := range []string{"answer", "failure", "none"} {
			t.Run(fmt.Sprintf("resting %v/%s", resting, outcome), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ctx := context.Background()
					c := newTestCache(1 << 20)
					s := &countingStore{Store: c.store}
					c.store = s
					store(c, acme, `{"accepts":"the key"}`, answer)
					s.resting = resting
					before := s.gets.Load()
					leader := c.Lookup(ctx, acme, []byte(body))
					if !leader.Leads() {
						t.Fatal("the first miss leads nothing")
					}
					waiters := make([]*Lookup, 8)
					var wg sync.WaitGroup
					for i := range waiters {
						wg.Go(func() { waiters[i] = c.Lookup(ctx, acme, []byte(body)) })
					}
					synctest.Wait()
					if n := s.gets.Load() - before; n != 1 {
						t.Errorf("%d lookups, want the leader's alone", n)
					}
					// Another key: known accepted it waits; unknown (or
					// nothing known, Redis resting) it does not.
					other := asker("org_keys", "acme", "acme-key-2")
					store(c, other, `{"accepts":"the other key"}`, answer)
					var second *Lookup
					wg.Go(func() { second = c.Lookup(ctx, other, []byte(body)) })
					stranger := c.Lookup(ctx, asker("org_keys", "acme", "never-accepted"), []byte(body))
					if stranger.hit || stranger.Leads() || stranger.failure != nil {
						t.Errorf("a key never accepted: %+v", stranger)
					}
					synctest.Wait()
					if resting && second == nil {
						t.Error("with nothing known, another key waited")
					}
					switch outcome {
					case "answer":
						c.Record(ctx, leader, 200, &answer)
					case "failure":
						c.Fail(leader, failure)
					case "none":
						c.Done(leader)
					}
					wg.Wait()
					if !resting {
						waiters = append(waiters, second)
					}
					for i, w := range waiters {
						got, hit := w.Hit()
						failed, fails := w.Failed()
						var ok bool
						switch outcome {
						case "answer":
							ok = hit && !fails && fmt.Sprint(got) == fmt.Sprint(answer)
						case "failure":
							ok = !hit && fails && fmt.Sprint(failed) == fmt.Sprint(failure)
						case "none":
							ok = !hit && !fails
						}
						if !ok || w.Leads() {
							t.Errorf("waiter %d: %+v", i, w)
						}
					}
					if len(c.flights) != 0 {
						t.Errorf("%d flights left", len(c.flights))
					}
				})
			})
		}
	}
}

// At most maxFollowers wait for one request: the next asks the upstream.
func TestFollowersAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		c := newTestCache(1 << 20)
		leader := c.Lookup(ctx, acme, []byte(body))
		for range maxFollowers {
			go c.Lookup(ctx, acme, []byte(body))
		}
		synctest.Wait()
		past := c.Lookup(ctx, acme, []byte(body))
		if past.hit || past.Leads() {
			t.Errorf("past the bound: %+v", past)
		}
		cancel() // the waiting clients leave: they stop waiting
		synctest.Wait()
		c.Done(leader)
	})
}

func redisCaches(t *testing.T) (a, b *Cache, client *redis.Client, hook *dataHook) {
	srv := redistest.Start(t)
	rdb, err := redispool.NewClient([]string{srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	a, _ = New(Config{}, rdb, "p:", nil, nil)
	b, _ = New(Config{}, rdb, "p:", nil, nil)
	client = redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	hook = new(dataHook)
	rdb.AddHook(hook)
	return a, b, client, hook
}

// An uncontended miss answered within markAfter costs Redis its lookup
// and its store: no marker.
func TestQuickMissWritesNoMarker(t *testing.T) {
	a, _, client, hook := redisCaches(t)
	ctx := context.Background()
	store(a, acme, `{"warms":"the connections"}`, answer)
	hook.sent.Store(0)
	a.markAfter = time.Hour // however slow the machine, the call is quicker
	l := a.Lookup(ctx, acme, []byte(body))
	a.Record(ctx, l, 200, &answer)
	if n := hook.sent.Load(); n != 2 {
		t.Errorf("%d round trips for a miss and its store, want 2", n)
	}
	if keys := client.Keys(ctx, "p:cache:run:*").Val(); len(keys) != 0 {
		t.Errorf("markers %q", keys)
	}
}

// A miss at one instance waits for an identical one at another, through
// its marker in Redis: it takes the stored answer, the failure (the
// gateway's own too), or asks the upstream when the leader ends with
// nothing.
func TestRemoteWaitersTakeTheLeadersOutcome(t *testing.T) {
	a, b, client, _ := redisCaches(t)
	ctx := context.Background()
	gatewayTimeout := Answer{Status: 504, ContentType: "application/json", Body: []byte(`{"detail":"upstream_timeout"}`), Reject: "upstream_error"}
	for i, outcome := range []string{"answer", "failure", "gateway failure", "none"} {
		t.Run(outcome, func(t *testing.T) {
			b := b
			req := []byte(fmt.Sprintf(`{"model":"service-1.0.0","n":%d}`, i))
			store(a, acme, `{"accepts":"the key"}`, answer)
			leader := a.Lookup(ctx, acme, req)
			marker := "p:cache:" + markerKey(leader.entryKey)
			wait.Until(t, "the marker", func() bool { return client.Exists(ctx, marker).Val() == 1 })
			if ttl := client.PTTL(ctx, marker).Val(); ttl <= 0 || ttl > markerTTL {
				t.Errorf("the marker lives %v", ttl)
			}
			got := make(chan *Lookup, 2)
			go func() { got <- b.Lookup(ctx, acme, req) }()
			go func() { got <- b.Lookup(ctx, acme, req) }() // waits for the first, in process
			wait.Until(t, "both waiting at the other instance", func() bool {
				b.mu.Lock()
				defer b.mu.Unlock()
				f := b.flights[leader.entryKey]
				return f != nil && f.followers == 1
			})
			var want *Answer
			switch outcome {
			case "answer":
				a.Record(ctx, leader, 200, &answer)
				want = &answer
			case "failure":
				a.Fail(leader, failure)
				want = &failure
			case "gateway failure":
				a.Fail(leader, gatewayTimeout)
				want = &gatewayTimeout
			case "none":
				a.Done(leader)
			}
			for range 2 {
				w := <-got
				answered, hit := w.Hit()
				failed, fails := w.Failed()
				var ok bool
				switch {
				case want == nil:
					ok = !hit && !fails
				case outcome == "answer":
					ok = hit && fmt.Sprint(answered) == fmt.Sprint(*want)
				default:
					ok = fails && fmt.Sprint(failed) == fmt.Sprint(*want)
				}
				if !ok || w.Leads() {
					t.Errorf("remote waiter: %+v", w)
				}
			}
			if outcome != "failure" && outcome != "gateway failure" {
				wait.Until(t, "the marker gone", func() bool { return client.Exists(ctx, marker).Val() == 0 })
			}
		})
	}
}

// dataHook counts the round trips that read or write the cache's keys
// (a connection's own setup, which the pool may do at any time, is not
// one).
type dataHook struct{ sent atomic.Int64 }

func (h *dataHook) note(cmd redis.Cmder) {
	if n := cmd.Name(); n == "get" || n == "set" || n == "del" {
		h.sent.Add(1)
	}
}

func (h *dataHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *dataHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.note(cmd); return next(ctx, cmd) }
}
func (h *dataHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.note(cmds[0]); return next(ctx, cmds) }
}
