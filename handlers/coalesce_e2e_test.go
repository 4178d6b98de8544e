package handlers_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
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

// hungTimeout is the response_header_timeout of the hung upstream's
// reverse_proxy: the leader's 504 comes after it, and so must its waiters'.
const hungTimeout = 3 * time.Second

// gatedUpstream answers the requests marked X-Test-Gate as its mode says,
// counting them: "slow" answers a complete 200 once released, "failing" a
// 503 of its own once released, "hung" never answers (the gateway's
// response_header_timeout ends the call). Unmarked requests get a 200 at
// once.
type gatedUpstream struct {
	*gatewaytest.Upstream
	mode    string
	gated   atomic.Int64
	release chan struct{}
	once    sync.Once
}

func newGatedUpstream(t *testing.T, mode string) *gatedUpstream {
	u := &gatedUpstream{mode: mode, release: make(chan struct{})}
	u.Upstream = gatewaytest.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("X-Test-Gate") != "" {
			n := u.gated.Add(1)
			select {
			case <-u.release:
			case <-r.Context().Done():
				return
			}
			if mode == "failing" {
				w.Header().Set("X-Request-Id", fmt.Sprintf("failed-%d", n))
				w.Header().Set("Retry-After", "7")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, `{"detail":"the judge is overloaded, retry"}`)
				return
			}
		}
		w.Header().Set("X-Request-Id", fmt.Sprintf("req-%d", time.Now().UnixNano()))
		_, _ = io.WriteString(w, `{"model":"service-1.0.0","answers":{"q":{"type":"noul","noul":0.97}},"usage":{"input_tokens":12}}`)
	}))
	t.Cleanup(u.letGo) // before the upstream closes
	return u
}

// letGo releases the gated calls (a hung upstream's stay hung).
func (u *gatedUpstream) letGo() {
	if u.mode != "hung" {
		u.once.Do(func() { close(u.release) })
	}
}

// proxyTo is the reverse_proxy of a site to the upstream: with a
// response_header_timeout for the hung one.
func (u *gatedUpstream) proxyTo() string {
	if u.mode != "hung" {
		return u.Addr()
	}
	return fmt.Sprintf("%s {\n\t\ttransport http {\n\t\t\tresponse_header_timeout %v\n\t\t}\n\t}", u.Addr(), hungTimeout)
}

// gatedResult is one request's answer, and how long it took.
type gatedResult struct {
	status                  int
	cache, reject, id, body string
	took                    time.Duration
}

func askGated(t *testing.T, url, key, body string) gatedResult {
	start := time.Now()
	resp, b := post(t, url, key, body, "X-Test-Gate", "1")
	return gatedResult{resp.StatusCode, resp.Header.Get("X-Cache"), resp.Header.Get("X-Gateway-Reject"),
		resp.Header.Get("X-Request-Id"), string(b), time.Since(start)}
}

// checkCoalesced checks the answers of identical requests whose first led
// the others: one upstream call between them, and each waiter answered
// what the leader was, when the leader was.
func checkCoalesced(t *testing.T, u *gatedUpstream, results []gatedResult) {
	t.Helper()
	if n := u.gated.Load(); n != 1 {
		t.Errorf("%d upstream calls for %d identical requests, want 1", n, len(results))
	}
	leader := results[0]
	for i, r := range results {
		var ok bool
		switch u.mode {
		case "slow":
			want := "hit"
			if i == 0 {
				want = "miss"
			}
			ok = r.status == 200 && r.cache == want && r.body == leader.body && r.id == leader.id
		case "failing":
			ok = r.status == 503 && r.cache == "miss" && r.reject == "" && r.body == `{"detail":"the judge is overloaded, retry"}` && r.id == leader.id
		case "hung":
			// The leader's 504, when the leader got it: never the
			// leader's wait and then one of its own.
			ok = r.status == 504 && r.cache == "miss" && r.reject == "upstream_error" && r.body == `{"detail":"upstream_timeout"}` &&
				r.took < hungTimeout+hungTimeout/2
		}
		if !ok {
			t.Errorf("request %d: %d X-Cache %q reject %q id %q (leader's %q) after %v: %s", i, r.status, r.cache, r.reject, r.id, leader.id, r.took, r.body)
		}
	}
}

// Identical misses ask the upstream once, whatever the upstream does and
// wherever the cache lives: a slow upstream's 200 is every waiter's hit, a
// failing upstream's 503 every waiter's answer, a hung upstream's 504
// every waiter's, when the leader's comes. With Redis resting, nothing is
// known of any key, and the waiters with the leader's own key still take
// its answer.
func TestCacheCoalescesAgainstTheUpstream(t *testing.T) {
	rs := redistest.Start(t)
	for _, store := range []string{"in process", "redis", "redis resting"} {
		for _, mode := range []string{"slow", "failing", "hung"} {
			t.Run(store+"/"+mode, func(t *testing.T) {
				u := newGatedUpstream(t, mode)
				block := "\t\tcache\n\t\tlimits {\n\t\t\trequests_per_minute 1000\n\t\t}\n"
				var resting *redistest.Server
				switch store {
				case "redis":
					block = "\t\tredis " + rs.URL() + "\n" + block
				case "redis resting":
					resting = redistest.Start(t)
					block = "\t\tredis " + resting.URL() + "\n" + block
				}
				sites, url := site(t, u.proxyTo(), block)
				metricsPort := gatewaytest.FreePort(t)
				g := gatewaytest.Load(t, sites+fmt.Sprintf(":%d {\n\tmetrics\n}\n", metricsPort))
				metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
				if resting != nil {
					resting.Stop()
					wait.Until(t, "the answer cache resting Redis", func() bool {
						post(t, url, "acme-key", versionBody(fmt.Sprintf("rest %d", time.Now().UnixNano())))
						return strings.Contains(string(g.RawLog()), "answer cache: redis failing")
					})
				}

				body := versionBody("32 at once: " + store + ", " + mode)
				results := make([]gatedResult, 32)
				var wg sync.WaitGroup
				wg.Go(func() { results[0] = askGated(t, url, "acme-key", body) })
				wait.Until(t, "the first request at the upstream", func() bool { return u.gated.Load() == 1 })
				for i := 1; i < len(results); i++ {
					wg.Go(func() { results[i] = askGated(t, url, "acme-key", body) })
				}
				wait.Until(t, "31 requests waiting", func() bool { return metricValue(t, metricsURL, "systemone_cache_waiting") == "31" })
				u.letGo()
				wg.Wait()
				checkCoalesced(t, u, results)
			})
		}
	}
}

