package limits

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/testclock"
	"github.com/systemone/systemone-gateway/policy/limits/store"
)

func pct(f float64) *float64 { return &f }

// newLeaser is newLimiter with local_allowance share and interval, Redis
// on clk, and no background sweep.
func newLeaser(t *testing.T, cfg Config, share float64, interval time.Duration, clk *testclock.Clock, opts ...option) *Limiter {
	t.Helper()
	cfg.LocalAllowance = &LocalAllowance{Share: pct(share), Interval: caddy.Duration(interval)}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = slow
	}
	if cfg.OnStoreError == "" {
		cfg.OnStoreError = StoreErrorDeny
	}
	l, _ := newLimiter(t, cfg, clk, true, append(opts, func(s *shared) { s.sweepEvery = time.Hour })...)
	return l
}

// levels reads org's two buckets from Redis, in units, refilled to clk's
// time as the scripts would.
func levels(t *testing.T, l *Limiter, org string, clk *testclock.Clock) (req, tok int64) {
	t.Helper()
	v := redistest.HashInts(t, universal(l), prefixOf(l)+"{"+org+"}:b", "r", "ra", "t", "ta")
	at := func(i int) store.Stored {
		if v[i] == nil {
			return store.Stored{}
		}
		return store.Stored{Level: *v[i], At: *v[i+1], Known: true}
	}
	lim := l.limitsFor(org)
	now := clk.Now().UnixMicro()
	if lim.rpm > 0 {
		req = store.Refill(lim.requests(), at(0), now)
	}
	if lim.tps > 0 {
		tok = store.Refill(lim.tokens(), at(2), now)
	}
	return req, tok
}

// TestLeaseSpendsLocally: one lease call pays many admissions, the headers
// count Redis's level plus the lease's rest, and exact admission is kept
// for an organization with a budget.
func TestLeaseSpendsLocally(t *testing.T) {
	srv := redistest.Start(t)
	clk := newFakeClock()
	cfg := Config{Orgs: map[string]Override{"budgeted": {Budget: &Budget{Yuan: 1_000_000_000, Per: PerDay}}}}
	l := newLeaser(t, cfg, 0.1, time.Second, clk, onRedis(srv.URL()))
	mustAllow(t, l.Admit(bg, "warm", 1))     // connects and loads the lease script
	mustAllow(t, l.Admit(bg, "budgeted", 1)) // and the admission script
	hook := &redistest.CountHook{}
	universal(l).AddHook(hook)
	for i := range 30 {
		d := mustAllow(t, l.Admit(bg, "acme", 100))
		if d.Requests != (Quota{300, int64(299 - i)}) || d.Tokens != (Quota{64000, int64(64000 - 100*(i+1))}) {
			t.Fatalf("admission %d: %+v %+v", i, d.Requests, d.Tokens)
		}
	}
	if n := hook.Scripts.Load(); n != 1 {
		t.Fatalf("%d scripts for 30 admissions from a lease of 30 requests", n)
	}
	// Redis has lent 30 requests and 6400 tokens.
	if r, tk := levels(t, l, "acme", clk); r != 270*store.Unit || tk != (64000-6400)*store.Unit {
		t.Fatalf("Redis holds %d requests, %d tokens", r/store.Unit, tk/store.Unit)
	}
	// The 31st takes a new lease, giving the old one's rest back.
	mustAllow(t, l.Admit(bg, "acme", 100))
	if n := hook.Scripts.Load(); n != 2 {
		t.Fatalf("%d scripts after the lease was spent, want 2", n)
	}
	if l.Stats().LeasesTaken != 3 {
		t.Fatalf("leases taken %d", l.Stats().LeasesTaken)
	}
	for range 3 {
		mustAllow(t, l.Admit(bg, "budgeted", 1))
	}
	if n := hook.Scripts.Load(); n != 5 {
		t.Fatalf("%d scripts: an org with a budget must be admitted exactly", n-2)
	}
}

