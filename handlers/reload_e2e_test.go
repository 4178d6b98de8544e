package handlers_test

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/redistest"
)

// TestReloadUnderLoad reloads the config, as `caddy reload` does, with
// changed limits and route thresholds while clients keep sending. Expected:
// every request gets a 200 or a contract answer (such as 429), never another
// error; requests counted before a reload still count after it; an open
// breaker stays open; the new limit and threshold apply from the next
// response. For buckets in process and in Redis.
//
// A reload replaces Caddy's servers, and on their way out the old ones drop
// connections that never got a request through: idle keep-alive connections
// (Go's http.Server closes them on shutdown, as nginx does on reload; a
// client that sends on one at that instant sees it close) and connections
// still in the old listening socket's accept queue (Caddy listens with
// SO_REUSEPORT; Linux resets those when the socket closes). Nothing on such a
// connection reached the gateway, so the clients here do what clients that
// retry connection errors do: send the request again (on a fresh connection, at most five times). The
// test checks that the gateway never processed a request whose connection
// failed: the upstream saw exactly the requests whose answers the clients
// got.
func TestReloadUnderLoad(t *testing.T) {
	for _, store := range []string{"in-process", "redis"} {
		t.Run(store, func(t *testing.T) {
			sim := unlimitedSimulator(t)
			port := gatewaytest.FreePort(t)
			url := fmt.Sprintf("http://127.0.0.1:%d", port)
			redisLine, timeoutLine := "", ""
			if store == "redis" {
				redisLine, timeoutLine = "\t\tredis "+redistest.Start(t).URL()+"\n", "\t\t\tstore_timeout 2s\n"
			}
			config := func(rpm int, noul string) string {
				return fmt.Sprintf(`:%d {
	systemone {
%s		limits {
%s			requests_per_minute %d
			tokens_per_second 0
		}
		breaker {
			failures 2
			open_for 1m
		}
		route {
			pin service-1.0.0 {
				noul %s
			}
		}
	}
	reverse_proxy %s
}
`, port, redisLine, timeoutLine, rpm, noul, sim.Addr())
			}
			// A: 60 a minute, noul 0.9. B: 90 a minute, noul 0.5.
			configA, configB := config(60, "0.9"), config(90, "0.5")
			g := gatewaytest.Load(t, configA)
			c := newClient(t)

			var retried, fromUpstream atomic.Int64
			var failures sync.Map
			post := func(key, body string, header ...string) result {
				r := c.post(url, key, body, header...)
				for attempt := 1; r.err != nil && attempt <= 5; attempt++ {
					retried.Add(1)
					// The reload closed the old server's keep-alive
					// connections: retry on a fresh one, not on the next
					// stale connection in the pool.
					c.closeIdle()
					r = c.post(url, key, body, header...)
				}
				switch {
				case r.err != nil || r.status != 200 && r.header.Get("X-Gateway-Reject") == "" && r.status != 529:
					failures.Store(r.String(), true)
				case r.header.Get("X-Gateway-Reject") == "":
					fromUpstream.Add(1) // a 200, or the upstream's 529
				}
				return r
			}
			// The simulator answers noul 0.8 here: confidence 0.6, below
			// A's threshold and above B's.
			routeOf := func() string {
				r := post("threshold-"+store, smallBody, "X-Simulator-Confidence", `{"late":0.8}`)
				if r.status != 200 {
					t.Fatalf("threshold probe: %v", r)
				}
				return r.header.Get("X-Route") + " " + r.header.Get("X-Route-Reason")
			}

			// Background load through every reload: 8 clients, each its
			// own org, as fast as they can.
			stop := make(chan struct{})
			var sent atomic.Int64
			var wg sync.WaitGroup
			for w := 0; w < 8; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						r := post(fmt.Sprintf("load-%s-%d", store, w), smallBody)
						sent.Add(1)
						if r.err == nil && r.status != 200 && contractAnswer(r, "rate_limited") != nil {
							failures.Store(r.String(), true)
						}
					}
				}()
			}

			// Before any reload: 30 requests counted for one org, a breaker
			// opened, and A's threshold routes 0.6 to a human.
			counted := "counted-" + store
			for i := 0; i < 30; i++ {
				if r := post(counted, smallBody); r.status != 200 {
					t.Fatalf("counted request %d: %v", i, r)
				}
			}
			countedAt := time.Now()
			broken := `{"model":"service-0.0.1","state":"s","questions":{"q":{"type":"noul","instructions":"x"}}}`
			for i := 0; i < 2; i++ {
				post("breaker-"+store, broken, "X-Simulator-Overloaded", "1")
			}
			if got := routeOf(); got != "human low_confidence" {
				t.Fatalf("config A routes %q, want human low_confidence", got)
			}

			for i, next := range []string{configB, configA, configB} {
				g.Reload(next)
				rpm, want := 90, "auto confident"
				if next == configA {
					rpm, want = 60, "human low_confidence"
				}
				// The new threshold applies to the next response.
				if got := routeOf(); got != want {
					t.Errorf("reload %d: routes %q, want %q", i+1, got, want)
				}
				// The new limit applies, to the buckets as they were: the 30
				// requests (and one per reload since) still count.
				r := post(counted, smallBody)
				remaining, err := strconv.Atoi(r.header.Get("X-RateLimit-Remaining-Requests"))
				// Refills ran at each config's rate in turn: bound them by
				// the faster one's (90 a minute).
				refill := int(time.Since(countedAt).Seconds()*90/60) + 1
				if r.status != 200 || r.header.Get("X-RateLimit-Limit-Requests") != strconv.Itoa(rpm) || err != nil || remaining > rpm-31-i+refill {
					t.Errorf("reload %d: %v limit %q remaining %q, want limit %d and at most %d remaining",
						i+1, r, r.header.Get("X-RateLimit-Limit-Requests"), r.header.Get("X-RateLimit-Remaining-Requests"), rpm, rpm-31-i+refill)
				}
				// The open breaker stays open.
				if r := post("breaker-"+store, broken); contractAnswer(r, "breaker_open") != nil {
					t.Errorf("reload %d: %v, want the breaker still open", i+1, r)
				}
			}
			close(stop)
			wg.Wait()

			failures.Range(func(k, _ any) bool {
				t.Errorf("failed across the reloads: %v", k)
				return true
			})
			if n := sim.Calls(); n != fromUpstream.Load() {
				t.Errorf("the upstream saw %d requests, the clients got %d answers from it: a request whose connection failed was processed", n, fromUpstream.Load())
			}
			if sent.Load() < 100 {
				t.Errorf("only %d requests ran under load", sent.Load())
			}
			if n := countLog(g.Log(), "circuit breaker opened"); n != 1 {
				t.Errorf("%d \"circuit breaker opened\" entries, want 1: reloads neither close nor reopen it", n)
			}
			t.Logf("%d requests under load across 3 reloads; %d sent again after their connection failed", sent.Load(), retried.Load())
		})
	}
}

