package limits

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/faultproxy"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/testclock"
	"github.com/systemone/systemone-gateway/policy/limits/redisstore"
)

func yp(y Yuan) *Yuan { return &y }

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// budgetConfig is a budget of 0.01 yuan per per at 1 yuan per million
// tokens (1,000 nano-yuan a token): 10,000 tokens a period. The buckets
// are off, so that only the budget refuses.
func budgetConfig(per, tz string) Config {
	return Config{
		RequestsPerMinute: i64(0), TokensPerSecond: i64(0),
		Budget: &Budget{Yuan: 10_000_000, Per: per}, Price: yp(nanoPerYuan), BudgetTimezone: tz,
	}
}

func mustSpend(t *testing.T, d Decision, spent, reserved, own Yuan) {
	t.Helper()
	if b := d.Budget; b.Spent != spent || b.Reserved != reserved || b.Own != own {
		t.Fatalf("budget %+v, want spent %d reserved %d own %d", b, spent, reserved, own)
	}
}

func mustRefuseBudget(t *testing.T, d Decision, msg string) {
	t.Helper()
	if d.Allowed || d.Unavailable || d.Bucket != BucketBudget || d.Message != msg {
		t.Fatalf("got %+v\nwant refused by the budget: %q", d, msg)
	}
}

// The Redis script picks the period by the server's clock: a gateway whose
// clock lags across midnight still charges the day Redis is in.
func TestRedisBudgetServerClock(t *testing.T) {
	srv := redistest.Start(t)
	cfg := budgetConfig(PerDay, "")
	cfg.StoreTimeout, cfg.OnStoreError = slow, StoreErrorDeny
	gw, server := newFakeClock(), newFakeClock()
	l, _ := newLimiter(t, cfg, gw, false, onRedis(srv.URL()), tuned(func(o *redisstore.Options) { o.Clock = server.Now }))
	gw.Set(time.Date(2026, 11, 23, 23, 59, 0, 0, time.UTC))
	server.Set(gw.Now())
	settle(l, mustAllow(t, l.Admit(bg, "acme", 1000)), 10_000)
	gw.Set(time.Date(2026, 11, 23, 23, 59, 59, 500_000_000, time.UTC))  // still the 23rd here
	server.Set(time.Date(2026, 11, 24, 0, 0, 0, 500_000_000, time.UTC)) // the 24th in Redis
	d := mustAllow(t, l.Admit(bg, "acme", 1000))
	if d.Budget.Reset.Format(time.RFC3339) != "2026-11-25T00:00:00Z" || d.spend.Period != "2026-11-24" {
		t.Fatalf("period %s, reset %s; want the 24th", d.spend.Period, d.Budget.Reset)
	}
	settle(l, d, 10_000)
	if reply := hget(t, srv.Addr, t.Name()+":{acme}:budget:2026-11-24", "s"); reply != "10000000" {
		t.Fatalf("spent on the 24th: %q", reply)
	}
	// And the other way: a gateway ahead of Redis charges the day Redis is in.
	gw.Set(time.Date(2026, 11, 25, 0, 0, 1, 0, time.UTC))
	server.Set(time.Date(2026, 11, 24, 23, 59, 59, 0, time.UTC))
	mustRefuseBudget(t, l.Admit(bg, "acme", 1), "Budget exceeded: 0.01 yuan per day for organization acme, resets at 2026-11-25T00:00:00Z")
}

// A reservation that is never settled (an instance crashed mid-request, a
// settlement lost with Redis) lapses after 10 to 11 minutes; a settlement
// that comes later still charges.
func TestBudgetReservationLapses(t *testing.T) {
	stores(t, func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock)) {
		l, clk := mk(budgetConfig(PerMonth, ""))
		clk.Set(time.Date(2026, 11, 23, 18, 0, 30, 0, time.UTC))
		lost := mustAllow(t, l.Admit(bg, "acme", 10_000))
		mustRefuseBudget(t, l.Admit(bg, "acme", 1), "Budget exceeded: 0.01 yuan per month for organization acme, resets at 2026-12-01T00:00:00Z")
		clk.Set(time.Date(2026, 11, 23, 18, 10, 59, 0, time.UTC))
		mustSpend(t, l.Admit(bg, "acme", -1), 0, 10_000_000, 0) // refused: still held
		clk.Set(time.Date(2026, 11, 23, 18, 11, 0, 0, time.UTC))
		d := mustAllow(t, l.Admit(bg, "acme", 1000))
		mustSpend(t, d, 0, 1_000_000, 1_000_000)
		settle(l, lost, 3000)
		mustSpend(t, mustAllow(t, l.Admit(bg, "acme", 0)), 3_000_000, 1_000_000, 0)
	})
}

