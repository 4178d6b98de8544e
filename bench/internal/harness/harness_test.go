package harness

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	r := Result{Latencies: []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}
	for q, want := range map[float64]time.Duration{0.5: 5, 0.9: 9, 0.99: 10, 0: 1, 1: 10} {
		if got := r.Percentile(q); got != want {
			t.Errorf("Percentile(%v) = %v, want %v", q, got, want)
		}
	}
	if (Result{}).Percentile(0.5) != 0 || (Result{}).Throughput() != 0 {
		t.Error("an empty result reports latency or throughput")
	}
}

func TestMonitorArgs(t *testing.T) {
	got := monitorArgs(`"EVALSHA" "ab12" "2" "p{org\"x}:b" "p{org}:h" ""`)
	want := []string{"EVALSHA", "ab12", "2", `p{org\"x}:b`, "p{org}:h", ""}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("monitorArgs = %q, want %q", got, want)
	}
	if got := monitorArgs(`"unterminated`); !reflect.DeepEqual(got, []string{"unterminated"}) {
		t.Errorf("monitorArgs of a broken line = %q", got)
	}
}

func TestCallsDelta(t *testing.T) {
	got := CallsDelta(map[string]int64{"evalsha": 10, "info": 3, "get": 5}, map[string]int64{"evalsha": 15, "info": 4, "get": 5, "set": 2})
	if want := map[string]int64{"evalsha": 5, "set": 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("CallsDelta = %v, want %v", got, want)
	}
}

func TestHeaderCheck(t *testing.T) {
	gateway := http.Header{
		"X-Route": {"auto"}, "X-Route-Model": {"service-1.0.0"}, "X-Ratelimit-Limit-Requests": {"10000000"},
	}
	hit := gateway.Clone()
	hit.Set("X-Cache", "hit")
	miss := gateway.Clone()
	miss.Set("X-Cache", "miss")
	withGuardrails := gateway.Clone()
	withGuardrails.Set("X-Guardrails-Action", "pass")
	withGuardrails.Set("X-Guardrails-Risk", "none")
	withBudget := gateway.Clone()
	withBudget.Set("X-Budget-Limit", "1000000.00")
	withBudget.Set("X-Budget-Remaining", "999999.99")
	everything := withBudget.Clone()
	everything.Set("X-Guardrails-Action", "pass")
	everything.Set("X-Guardrails-Risk", "none")
	everythingMissed := everything.Clone()
	everythingMissed.Set("X-Cache", "miss")
	everythingHit := everything.Clone()
	everythingHit.Set("X-Cache", "hit")
	budgetUnknown := everythingMissed.Clone()
	budgetUnknown.Del("X-Budget-Remaining")
	for _, tc := range []struct {
		config string
		h      http.Header
		ok     bool
	}{
		{Plain, http.Header{}, true},
		{Plain, gateway, false}, // P must not pass through the gateway
		{Limits, gateway, true},
		{Limits, http.Header{}, false},
		{Limits, withGuardrails, false},
		{Guardrails, withGuardrails, true},
		{GuardrailsCached, gateway, false},
		{Cached, gateway, false}, // no X-Cache: not the cache's answer
		{Cached, hit, true},
		{Cached, miss, true}, // counted
		{Limits, hit, false},
		{LimitsBudget, withBudget, true},
		{LimitsBudget, gateway, false}, // the budget not checked
		{Limits, withBudget, false},
		{Everything, everythingMissed, true},
		{Everything, everythingHit, false}, // the alias's answers are never stored
		{Everything, everything, false},    // the cache not asked
		{Everything, budgetUnknown, false},
		{Everything, withGuardrails, false},
		{LimitsUnbuffered, gateway, true},
		{LimitsLocalUnbuffered, http.Header{}, false},
		{Nginx, http.Header{}, true},
		{NginxLimits, gateway, false},
	} {
		if err := HeaderCheck(tc.config)(tc.h); (err == nil) != tc.ok {
			t.Errorf("%s with %v: error %v, want ok %v", tc.config, tc.h, err, tc.ok)
		}
	}
}

// TestDriver: both loops send the requests in turn, check every answer,
// and stop at the first one that is not the upstream's.
func TestDriver(t *testing.T) {
	var calls, wrongAfter atomic.Int64
	wrongAfter.Store(1 << 40)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if r.Header.Get("Authorization") != "Bearer k" || r.Method != http.MethodPost {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if n > wrongAfter.Load() {
			_, _ = w.Write([]byte("other"))
			return
		}
		_, _ = w.Write([]byte("answer"))
	}))
	defer srv.Close()
	d := NewDriver(4)
	defer d.Close()
	reqs := []Request{{URL: srv.URL, Key: "k", Body: []byte("{}"), Want: []byte("answer")}}
	ctx := context.Background()

	res := d.Closed(ctx, reqs, 4, 100*time.Millisecond)
	if res.Err != nil || res.Requests == 0 || len(res.Latencies) != res.Requests {
		t.Fatalf("closed loop: %d requests, %d latencies, error %v", res.Requests, len(res.Latencies), res.Err)
	}
	res = d.Open(ctx, reqs, 200, 100*time.Millisecond, 4)
	if res.Err != nil || res.Requests != 20 {
		t.Fatalf("open loop at 200/s for 100ms: %d requests, error %v", res.Requests, res.Err)
	}

	wrongAfter.Store(calls.Load() + 5)
	res = d.Closed(ctx, reqs, 2, 10*time.Second)
	if res.Err == nil || !strings.Contains(res.Err.Error(), "not the upstream's") {
		t.Fatalf("a wrong answer gave error %v", res.Err)
	}
	reqs[0].Key = "other"
	if _, err := d.Answer(ctx, reqs[0]); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("a 400 gave error %v", err)
	}
}
