package limits

import (
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/policy/limits/redisstore"
)

const slow = caddy.Duration(5 * time.Second) // for tests about anything but timeouts

// public strips what a Decision holds for Settle, and the location of its
// reset (each limiter loads its own).
func public(d Decision) Decision {
	d.org, d.by = "", chargedNone
	d.Budget.Reset = d.Budget.Reset.UTC()
	return d
}

// TestRedisMatchesInProcess drives both stores through the same random
// history on the same clock: every decision must be identical. The history
// crosses midnight on a DST day in the budget's zone, settles requests out
// of order (some never), and lets reservations lapse.
func TestRedisMatchesInProcess(t *testing.T) {
	srv := redistest.Start(t)
	cfg := Config{
		RequestsPerMinute: i64(20), TokensPerSecond: i64(300), TokenBurst: i64(5000),
		Budget: &Budget{Yuan: 100_000_000, Per: PerDay}, Price: yp(nanoPerYuan), BudgetTimezone: "America/New_York",
		Orgs: map[string]Override{
			"b{x}": {RequestsPerMinute: i64(0)}, "c": {TokensPerSecond: i64(0)}, "d": {TokenBurst: i64(100)},
			"e": {Budget: &Budget{Yuan: 5_000_000, Per: PerMonth}, RequestsPerMinute: i64(0), TokensPerSecond: i64(0)},
			"f": {Budget: &Budget{}},
		},
	}
	clk := newFakeClock()
	// Ten minutes before New York's midnight into its 23-hour day.
	clk.Set(time.Date(2027, 3, 13, 23, 50, 0, 0, zone(t, "America/New_York")))
	mem, _ := newLimiter(t, cfg, clk, true)
	cfg.StoreTimeout, cfg.OnStoreError = slow, StoreErrorDeny
	red, _ := newLimiter(t, cfg, clk, true, onRedis(srv.URL()))

	rng := rand.New(rand.NewPCG(1, 2))
	orgs := []string{"a", "b{x}", "c", "d", "e", "f"}
	pending := map[string][][2]Decision{} // admitted, not settled yet
	var boundaries int
	outcomes := map[string]int{}
	day := clk.Now().Day()
	for i := range 4000 {
		org := orgs[rng.IntN(len(orgs))]
		var dm, dr Decision
		switch op := rng.IntN(100); {
		case op < 50:
			est := rng.Int64N(3000)
			dm, dr = mem.Admit(bg, org, est), red.Admit(bg, org, est)
			if dm.Allowed {
				pending[org] = append(pending[org], [2]Decision{dm, dr})
			}
			outcomes[dm.Bucket]++
		case op < 60:
			dm, dr = mem.AdmitRequest(bg, org), red.AdmitRequest(bg, org)
		case op < 70:
			d := time.Duration(rng.Int64N(int64(4 * time.Second)))
			hold(mem, org, d)
			hold(red, org, d)
			continue
		case op < 85:
			p := pending[org]
			if len(p) == 0 {
				continue
			}
			j := rng.IntN(len(p))
			actual := rng.Int64N(6000)
			if rng.IntN(4) == 0 {
				actual = 0 // failed: not billed
			}
			settle(mem, p[j][0], actual)
			settle(red, p[j][1], actual)
			pending[org] = append(p[:j], p[j+1:]...)
			continue
		case op < 99:
			clk.Advance(time.Duration(rng.Int64N(int64(3 * time.Second))))
			continue
		default:
			// Long enough for reservations never settled to lapse.
			clk.Advance(time.Duration(rng.Int64N(int64(2 * time.Hour))))
			if d := clk.Now().Day(); d != day {
				boundaries, day = boundaries+1, d
			}
			continue
		}
		if public(dm) != public(dr) {
			t.Fatalf("step %d, %s: in process %+v\nredis %+v", i, org, public(dm), public(dr))
		}
		if dr.Unavailable {
			t.Fatalf("step %d: redis failed", i)
		}
	}
	if outcomes[BucketBudget] < 100 || outcomes[""] < 500 || outcomes[BucketTokens] < 20 || boundaries == 0 {
		t.Fatalf("admissions by outcome %v, %d midnights: the history does not exercise budgets and buckets", outcomes, boundaries)
	}
	t.Logf("admissions by outcome %v, %d midnights crossed", outcomes, boundaries)
}

