package redisstore

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/testclock"
	"github.com/systemone/systemone-gateway/policy/limits/store"
)

// adaptive returns an instance whose leases run in the adaptive mode, on
// the test's clock, with no background sweep.
func adaptive(t *testing.T, url, prefix string, req, tok store.Spec, share float64, interval time.Duration, clk *testclock.Clock) *instance {
	in := exact(t, url, prefix, req, tok, clk)
	in.leases = NewLeases(in.s.Store, LeaseOptions{Share: share, Interval: interval, Now: clk.Now, Adaptive: true,
		Specs: func(string) (store.Spec, store.Spec) { return req, tok }, SweepEvery: time.Hour})
	in.st = in.leases
	t.Cleanup(func() { _ = in.leases.Close() })
	return in
}

// scripts counts the script calls in's store sends from now on.
func (in *instance) scripts() *redistest.CountHook {
	hook := &redistest.CountHook{}
	in.s.client.AddHook(hook)
	return hook
}

// TestAdaptivePace: an organization admitted fewer than
// MinLeaseAdmissions times in an interval is admitted exactly, one script
// each; the admission that reaches the pace takes a lease, which pays the
// rest of the interval's admissions; once the pace has lapsed for two
// intervals, admissions are exact again.
func TestAdaptivePace(t *testing.T) {
	srv := redistest.Start(t)
	clk := testclock.New(time.Time{})
	req, tok := store.RequestsPerMinute(6000), store.TokensPerSecond(1000, 64000) // slices of 120 requests, 1,280 tokens
	in := adaptive(t, srv.URL(), "pace:", req, tok, 0.02, 100*time.Millisecond, clk)
	in.admit("warm", 1) // connects and loads the script
	hook := in.scripts()
	for i := range MinLeaseAdmissions - 1 {
		if !in.admit("acme", 10).o.Allowed {
			t.Fatalf("admission %d refused", i)
		}
		clk.Advance(10 * time.Millisecond)
	}
	if n := hook.Scripts.Load(); n != MinLeaseAdmissions-1 {
		t.Fatalf("%d scripts for %d admissions below the pace, want one each", n, MinLeaseAdmissions-1)
	}
	for range 30 {
		if !in.admit("acme", 10).o.Allowed {
			t.Fatal("refused")
		}
	}
	if n := hook.Scripts.Load(); n != MinLeaseAdmissions {
		t.Fatalf("%d scripts once the pace was reached, want one more: the lease", n)
	}
	if in.leases.Stats().LeasesTaken != 1 {
		t.Fatalf("leases taken %d", in.leases.Stats().LeasesTaken)
	}
	// Two quiet intervals: the lease expires, its pace lapses.
	clk.Advance(200 * time.Millisecond)
	in.sweep()
	hook.Scripts.Store(0)
	for range 3 {
		in.admit("acme", 10)
	}
	if n := hook.Scripts.Load(); n != 3 {
		t.Fatalf("%d scripts for 3 admissions after the pace lapsed, want 3", n)
	}
	r, tk := in.levels("acme")
	if want := int64(6000-7-30-3) * store.Unit; r > want+req.Rate*300_000 || r < want {
		t.Errorf("Redis holds %d requests after the lease went back", r/store.Unit)
	}
	_ = tk
}

// TestAdaptiveSmallLimitsExact: at any pace, a limit whose slice holds
// fewer than MinLeaseAdmissions requests (2% of 399 is 7.98) is admitted
// exactly on every instance: two instances admitting as fast as they can
// admit exactly the bucket, one script per admission. At 400 requests a
// minute (a slice of 8) the same run leases.
func TestAdaptiveSmallLimitsExact(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		rpm   int64
		lease bool
	}{{10, false}, {399, false}, {400, true}} {
		t.Run(fmt.Sprint(tc.rpm), func(t *testing.T) {
			clk := testclock.New(time.Time{})
			prefix := t.Name() + ":"
			req := store.RequestsPerMinute(tc.rpm)
			a := adaptive(t, srv.URL(), prefix, req, store.Spec{}, 0.02, 100*time.Millisecond, clk)
			b := adaptive(t, srv.URL(), prefix, req, store.Spec{}, 0.02, 100*time.Millisecond, clk)
			a.admit("warm", 0)
			b.admit("warm", 0)
			ha, hb := a.scripts(), b.scripts()
			admitted, tries := int64(0), 2*tc.rpm
			var firstScripts int64 // in the first rpm tries, which the bucket pays
			for i := range tries {
				in := a
				if i%2 == 1 {
					in = b
				}
				if in.admit("acme", 0).o.Allowed {
					admitted++
				}
				if i == tc.rpm-1 {
					firstScripts = ha.Scripts.Load() + hb.Scripts.Load()
				}
			}
			scripts := ha.Scripts.Load() + hb.Scripts.Load()
			t.Logf("%d requests a minute: %d of %d admitted, %d scripts (%d for the first %d)", tc.rpm, admitted, tries, scripts, firstScripts, tc.rpm)
			if tc.lease {
				if firstScripts >= tc.rpm/2 {
					t.Fatalf("%d scripts for %d admissions: a slice of 8 requests must be leased", firstScripts, tc.rpm)
				}
				bound := overshootBound(2, 8*store.Unit, req.Rate, 100*time.Millisecond) / store.Unit
				if admitted < tc.rpm-8 || admitted > tc.rpm+bound {
					t.Fatalf("admitted %d, want %d within the bound %d", admitted, tc.rpm, bound)
				}
				return
			}
			if admitted != tc.rpm || scripts != tries {
				t.Fatalf("admitted %d with %d scripts, want exactly %d with one script per admission (%d)", admitted, scripts, tc.rpm, tries)
			}
		})
	}
}

