package handlers_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/faultproxy"
	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/redistest"
	"github.com/systemone/systemone-gateway/internal/wait"
	"github.com/systemone/systemone-gateway/simulator"
)

// The fault matrix. Each subtest is one row: its name states the fault,
// its assertions the behaviour a client sees and the bound it stays within.
// Faults are made with real processes on loopback: redis-server, HTTP
// servers, and internal/faultproxy between them and the gateway. Bounds on
// time are generous upper bounds; after each fault clears, goroutines and
// live heap must return to their baseline (see harness_e2e_test.go).

// TestFaultsRedis: Redis refused, black-holed, slowed, restarted and
// script-flushed, under each on_store_error mode. One config serves three
// sites, one per mode, each with a limiter of its own on one Redis behind a
// fault proxy. requests_per_minute is 3, so an org that spent its 3 requests
// in Redis is refused by Redis (429) and admitted (200) by a fresh
// in-process bucket: which store answered shows in the status.
//
// Expected, when the fault makes Redis unusable: local admits against
// in-process buckets (200 with X-RateLimit-Remaining-*), allow admits (200,
// remaining unknown so not sent), deny answers 503 rate_limiter_unavailable
// with retry-after 1. Latency under store_timeout and SCRIPT FLUSH are
// invisible. Bound: no request waits longer than store_timeout + 1s; each
// limiter logs "redis lost" once and "redis back" once.
func TestFaultsRedis(t *testing.T) {
	const storeTimeout = 300 * time.Millisecond
	const bound = storeTimeout + time.Second
	modes := []string{"local", "allow", "deny"}
	type env struct {
		t     *testing.T
		redis *redistest.Server
		proxy *faultproxy.Proxy
	}
	for _, f := range []struct {
		name   string
		direct bool // the gateway talks to Redis itself, not through the proxy
		breaks bool // Redis cannot admit during the fault
		start  func(env)
		clear  func(env)
	}{
		{name: "refused", breaks: true, start: func(e env) { e.proxy.Refuse() }, clear: func(e env) { e.proxy.Pass() }},
		{name: "black-holed", breaks: true, start: func(e env) { e.proxy.BlackHole() }, clear: func(e env) { e.proxy.Pass() }},
		{name: "slowed by 5ms", start: func(e env) { e.proxy.Latency(0, 5*time.Millisecond) }, clear: func(e env) { e.proxy.Pass() }},
		{name: "slowed by 50ms", start: func(e env) { e.proxy.Latency(0, 50*time.Millisecond) }, clear: func(e env) { e.proxy.Pass() }},
		{name: "slowed by 500ms", breaks: true, start: func(e env) { e.proxy.Latency(0, 500*time.Millisecond) }, clear: func(e env) { e.proxy.Pass() }},
		{name: "restarted", direct: true, breaks: true, start: func(e env) { e.redis.Stop() }, clear: func(e env) { e.redis.Restart() }},
		{name: "SCRIPT FLUSH", direct: true, start: func(e env) {
			if reply, err := e.redis.Do("SCRIPT", "FLUSH"); err != nil || reply != "+OK" {
				e.t.Fatalf("SCRIPT FLUSH: %q %v", reply, err)
			}
		}, clear: func(env) {}},
	} {
		t.Run("redis "+f.name, func(t *testing.T) {
			e := env{t: t, redis: redistest.Start(t)}
			e.proxy = faultproxy.Start(t, e.redis.Addr)
			addr := e.proxy.Addr()
			if f.direct {
				addr = e.redis.Addr
			}
			sim := unlimitedSimulator(t)
			urls := map[string]string{}
			var sites string
			for _, mode := range modes {
				s, url := site(t, sim.Addr(), fmt.Sprintf("\t\tredis redis://%s\n\t\tlimits {\n\t\t\trequests_per_minute 3\n\t\t\tstore_timeout %s\n\t\t\ton_store_error %s\n\t\t}\n", addr, storeTimeout, mode))
				sites += s
				urls[mode] = url
			}
			g := gatewaytest.Load(t, sites)
			c := newClient(t)
			// Every org in this row is new to the process's in-process buckets.
			key := func(mode, what string) string { return "redis-" + f.name + "-" + mode + "-" + what }
			check := func(t *testing.T, phase string, rs []result, want func(result) error) {
				t.Helper()
				for _, r := range rs {
					if r.elapsed > bound {
						t.Errorf("%s: a request took %v, over store_timeout + 1s", phase, r.elapsed)
					}
					if err := want(r); err != nil {
						t.Errorf("%s: %v", phase, err)
					}
				}
			}
			loadAll := func(tag string) map[string][]result {
				out := map[string][]result{}
				for _, mode := range modes {
					out[mode] = c.load(urls[mode], 8, 3, func(w int) string { return key(mode, fmt.Sprintf("%s-%d", tag, w)) }, func(int, int) string { return smallBody })
				}
				return out
			}

			// Healthy: each mode's "spent" org uses its 3 requests in Redis.
			// (A loaded machine may stall one call past store_timeout; it
			// then goes to the fallback, so the loop goes on to a 429.)
			for _, mode := range modes {
				for i := 0; ; i++ {
					r := c.post(urls[mode], key(mode, "spent"), smallBody)
					if contractAnswer(r, "rate_limited") == nil && i >= 3 {
						break
					}
					if r.status != 200 && r.status != 503 || i == 8 {
						t.Fatalf("%s healthy, request %d: %v", mode, i+1, r)
					}
				}
			}
			loadAll("warm")
			c.closeIdle()
			base := takeBaseline(e.proxy)

			f.start(e)
			during := loadAll("fault")
			for _, mode := range modes {
				spent := c.post(urls[mode], key(mode, "spent"), smallBody)
				t.Run("on_store_error "+mode, func(t *testing.T) {
					// The spent org is known to be over its limit until its
					// bucket refills (20s at 3 a minute): this instance
					// refuses it without asking Redis, whatever the fault.
					check(t, "fault", []result{spent}, func(r result) error { return contractAnswer(r, "rate_limited") })
					switch {
					case !f.breaks, mode == "local":
						check(t, "fault", during[mode], okWithRemaining)
					case mode == "allow":
						check(t, "fault", during[mode], okRemainingUnknown)
					case mode == "deny":
						check(t, "fault", during[mode], func(r result) error { return contractAnswer(r, "rate_limiter_unavailable") })
					}
				})
			}
			if f.breaks {
				waitLog(t, g.Log, "redis lost", len(modes), wait.Bound)
			}

			f.clear(e)
			if f.breaks {
				// The probe's backoff is at most a few seconds this early.
				waitLog(t, g.Log, "redis back", len(modes), 15*time.Second)
			}
			after := loadAll("after")
			for _, mode := range modes {
				// Still known to be over its limit: a Redis that restarted
				// without its buckets does not make this instance forget.
				r := c.post(urls[mode], key(mode, "spent"), smallBody)
				check(t, "after", []result{r}, func(r result) error { return contractAnswer(r, "rate_limited") })
				check(t, "after", after[mode], okWithRemaining)
			}
			if lost, back := countLog(g.Log(), "redis lost"), countLog(g.Log(), "redis back"); f.breaks && (lost != len(modes) || back != len(modes)) || !f.breaks && lost+back != 0 {
				t.Errorf("%d \"redis lost\" and %d \"redis back\" entries, want one each per limiter when the fault breaks Redis, else none", lost, back)
			}
			c.closeIdle()
			base.settle(t, e.proxy)
		})
	}
}