// TestRedisServerClock runs on the Redis server's TIME, as in production.
func TestRedisServerClock(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLimiter(t, Config{StoreTimeout: slow, OnStoreError: StoreErrorDeny}, nil, false, onRedis(srv.URL()))
	start := time.Now()
	for range 300 {
		mustAllow(t, l.Admit(bg, "acme", 1))
	}
	admitted := 0
	for range 300 {
		if l.Admit(bg, "acme", 1).Allowed {
			admitted++
		}
	}
	// 5 requests per second refill while the test runs, no more.
	if bound := int(time.Since(start).Seconds()*5) + 1; admitted > bound {
		t.Fatalf("admitted %d more in %s, want at most %d", admitted, time.Since(start), bound)
	}

	l, _ = newLimiter(t, Config{StoreTimeout: slow, RequestsPerMinute: i64(0), TokensPerSecond: i64(1), TokenBurst: i64(10)}, nil, false, onRedis(srv.URL()))
	mustAllow(t, l.Admit(bg, "acme", 10))
	// 10 tokens at 1/s: 10s, less the few milliseconds since.
	mustRefuse(t, l.Admit(bg, "acme", 10), 10*time.Second, "Rate limit exceeded: 1 input tokens per second for organization acme")

	other, _ := newLimiter(t, Config{StoreTimeout: slow}, nil, false, onRedis(srv.URL()), prefixed(t.Name()+":"))
	l2, _ := newLimiter(t, Config{StoreTimeout: slow}, nil, false, onRedis(srv.URL()), prefixed(t.Name()+":"))
	ownProcess(t, l2)
	hold(other, "acme", 3*time.Second)
	mustRefuse(t, l2.Admit(bg, "acme", 1), 3*time.Second, "Rate limit exceeded: the upstream limited organization acme; retry after 3s")
}

