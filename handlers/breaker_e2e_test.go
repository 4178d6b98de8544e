package handlers_test

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/simulator"
)

const breakerBlock = "\t\tbreaker {\n\t\t\tfailures 3\n\t\t\topen_for 1m\n\t\t}\n\t\tlimits\n"

func modelBody(model string) string {
	return `{"model":"` + model + `","state":"s","questions":{"q":{"type":"noul","instructions":"x"}}}`
}

// A run of 529s opens the model's breaker: then the gateway answers 529
// itself, at once, and the upstream sees nothing more.
func TestBreakerOpensOnOverload(t *testing.T) {
	sim := newSimulator(t, simulator.Handler{})
	sites, url := site(t, sim.Addr(), breakerBlock)
	g := gatewaytest.Load(t, sites)

	for i := 0; i < 3; i++ {
		resp, body := post(t, url, "k", modelBody("service-1.0.0"), "X-Simulator-Overloaded", "1")
		if resp.StatusCode != 529 || resp.Header.Get("X-Gateway-Reject") != "" {
			t.Fatalf("call %d: %d %q %s, want the upstream's own 529", i, resp.StatusCode, resp.Header.Get("X-Gateway-Reject"), body)
		}
	}
	if n := sim.Calls(); n != 3 {
		t.Fatalf("%d upstream calls before the breaker opened, want 3", n)
	}
	// The open breaker's answers carry the rate-limit headers of their
	// admission: each counts one request (and no tokens), so the remaining
	// count drops by one each, less what refilled meanwhile (5 a second).
	firstRemaining := -1
	started := time.Now()
	for i := 0; i < 20; i++ {
		resp, body := post(t, url, "k", modelBody("service-1.0.0"))
		if resp.StatusCode != 529 || resp.Header.Get("X-Gateway-Reject") != "breaker_open" || string(body) != `{"detail":"overloaded"}` {
			t.Fatalf("open breaker answered %d %q %s", resp.StatusCode, resp.Header.Get("X-Gateway-Reject"), body)
		}
		// The seconds until half-open: 60 at first, counting down as the
		// test runs (slowly, on a loaded machine).
		if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra < 50 || ra > 60 {
			t.Errorf("retry-after %d, want the seconds until half-open (60, counting down)", ra)
		}
		remaining, err := strconv.Atoi(resp.Header.Get("X-RateLimit-Remaining-Requests"))
		if err != nil {
			t.Fatalf("remaining requests %q", resp.Header.Get("X-RateLimit-Remaining-Requests"))
		}
		if firstRemaining < 0 {
			firstRemaining = remaining
		}
		if refilled := int(time.Since(started).Seconds()*5) + 1; remaining > firstRemaining-i+refilled || remaining < firstRemaining-i {
			t.Errorf("answer %d: %d requests remaining, want %d counted from %d (plus at most %d refilled)", i, remaining, i, firstRemaining, refilled)
		}
	}
	if n := sim.Calls(); n != 3 {
		t.Errorf("%d upstream calls, want none while open", n-3)
	}
	// Another model has a breaker of its own.
	if resp, body := post(t, url, "k", modelBody("service-latest")); resp.StatusCode != 200 {
		t.Errorf("another model: %d %s", resp.StatusCode, body)
	}

	var opened, rejectedLogged int
	for _, e := range g.Log() {
		if e["msg"] == "circuit breaker opened" && e["level"] == "warn" && e["model"] == "service-1.0.0" {
			opened++
		}
		if e["msg"] == "systemone request" && e["reject"] == "breaker_open" && e["breaker_state"] == "open" {
			rejectedLogged++
		}
	}
	if opened != 1 || rejectedLogged != 20 {
		t.Errorf("%d open warnings (want 1), %d rejections logged with breaker_state open (want 20)", opened, rejectedLogged)
	}

	// A reload with the same breaker settings keeps the open breaker open.
	g.Reload(sites)
	resp, _ := post(t, url, "k", modelBody("service-1.0.0"))
	if resp.StatusCode != 529 || resp.Header.Get("X-Gateway-Reject") != "breaker_open" {
		t.Errorf("after a reload: %d %q, want the breaker still open", resp.StatusCode, resp.Header.Get("X-Gateway-Reject"))
	}
	if n := sim.Calls(); n != 4 {
		t.Errorf("%d upstream calls after the reload, want 4", n)
	}
}