// TestAdaptiveLargeRequestsExact: a request whose token charge is more
// than an eighth of the token slice never takes a lease: a live lease that
// can pay it does, and once it cannot, the request is admitted exactly,
// the lease left to the small requests of the same organization.
func TestAdaptiveLargeRequestsExact(t *testing.T) {
	srv := redistest.Start(t)
	clk := testclock.New(time.Time{})
	req, tok := store.RequestsPerMinute(60000), store.TokensPerSecond(1000, 64000) // a token slice of 1,280
	in := adaptive(t, srv.URL(), "large:", req, tok, 0.02, 100*time.Millisecond, clk)
	in.admit("warm", 1)
	for range MinLeaseAdmissions {
		in.admit("acme", 10) // the pace; the last takes a lease, 1,270 tokens left of it
	}
	hook := in.scripts()
	for range 5 {
		if !in.admit("acme", 400).o.Allowed { // 8 × 400 > 1,280
			t.Fatal("refused")
		}
	}
	// Three paid from the lease (70 tokens left), two exact.
	if n, leases := hook.Scripts.Load(), in.leases.Stats().LeasesTaken; n != 2 || leases != 1 {
		t.Fatalf("%d scripts and %d leases for 5 large admissions, want 2 exact ones and the one lease", n, leases)
	}
	for range 7 {
		in.admit("acme", 10)
	}
	if n := hook.Scripts.Load(); n != 2 {
		t.Fatalf("%d scripts after 7 small admissions the lease pays, want none more", n-2)
	}
	in.admit("acme", 10)
	if n, leases := hook.Scripts.Load(), in.leases.Stats().LeasesTaken; n != 3 || leases != 2 {
		t.Fatalf("%d scripts and %d leases once the lease ran out, want a new lease", n, leases)
	}
}

// TestAdaptiveNeverExceedsTheBound: random histories of three adaptive
// instances on one Redis bucket and one clock, with slow stretches
// (exact), bursts that reach the pace and spend leases whole, leases left
// unspent to expire, and sweeps: no window of time admits more than the
// bucket's capacity plus its refill plus the bound of docs/limits.md,
// (N-1)·s + min(s, r·T) with s = share × capacity.
func TestAdaptiveNeverExceedsTheBound(t *testing.T) {
	srv := redistest.Start(t)
	worst, leases := boundedHistories(t, 17, func(seed uint64, tok store.Spec, share float64, interval time.Duration, clk *testclock.Clock) *instance {
		return adaptive(t, srv.URL(), fmt.Sprint(t.Name(), seed, ":"), store.Spec{}, tok, share, interval, clk)
	}, func(rng *rand.Rand) int { return 1 + rng.IntN(MinLeaseAdmissions+2) }) // exact, or the pace reached and a lease left
	if worst <= 0 || leases == 0 {
		t.Fatalf("worst window %d units over, %d leases: the histories prove nothing", worst, leases)
	}
}

// TestAdaptiveWorstCase drives N adaptive instances through the sequence
// that makes leases admit the most beyond exact admission (see
// TestLeaseWorstCase in package limits), each lease preceded by the exact
// admissions that reach the pace, and exact instances through the same
// sequence: the difference reaches the bound, (N-1)·s + min(s, r·T), to
// within the one token the last microsecond of refill makes, and never
// exceeds it.
func TestAdaptiveWorstCase(t *testing.T) {
	srv := redistest.Start(t)
	const burst, share, interval = 1000, 0.1, time.Second
	const slice = int64(share * burst)
	for _, tc := range []struct {
		n   int
		tps int64
	}{{2, 10}, {2, 100}, {3, 10}} {
		t.Run(fmt.Sprintf("N=%d,r=%d", tc.n, tc.tps), func(t *testing.T) {
			tok := store.TokensPerSecond(tc.tps, burst)
			run := func(leasing bool) int64 {
				clk := testclock.New(time.Time{})
				prefix := fmt.Sprintf("%s:%v:", t.Name(), leasing)
				inst := make([]*instance, tc.n)
				for i := range inst {
					if leasing {
						inst[i] = adaptive(t, srv.URL(), prefix, store.Spec{}, tok, share, interval, clk)
					} else {
						inst[i] = exact(t, srv.URL(), prefix, store.Spec{}, tok, clk)
					}
				}
				paced := func(in *instance) {
					for range MinLeaseAdmissions { // the last one takes a lease
						if !in.admit("acme", 0).o.Allowed {
							t.Fatal("refused")
						}
					}
				}
				for _, in := range inst[1:] {
					paced(in) // a lease, left to expire
				}
				clk.Advance(time.Hour) // the bucket refills
				for _, in := range inst {
					paced(in) // fresh leases; the old ones go back
				}
				clk.Advance(interval - time.Microsecond)
				var admitted int64
				for _, in := range inst {
					for in.admit("acme", 1).o.Allowed {
						admitted++
					}
				}
				return admitted
			}
			exactly, leased := run(false), run(true)
			over := leased - exactly
			bound := overshootBound(tc.n, slice*store.Unit, tc.tps*60, interval) / store.Unit
			t.Logf("N=%d s=%d r·T=%d: exact admitted %d tokens, adaptive %d: %d more; bound %d", tc.n, slice, tc.tps, exactly, leased, over, bound)
			if exactly != burst {
				t.Fatalf("exact admission admitted %d, want the bucket: %d", exactly, burst)
			}
			if over > bound || over < bound-1 {
				t.Fatalf("adaptive leases admitted %d more than exact, want the bound %d (less at most the last microsecond's token)", over, bound)
			}
		})
	}
}
