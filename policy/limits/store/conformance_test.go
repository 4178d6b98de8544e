package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/internal/redispool"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/testclock"
	"github.com/systemone/systemone-gateway/internal/wait"
	"github.com/systemone/systemone-gateway/policy/limits/memstore"
	"github.com/systemone/systemone-gateway/policy/limits/redisstore"
	"github.com/systemone/systemone-gateway/policy/limits/store"
)

// TestStoresAgree runs the same random admissions, settlements, holds and
// budget reservations on the in-process store and on the Redis store, on
// one clock, and requires the same Outcome from both, to the unit: the
// Redis scripts transliterate the arithmetic the in-process store runs in
// Go, and this is what holds them to it.
func TestStoresAgree(t *testing.T) {
	srv := redistest.Start(t)
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			clk := testclock.New(time.Date(2026, 11, 23, 23, 59, 30, 0, time.UTC))
			mem := memstore.New()
			t.Cleanup(func() { _ = mem.Close() })
			client, err := redispool.NewClient([]string{srv.URL()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = client.Close() })
			red := redisstore.New(client, fmt.Sprint("agree", seed, ":"), redisstore.Options{
				Timeout: 5 * time.Second, Logger: zap.NewNop(), Clock: clk.Now})
			t.Cleanup(func() { _ = red.Close() })
			agree(t, rand.New(rand.NewPCG(seed, 7)), clk, mem, red)
		})
	}
}

func agree(t *testing.T, rng *rand.Rand, clk *testclock.Clock, mem store.Store, red *redisstore.Store) {
	ctx := context.Background()
	orgs := []string{"acme", "globex", "initech"}
	// Small buckets and a small budget, so that refusals, debts, holds and
	// the budget's edge all come up within a few hundred steps.
	req, tok := store.RequestsPerMinute(20), store.TokensPerSecond(50, 400)
	const budget = 1_000_000 // nano-yuan
	type admitted struct {
		org   string
		c     store.Check
		o     store.Outcome
		spend *store.SpendSettle
	}
	var inflight []admitted
	// seen counts what the steps came to, so that a run that never reaches
	// a refusal of some kind fails rather than proves nothing.
	seen := map[string]int{}
	periods := func(now time.Time) [3]store.Period {
		day := func(d int) store.Period {
			s := time.Date(now.Year(), now.Month(), now.Day()+d, 0, 0, 0, 0, time.UTC)
			return store.Period{Name: s.Format("2006-01-02"), Start: s, End: s.AddDate(0, 0, 1)}
		}
		return [3]store.Period{day(-1), day(0), day(1)}
	}
	for step := range 400 {
		now := clk.Now()
		org := orgs[rng.IntN(len(orgs))]
		switch op := rng.IntN(10); {
		case op < 6: // an admission, sometimes with a budget, sometimes requests only
			c := store.Check{Req: req, Tok: tok, ReqCost: store.Unit, TokCost: rng.Int64N(200) * store.Unit, Hold: true}
			if op == 5 {
				c.TokCost, c.ReportTok = -1, true
			}
			if rng.IntN(2) == 0 {
				c.Budget = store.BudgetCheck{Limit: budget, Cost: rng.Int64N(400_000), Periods: periods(now)}
				if op == 5 {
					c.Budget.Cost = -1 // read only, as for a request that is no evaluation
				}
			}
			om, errm := mem.Admit(ctx, org, c, 0, now)
			or, errr := red.Admit(ctx, org, c, 0, now)
			if errm != nil || errr != nil {
				t.Fatalf("step %d: errors %v %v", step, errm, errr)
			}
			if om != or {
				t.Fatalf("step %d: %s admits %+v\nin process: %+v\nin Redis:   %+v", step, org, c, om, or)
			}
			switch {
			case om.Allowed:
				seen["allowed"]++
			case om.BudgetRefused:
				seen["budget"]++
			case om.HoldWait > 0:
				seen["hold"]++
			case om.ReqWait > 0:
				seen["requests"]++
			case om.TokWait > 0:
				seen["tokens"]++
			}
			if c.Budget.On() && now.Day() == 24 {
				seen["next day"]++
			}
			if om.Allowed && (c.UsesTok() || c.Budget.On()) {
				a := admitted{org: org, c: c, o: om}
				if c.Budget.On() && c.Budget.Cost >= 0 {
					p := c.Budget.Periods[om.Period]
					a.spend = &store.SpendSettle{Period: p.Name, End: p.End.UnixMicro(), Slot: om.Slot, Release: c.Budget.Cost}
				}
				inflight = append(inflight, a)
			}
		case op < 8 && len(inflight) > 0: // a settlement, above or below the estimate
			i := rng.IntN(len(inflight))
			a := inflight[i]
			inflight = append(inflight[:i], inflight[i+1:]...)
			st := store.Settlement{Req: req, Tok: tok}
			if a.c.UsesTok() {
				st.Delta = tok.Clamp(rng.Int64N(300) - a.c.TokCost/store.Unit)
			}
			if a.spend != nil {
				sp := *a.spend
				sp.Charge = rng.Int64N(500_000)
				st.Spend = &sp
			}
			mem.Settle(a.org, st, now)
			red.Settle(a.org, st, now)
			waitSent(t, red)
			seen["settled"]++
		case op == 8: // an upstream 429
			d := time.Duration(1+rng.IntN(5)) * time.Second
			mem.Hold(org, d, now)
			red.Hold(org, d, now)
			waitSent(t, red)
		default: // time passes, across midnight
			clk.Advance(time.Duration(rng.Int64N(int64(3 * time.Second))))
		}
	}
	for _, k := range []string{"allowed", "budget", "hold", "requests", "tokens", "settled", "next day"} {
		if seen[k] == 0 {
			t.Errorf("no step came to %q: %v", k, seen)
		}
	}
	t.Logf("%v", seen)
}

// waitSent waits until the Redis store has no settlement or hold pending.
func waitSent(t *testing.T, s *redisstore.Store) {
	t.Helper()
	wait.Until(t, "the settlements sent", func() bool { return s.Stats().Pending == 0 })
}
