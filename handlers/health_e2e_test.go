package handlers_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/handlers"
	"github.com/systemone/systemone-gateway/internal/faultproxy"
	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/wait"
)

// probe asks a readiness endpoint, without a key, as a load balancer does.
func probe(t *testing.T, url string) (int, handlers.Readiness) {
	t.Helper()
	req, err := http.NewRequest("GET", url+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, body := do(t, req)
	var r handlers.Readiness
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("readiness %d: not its JSON body: %v: %s", resp.StatusCode, err, body)
	}
	if resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("readiness headers %v", resp.Header)
	}
	if (resp.StatusCode == 200) != r.Ready || resp.StatusCode != 200 && resp.StatusCode != 503 {
		t.Errorf("readiness answered %d with ready %v", resp.StatusCode, r.Ready)
	}
	return resp.StatusCode, r
}

// readinessSite is a gateway site with `systemone_health /healthz` ahead of
// a systemone block.
func readinessSite(port int, block, upstream string) string {
	return fmt.Sprintf(":%d {\n\tsystemone_health /healthz\n\tsystemone {\n%s\t}\n\treverse_proxy %s\n}\n", port, block, upstream)
}

// The readiness endpoint follows Redis as it goes away and comes back: not
// ready while Redis cannot be reached or the guarantee alarms (on_alarm
// human) have not been read since start, or were not at the latest read;
// ready again once both are; an open breaker is reported and keeps it
// ready.
func TestReadinessFollowsRedis(t *testing.T) {
	rs := redistest.Start(t)
	proxy := faultproxy.Start(t, rs.Addr)
	proxy.Refuse() // Redis away from the start: the alarms were never read
	sim := unlimitedSimulator(t)
	port := gatewaytest.FreePort(t)
	gatewaytest.Load(t, readinessSite(port, fmt.Sprintf(`		redis redis://%s
		breaker {
			failures 1
			open_for 1m
		}
		route {
			pin service-1.0.0 {
				noul 0.5
			}
			queue review:s
			on_alarm human
		}
`, proxy.Addr()), sim.Addr()))
	url := fmt.Sprintf("http://127.0.0.1:%d", port)

	status, r := probe(t, url)
	if status != 503 || !strings.HasPrefix(r.Checks.Redis, "unreachable: ") || !strings.HasPrefix(r.Checks.Alarms, "never read") {
		t.Fatalf("Redis refused since start: %d %+v; want 503 naming Redis unreachable and the alarms never read", status, r)
	}
	if strings.Contains(r.Checks.Redis, "redis://") {
		t.Errorf("the reason holds a Redis URL: %q", r.Checks.Redis)
	}

	proxy.Pass()
	wait.Until(t, "ready once Redis is back and the alarms read", func() bool {
		status, r = probe(t, url)
		return status == 200
	})
	if r.Checks.Redis != "ok" || r.Checks.Alarms != "ok" || len(r.Checks.Breakers) != 0 {
		t.Errorf("ready: %+v", r)
	}

	// An overloaded upstream opens the breaker: reported, still ready.
	if resp, body := post(t, url, "probe-key", smallBody, "X-Simulator-Overloaded", "1"); resp.StatusCode != 529 {
		t.Fatalf("overloaded: %d %s", resp.StatusCode, body)
	}
	if status, r = probe(t, url); status != 200 || r.Checks.Breakers["service-latest"] != "open" {
		t.Errorf("an open breaker: %d %+v; want ready, the breaker listed", status, r)
	}

	// Redis goes away again: unready at once for Redis, and the alarms go
	// stale at their next read.
	proxy.Refuse()
	wait.Until(t, "the alarms' read to fail", func() bool {
		status, r = probe(t, url)
		return strings.HasPrefix(r.Checks.Alarms, "stale")
	})
	if status != 503 || !strings.HasPrefix(r.Checks.Redis, "unreachable: ") || r.Checks.Breakers["service-latest"] != "open" {
		t.Errorf("Redis gone: %d %+v", status, r)
	}
	proxy.Pass()
	wait.Until(t, "ready again", func() bool {
		status, r = probe(t, url)
		return status == 200
	})
	if r.Checks.Redis != "ok" || r.Checks.Alarms != "ok" {
		t.Errorf("ready again: %+v", r)
	}
}

// Without Redis or on_alarm human there is nothing to wait for: ready, the
// checks off. After a reload the endpoint answers for the new config's
// handlers only.
func TestReadinessWithoutSharedState(t *testing.T) {
	sim := unlimitedSimulator(t)
	port := gatewaytest.FreePort(t)
	g := gatewaytest.Load(t, readinessSite(port, "\t\tlimits\n", sim.Addr()))
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	if status, r := probe(t, url); status != 200 || r.Checks.Redis != "off" || r.Checks.Alarms != "off" || r.Checks.Breakers == nil {
		t.Errorf("in process: %d %+v; want ready, redis and alarms off, breakers {}", status, r)
	}
	// The probe never reached systemone: it needs no key, and is counted
	// in no org's bucket.
	if resp, _ := post(t, url, "", smallBody); resp.StatusCode != 401 {
		t.Errorf("an evaluation without a key: %d, want 401", resp.StatusCode)
	}

	rs := redistest.Start(t)
	proxy := faultproxy.Start(t, rs.Addr)
	proxy.Refuse()
	g.Reload(readinessSite(port, fmt.Sprintf("\t\tredis redis://%s\n\t\tlimits\n", proxy.Addr()), sim.Addr()))
	if status, r := probe(t, url); status != 503 || !strings.HasPrefix(r.Checks.Redis, "unreachable: ") || r.Checks.Alarms != "off" {
		t.Errorf("after a reload to a Redis that refuses: %d %+v", status, r)
	}
	proxy.Pass()
	if status, r := probe(t, url); status != 200 || r.Checks.Redis != "ok" {
		t.Errorf("the new config's Redis answers: %d %+v", status, r)
	}
}