// A budget refusal counts one request, as the gateway's own answers do, so
// that an org over its budget cannot make the gateway parse bodies for
// free; once the requests bucket is empty, its 429 comes first.
func TestBudgetRefusalCountsOneRequest(t *testing.T) {
	stores(t, func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock)) {
		cfg := budgetConfig(PerDay, "")
		cfg.RequestsPerMinute, cfg.TokensPerSecond = i64(3), i64(1)
		l, _ := mk(cfg)
		settle(l, mustAllow(t, l.Admit(bg, "acme", 1)), 10_000)
		d := l.Admit(bg, "acme", 64000) // the token bucket would refuse it too
		mustRefuseBudget(t, d, d.Message)
		if d.Requests != (Quota{3, 1}) || d.Tokens.Remaining != 54000 {
			t.Fatalf("after a 402: %+v %+v", d.Requests, d.Tokens)
		}
		if d := l.Admit(bg, "acme", 1); d.Bucket != BucketBudget || d.Requests.Remaining != 0 {
			t.Fatalf("%+v", d)
		}
		mustRefuse(t, l.Admit(bg, "acme", 1), 20*time.Second, "Rate limit exceeded: 3 requests per minute for organization acme")
		d, over := l.KnownOver("acme")
		if !over || d.Budget.Limit != 10_000_000 || d.Budget.Spent != 10_000_000 {
			t.Fatalf("known over: %v %+v", over, d)
		}
	})
}

// AdmitRequest reports the budget but neither consults nor reserves it.
func TestBudgetAdmitRequestReportsOnly(t *testing.T) {
	stores(t, func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock)) {
		l, _ := mk(budgetConfig(PerDay, ""))
		settle(l, mustAllow(t, l.Admit(bg, "acme", 1)), 10_000)
		d := mustAllow(t, l.AdmitRequest(bg, "acme"))
		mustSpend(t, d, 10_000_000, 0, 0)
		l.Settle(d, 1000) // nothing reserved, nothing to charge
		mustSpend(t, mustAllow(t, l.AdmitRequest(bg, "acme")), 10_000_000, 0, 0)
	})
}