func TestRedisInstancesShareOneLimit(t *testing.T) {
	srv := redistest.Start(t)
	cfg := Config{StoreTimeout: slow, OnStoreError: StoreErrorDeny}
	opts := []option{onRedis(srv.URL()), prefixed("shared:")}
	clk := newFakeClock()
	a, _ := newLimiter(t, cfg, clk, true, opts...)
	b, _ := newLimiter(t, cfg, clk, true, opts...)
	ownProcess(t, b)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		l := a
		if g%2 == 1 {
			l = b
		}
		wg.Go(func() {
			for range 40 {
				if l.Admit(bg, "acme", 1).Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 300 {
		t.Fatalf("two instances admitted %d, want 300 together", admitted.Load())
	}
	mustRefuse(t, b.Admit(bg, "acme", 1), time.Second, "Rate limit exceeded: 300 requests per minute for organization acme")

	// A refund on one instance is seen by the other.
	d := mustAllow(t, a.Admit(bg, "tokens", 64000))
	settle(a, d, 1000)
	if d := mustAllow(t, b.Admit(bg, "tokens", 0)); d.Tokens.Remaining != 63000 {
		t.Fatalf("after a refund on the other instance: %+v", d.Tokens)
	}
	// An upstream 429 seen by one instance holds the org on both.
	hold(a, "held", 5*time.Second)
	mustRefuse(t, b.Admit(bg, "held", 1), 5*time.Second, "Rate limit exceeded: the upstream limited organization held; retry after 5s")
	clk.Advance(5 * time.Second)
	mustAllow(t, b.Admit(bg, "held", 1))
}

func TestRedisCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	cfg := Config{StoreTimeout: slow, OnStoreError: StoreErrorDeny, RequestsPerMinute: i64(3)}
	clk := newFakeClock()
	a, _ := newLimiter(t, cfg, clk, true, onRedis(cluster.URLs()...))
	b, _ := newLimiter(t, cfg, clk, true, onRedis(cluster.URLs()...))
	ownProcess(t, b)
	for i := range 30 {
		org := "org{" + strconv.Itoa(i) + "}" // braces must not break the hash tag
		for j := range 3 {
			l := a
			if j == 1 {
				l = b
			}
			mustAllow(t, l.Admit(bg, org, 10))
		}
		mustRefuse(t, b.Admit(bg, org, 10), 20*time.Second, "Rate limit exceeded: 3 requests per minute for organization "+org)
	}
	nodesWithKeys := 0
	for _, n := range cluster.Nodes {
		if reply, err := n.Do("DBSIZE"); err != nil {
			t.Fatal(err)
		} else if reply != ":0" {
			nodesWithKeys++
		}
	}
	if nodesWithKeys < 2 {
		t.Fatalf("keys on %d nodes, want them spread over the cluster", nodesWithKeys)
	}
	hold(a, "org{7}", 2*time.Second)
	d := mustAllow(t, a.Admit(bg, "fresh", 5000))
	settle(a, d, 1000)
	// Both wait: the hold (2s) and the requests bucket (20s).
	mustRefuse(t, b.Admit(bg, "org{7}", 1), 20*time.Second, "Rate limit exceeded: the upstream limited organization org{7}; retry after 20s")
	if d := mustAllow(t, b.Admit(bg, "fresh", 0)); d.Tokens.Remaining != 63000 {
		t.Fatalf("settlement on the cluster: %+v", d.Tokens)
	}
}

// TestRedisStopped stops Redis under a limiter in each on_store_error mode,
// then starts it again.
func TestRedisStopped(t *testing.T) {
	for _, mode := range []string{StoreErrorLocal, StoreErrorAllow, StoreErrorDeny} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.Start(t)
			l, logs := newLimiter(t, Config{
				OnStoreError:      mode,
				RequestsPerMinute: i64(2),
				StoreTimeout:      caddy.Duration(50 * time.Millisecond),
			}, nil, false, onRedis(srv.URL()))
			hook := &redistest.CountHook{Except: redisstore.IsProbe} // the probe of the lost node is expected
			universal(l).AddHook(hook)
			if d := mustAllow(t, l.Admit(bg, "acme", 1)); d.by != chargedShared {
				t.Fatal("admitted without Redis")
			}
			srv.Stop()
			for i := range 4 {
				start := time.Now()
				d := l.Admit(bg, "acme", 1)
				if took := time.Since(start); took > 2*time.Second {
					t.Fatalf("admission %d took %s with Redis down", i, took)
				}
				switch mode {
				case StoreErrorLocal:
					// Fresh in-process buckets with the same limits.
					if i < 2 {
						if d := mustAllow(t, d); d.by != chargedLocal || d.Requests != (Quota{2, int64(1 - i)}) {
							t.Fatalf("fallback %d: %+v", i, d)
						}
					} else {
						mustRefuse(t, d, 30*time.Second, "Rate limit exceeded: 2 requests per minute for organization acme")
					}
				case StoreErrorAllow:
					if !d.Allowed || d.Requests != (Quota{2, -1}) || d.Charged != 0 {
						t.Fatalf("allow mode: %+v", d)
					}
				case StoreErrorDeny:
					if d.Allowed || !d.Unavailable || d.RetryAfter != time.Second {
						t.Fatalf("deny mode: %+v", d)
					}
				}
			}
			if !lost(l) {
				t.Fatal("Redis not marked lost after 4 failures")
			}
			scripts := hook.Scripts.Load()
			for range 20 {
				l.Admit(bg, "acme", 1)
			}
			if got := hook.Scripts.Load(); got != scripts {
				t.Fatalf("%d scripts sent to a lost Redis, want none", got-scripts)
			}
			warned := logs.FilterMessage("redis lost").All()
			if len(warned) != 1 || warned[0].Level != zapcore.WarnLevel || warned[0].ContextMap()["error_class"] == "" {
				t.Fatalf("want one warning, got %v", warned)
			}

			srv.Restart()
			eventually(t, func() bool { return !lost(l) })
			if d := mustAllow(t, l.Admit(bg, "acme", 1)); d.by != chargedShared || d.Requests.Remaining != 1 {
				t.Fatalf("after Redis came back: %+v", d)
			}
			if back := logs.FilterMessage("redis back").All(); len(back) != 1 || back[0].Level != zapcore.InfoLevel {
				t.Fatalf("want one info entry, got %v", back)
			}
			if n := logs.FilterMessage("redis lost").Len(); n != 1 {
				t.Fatalf("%d lost entries", n)
			}
		})
	}
}

