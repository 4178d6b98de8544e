package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/wait"
)

// accountant is an evaluation upstream that bills every 200 usage input
// tokens and keeps its own account of them per org (the X-Org header):
// what the fleet's budgets must end up holding.
type accountant struct {
	usage int64
	mu    sync.Mutex
	by    map[string]int64 // org -> tokens billed
}

func newAccountant(t *testing.T, usage int64) (*accountant, *gatewaytest.Upstream) {
	a := &accountant{usage: usage, by: map[string]int64{}}
	return a, gatewaytest.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		org := r.Header.Get("X-Org")
		a.mu.Lock()
		a.by[org] += a.usage
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"model":"service-1.0.0","answers":{"late":{"type":"noul","noul":0.9}},"usage":{"input_tokens":%d,"output_tokens":2}}`, a.usage)
	}))
}

func (a *accountant) billed(org string) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.by[org]
}

// TestFaultsRedisClusterMasterDown: two gateways (one in this process,
// one in a child process) share a three-master Redis Cluster for their
// limits and budgets, with on_store_error local, under traffic from six
// orgs spread over the masters. One master is killed, with requests in
// flight, until the cluster counts it failed (past the node timeout:
// CLUSTERDOWN), then restarted. Every 200 the upstream billed ends up in
// Redis's budget totals exactly once, for the orgs of the dead master and
// of the live ones alike: a settlement whose answer the kill cut is sent
// again with its id, and runs once whether or not the dead master had run
// it; no settlement is counted lost; each gateway logs one `redis lost` and one `redis back`,
// and reports systemone_redis_up 0 in between. Both ways a cluster can
// meet a dead master: every node refusing (full coverage, the default),
// and the live masters serving their own slots.
func TestFaultsRedisClusterMasterDown(t *testing.T) {
	for _, coverage := range []string{"yes", "no"} {
		t.Run("cluster-require-full-coverage "+coverage, func(t *testing.T) {
			clusterMasterDown(t, coverage)
		})
	}
}

func clusterMasterDown(t *testing.T, coverage string) {
	// The dead master keeps its data (an append-only file, synced at
	// every write) so that what it held before the outage is still there.
	cluster := redistest.StartCluster(t, 3, "--cluster-node-timeout", "1000", "--cluster-require-full-coverage", coverage,
		"--appendonly", "yes", "--appendfsync", "always")
	dead := cluster.Nodes[2]
	direct := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cluster.Nodes[0].Addr}})
	t.Cleanup(func() { _ = direct.Close() })

	// Two orgs on each master.
	var orgs []string
	perNode := map[string]int{}
	for i := 0; len(orgs) < 6; i++ {
		org := "cluster-org-" + strconv.Itoa(i)
		node, err := direct.MasterForKey(context.Background(), "systemone:{"+org+"}:b")
		if err != nil {
			t.Fatal(err)
		}
		if addr := node.Options().Addr; perNode[addr] < 2 {
			perNode[addr]++
			orgs = append(orgs, org)
		}
	}

	const usage = 1000 // tokens per 200; at 1 yuan a million, 1,000,000 nano-yuan
	acct, up := newAccountant(t, usage)
	block := fmt.Sprintf("\t\tredis %s %s %s\n\t\torg_header X-Org\n\t\tlimits {\n\t\t\trequests_per_minute 100000\n\t\t\ttokens_per_second 0\n"+
		"\t\t\tbudget 100000 per month\n\t\t\tprice 1\n\t\t\ton_store_error local\n\t\t\tstore_timeout 300ms\n\t\t}\n",
		cluster.Nodes[0].URL(), cluster.Nodes[1].URL(), cluster.Nodes[2].URL())
	metricsA, metricsB := gatewaytest.FreePort(t), gatewaytest.FreePort(t)
	sitesA, urlA := site(t, up.Addr(), block)
	sitesB, urlB := site(t, up.Addr(), block)
	a := gatewaytest.Load(t, sitesA+fmt.Sprintf(":%d {\n\tmetrics\n}\n", metricsA))
	b := gatewaytest.StartProcess(t, sitesB+fmt.Sprintf(":%d {\n\tmetrics\n}\n", metricsB))
	metricsURLs := []string{fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsA), fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsB)}
	const lostSeries = `systemone_limit_settlements_lost_total{reason="unanswered"}`
	const droppedSeries = `systemone_limit_settlements_lost_total{reason="dropped"}`
	// This process's counters include earlier tests' limiters.
	lostBefore, droppedBefore := metricValue(t, metricsURLs[0], lostSeries), metricValue(t, metricsURLs[0], droppedSeries)

	// Traffic: one client per org, alternating between the gateways, a
	// request every 20 ms at most (the phases below last seconds each;
	// unpaced, the clients would spend two cores on requests that show
	// nothing more).
	c := newClient(t)
	var sent atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	status := map[int]int{}
	// If a wait below fails the test, the clients stop before the cluster
	// and the gateways are torn down (cleanups run last registered first),
	// so that none reports on a test that has ended.
	stopped := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopped)
	for _, org := range orgs {
		wg.Go(func() {
			pace := time.NewTicker(20 * time.Millisecond)
			defer pace.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-pace.C:
				}
				url := urlA
				if i%2 == 1 {
					url = urlB
				}
				r := c.post(url, "key-"+org, smallBody, "X-Org", org)
				mu.Lock()
				status[r.status]++
				mu.Unlock()
				if r.status != 200 {
					t.Errorf("%s: %v, want 200 (on_store_error local)", org, r)
				}
				sent.Add(1)
			}
		})
	}
	more := func(n int64) {
		t.Helper()
		from := sent.Load()
		wait.Until(t, fmt.Sprintf("%d more requests", n), func() bool { return sent.Load() >= from+n })
	}
	more(60)

	dead.Stop()
	// Past the node timeout, the cluster counts the master failed (with
	// full coverage, every node answers CLUSTERDOWN from then on).
	liveNode := redis.NewClient(&redis.Options{Addr: cluster.Nodes[0].Addr})
	t.Cleanup(func() { _ = liveNode.Close() })
	wait.Until(t, "the cluster to count the master failed", func() bool {
		nodes, _ := liveNode.ClusterNodes(context.Background()).Result()
		for _, line := range strings.Split(nodes, "\n") {
			if f := strings.Fields(line); len(f) > 2 && strings.HasPrefix(f[1], dead.Addr) && strings.Contains(f[2], "fail") && !strings.Contains(f[2], "fail?") {
				return true
			}
		}
		return false
	})
	waitLog(t, a.Log, "redis lost", 1, wait.Bound)
	waitLog(t, b.Log, "redis lost", 1, wait.Bound)
	for _, m := range metricsURLs {
		if got := metricValue(t, m, "systemone_redis_up"); got != "0" {
			t.Errorf("%s: systemone_redis_up %s during the outage, want 0", m, got)
		}
	}
	more(120)

	dead.Restart()
	waitLog(t, a.Log, "redis back", 1, wait.Bound)
	waitLog(t, b.Log, "redis back", 1, wait.Bound)
	more(120)
	stopped()

	// Every billed yuan in Redis: the budget's spent total of each org is
	// what the upstream billed it (at 1 yuan a million tokens, a token is
	// 1,000 nano-yuan).
	period := time.Now().UTC().Format("2006-01")
	for _, org := range orgs {
		key := "systemone:{" + org + "}:budget:" + period
		var got int64
		wait.Until(t, org+"'s spend in Redis", func() bool {
			v, err := direct.HGet(context.Background(), key, "s").Int64()
			got = v
			return err == nil && v == acct.billed(org)*1000
		})
		t.Logf("%s: %d nano-yuan in Redis, %d billed", org, got, acct.billed(org)*1000)
	}
	if got := metricValue(t, metricsURLs[0], lostSeries); got != lostBefore {
		t.Errorf("in-process gateway: %s %s, was %s: want none lost", lostSeries, got, lostBefore)
	}
	if got := metricValue(t, metricsURLs[0], droppedSeries); got != droppedBefore {
		t.Errorf("in-process gateway: %s %s, was %s: want none dropped", droppedSeries, got, droppedBefore)
	}
	for _, series := range []string{lostSeries, droppedSeries} {
		if got := metricValue(t, metricsURLs[1], series); got != "0" {
			t.Errorf("child gateway: %s %s, want 0", series, got)
		}
	}
	for name, log := range map[string]func() []map[string]any{"in-process": a.Log, "child": b.Log} {
		if lost, back := countLog(log(), "redis lost"), countLog(log(), "redis back"); lost != 1 || back != 1 {
			t.Errorf("%s gateway: %d `redis lost` and %d `redis back` entries, want one each", name, lost, back)
		}
	}
	for _, m := range metricsURLs {
		if got := metricValue(t, m, "systemone_redis_up"); got != "1" {
			t.Errorf("%s: systemone_redis_up %s after the outage, want 1", m, got)
		}
	}
	t.Logf("%d requests: %v", sent.Load(), status)
}