func TestBudgetOrgOverrides(t *testing.T) {
	stores(t, func(t *testing.T, mk func(Config) (*Limiter, *testclock.Clock)) {
		cfg := budgetConfig(PerMonth, "Asia/Shanghai")
		cfg.Orgs = map[string]Override{
			"big":  {Budget: &Budget{Yuan: 2 * nanoPerYuan, Per: PerDay}},
			"free": {Budget: &Budget{}},
		}
		l, clk := mk(cfg)
		clk.Set(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
		d := mustAllow(t, l.Admit(bg, "big", 100_000))
		if d.Budget.Limit != 2*nanoPerYuan || d.Budget.Per != PerDay || d.Budget.Reset.Format(time.RFC3339) != "2026-11-24T00:00:00+08:00" {
			t.Fatalf("big: %+v", d.Budget)
		}
		settle(l, d, 1_999_999)
		mustAllow(t, l.Admit(bg, "big", 1))
		d = mustAllow(t, l.Admit(bg, "free", 100_000_000))
		h := http.Header{}
		d.SetHeaders(h)
		if d.Budget != (Spend{}) || d.spend.Period != "" || len(h) != 0 {
			t.Fatalf("an exempt org has a budget: %+v %v", d.Budget, h)
		}
		settle(l, d, 100_000_000)
		settle(l, mustAllow(t, l.Admit(bg, "acme", 1)), 10_000)
		mustRefuseBudget(t, l.Admit(bg, "acme", 1), "Budget exceeded: 0.01 yuan per month for organization acme, resets at 2026-12-01T00:00:00+08:00")
	})
}

// reloadPrice is a reload that doubles the price (1 yuan per million
// tokens, then 2) while old has admitted d, 1,000 tokens for acme.
func reloadPrice(t *testing.T, opts []option) (old *Limiter, d Decision, reloaded *Limiter) {
	t.Helper()
	clk := newFakeClock()
	oldCfg := budgetConfig(PerMonth, "")
	oldCfg.StoreTimeout, oldCfg.OnStoreError = slow, StoreErrorDeny
	newCfg := oldCfg
	newCfg.Price = yp(2 * nanoPerYuan)
	old, _ = newLimiter(t, oldCfg, clk, true, opts...)
	d = mustAllow(t, old.Admit(bg, "acme", 1000))
	reloaded, _ = newLimiter(t, newCfg, clk, true, opts...)
	return old, d, reloaded
}

// A price changed by a reload applies from the next request: a request
// admitted under the old config is charged at its price.
func TestBudgetPriceChange(t *testing.T) {
	for _, store := range []string{"inprocess", "redis"} {
		t.Run(store, func(t *testing.T) {
			var opts []option
			if store == "redis" {
				opts = append(opts, onRedis(redistest.Start(t).URL()))
			}
			opts = append(opts, prefixed(t.Name()+":"))
			old, d, reloaded := reloadPrice(t, opts)
			settle(old, d, 2000) // the old handler settles its own request
			_ = old.Close()
			d = mustAllow(t, reloaded.Admit(bg, "acme", 1000))
			mustSpend(t, d, 2_000_000, 2_000_000, 2_000_000) // charged at 1 yuan, reserved at 2
			if d.Cost(1000) != 2_000_000 {
				t.Fatalf("cost at the new price: %d", d.Cost(1000))
			}
		})
	}
}

// A request that reaches an old config after a reload has released it
// settles through a closed limiter: the settlement is sent at once, not
// dropped, and so is a hold.
func TestRedisSettleAfterCloseIsSent(t *testing.T) {
	old, d, reloaded := reloadPrice(t, []option{onRedis(redistest.Start(t).URL()), prefixed(t.Name() + ":")})
	_ = old.Close()
	old.Settle(d, 2000)
	d = mustAllow(t, reloaded.Admit(bg, "acme", 1000))
	mustSpend(t, d, 2_000_000, 2_000_000, 2_000_000) // charged at 1 yuan, reserved at 2
	old.Hold("acme", 30*time.Second)
	if d := reloaded.Admit(bg, "acme", 1000); d.Allowed || d.Bucket != BucketHold {
		t.Fatalf("after a hold sent through the closed limiter: %+v", d)
	}
}

// Two instances on one Redis, 200 concurrent admissions against a budget
// worth 10 requests: the reservations admit exactly 10 while none is
// settled, and never more than the budget plus the last request once they
// are, each settling at a real cost above its estimate.
func TestRedisBudgetTwoInstances(t *testing.T) {
	srv := redistest.Start(t)
	cfg := budgetConfig(PerDay, "")
	cfg.StoreTimeout, cfg.OnStoreError = slow, StoreErrorDeny
	opts := []option{onRedis(srv.URL()), prefixed("shared:")}
	a, _ := newLimiter(t, cfg, nil, false, opts...)
	b, _ := newLimiter(t, cfg, nil, false, opts...)
	ownProcess(t, b)

	var period atomic.Value
	run := func(org string, settleEach bool) (admitted int64, charged int64) {
		var n, c atomic.Int64
		var wg sync.WaitGroup
		for i := range 200 {
			l := a
			if i%2 == 1 {
				l = b
			}
			wg.Go(func() {
				d := l.Admit(bg, org, 1000) // 0.001 yuan each
				if d.Unavailable {
					t.Errorf("redis failed: %+v", d)
				}
				if d.Allowed {
					period.Store(d.spend.Period)
					n.Add(1)
					if settleEach {
						c.Add(1100)
						l.Settle(d, 1100) // 10% over the estimate
					}
				}
			})
		}
		wg.Wait()
		drain(a)
		drain(b)
		return n.Load(), c.Load()
	}
	if n, _ := run("unsettled", false); n != 10 {
		t.Fatalf("admitted %d while none settled, want 10", n)
	}
	n, tokens := run("settled", true)
	spent := cost(tokens, nanoPerYuan)
	// The budget plus the last request, plus 10% of each request in flight.
	if bound := int64(10_000_000) + 1_100_000 + 100_000*n; spent > bound || n < 10 {
		t.Fatalf("admitted %d, spent %d nano-yuan, want at least 10 and at most %d", n, spent, bound)
	}
	reply := hget(t, srv.Addr, "shared:{settled}:budget:"+period.Load().(string), "s")
	if reply != strconv.FormatInt(spent, 10) {
		t.Fatalf("Redis has spent %s, the instances charged %d", reply, spent)
	}
	t.Logf("settled run: %d admitted, %d nano-yuan spent of 10000000", n, spent)
}

func TestRedisBudgetKeys(t *testing.T) {
	srv := redistest.Start(t)
	cfg := budgetConfig(PerDay, "")
	cfg.StoreTimeout = slow
	clk := newFakeClock()
	l, _ := newLimiter(t, cfg, clk, true, onRedis(srv.URL()), prefixed("ttl:"))
	clk.Set(time.Date(2026, 11, 23, 23, 0, 0, 0, time.UTC))
	d := mustAllow(t, l.Admit(bg, "acme", 1000))
	key := "ttl:{acme}:budget:2026-11-23"
	// An hour to midnight, and the hour's margin.
	if ms := pttl(t, srv, key); ms <= 7_190_000 || ms > 7_200_000 {
		t.Fatalf("budget PTTL %dms, want about 2h", ms)
	}
	// A request that costs nothing leaves nothing behind: an org that
	// never spends keeps no key.
	settle(l, d, 0)
	if reply, _ := srv.Do("EXISTS", key); reply != ":0" {
		t.Fatalf("EXISTS %s after a released reservation: %s", key, reply)
	}
	settle(l, mustAllow(t, l.Admit(bg, "acme", 1000)), 10)
	if reply := hget(t, srv.Addr, key, "s"); reply != "10000" {
		t.Fatalf("spent %q, want 10000 nano-yuan", reply)
	}
}

// hget reads one field of a hash ("" when there is none).
func hget(t testing.TB, addr, key, field string) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	v, err := c.HGet(bg, key, field).Result()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return v
}