// Requests in flight across a reload finish under the config that admitted
// them, with nothing of theirs lost: Caddy cleans up the old config while
// its servers still finish their requests, and the old handler keeps its
// settlement queue, review queue and Redis client until its last request is
// out. Two evaluation calls wait at the upstream while the config is
// reloaded; each then bills 1,000 tokens, 1.00 of a 5.00 budget (their
// admission reserved only their estimate). Expected: the budget ends at
// 3.00 and, with Redis, both answers are in the review stream.
func TestReloadKeepsRequestsInFlight(t *testing.T) {
	for _, store := range []string{"in-process", "redis"} {
		t.Run(store, func(t *testing.T) {
			arrived, release := make(chan struct{}, 2), make(chan struct{})
			up := gatewaytest.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				<-release
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"model":"service-1.0.0","answers":{"late":{"type":"noul","noul":0.9,"confidence":0.8}},"usage":{"input_tokens":1000,"output_tokens":2}}`))
			}))
			port := gatewaytest.FreePort(t)
			url := fmt.Sprintf("http://127.0.0.1:%d", port)
			var rs *redistest.Server
			redisLine, routeBlock := "", ""
			if store == "redis" {
				rs = redistest.Start(t)
				redisLine = "\t\tredis " + rs.URL() + "\n"
				routeBlock = "\t\troute {\n\t\t\tqueue review:inflight\n\t\t\taudit 1\n\t\t}\n"
			}
			config := fmt.Sprintf(":%d {\n\tsystemone {\n%s\t\tlimits {\n\t\t\tbudget 5 per month\n\t\t\tprice 1000\n\t\t}\n%s\t}\n\treverse_proxy %s\n}\n",
				port, redisLine, routeBlock, up.Addr())
			g := gatewaytest.Load(t, config)

			var wg sync.WaitGroup
			statuses := make([]int, 2)
			for i := range statuses {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := &client{tr: &http.Transport{DisableKeepAlives: true}}
					r := c.post(url, "k", smallBody)
					if r.err != nil {
						t.Errorf("request %d: %v", i, r.err)
						return
					}
					statuses[i] = r.status
				}()
			}
			<-arrived
			<-arrived
			g.Reload(config) // returns once the old config is cleaned up
			close(release)
			wg.Wait()
			if statuses[0] != 200 || statuses[1] != 200 {
				t.Fatalf("statuses %v, want two 200s", statuses)
			}
			waitRemaining(t, url, "k", "3.00")
			if rs == nil {
				return
			}
			waitFor(t, func() bool {
				n, err := rs.Do("XLEN", "review:inflight")
				return err == nil && n == ":2"
			}, 10*time.Second)
		})
	}
}