func okWithRemaining(r result) error {
	if r.status != 200 || r.header.Get("X-RateLimit-Remaining-Requests") == "" || r.header.Get("X-RateLimit-Limit-Requests") != "3" {
		return fmt.Errorf("%v, want 200 with X-RateLimit-Remaining-Requests", r)
	}
	return nil
}

func okRemainingUnknown(r result) error {
	if r.status != 200 || r.header.Get("X-RateLimit-Remaining-Requests") != "" || r.header.Get("X-RateLimit-Limit-Requests") != "3" {
		return fmt.Errorf("%v remaining %q, want 200 with the limit and no remaining", r, r.header.Get("X-RateLimit-Remaining-Requests"))
	}
	return nil
}

// switchable serves with the handler set last; it starts with next.
type switchable struct {
	mu   sync.Mutex
	next http.Handler
	cur  http.Handler
}

func newSwitchable(next http.Handler) *switchable { return &switchable{next: next, cur: next} }

func (s *switchable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	h := s.cur
	s.mu.Unlock()
	h.ServeHTTP(w, r)
}

func (s *switchable) set(h http.Handler) {
	s.mu.Lock()
	s.cur = h
	s.mu.Unlock()
}

func (s *switchable) reset() { s.set(s.next) }

// answering answers every request with status, header pairs and body.
func answering(status int, body string, header ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})
}

