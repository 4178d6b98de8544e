package handlers_test

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/simulator"
)

// The gateway's overhead (the overhead_ms log field and the
// systemone_gateway_overhead_seconds histogram) is its time less what it
// waited for the upstream and the guardrails service: with an upstream that
// takes at least 60 ms and a guardrails service at least 120 ms, the
// overhead is at most the total less 180 ms in sequential mode, where the
// waits add up, and less 120 ms in parallel mode, where the answer waits
// for the verdict.
func TestOverheadLeavesOutTheWaits(t *testing.T) {
	const wait = 60 * time.Millisecond
	for _, mode := range []string{"sequential", "parallel"} {
		t.Run(mode, func(t *testing.T) {
			eval := newSimulator(t, simulator.Handler{RequestsPerMinute: int64p(0), TokensPerSecond: int64p(0), Latency: caddy.Duration(wait)})
			guard := newSimulator(t, simulator.Handler{})
			target, _ := url.Parse(guard.URL)
			proxy := httputil.NewSingleHostReverseProxy(target)
			slowGuard := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				time.Sleep(2 * wait)
				proxy.ServeHTTP(w, r)
			}))
			t.Cleanup(slowGuard.Close)
			sites, gatewayURL := site(t, eval.Addr(), guardrailsBlock(slowGuard.URL, "\t\t\tmode "+mode+"\n")+routeBlock)
			metricsPort := gatewaytest.FreePort(t)
			g := gatewaytest.Load(t, sites+fmt.Sprintf(":%d {\n\tmetrics\n}\n", metricsPort))
			metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
			countBefore, _ := strconv.Atoi(metricValue(t, metricsURL, "systemone_gateway_overhead_seconds_count"))
			sumBefore, _ := strconv.ParseFloat(metricValue(t, metricsURL, "systemone_gateway_overhead_seconds_sum"), 64)

			if resp, body := post(t, gatewayURL, "k", stateBody("我们公司的退货政策是什么？")); resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			entries := g.Entries()
			e := entries[len(entries)-1]
			total, overhead := e["total_ms"].(float64), e["overhead_ms"].(float64)
			waited := 3 * wait
			if mode == "parallel" {
				waited = 2 * wait
			}
			if overhead < 0 || overhead > total-float64(waited.Milliseconds()) {
				t.Errorf("overhead_ms %v of total_ms %v: the waits (at least %v) are not all left out", overhead, total, waited)
			}
			if count, _ := strconv.Atoi(metricValue(t, metricsURL, "systemone_gateway_overhead_seconds_count")); count != countBefore+1 {
				t.Errorf("overhead histogram count %d, want %d", count, countBefore+1)
			}
			sum, _ := strconv.ParseFloat(metricValue(t, metricsURL, "systemone_gateway_overhead_seconds_sum"), 64)
			if observed := (sum - sumBefore) * 1000; math.Abs(observed-overhead) > 0.002 {
				t.Errorf("the histogram observed %v ms, the log says overhead_ms %v", observed, overhead)
			}
		})
	}
}