// With Redis unavailable, on_store_error decides for budgets as for
// buckets. local: this instance admits against its own in-process spend for
// the period, up to the whole budget, and what it spends is charged to
// Redis's total once it returns; allow: admitted, uncounted, remaining
// unknown; deny: 503. A reservation never settled lapses.
func TestRedisBudgetStoreError(t *testing.T) {
	for _, mode := range storeErrorModes {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.Start(t)
			proxy := faultproxy.Start(t, srv.Addr)
			cfg := budgetConfig(PerDay, "")
			cfg.OnStoreError, cfg.StoreTimeout = mode, slow
			clk := newFakeClock()
			clk.Set(time.Date(2026, 11, 23, 12, 0, 30, 0, time.UTC))
			l, _ := newLimiter(t, cfg, clk, true, onRedis("redis://"+proxy.Addr()))
			settle(l, mustAllow(t, l.Admit(bg, "acme", 1000)), 4000)
			inflight := mustAllow(t, l.Admit(bg, "acme", 1000))
			if inflight.by != chargedShared {
				t.Fatalf("admitted without Redis: %+v", inflight)
			}

			proxy.Refuse()
			switch mode {
			case StoreErrorLocal:
				n := 0
				for ; n < 20; n++ {
					d := l.Admit(bg, "acme", 1000)
					if !d.Allowed {
						mustRefuseBudget(t, d, "Budget exceeded: 0.01 yuan per day for organization acme, resets at 2026-11-24T00:00:00Z")
						mustSpend(t, d, 10_000_000, 0, 0)
						break
					}
					if d.by != chargedLocal {
						t.Fatalf("admission %d not in process: %+v", n, d)
					}
					l.Settle(d, 1000) // in process at once; Redis's share waits in the queue
				}
				if n != 10 {
					t.Fatalf("admitted %d in process, want the whole budget's 10", n)
				}
			case StoreErrorAllow:
				for range 5 {
					d := mustAllow(t, l.Admit(bg, "acme", 1000))
					h := http.Header{}
					d.SetHeaders(h)
					if d.Budget.Spent != -1 || h.Get("X-Budget-Limit") != "0.01" || h.Get("X-Budget-Remaining") != "" || h.Get("X-Budget-Reset") == "" {
						t.Fatalf("allow: %+v %v", d.Budget, h)
					}
					l.Settle(d, 1000) // counted nowhere
				}
			case StoreErrorDeny:
				for range 5 {
					if d := l.Admit(bg, "acme", 1000); !d.Unavailable || d.Budget.Spent != -1 {
						t.Fatalf("deny: %+v", d)
					}
				}
			}
			proxy.Pass()
			eventually(t, func() bool { return !lost(l) })
			drain(l)
			// Redis has what it had, plus, with local, the ten
			// admissions' cost, spent in process meanwhile: the org
			// overspent by the outage, and the record says so. The
			// request in flight never settles (as if its instance had
			// died with Redis away): its reservation holds until it
			// lapses.
			spent := Yuan(4_000_000)
			if mode == StoreErrorLocal {
				spent += 10_000_000
			}
			d := l.Admit(bg, "acme", 0)
			if d.by != chargedShared {
				t.Fatalf("not back on Redis: %+v", d)
			}
			mustSpend(t, d, spent, 1_000_000, 0)
			clk.Advance(11 * time.Minute)
			mustSpend(t, l.Admit(bg, "acme", 0), spent, 0, 0)
		})
	}
}

