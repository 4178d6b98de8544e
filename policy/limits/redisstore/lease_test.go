package redisstore

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/testclock"
	"github.com/systemone/systemone-gateway/internal/wait"
	"github.com/systemone/systemone-gateway/policy/limits/store"
)

// instance is one gateway instance's limits on Redis as the Limiter drives
// them: a Redis store of its own, with leases over it or without (exact
// admission), on the test's clock (Redis's scripts too).
type instance struct {
	t        *testing.T
	s        *testStore
	leases   *Leases // nil: exact admission
	st       store.Store
	req, tok store.Spec
	clk      *testclock.Clock
}

// leasing returns an instance with leases of share and interval; the
// sweeper runs every sweepEvery (0: its default).
func leasing(t *testing.T, url, prefix string, req, tok store.Spec, share float64, interval, sweepEvery time.Duration, clk *testclock.Clock) *instance {
	in := exact(t, url, prefix, req, tok, clk)
	in.leases = NewLeases(in.s.Store, LeaseOptions{Share: share, Interval: interval, Now: clk.Now,
		Specs: func(string) (store.Spec, store.Spec) { return req, tok }, SweepEvery: sweepEvery})
	in.st = in.leases
	t.Cleanup(func() { _ = in.leases.Close() })
	return in
}

// exact returns an instance that admits exactly, one script each.
func exact(t *testing.T, url, prefix string, req, tok store.Spec, clk *testclock.Clock) *instance {
	s := newStoreAt(t, url, prefix, Options{Clock: clk.Now})
	return &instance{t: t, s: s, st: s.Store, req: req, tok: tok, clk: clk}
}

// admitted is an admission and its answer.
type admitted struct {
	c store.Check
	o store.Outcome
}

// admit is the Limiter's admission of an evaluation estimated at tokens.
func (in *instance) admit(org string, tokens int64) admitted {
	in.t.Helper()
	return in.check(org, admission(in.req, in.tok, tokens))
}

// admitRequest is the Limiter's admission of a request that is no
// evaluation: one request, the token bucket reported only.
func (in *instance) admitRequest(org string) admitted {
	in.t.Helper()
	return in.check(org, store.Check{Req: in.req, Tok: in.tok, ReqCost: store.Unit, TokCost: -1, ReportTok: true})
}

func (in *instance) check(org string, c store.Check) admitted {
	in.t.Helper()
	o, err := in.st.Admit(bg, org, c, 0, in.clk.Now())
	if err != nil {
		in.t.Fatalf("%s: %v", org, err)
	}
	return admitted{c, o}
}

// settle is the Limiter's settlement of a, admitted, at actual tokens.
func (in *instance) settle(org string, a admitted, actual int64) {
	if !a.o.Allowed || !in.tok.On() {
		return
	}
	charged := int64(0)
	if a.c.UsesTok() {
		charged = a.c.TokCost / store.Unit
	}
	if delta := in.tok.Clamp(max(actual, 0) - charged); delta != 0 {
		in.st.Settle(org, store.Settlement{Req: in.req, Tok: in.tok, Delta: delta, Lease: a.o.Lease}, in.clk.Now())
	}
}

// sweep gives back the leases expired at the clock's time and waits until
// Redis has them.
func (in *instance) sweep() {
	in.leases.sweep(store.Micros(in.clk.Now()))
	in.s.drain(in.t)
}

// entries is the number of organizations the instance keeps a lease entry for.
func (in *instance) entries() int64 { return in.leases.size.Load() }

// levels reads org's two buckets from Redis, in units, refilled to the
// clock's time as the scripts would.
func (in *instance) levels(org string) (req, tok int64) {
	in.t.Helper()
	v := redistest.HashInts(in.t, in.s.client, in.s.prefix+"{"+org+"}:b", "r", "ra", "t", "ta")
	at := func(i int) store.Stored {
		if v[i] == nil {
			return store.Stored{}
		}
		return store.Stored{Level: *v[i], At: *v[i+1], Known: true}
	}
	now := in.clk.Now().UnixMicro()
	if in.req.On() {
		req = store.Refill(in.req, at(0), now)
	}
	if in.tok.On() {
		tok = store.Refill(in.tok, at(2), now)
	}
	return req, tok
}

// overshootBound is the bound of docs/limits.md (local allowance), in
// units: what N instances leasing slices of s units, each for interval,
// admit at most beyond exact admission in any window, at refill rate
// units per µs.
func overshootBound(n int, s, rate int64, interval time.Duration) int64 {
	return int64(n-1)*s + min(s, rate*interval.Microseconds())
}

