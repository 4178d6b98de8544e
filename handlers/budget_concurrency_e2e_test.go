package handlers_test

import (
	"strconv"
	"sync"
	"testing"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/internal/gatewaytest"
)

// Concurrent clients far below the budget are never refused on it: a
// request's reservation stops counting when the request ends, on Redis as in
// process. Half the clients get the upstream's 500 (nothing billed), half a
// 200 billing 1 token; the budget holds 60 requests' estimates, and spent
// plus 16 in flight stays well below it.
func TestBudgetConcurrentTrafficNeverFalselyRefused(t *testing.T) {
	const clients, perClient, price = 16, 40, 1000 // yuan per million tokens
	req, err := evaluation.ParseRequest([]byte(smallBody))
	if err != nil {
		t.Fatal(err)
	}
	estimate := float64(req.EstimatedTokens) * price / 1e6 // yuan
	budget := 60 * estimate
	if spent := clients / 2 * perClient * 1 * price / 1e6; spent+clients*estimate >= budget {
		t.Fatalf("the test's traffic could reach the budget: %v spent, %v in flight, budget %v", spent, clients*estimate, budget)
	}
	for _, store := range []string{"in-process", "redis"} {
		t.Run(store, func(t *testing.T) {
			up := biller(t, 1, nil)
			block, _ := withRedis(store, t, "\t\tlimits {\n\t\t\trequests_per_minute 0\n\t\t\ttokens_per_second 0\n"+
				"\t\t\tbudget "+strconv.FormatFloat(budget, 'f', 6, 64)+" per day\n\t\t\tprice "+strconv.Itoa(price)+"\n\t\t}\n")
			sites, url := site(t, up.Addr(), block)
			gatewaytest.Load(t, sites)
			c := newClient(t)
			statuses := make([]map[int]int, clients)
			var wg sync.WaitGroup
			for i := range clients {
				statuses[i] = map[int]int{}
				header := []string{"X-Test", "500"}
				if i%2 == 1 {
					header = nil // a 200 billing 1 token
				}
				wg.Go(func() {
					for range perClient {
						r := c.post(url, "k", smallBody, header...)
						if r.err != nil {
							t.Errorf("client %d: %v", i, r)
							return
						}
						statuses[i][r.status]++
					}
				})
			}
			wg.Wait()
			total := map[int]int{}
			for _, s := range statuses {
				for code, n := range s {
					total[code] += n
				}
			}
			if total[500] != clients/2*perClient || total[200] != clients/2*perClient {
				t.Fatalf("statuses %v, want %d 500s and %d 200s, no 402", total, clients/2*perClient, clients/2*perClient)
			}
		})
	}
}