// The cost of a budget in an admission, against the same admission without
// one: in process, and against Redis (one round trip either way).
func BenchmarkBudgetAdmit(b *testing.B) {
	for _, store := range []string{"inprocess", "redis"} {
		for _, budget := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/budget=%v", store, budget), func(b *testing.B) {
				cfg := benchConfig()
				if budget {
					cfg.Budget = &Budget{Yuan: maxBudget, Per: PerMonth}
				}
				var opts []option
				if store == "redis" {
					opts = append(opts, onRedis(redistest.Start(b).URL()))
				}
				l, _ := newLimiter(b, cfg, nil, false, opts...)
				i := 0
				for b.Loop() {
					d := l.Admit(bg, orgNames[i%len(orgNames)], 1500)
					mustAllowB(b, d)
					l.Settle(d, 1400)
					i++
				}
			})
		}
	}
}

// On Redis Cluster the budget's keys share the org's slot with its buckets:
// one script serves them all, for any org id.
func TestRedisBudgetCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	cfg := budgetConfig(PerDay, "Asia/Shanghai")
	cfg.StoreTimeout, cfg.OnStoreError = slow, StoreErrorDeny
	cfg.RequestsPerMinute = i64(100)
	clk := newFakeClock()
	l, _ := newLimiter(t, cfg, clk, true, onRedis(cluster.URLs()...))
	for i := range 20 {
		org := "org{" + strconv.Itoa(i) + "}"
		d := mustAllow(t, l.Admit(bg, org, 4000))
		if d.by != chargedShared {
			t.Fatalf("%s: not on Redis: %+v", org, d)
		}
		settle(l, d, 10_000)
		mustRefuseBudget(t, l.Admit(bg, org, 1), "Budget exceeded: 0.01 yuan per day for organization "+org+", resets at "+d.Budget.Reset.Format(time.RFC3339))
	}
}

// A settlement still queued when the limiter closes with Redis lost has
// nobody left to send it: it is counted as dropped and logged, not lost
// silently.
func TestRedisSettlementAbandonedAtCloseIsCounted(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr)
	cfg := budgetConfig(PerDay, "")
	cfg.StoreTimeout = slow
	l, logs := newLimiter(t, cfg, newFakeClock(), true, onRedis("redis://"+proxy.Addr()))
	d := mustAllow(t, l.Admit(bg, "acme", 1000))
	if d.by != chargedShared {
		t.Fatalf("admitted without Redis: %+v", d)
	}
	proxy.Refuse()
	for i := 0; !lost(l); i++ {
		if i == 100 {
			t.Fatal("Redis refused 100 admissions and is not counted lost")
		}
		l.Admit(bg, "other", 1) // on_store_error local: in process, and counts the failure
	}
	l.Settle(d, 2000)
	_ = l.Close()
	if st := l.Stats(); st.SettlementsDropped != 1 {
		t.Errorf("stats %+v, want the queued settlement dropped", st)
	}
	if logs.FilterMessage("redis unavailable as the limiter closed; settlements dropped").Len() != 1 {
		t.Errorf("no warning: %v", logs.AllUntimed())
	}
}