// TestFaultsGuardrails: the guardrails service slow, black-holed, down,
// resetting, answering 5xx or 429, or answering garbage, under both on_error
// modes. Two sites (block, allow) check against one service behind a fault
// proxy. Expected: on_error block answers 503 guardrails_unavailable with
// retry-after 1 and forwards nothing; on_error allow forwards the request
// unchecked (X-Guardrails-Risk unknown, X-Guardrails-Action unchecked) and
// routes the answer to a human (X-Route-Reason guardrails_unavailable).
// Bound: the guardrails timeout (300ms) + 1s per request. Each checker logs
// one "guardrails service failing" per fault and one "answering again"
// when it clears.
func TestFaultsGuardrails(t *testing.T) {
	const timeout = 300 * time.Millisecond
	const bound = timeout + time.Second
	svc := newSwitchable(mustSimulator(t, simulator.Handler{}))
	proxy := faultproxy.Start(t, gatewaytest.NewUpstream(t, svc).Addr())
	modes := []string{"block", "allow"}
	evals := map[string]*gatewaytest.Upstream{}
	urls := map[string]string{}
	var sites string
	for _, mode := range modes {
		evals[mode] = unlimitedSimulator(t)
		s, url := site(t, evals[mode].Addr(), guardrailsBlock("http://"+proxy.Addr(), fmt.Sprintf("\t\t\ttimeout %s\n\t\t\ton_error %s\n", timeout, mode))+routeBlock)
		sites += s
		urls[mode] = url
	}
	g := gatewaytest.Load(t, sites)
	c := newClient(t)
	var n atomic.Int64
	state := func(int, int) string { return stateBody(fmt.Sprintf("The parcel was late, case %d.", n.Add(1))) }
	for _, mode := range modes {
		c.load(urls[mode], 8, 2, func(int) string { return "guard-warm" }, state)
	}
	c.closeIdle()
	base := takeBaseline(proxy)

	big := `{"overall_risk_level":"无风险","pad":"` + strings.Repeat("x", 2<<20) + `"}`
	for i, f := range []struct {
		name  string
		start func()
	}{
		{"slow (answers after 1s)", func() { proxy.Latency(0, time.Second) }},
		{"black-holed", proxy.BlackHole},
		{"down (connection refused)", proxy.Refuse},
		{"resetting connections", proxy.Reset},
		{"500", func() { svc.set(answering(500, `{"code":50001,"message":"internal error"}`)) }},
		{"502", func() { svc.set(answering(502, "<html>bad gateway</html>")) }},
		{"503", func() { svc.set(answering(503, "")) }},
		{"429", func() { svc.set(answering(429, `{"code":42901,"message":"rate limited"}`, "Retry-After", "1")) }},
		{"garbage: not JSON", func() { svc.set(answering(200, "<html>hello</html>", "Content-Type", "text/html")) }},
		{"garbage: JSON without overall_risk_level", func() { svc.set(answering(200, `{"result":{"compliance":{"categories":[]}}}`)) }},
		{"garbage: truncated JSON", func() { svc.set(answering(200, `{"result":{"compliance":{"risk_level":"无风`)) }},
		{"garbage: empty 200", func() { svc.set(answering(200, "")) }},
		{"garbage: 2 MiB answer", func() { svc.set(answering(200, big)) }},
		{"garbage: redirect", func() { svc.set(answering(307, "", "Location", "http://127.0.0.1:1/elsewhere")) }},
	} {
		t.Run("guardrails "+f.name, func(t *testing.T) {
			calls := map[string]int64{}
			for _, mode := range modes {
				calls[mode] = evals[mode].Calls()
			}
			f.start()
			for _, mode := range modes {
				t.Run("on_error "+mode, func(t *testing.T) {
					rs := c.load(urls[mode], 4, 2, func(int) string { return "guard-" + mode }, state)
					for _, r := range rs {
						if r.elapsed > bound {
							t.Errorf("a request took %v, over the guardrails timeout + 1s", r.elapsed)
						}
						if mode == "block" {
							if err := contractAnswer(r, "guardrails_unavailable"); err != nil {
								t.Error(err)
							}
							continue
						}
						if r.status != 200 || r.header.Get("X-Guardrails-Risk") != "unknown" || r.header.Get("X-Guardrails-Action") != "unchecked" ||
							r.header.Get("X-Route") != "human" || r.header.Get("X-Route-Reason") != "guardrails_unavailable" {
							t.Errorf("%v %v, want 200 unchecked and routed to a human", r, r.header)
						}
					}
					if got := evals[mode].Calls() - calls[mode]; mode == "block" && got != 0 || mode == "allow" && got != int64(len(rs)) {
						t.Errorf("%d requests reached the upstream out of %d", got, len(rs))
					}
				})
			}
			waitLog(t, g.Log, "guardrails service failing", 2*(i+1), wait.Bound)

			proxy.Pass()
			svc.reset()
			for _, mode := range modes {
				if r := c.post(urls[mode], "guard-"+mode, state(0, 0)); r.status != 200 || r.header.Get("X-Guardrails-Action") != "pass" {
					t.Errorf("%s after the fault: %v %v, want a checked pass", mode, r, r.header)
				}
			}
			waitLog(t, g.Log, "guardrails service answering again", 2*(i+1), wait.Bound)
		})
	}
	if failing := countLog(g.Log(), "guardrails service failing"); failing != 2*14 {
		t.Errorf("%d \"guardrails service failing\" entries for 14 faults and 2 checkers, want one per fault and checker", failing)
	}
	c.closeIdle()
	base.settle(t, proxy)
}

func mustSimulator(t *testing.T, cfg simulator.Handler) http.Handler {
	t.Helper()
	h, err := simulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