// Identical misses at two instances sharing Redis ask the upstream once:
// the leader's marker makes the other instance's requests wait for its
// stored answer, or its failure.
func TestCacheCoalescesAcrossInstances(t *testing.T) {
	rs := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { _ = client.Close() })
	for _, mode := range []string{"slow", "failing", "hung"} {
		t.Run(mode, func(t *testing.T) {
			u := newGatedUpstream(t, mode)
			prefix := "coalesce-" + mode + ":"
			block := "\t\tredis " + rs.URL() + "\n\t\tkey_prefix " + prefix + "\n\t\tcache\n\t\tlimits {\n\t\t\trequests_per_minute 1000\n\t\t}\n"
			sitesA, urlA := site(t, u.proxyTo(), block)
			sitesB, urlB := site(t, u.proxyTo(), block)
			portA, portB := gatewaytest.FreePort(t), gatewaytest.FreePort(t)
			gatewaytest.Load(t, sitesA+fmt.Sprintf(":%d {\n\tmetrics\n}\n", portA))
			gatewaytest.StartProcess(t, sitesB+fmt.Sprintf(":%d {\n\tmetrics\n}\n", portB))
			metricsA := fmt.Sprintf("http://127.0.0.1:%d/metrics", portA)
			metricsB := fmt.Sprintf("http://127.0.0.1:%d/metrics", portB)

			// The key is accepted on another body, so that B knows it;
			// B's own request dials its Redis connections first.
			for _, url := range []string{urlA, urlB} {
				if resp, _ := post(t, url, "acme-key", versionBody("accept the key at "+url)); resp.StatusCode != 200 {
					t.Fatal(resp.Status)
				}
			}
			body := versionBody("32 at two instances: " + mode)
			results := make([]gatedResult, 32)
			var wg sync.WaitGroup
			wg.Go(func() { results[0] = askGated(t, urlA, "acme-key", body) })
			wait.Until(t, "the leader's marker in Redis", func() bool {
				keys, _ := client.Keys(context.Background(), prefix+"cache:run:*").Result()
				return len(keys) == 1
			})
			for i := 1; i < len(results); i++ {
				url := urlA
				if i%2 == 0 {
					url = urlB
				}
				wg.Go(func() { results[i] = askGated(t, url, "acme-key", body) })
			}
			var atA, atB string
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("waiting at A %s, at B %s; upstream calls %d", atA, atB, u.gated.Load())
				}
			})
			wait.Until(t, "16 requests waiting at A and 15 at B", func() bool {
				atA, atB = metricValue(t, metricsA, "systemone_cache_waiting"), metricValue(t, metricsB, "systemone_cache_waiting")
				return atA == "16" && atB == "15"
			})
			u.letGo()
			wg.Wait()
			checkCoalesced(t, u, results)
			// The marker goes with the flight (a failure's stays a moment,
			// for the waiters that have not yet polled).
			if mode != "failing" {
				wait.Until(t, "the marker gone", func() bool {
					keys, _ := client.Keys(context.Background(), prefix+"cache:run:*").Result()
					return len(keys) == 0
				})
			}
		})
	}
}

// A leader whose key the upstream refuses gives its waiters nothing: they
// ask the upstream themselves, at once; and a key the cache never saw
// accepted does not wait for another key's answer.
func TestCacheWaiterWithAnUnknownKeyAsksItself(t *testing.T) {
	u := newGatedUpstream(t, "slow")
	sites, url := site(t, u.proxyTo(), "\t\tcache\n\t\tlimits {\n\t\t\trequests_per_minute 1000\n\t\t}\n")
	metricsPort := gatewaytest.FreePort(t)
	gatewaytest.Load(t, sites+fmt.Sprintf(":%d {\n\tmetrics\n}\n", metricsPort))
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	body := versionBody("two keys")
	var wg sync.WaitGroup
	var leader, stranger gatedResult
	wg.Go(func() { leader = askGated(t, url, "first-key", body) })
	wait.Until(t, "the first request at the upstream", func() bool { return u.gated.Load() == 1 })
	wg.Go(func() { stranger = askGated(t, url, "second-key", body) })
	wait.Until(t, "the second key's own call", func() bool { return u.gated.Load() == 2 })
	if v := metricValue(t, metricsURL, "systemone_cache_waiting"); v != "0" {
		t.Errorf("systemone_cache_waiting %s: a key never accepted waited", v)
	}
	u.letGo()
	wg.Wait()
	if leader.status != 200 || stranger.status != 200 || stranger.cache != "miss" || bytes.Equal([]byte(stranger.id), []byte(leader.id)) {
		t.Errorf("leader %+v, second key %+v", leader, stranger)
	}
}
