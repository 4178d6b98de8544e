package handlers_test

import (
	"fmt"
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
// no request fails (each is a 200 or a contract answer such as 429);
// requests counted before a reload still count after it; an open breaker
// stays open; the new limit and threshold apply from the next response.
// For buckets in process and in Redis.
//
// A reload shuts the old servers down, which closes their idle keep-alive
// connections (Go's http.Server does, as nginx does on reload): a client
// that sends on one at that instant sees the connection close before any
// answer. The clients here mark their evaluations idempotent (they are:
// the same body gets the same answer) with an Idempotency-Key, so that Go's
// transport sends such a request again on a new connection, as clients
// that retry connection errors do; see the README's Reliability section.
func TestReloadUnderLoad(t *testing.T) {
	for _, store := range []string{"in-process", "redis"} {
		t.Run(store, func(t *testing.T) {
			sim := unlimitedSimulator(t)
			port := gatewaytest.FreePort(t)
			url := fmt.Sprintf("http://127.0.0.1:%d", port)
			redisLine := ""
			if store == "redis" {
				redisLine = "\t\t\tredis " + redistest.Start(t).URL() + "\n\t\t\tstore_timeout 2s\n"
			}
			config := func(rpm int, noul string) string {
				return fmt.Sprintf(`:%d {
	systemone {
		limits {
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
`, port, redisLine, rpm, noul, sim.Addr())
			}
			// A: 60 a minute, noul 0.9. B: 90 a minute, noul 0.5.
			configA, configB := config(60, "0.9"), config(90, "0.5")
			g := gatewaytest.Load(t, configA)
			c := newClient(t)
			// The simulator answers noul 0.8 here: confidence 0.6, below
			// A's threshold and above B's.
			var n atomic.Int64
			idempotent := func(header ...string) []string {
				return append(header, "Idempotency-Key", fmt.Sprintf("%s-%d", store, n.Add(1)))
			}
			routeOf := func() string {
				r := c.post(url, "threshold-"+store, smallBody, idempotent("X-Simulator-Confidence", `{"late":0.8}`)...)
				if r.status != 200 {
					t.Fatalf("threshold probe: %v", r)
				}
				return r.header.Get("X-Route") + " " + r.header.Get("X-Route-Reason")
			}

			// Background load through every reload: 8 clients, each its
			// own org, as fast as they can.
			stop := make(chan struct{})
			var sent, failed atomic.Int64
			var failures sync.Map
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
						r := c.post(url, fmt.Sprintf("load-%s-%d", store, w), smallBody, idempotent()...)
						sent.Add(1)
						if r.status != 200 && contractAnswer(r, "rate_limited") != nil {
							failed.Add(1)
							failures.Store(r.String(), true)
						}
					}
				}()
			}

			// Before any reload: 30 requests counted for one org, a breaker
			// opened, and A's threshold routes 0.6 to a human.
			counted := "counted-" + store
			for i := 0; i < 30; i++ {
				if r := c.post(url, counted, smallBody, idempotent()...); r.status != 200 {
					t.Fatalf("counted request %d: %v", i, r)
				}
			}
			countedAt := time.Now()
			broken := `{"model":"service-0.0.1","state":"s","questions":{"q":{"type":"noul","instructions":"x"}}}`
			for i := 0; i < 2; i++ {
				c.post(url, "breaker-"+store, broken, idempotent("X-Simulator-Overloaded", "1")...)
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
				r := c.post(url, counted, smallBody, idempotent()...)
				remaining, err := strconv.Atoi(r.header.Get("X-RateLimit-Remaining-Requests"))
				refill := int(time.Since(countedAt).Seconds()*float64(rpm)/60) + 1
				if r.status != 200 || r.header.Get("X-RateLimit-Limit-Requests") != strconv.Itoa(rpm) || err != nil || remaining > rpm-31-i+refill {
					t.Errorf("reload %d: %v limit %q remaining %q, want limit %d and at most %d remaining",
						i+1, r, r.header.Get("X-RateLimit-Limit-Requests"), r.header.Get("X-RateLimit-Remaining-Requests"), rpm, rpm-31-i+refill)
				}
				// The open breaker stays open.
				if r := c.post(url, "breaker-"+store, broken, idempotent()...); contractAnswer(r, "breaker_open") != nil {
					t.Errorf("reload %d: %v, want the breaker still open", i+1, r)
				}
			}
			close(stop)
			wg.Wait()

			if n := failed.Load(); n > 0 {
				failures.Range(func(k, _ any) bool { t.Log(k); return true })
				t.Errorf("%d of %d requests under load failed across 3 reloads", n, sent.Load())
			}
			if sent.Load() < 100 {
				t.Errorf("only %d requests ran under load", sent.Load())
			}
			if n := countLog(g.Log(), "circuit breaker opened"); n != 1 {
				t.Errorf("%d \"circuit breaker opened\" entries, want 1: reloads neither close nor reopen it", n)
			}
			t.Logf("%d requests under load across 3 reloads", sent.Load())
		})
	}
}