// The upstream's 429s (an org's quota) and clients going away are not
// overloads.
func TestBreakerIgnoresQuotaAndCancellation(t *testing.T) {
	var mu sync.Mutex
	mode := "429"
	up := gatewaytest.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		m := mode
		mu.Unlock()
		switch m {
		case "429":
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(429)
			_, _ = w.Write([]byte(`{"detail":"Rate limit exceeded"}`))
		case "hang":
			<-r.Context().Done()
		}
	}))
	sites, url := site(t, up.Addr(), "\t\tbreaker {\n\t\t\tfailures 2\n\t\t}\n")
	gatewaytest.Load(t, sites)

	for i := 0; i < 10; i++ {
		if resp, _ := post(t, url, "k", modelBody("m")); resp.StatusCode != 429 || resp.Header.Get("X-Gateway-Reject") != "" {
			t.Fatalf("429 storm: %d %q", resp.StatusCode, resp.Header.Get("X-Gateway-Reject"))
		}
	}
	mu.Lock()
	mode = "hang"
	mu.Unlock()
	for i := 0; i < 4; i++ {
		// The client gives up once its request is at the upstream (a
		// fixed timeout could give up before, on a loaded machine).
		abandon(t, url, "k", modelBody("m"), func() bool { return up.Calls() == int64(11+i) })
	}
	if n := up.Calls(); n != 14 {
		t.Fatalf("%d upstream calls, want 14 (nothing refused by the breaker)", n)
	}
	mu.Lock()
	mode = "429"
	mu.Unlock()
	resp, _ := post(t, url, "k", modelBody("m"))
	if resp.StatusCode != 429 || resp.Header.Get("X-Gateway-Reject") == "breaker_open" {
		t.Errorf("after 429s and cancellations: %d %q, want the upstream's 429", resp.StatusCode, resp.Header.Get("X-Gateway-Reject"))
	}
}

// Model names are the client's: names the upstream answers 404 and requests
// the limiter refuses create no breaker and no metric series, so a real
// version that fails afterwards still gets its breaker.
func TestBreakerJunkModelsTakeNoSlot(t *testing.T) {
	sim := newSimulator(t, simulator.Handler{})
	gw, url := site(t, sim.Addr(), "\t\tbreaker {\n\t\t\tfailures 3\n\t\t\topen_for 1m\n\t\t}\n\t\tlimits {\n\t\t\trequests_per_minute 100\n\t\t}\n")
	metricsPort := gatewaytest.FreePort(t)
	gatewaytest.Load(t, gw+fmt.Sprintf(":%d {\n\tmetrics\n}\n", metricsPort))

	statuses := map[int]int{}
	for i := 0; i < 300; i++ {
		model := fmt.Sprintf("junk-e2e-%d", i)
		resp, _ := post(t, url, "junk-key", modelBody(model))
		statuses[resp.StatusCode]++
		post(t, url, "", modelBody(model)) // unauthenticated: 401
	}
	if statuses[404] == 0 || statuses[429] == 0 || statuses[404]+statuses[429] != 300 {
		t.Fatalf("junk answers %v, want 404s then 429s", statuses)
	}
	for i := 0; i < 3; i++ {
		post(t, url, "real-key", modelBody("service-9.9.9"), "X-Simulator-Overloaded", "1")
	}
	if resp, _ := post(t, url, "real-key", modelBody("service-9.9.9")); resp.StatusCode != 529 || resp.Header.Get("X-Gateway-Reject") != "breaker_open" {
		t.Errorf("after 3 overloads: %d %q, want the breaker open", resp.StatusCode, resp.Header.Get("X-Gateway-Reject"))
	}

	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(raw), `systemone_breaker_state{model="service-9.9.9"} 2`) {
		t.Errorf("metrics lack systemone_breaker_state{model=\"service-9.9.9\"} 2")
	}
	if strings.Contains(string(raw), "junk-e2e-") {
		t.Errorf("metrics hold a series for a junk model")
	}
}