// TestLeaseGivesBackExactly drives leases and exact admission through the
// same admissions and settlements on the same clock: once the leases have
// expired and been given back, both sets of buckets in Redis hold exactly
// the same units, and the sweeper forgets the entry.
func TestLeaseGivesBackExactly(t *testing.T) {
	srv := redistest.Start(t)
	clk := testclock.New(time.Time{})
	req, tok := store.RequestsPerMinute(600), store.TokensPerSecond(1000, 64000)
	lease := leasing(t, srv.URL(), "lease:", req, tok, 0.1, time.Second, time.Hour, clk)
	exact := exact(t, srv.URL(), "exact:", req, tok, clk)

	rng := rand.New(rand.NewPCG(3, 4))
	// Drain the buckets first, so that nothing below fills a bucket
	// (where a lease held outside and Redis refilling would part ways;
	// that is the overshoot docs/limits.md bounds, not a give-back).
	both := func(f func(in *instance) admitted) {
		al, ae := f(lease), f(exact)
		if al.o.Allowed != ae.o.Allowed {
			t.Fatalf("lease %+v\nexact %+v", al.o, ae.o)
		}
	}
	both(func(in *instance) admitted { return in.admit("acme", 40000) })
	for range 300 {
		both(func(in *instance) admitted { return in.admitRequest("acme") })
	}
	type pair struct{ l, e admitted }
	var pending []pair
	for i := range 400 {
		switch op := rng.IntN(10); {
		case op < 5:
			est := rng.Int64N(100)
			al, ae := lease.admit("acme", est), exact.admit("acme", est)
			if !al.o.Allowed || !ae.o.Allowed {
				t.Fatalf("step %d: lease %+v exact %+v", i, al.o, ae.o)
			}
			pending = append(pending, pair{al, ae})
		case op < 6:
			both(func(in *instance) admitted { return in.admitRequest("acme") })
		case op < 9 && len(pending) > 0:
			j := rng.IntN(len(pending))
			actual := rng.Int64N(200) // above and below the estimates
			lease.settle("acme", pending[j].l, actual)
			exact.settle("acme", pending[j].e, actual)
			pending = append(pending[:j], pending[j+1:]...)
		default:
			clk.Advance(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
		}
	}
	for _, p := range pending {
		lease.settle("acme", p.l, 0)
		exact.settle("acme", p.e, 0)
	}
	clk.Advance(time.Second)
	lease.sweep()
	exact.s.drain(t)
	lr, lt := lease.levels("acme")
	er, et := exact.levels("acme")
	if lr != er || lt != et {
		t.Fatalf("after the give-back: the leases' buckets %d requests %d tokens (units), exact %d %d", lr, lt, er, et)
	}
	if lr == 600*store.Unit || lt == 64000*store.Unit {
		t.Fatal("a bucket is full: the test proves nothing")
	}
	if n := lease.entries(); n != 1 {
		t.Fatalf("%d entries after the give-back, want the returning one", n)
	}
	lease.sweep()
	if n := lease.entries(); n != 0 {
		t.Fatalf("%d entries after the next sweep, want none", n)
	}
	t.Logf("leases taken %d for %d steps", lease.leases.Stats().LeasesTaken, 400)
}

// TestLeaseNeverExceedsTheBound: random histories of N instances leasing
// from one bucket, on one clock, with leases taken and left unspent,
// spent whole, expired and swept: no window of time admits more than the
// bucket's capacity plus its refill plus the bound.
func TestLeaseNeverExceedsTheBound(t *testing.T) {
	srv := redistest.Start(t)
	worst, _ := boundedHistories(t, 11, func(seed uint64, tok store.Spec, share float64, interval time.Duration, clk *testclock.Clock) *instance {
		return leasing(t, srv.URL(), fmt.Sprint(t.Name(), seed, ":"), store.Spec{}, tok, share, interval, time.Hour, clk)
	}, func(*rand.Rand) int { return 1 })
	// Leasing must show at least some overshoot, or the histories do not
	// exercise what the bound is about.
	if worst <= 0 {
		t.Fatal("no window admitted more than exact admission could: the histories prove nothing")
	}
}

// boundedHistories runs random histories (seeds 0 to 3, the PCG stream
// given) of three instances mk makes on one token bucket of 1,000 tokens
// at 20 a second, slices of 10% for a second, on one clock: a step makes
// few(rng) admissions of 0 to 2 tokens, or spends all it can, or moves the
// clock, or sweeps. It fails the test when a window of time admits more
// than the bucket's capacity plus its refill plus the bound, and returns
// the worst window's excess (units) and the leases taken.
func boundedHistories(t *testing.T, stream uint64, mk func(seed uint64, tok store.Spec, share float64, interval time.Duration, clk *testclock.Clock) *instance,
	few func(*rand.Rand) int) (worstOfAll, leases int64) {
	const n, burst, tps, share, interval = 3, 1000, 20, 0.1, time.Second
	tok := store.TokensPerSecond(tps, burst)
	bound := overshootBound(n, int64(share*burst)*store.Unit, tps*60, interval)
	worstOfAll = -1 << 62
	for seed := range uint64(4) {
		clk := testclock.New(time.Time{})
		inst := make([]*instance, n)
		for i := range inst {
			inst[i] = mk(seed, tok, share, interval, clk)
		}
		rng := rand.New(rand.NewPCG(seed, stream))
		// admitted[i] is what was admitted at times[i].
		times, admitted := []int64{clk.Now().UnixMicro()}, []int64{0}
		for range 1500 {
			in := inst[rng.IntN(n)]
			switch op := rng.IntN(20); {
			case op < 7: // mostly leases taken and left unspent
				for range few(rng) {
					if est := rng.Int64N(3); in.admit("acme", est).o.Allowed {
						admitted[len(admitted)-1] += est
					}
				}
			case op < 12: // spend everything
				for range 200 {
					if !in.admit("acme", 10).o.Allowed {
						break
					}
					admitted[len(admitted)-1] += 10
				}
			case op < 17:
				var d time.Duration
				switch rng.IntN(3) {
				case 0:
					d = time.Duration(rng.Int64N(int64(100 * time.Millisecond)))
				case 1:
					d = interval - time.Duration(rng.Int64N(int64(50*time.Millisecond)))
				default:
					d = time.Duration(rng.Int64N(int64(20 * time.Second)))
				}
				clk.Advance(d)
				times, admitted = append(times, clk.Now().UnixMicro()), append(admitted, 0)
			default:
				in.sweep()
			}
		}
		var worst int64 = -1 << 62
		for i := range times {
			var sum int64
			for j := i; j < len(times); j++ {
				sum += admitted[j]
				worst = max(worst, sum*store.Unit-burst*store.Unit-tps*60*(times[j]-times[i]))
			}
		}
		for _, in := range inst {
			leases += in.leases.Stats().LeasesTaken
		}
		t.Logf("seed %d: the worst window admitted %.1f tokens beyond capacity plus refill; bound %d", seed, float64(worst)/store.Unit, bound/store.Unit)
		if worst > bound {
			t.Fatalf("a window admitted %.1f tokens beyond capacity plus refill, bound %d", float64(worst)/store.Unit, bound/store.Unit)
		}
		worstOfAll = max(worstOfAll, worst)
	}
	return worstOfAll, leases
}

// TestLeaseUndershoot: a refusal may come while other instances hold
// unspent leases, until they expire and go back.
func TestLeaseUndershoot(t *testing.T) {
	srv := redistest.Start(t)
	clk := testclock.New(time.Time{})
	tok := store.TokensPerSecond(1, 1000)
	a := leasing(t, srv.URL(), "under:", store.Spec{}, tok, 0.1, time.Second, time.Hour, clk)
	b := leasing(t, srv.URL(), "under:", store.Spec{}, tok, 0.1, time.Second, time.Hour, clk)
	if !a.admit("acme", 0).o.Allowed { // holds 100 tokens, spends none
		t.Fatal("a refused")
	}
	var first int64
	for b.admit("acme", 1).o.Allowed {
		first++
	}
	if first != 900 {
		t.Fatalf("b admitted %d while a held its lease, want 900", first)
	}
	clk.Advance(time.Second)
	a.sweep()
	var then int64
	for b.admit("acme", 1).o.Allowed {
		then++
	}
	// a's 100 and a second's refill.
	if then != 101 {
		t.Fatalf("b admitted %d once a's lease went back, want 101", then)
	}
}

// TestLeaseSweeperRuns: without the test sweeping, the background sweeper
// gives an idle lease back and forgets its entry.
func TestLeaseSweeperRuns(t *testing.T) {
	srv := redistest.Start(t)
	clk := testclock.New(time.Time{})
	in := leasing(t, srv.URL(), "t:", defReq, defTok, 0.1, 10*time.Millisecond, 0, clk)
	if !in.admit("acme", 100).o.Allowed {
		t.Fatal("refused")
	}
	if r, _ := in.levels("acme"); r != 270*store.Unit {
		t.Fatalf("requests in Redis %d", r/store.Unit)
	}
	clk.Advance(10 * time.Millisecond)
	wait.Until(t, "the idle lease given back and forgotten", func() bool {
		r, tk := in.levels("acme")
		return r >= 299*store.Unit && tk >= 63900*store.Unit && in.entries() == 0
	})
}