// blackHole accepts connections and never answers.
func blackHole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	// Socket timeouts far beyond the test's bound: only store_timeout, the
	// context deadline, can end the wait.
	return "redis://" + ln.Addr().String() + "?read_timeout=30s&write_timeout=30s&dial_timeout=30s"
}

func TestRedisBlackHoled(t *testing.T) {
	l, logs := newLimiter(t, Config{
		OnStoreError: StoreErrorDeny,
		StoreTimeout: caddy.Duration(50 * time.Millisecond),
	}, nil, false, onRedis(blackHole(t)))
	for i := range 5 {
		start := time.Now()
		d := l.Admit(bg, "acme", 1)
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("admission %d took %s against a black hole", i, took)
		}
		if !d.Unavailable {
			t.Fatalf("admission %d: %+v", i, d)
		}
	}
	if !lost(l) || logs.FilterMessage("redis lost").FilterField(zap.String("error_class", "timeout")).Len() != 1 {
		t.Fatalf("want Redis lost on timeouts, logs %v", logs.All())
	}
}

func TestRedisScriptFlushed(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLimiter(t, Config{StoreTimeout: slow, OnStoreError: StoreErrorDeny}, newFakeClock(), true, onRedis(srv.URL()))
	mustAllow(t, l.Admit(bg, "acme", 1))
	if reply, err := srv.Do("SCRIPT", "FLUSH"); err != nil || reply != "+OK" {
		t.Fatalf("SCRIPT FLUSH: %q %v", reply, err)
	}
	// EVALSHA fails with NOSCRIPT, EVAL runs it: charged once.
	if d := mustAllow(t, l.Admit(bg, "acme", 1)); d.Requests.Remaining != 298 || d.Tokens.Remaining != 63998 {
		t.Fatalf("after SCRIPT FLUSH: %+v", d)
	}
	srv.Do("SCRIPT", "FLUSH")
	d := mustAllow(t, l.Admit(bg, "acme", 100))
	srv.Do("SCRIPT", "FLUSH")
	settle(l, d, 0)
	if d := mustAllow(t, l.Admit(bg, "acme", 0)); d.Tokens.Remaining != 63998 {
		t.Fatalf("settled after SCRIPT FLUSH: %+v", d.Tokens)
	}
}

func TestRedisOneRoundTripPerAdmission(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLimiter(t, Config{StoreTimeout: slow, OnStoreError: StoreErrorDeny}, nil, false, onRedis(srv.URL()))
	hook := &redistest.CountHook{}
	universal(l).AddHook(hook)
	mustAllow(t, l.Admit(bg, "warm", 1)) // connect
	srv.Do("CONFIG", "RESETSTAT")
	hook.Sent.Store(0)
	for i := range 100 {
		l.Admit(bg, "org"+strconv.Itoa(i%7), 500)
	}
	if n := hook.Sent.Load(); n != 100 {
		t.Fatalf("client sent %d commands for 100 admissions", n)
	}
	// The server agrees, and reads its own clock once per admission.
	calls := redistest.CommandCalls(t, srv.Addr)
	if calls["evalsha"] != 100 || calls["eval"] != 0 || calls["time"] != 100 {
		t.Fatalf("server command counts %v, want evalsha=100, each reading TIME", calls)
	}
}

// TestRedisSettlementsAddUp: while the queue pauses between flushes, the
// settlements of one organization add up to one script, and the bucket
// still ends up where each would have put it.
func TestRedisSettlementsAddUp(t *testing.T) {
	srv := redistest.Start(t)
	// A pause far longer than the test's admissions take.
	l, _ := newLimiter(t, Config{StoreTimeout: slow, OnStoreError: StoreErrorDeny}, nil, false, onRedis(srv.URL()),
		tuned(func(o *redisstore.Options) { o.SettleEvery = time.Second }))
	settle(l, mustAllow(t, l.Admit(bg, "warm", 1)), 0) // loads both scripts
	hook := &redistest.CountHook{}
	universal(l).AddHook(hook)
	var admitted []Decision
	for range 10 {
		admitted = append(admitted, mustAllow(t, l.Admit(bg, "acme", 1000)))
	}
	for _, d := range admitted {
		l.Settle(d, 100) // 900 back each
	}
	drain(l)
	// The first settlement may go alone; the others wait for the pause.
	if n := hook.Scripts.Load(); n > 10+2 {
		t.Fatalf("%d scripts for 10 admissions and 10 settlements, want at most 12", n)
	}
	if d := mustAllow(t, l.Admit(bg, "acme", 0)); d.Tokens.Remaining < 64000-10*100-5 {
		t.Fatalf("after the refunds: %+v, want about %d", d.Tokens, 64000-10*100)
	}
}

