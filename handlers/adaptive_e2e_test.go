package handlers_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/redistest"
)

// sharedGateways loads n gateways (sites, each its own handler, limiter
// and leases, as separate instances would have) in front of one
// simulator, all with the limits block on one redis-server, and returns
// their URLs, the simulator and a client of that Redis.
func sharedGateways(t *testing.T, n int, limitsBlock string) (urls []string, sim *gatewaytest.Upstream, rdb *redis.Client) {
	t.Helper()
	sim = unlimitedSimulator(t)
	srv := redistest.Start(t)
	block := "\t\tredis " + srv.URL() + "\n\t\tlimits {\n" + limitsBlock + "\t\t\tstore_timeout 2s\n\t\t}\n"
	var sites string
	for range n {
		s, u := site(t, sim.Addr(), block)
		sites, urls = sites+s, append(urls, u)
	}
	gatewaytest.Load(t, sites)
	rdb = redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return urls, sim, rdb
}

// TestSmallLimitExactAcrossGateways: by default (the adaptive allowance),
// a small limit stays exact however fast its requests come: two gateways
// on one Redis, `requests_per_minute 10`, 20 requests at once, 10 through
// each: exactly 10 reach the upstream, the other 10 get the contract's 429.
func TestSmallLimitExactAcrossGateways(t *testing.T) {
	urls, sim, _ := sharedGateways(t, 2, "\t\t\trequests_per_minute 10\n")
	c := newClient(t)
	var mu sync.Mutex
	status := map[int]int{}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			r := c.post(urls[i%2], "small-limit", smallBody)
			if r.status == 429 {
				if err := contractAnswer(r, "rate_limited"); err != nil {
					t.Error(err)
				}
			}
			mu.Lock()
			status[r.status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if status[200] != 10 || status[429] != 10 || sim.Calls() != 10 {
		t.Fatalf("answers %v, upstream called %d times: want exactly 10 of 20 through", status, sim.Calls())
	}
}

// TestAdaptiveAllowanceEndToEnd: three gateways on one Redis share an
// org's 300 requests a minute, with `local_allowance adaptive 10% 2s`
// (slices of 30 requests; 2s so that the pace holds on a loaded machine).
// Sending as fast as they can, they admit within the bound of
// docs/limits.md ((N−1)·s + min(s, r·T) = 60 + 10 beyond exact admission,
// plus the run's refill), at most (N−1)·s = 60 short of it; every admitted
// request reaches the upstream once; and Redis runs a fraction of the
// scripts exact admission would.
func TestAdaptiveAllowanceEndToEnd(t *testing.T) {
	const rpm, slice, n = 300, 30, 3
	urls, sim, rdb := sharedGateways(t, n, "\t\t\trequests_per_minute 300\n\t\t\tlocal_allowance adaptive 10% 2s\n")
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t)
	started := time.Now()
	var mu sync.Mutex
	var results []result
	var wg sync.WaitGroup
	for _, url := range urls {
		wg.Go(func() {
			rs := c.load(url, 4, 40, func(int) string { return "adaptive" }, func(int, int) string { return smallBody })
			mu.Lock()
			results = append(results, rs...)
			mu.Unlock()
		})
	}
	wg.Wait()
	refill := int(time.Since(started).Seconds()*rpm/60) + 1
	admitted := 0
	for _, r := range results {
		switch r.status {
		case 200:
			admitted++
		case 429:
			if err := contractAnswer(r, "rate_limited"); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("unexpected answer: %v", r)
		}
	}
	bound := (n-1)*slice + min(slice, rpm/60*2)
	if admitted < rpm-(n-1)*slice || admitted > rpm+refill+bound {
		t.Errorf("%d of %d admitted, want %d..%d", admitted, len(results), rpm-(n-1)*slice, rpm+refill+bound)
	}
	if int(sim.Calls()) != admitted {
		t.Errorf("the upstream was called %d times for %d admitted requests", sim.Calls(), admitted)
	}
	scripts := redistest.CommandCalls(t, rdb.Options().Addr)["evalsha"]
	if scripts == 0 || scripts > len(results)/3 {
		t.Errorf("%d scripts ran in Redis for %d requests, want leases to pay most admissions", scripts, len(results))
	}
	t.Logf("%d of %d admitted (exact: %d, bound +%d, refill %d), %d scripts in Redis", admitted, len(results), rpm, bound, refill, scripts)
}