// TestLeaseOneCallPerOrg: concurrent admissions of one organization wait
// for the one lease call in flight instead of each taking a lease.
func TestLeaseOneCallPerOrg(t *testing.T) {
	srv := redistest.Start(t)
	clk := newFakeClock()
	l := newLeaser(t, Config{RequestsPerMinute: i64(6000)}, 0.1, time.Second, clk, onRedis(srv.URL()))
	mustAllow(t, l.Admit(bg, "warm", 1)) // connects and loads the script
	hook := &redistest.CountHook{}
	universal(l).AddHook(hook)
	const n = 64
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for range n {
		wg.Go(func() {
			if l.Admit(bg, "acme", 10).Allowed {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	if admitted.Load() != n || hook.Scripts.Load() != 1 {
		t.Fatalf("%d admitted with %d scripts, want %d with one lease", admitted.Load(), hook.Scripts.Load(), n)
	}

	// When that one call is refused, those waiting for it share its
	// refusal rather than ask again.
	l2 := newLeaser(t, Config{RequestsPerMinute: i64(60), TokensPerSecond: i64(0)}, 0.5, time.Second, clk, onRedis(srv.URL()), prefixed("refused:"))
	for range 60 {
		mustAllow(t, l2.Admit(bg, "acme", 0))
	}
	universal(l2).AddHook(hook)
	hook.Scripts.Store(0)
	var refused atomic.Int64
	for range n {
		wg.Go(func() {
			if d := l2.Admit(bg, "acme", 0); d.Bucket == BucketRequests && d.RetryAfter == time.Second {
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	// Each admission either made a call or shared one's refusal.
	if refused.Load() != n {
		t.Fatalf("%d of %d refused", refused.Load(), n)
	}
	t.Logf("%d refusals from %d lease calls", n, hook.Scripts.Load())
}

// TestLeaseStoreError: a lease keeps paying while Redis is away; the
// admission that needs a new lease then follows on_store_error as an exact
// admission does.
func TestLeaseStoreError(t *testing.T) {
	for _, mode := range storeErrorModes {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.Start(t)
			clk := newFakeClock()
			l := newLeaser(t, Config{RequestsPerMinute: i64(100), OnStoreError: mode, StoreTimeout: caddy.Duration(50 * time.Millisecond)},
				0.02, time.Second, clk, onRedis(srv.URL()))
			mustAllow(t, l.Admit(bg, "acme", 1)) // a lease of 2 requests
			srv.Stop()
			if d := mustAllow(t, l.Admit(bg, "acme", 1)); d.by != chargedShared || d.by == chargedLocal {
				t.Fatalf("from the lease: %+v", d)
			}
			for i := range 4 {
				d := l.Admit(bg, "acme", 1)
				switch mode {
				case StoreErrorLocal:
					if d := mustAllow(t, d); d.by != chargedLocal || d.Requests != (Quota{100, int64(99 - i)}) {
						t.Fatalf("fallback %d: %+v", i, d)
					}
				case StoreErrorAllow:
					if !d.Allowed || d.Requests != (Quota{100, -1}) || d.Charged != 0 || d.by == chargedLocal {
						t.Fatalf("allow mode: %+v", d)
					}
				case StoreErrorDeny:
					if d.Allowed || !d.Unavailable || d.RetryAfter != time.Second {
						t.Fatalf("deny mode: %+v", d)
					}
				}
			}
			if !lost(l) {
				t.Fatal("Redis not marked lost")
			}
			srv.Restart()
			eventually(t, func() bool { return !lost(l) })
			if d := mustAllow(t, l.Admit(bg, "acme", 1)); d.by != chargedShared || d.by == chargedLocal {
				t.Fatalf("after Redis came back: %+v", d)
			}
		})
	}
}

// TestLeaseHoldReachesOtherInstances: an upstream hold applies at once on
// the instance that saw the 429, and on another at its next lease: within
// the interval.
func TestLeaseHoldReachesOtherInstances(t *testing.T) {
	srv := redistest.Start(t)
	clk := newFakeClock()
	a := newLeaser(t, Config{}, 0.1, time.Second, clk, onRedis(srv.URL()), prefixed("hold:"))
	b := ownProcess(t, newLeaser(t, Config{}, 0.1, time.Second, clk, onRedis(srv.URL()), prefixed("hold:")))
	mustAllow(t, a.Admit(bg, "acme", 10))
	mustAllow(t, b.Admit(bg, "acme", 10))
	hold(a, "acme", 5*time.Second)
	const msg = "Rate limit exceeded: the upstream limited organization acme; retry after 5s"
	mustRefuse(t, a.Admit(bg, "acme", 10), 5*time.Second, msg)
	// b admits from its lease until it expires ...
	clk.Advance(999 * time.Millisecond)
	mustAllow(t, b.Admit(bg, "acme", 10))
	// ... and its next lease brings the hold.
	clk.Advance(time.Millisecond)
	mustRefuse(t, b.Admit(bg, "acme", 10), 4*time.Second, "Rate limit exceeded: the upstream limited organization acme; retry after 4s")
	// A request that is not an evaluation is not held.
	mustAllow(t, b.AdmitRequest(bg, "acme"))
	clk.Advance(4 * time.Second)
	mustAllow(t, b.Admit(bg, "acme", 10))
}

// TestLeaseSettlementsRace: many goroutines on two instances admit and
// settle against leases and Redis at once; in the end the buckets hold
// exactly what the usage says.
func TestLeaseSettlementsRace(t *testing.T) {
	srv := redistest.Start(t)
	clk := newFakeClock() // never moves: no refill, every unit is accounted for
	cfg := Config{RequestsPerMinute: i64(maxLimit), TokensPerSecond: i64(1), TokenBurst: i64(maxLimit)}
	a := newLeaser(t, cfg, 0.001, time.Second, clk, onRedis(srv.URL()), prefixed("race:"))
	b := ownProcess(t, newLeaser(t, cfg, 0.001, time.Second, clk, onRedis(srv.URL()), prefixed("race:")))
	var requests, tokens atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		l := a
		if g%2 == 1 {
			l = b
		}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range 300 {
				org := fmt.Sprint("org", rng.IntN(3))
				if rng.IntN(5) == 0 {
					if !l.AdmitRequest(bg, org).Allowed {
						t.Error("refused")
						return
					}
					requests.Add(1)
					continue
				}
				d := l.Admit(bg, org, rng.Int64N(2000))
				if !d.Allowed {
					t.Errorf("refused: %+v", d)
					return
				}
				requests.Add(1)
				actual := rng.Int64N(3000)
				l.Settle(d, actual)
				tokens.Add(actual)
			}
		})
	}
	wg.Wait()
	_ = a.Close() // gives back every lease and sends the queue
	_ = b.Close()
	var r, tk int64
	for i := range 3 {
		ri, ti := levels(t, a, fmt.Sprint("org", i), clk)
		r, tk = r+maxLimit*store.Unit-ri, tk+maxLimit*store.Unit-ti
	}
	if r != requests.Load()*store.Unit || tk != tokens.Load()*store.Unit {
		t.Fatalf("the buckets lost %d requests and %d tokens (units), usage says %d and %d",
			r, tk, requests.Load()*store.Unit, tokens.Load()*store.Unit)
	}
	t.Logf("%d leases taken", a.Stats().LeasesTaken+b.Stats().LeasesTaken)
}

// overshootBound is the bound of docs/limits.md (local allowance), in units: what N instances leasing
// slices of s units for interval T from a bucket refilled at rate units/µs
// may admit over any window beyond what exact admission may.
func overshootBound(n int, s, rate int64, interval time.Duration) int64 {
	return int64(n-1)*s + min(s, rate*interval.Microseconds())
}

// TestLeaseWorstCase drives N instances (limiters with in-process state
// of their own, sharing one Redis and one clock) through the sequence that
// makes leases admit the most beyond exact admission, and the same sequence
// through exact limiters: the difference reaches that bound,
// (N-1)*s + min(s, r*T), to within the one token the last microsecond of
// refill makes, and never exceeds it.
//
// The sequence: N-1 instances take a lease and let it expire unspent while
// the bucket refills; then one instance takes a fresh lease and the N-1
// exchange their old ones for new ones at once, each giving back a full
// slice that the bucket has refilled meanwhile; one interval later, just
// before the leases expire, every instance spends all it can.
func TestLeaseWorstCase(t *testing.T) {
	srv := redistest.Start(t)
	const burst, share, interval = 1000, 0.1, time.Second
	const slice = int64(share * burst)
	for _, tc := range []struct {
		n   int
		tps int64
	}{
		{2, 10},   // r*T = 10 < s = 100: (N-1)*s + r*T = 110, more than N*min(s, r*T) = 20
		{2, 100},  // r*T = s: N*s = 200
		{2, 1000}, // r*T > s: N*s = 200
		{3, 10},   // 2*100 + 10 = 210
	} {
		t.Run(fmt.Sprintf("N=%d,r=%d", tc.n, tc.tps), func(t *testing.T) {
			cfg := Config{RequestsPerMinute: i64(0), TokensPerSecond: i64(tc.tps), TokenBurst: i64(burst), StoreTimeout: slow, OnStoreError: StoreErrorDeny}
			run := func(leasing bool) int64 {
				clk := newFakeClock()
				prefix := fmt.Sprintf("%s:%v:", t.Name(), leasing)
				inst := make([]*Limiter, tc.n)
				for i := range inst {
					if leasing {
						inst[i] = newLeaser(t, cfg, share, interval, clk, onRedis(srv.URL()), prefixed(prefix))
					} else {
						inst[i], _ = newLimiter(t, cfg, clk, true, onRedis(srv.URL()), prefixed(prefix))
					}
					ownProcess(t, inst[i])
				}
				for _, l := range inst[1:] {
					mustAllow(t, l.Admit(bg, "acme", 0)) // a lease, left to expire
				}
				clk.Advance(time.Hour) // the bucket refills
				for _, l := range inst {
					mustAllow(t, l.Admit(bg, "acme", 0)) // fresh leases; the old ones go back
				}
				clk.Advance(interval - time.Microsecond)
				var admitted int64
				for _, l := range inst {
					for l.Admit(bg, "acme", 1).Allowed {
						admitted++
					}
				}
				return admitted
			}
			exact, leased := run(false), run(true)
			over := leased - exact
			bound := overshootBound(tc.n, slice*store.Unit, tc.tps*60, interval) / store.Unit
			t.Logf("N=%d s=%d r*T=%d: exact admitted %d tokens, leasing %d: %d more; bound (N-1)*s+min(s,r*T) = %d; N*min(s,r*T) = %d",
				tc.n, slice, tc.tps, exact, leased, over, bound, int64(tc.n)*min(slice, tc.tps))
			if exact != burst {
				t.Fatalf("exact admission admitted %d, want the bucket: %d", exact, burst)
			}
			if over > bound || over < bound-1 {
				t.Fatalf("leasing admitted %d more than exact, want the bound %d (less at most the last microsecond's token)", over, bound)
			}
		})
	}
}

// TestLeaseRefundStaysWithinTheSlice: a refund refills a lease up to the
// token slice and sends the rest to Redis, where the bucket's capacity caps
// it. Taken for a request estimated at the whole bucket and refunded whole,
// the lease must not keep the refund beside a bucket that refills: over the
// next interval the org gets no more than exact admission's bucket plus
// the bound for one instance, min(s, r·T).
func TestLeaseRefundStaysWithinTheSlice(t *testing.T) {
	srv := redistest.Start(t)
	clk := newFakeClock()
	const burst, rate, share = 1000, 500, 0.1 // s = 100 tokens, r·T = 500
	cfg := Config{RequestsPerMinute: i64(0), TokensPerSecond: i64(rate), TokenBurst: i64(burst)}
	l := newLeaser(t, cfg, share, time.Second, clk, onRedis(srv.URL()))

	d := mustAllow(t, l.Admit(bg, "acme", burst))
	l.Settle(d, 0) // a refund of the whole bucket
	drain(l)
	clk.Advance(999 * time.Millisecond)
	admitted := int64(0)
	for l.Admit(bg, "acme", 1).Allowed {
		admitted++
		if admitted > 3*burst {
			break
		}
	}
	if bound := int64(burst) + overshootBound(1, burst*share, rate, time.Second); admitted > bound {
		t.Fatalf("%d tokens admitted after the refund, want at most %d (the bucket plus min(s, r·T))", admitted, bound)
	}
	t.Logf("%d tokens admitted after the refund", admitted)
}