// A request that settles through a released limiter after the reload also
// closed its Redis client never reaches Redis: its settlement counts as
// dropped (not as sent and unanswered), in the limiter's counts and in the
// process's, which the metrics read after the limiter is gone.
func TestRedisSettleAfterClientClosedIsCountedDropped(t *testing.T) {
	srv := redistest.Start(t)
	cfg := budgetConfig(PerDay, "")
	cfg.StoreTimeout = slow
	l, logs := newLimiter(t, cfg, nil, false, onRedis(srv.URL()))
	d := mustAllow(t, l.Admit(bg, "acme", 1000))
	_ = l.Close()
	_ = universal(l).Close() // what the handler's release does next
	before := ProcessStats()
	l.Settle(d, 2000)
	if st := l.Stats(); st.SettlementsDropped != 1 || st.SettlementsUnanswered != 0 {
		t.Errorf("stats %+v, want the settlement dropped", st)
	}
	after := ProcessStats()
	if after.SettlementsDropped-before.SettlementsDropped != 1 || after.SettlementsUnanswered != before.SettlementsUnanswered {
		t.Errorf("process stats %+v, then %+v: want one more dropped", before, after)
	}
	if logs.FilterMessage("redis unavailable as the limiter closed; settlements dropped").Len() != 1 {
		t.Errorf("no warning: %v", logs.AllUntimed())
	}
}

// TestBudgetNoFalseRefusalUnderConcurrency: a reservation stops counting
// when its request ends, on every store and every instance. A budget worth
// 100 requests' estimates, and concurrent clients far fewer than that, each
// admitting and settling one request after another: what is spent plus
// what is really in flight always stays below the budget, so no admission
// may be refused on it. Unbilled traffic (the upstream failed: nothing is
// charged, the reservation released) and billed traffic of 1 token (charged
// a thousandth of the estimate) alike. With Redis, two instances share the
// budget, with in-process state of their own.
func TestBudgetNoFalseRefusalUnderConcurrency(t *testing.T) {
	const (
		clients   = 32
		perClient = 100
		estimate  = 1000 // tokens: 0.1 yuan at 100 yuan per million
	)
	cfg := Config{
		RequestsPerMinute: i64(0), TokensPerSecond: i64(0),
		Budget: &Budget{Yuan: 10 * nanoPerYuan, Per: PerDay}, Price: yp(100 * nanoPerYuan),
		StoreTimeout: slow, OnStoreError: StoreErrorDeny,
	}
	reservation := cost(estimate, *cfg.Price)
	for _, billed := range []int64{0, 1} {
		run := func(t *testing.T, instances []*Limiter) {
			org := "org" + strconv.FormatInt(billed, 10)
			var inflight, spent atomic.Int64 // nano-yuan
			var refused atomic.Int64
			var first sync.Once
			var wg sync.WaitGroup
			for i := range clients {
				l := instances[i%len(instances)]
				wg.Go(func() {
					for range perClient {
						inflight.Add(reservation)
						d := l.Admit(bg, org, estimate)
						if !d.Allowed {
							// Spent and in flight (this request's own
							// included) are below the budget: at most
							// clients reservations and every charge.
							held := spent.Load() + inflight.Load()
							inflight.Add(-reservation)
							refused.Add(1)
							first.Do(func() {
								t.Errorf("refused (%s %q) with %d nano-yuan spent and in flight, budget %d",
									d.Bucket, d.Message, held, int64(cfg.Budget.Yuan))
							})
							continue
						}
						c := cost(billed, *cfg.Price)
						spent.Add(c)
						l.Settle(d, billed)
						inflight.Add(-reservation)
					}
				})
			}
			wg.Wait()
			if n := refused.Load(); n > 0 {
				t.Fatalf("%d of %d admissions refused", n, clients*perClient)
			}
			// Every settlement reached the store: the period holds what was
			// spent, and nothing is reserved any more.
			d := mustAllow(t, instances[0].Admit(bg, org, 0))
			mustSpend(t, d, Yuan(spent.Load()), 0, 0)
		}
		t.Run(fmt.Sprintf("billed%d/inprocess", billed), func(t *testing.T) {
			l, _ := newLimiter(t, cfg, nil, false)
			run(t, []*Limiter{l})
		})
		t.Run(fmt.Sprintf("billed%d/redis", billed), func(t *testing.T) {
			srv := redistest.Start(t)
			opts := []option{onRedis(srv.URL()), prefixed("shared:")}
			a, _ := newLimiter(t, cfg, nil, false, opts...)
			b, _ := newLimiter(t, cfg, nil, false, opts...)
			run(t, []*Limiter{a, ownProcess(t, b)})
		})
	}
}