// dropProxy forwards to addr, but can drop one reply and close the
// connection: the command ran, the client never hears of it.
type dropProxy struct {
	addr     string
	dropNext atomic.Bool
}

func startDropProxy(t *testing.T, target string) *dropProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			closeBoth := func() { _ = c.Close(); _ = u.Close() }
			t.Cleanup(closeBoth)
			wg.Go(func() { _, _ = io.Copy(u, c); closeBoth() })
			wg.Go(func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := u.Read(buf)
					if err != nil {
						closeBoth()
						return
					}
					if p.dropNext.CompareAndSwap(true, false) {
						closeBoth()
						return
					}
					if _, err := c.Write(buf[:n]); err != nil {
						closeBoth()
						return
					}
				}
			})
		}
	})
	return p
}

func TestRedisNeverRetriesTheScript(t *testing.T) {
	srv := redistest.Start(t)
	proxy := startDropProxy(t, srv.Addr)
	clk := newFakeClock()
	l, _ := newLimiter(t, Config{StoreTimeout: slow}, clk, true, onRedis("redis://"+proxy.addr), prefixed("retry:"))
	mustAllow(t, l.Admit(bg, "acme", 1))
	proxy.dropNext.Store(true)
	// The script runs, its answer is lost: the admission falls back to the
	// in-process buckets (on_store_error local) and is not sent again.
	if d := mustAllow(t, l.Admit(bg, "acme", 1)); d.by != chargedLocal {
		t.Fatalf("lost answer: %+v, want the in-process fallback", d)
	}
	direct, _ := newLimiter(t, Config{StoreTimeout: slow}, clk, true, onRedis(srv.URL()), prefixed("retry:"))
	if d := mustAllow(t, direct.Admit(bg, "acme", 1)); d.Requests.Remaining != 297 {
		t.Fatalf("remaining %d, want 297: the script ran %d times for 2 admissions", d.Requests.Remaining, 299-d.Requests.Remaining)
	}
}

func TestRedisScriptErrorIsNotAnOutage(t *testing.T) {
	srv := redistest.Start(t)
	l, logs := newLimiter(t, Config{StoreTimeout: slow}, nil, false, onRedis(srv.URL()), prefixed("wrong:"))
	srv.Do("SET", "wrong:{acme}:b", "not a hash")
	for range 10 {
		if d := mustAllow(t, l.Admit(bg, "acme", 1)); d.by != chargedLocal {
			t.Fatalf("%+v, want the in-process fallback", d)
		}
	}
	if lost(l) {
		t.Fatal("a WRONGTYPE error marked Redis lost")
	}
	if d := mustAllow(t, l.Admit(bg, "other", 1)); d.by != chargedShared {
		t.Fatalf("other organizations must still use Redis: %+v", d)
	}
	errs := logs.FilterMessage("redis script failed")
	if errs.Len() != 10 || errs.FilterLevelExact(zapcore.ErrorLevel).Len() != 1 {
		t.Fatalf("want one error entry then debug ones, got %v", errs.All())
	}
}

// On the server's clock a bucket's key is kept twice the time its buckets
// need to be full again and a second more, so that the saves in between
// send no PEXPIRE; the key still expires.
func TestRedisKeysExpireOnServerClock(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLimiter(t, Config{StoreTimeout: slow}, nil, false, onRedis(srv.URL()), prefixed("ttl:"))
	for range 5 {
		mustAllow(t, l.Admit(bg, "acme", 1)) // full again within a second
	}
	if n := redistest.CommandCalls(t, srv.Addr)["pexpire"]; n != 1 {
		t.Fatalf("%d PEXPIRE for 5 admissions within a second, want 1", n)
	}
	if ms := pttl(t, srv, "ttl:{acme}:b"); ms <= 2000 || ms > 3000 {
		t.Fatalf("bucket PTTL %dms, want 3s (twice the second the buckets need, and a second)", ms)
	}
	// A debit that needs longer renews at once: 10,000 tokens are 10s.
	mustAllow(t, l.Admit(bg, "acme", 10_000))
	if ms := pttl(t, srv, "ttl:{acme}:b"); ms <= 20_000 || ms > 21_020 {
		t.Fatalf("bucket PTTL %dms after a 10s debit, want 21s", ms)
	}
}

func TestRedisKeysExpire(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLimiter(t, Config{StoreTimeout: slow}, newFakeClock(), true, onRedis(srv.URL()), prefixed("ttl:"))
	mustAllow(t, l.Admit(bg, "acme", 1000)) // tokens full again in 1s
	if ms := pttl(t, srv, "ttl:{acme}:b"); ms <= 0 || ms > 1001 {
		t.Fatalf("bucket PTTL %dms, want at most 1001ms", ms)
	}
	// Full again within a millisecond, and kept a second all the same: a
	// pinned clock does not move with Redis's.
	mustAllow(t, l.Admit(bg, "brief", 1))
	if ms := pttl(t, srv, "ttl:{brief}:b"); ms < 900 || ms > 1000 {
		t.Fatalf("bucket PTTL %dms, want a second", ms)
	}
	// A hold keeps the key as long as it lasts: here longer than the
	// buckets need.
	hold(l, "brief", 3*time.Second)
	if ms := pttl(t, srv, "ttl:{brief}:b"); ms <= 2000 || ms > 3001 {
		t.Fatalf("bucket PTTL %dms with a 3s hold, want 3s", ms)
	}
	// And the next save keeps it too (the request refused, but counted).
	if d := l.Admit(bg, "brief", 1); d.Allowed {
		t.Fatalf("admitted during the hold: %+v", d)
	}
	if ms := pttl(t, srv, "ttl:{brief}:b"); ms <= 2000 || ms > 3001 {
		t.Fatalf("bucket PTTL %dms after a save within the hold, want 3s", ms)
	}
	// A shorter hold leaves the longer one in place, and mends a TTL that
	// another writer left shorter than it.
	srv.Do("PEXPIRE", "ttl:{brief}:b", "100")
	hold(l, "brief", time.Second)
	if ms := pttl(t, srv, "ttl:{brief}:b"); ms <= 2000 || ms > 3001 {
		t.Fatalf("bucket PTTL %dms after a shorter hold, want the 3s hold's", ms)
	}
}

// TestRedisClockBehindRefillsNothingTwice: a script whose clock is behind
// the time a bucket was last written at (a replica's clock after a
// failover; in tests, a pinned clock read before another script ran)
// refills nothing, and leaves the bucket's time where it was: otherwise
// the next script would refill that span a second time.
func TestRedisClockBehindRefillsNothingTwice(t *testing.T) {
	srv := redistest.Start(t)
	clk := newFakeClock()
	cfg := Config{RequestsPerMinute: i64(0), TokensPerSecond: i64(10), TokenBurst: i64(1000), StoreTimeout: slow, OnStoreError: StoreErrorDeny}
	l, _ := newLimiter(t, cfg, clk, true, onRedis(srv.URL()))
	t0 := clk.Now()
	mustAllow(t, l.Admit(bg, "acme", 1000)) // empty at t0
	clk.Set(t0.Add(10 * time.Second))
	if d := mustAllow(t, l.Admit(bg, "acme", 1)); d.Tokens.Remaining != 99 {
		t.Fatalf("remaining %d after 10s, want 99", d.Tokens.Remaining)
	}
	clk.Set(t0.Add(5 * time.Second)) // behind the bucket's time
	if d := mustAllow(t, l.Admit(bg, "acme", 1)); d.Tokens.Remaining != 98 {
		t.Fatalf("remaining %d with the clock behind, want 98: nothing refilled", d.Tokens.Remaining)
	}
	clk.Set(t0.Add(10 * time.Second))
	if d := mustAllow(t, l.Admit(bg, "acme", 1)); d.Tokens.Remaining != 97 {
		t.Fatalf("remaining %d back at 10s, want 97: the span from 5s to 10s was refilled twice", d.Tokens.Remaining)
	}
}
