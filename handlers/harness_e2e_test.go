package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/faultproxy"
	"github.com/systemone/systemone-gateway/internal/wait"
)

// This file holds what the fault matrix, the reload and the security tests
// share: a keep-alive client for load, checks of the contract's answers, and
// the goroutine and heap baselines that every fault must return to.

// client is an HTTP client with keep-alive, as real clients are; its idle
// connections close when the test ends, so goroutine counts can settle.
type client struct {
	tr *http.Transport
}

func newClient(t *testing.T) *client {
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &client{tr: tr}
}

// result is what a client got for one request.
type result struct {
	status  int
	header  http.Header
	body    []byte
	elapsed time.Duration
	err     error // a transport error: no answer at all
}

// resultOf is a response read whole, as a result.
func resultOf(resp *http.Response, body []byte) result {
	return result{status: resp.StatusCode, header: resp.Header, body: body}
}

func (r result) String() string {
	if r.err != nil {
		return fmt.Sprintf("error %v after %v", r.err, r.elapsed)
	}
	return fmt.Sprintf("%d %q after %v: %.200s", r.status, r.header.Get("X-Gateway-Reject"), r.elapsed, r.body)
}

// post sends an evaluation request with key (none when empty) and header
// pairs. It is safe to call from any goroutine.
func (c *client) post(url, key, body string, header ...string) result {
	req, err := http.NewRequest("POST", url+"/v1/systemone", strings.NewReader(body))
	if err != nil {
		return result{err: err}
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return c.do(req)
}

func (c *client) do(req *http.Request) result {
	start := time.Now()
	resp, err := c.tr.RoundTrip(req)
	if err != nil {
		return result{err: err, elapsed: time.Since(start)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, header: resp.Header, body: body, elapsed: time.Since(start), err: err}
}

// closeIdle closes the client's idle connections, so that the gateway's
// goroutines serving them end.
func (c *client) closeIdle() { c.tr.CloseIdleConnections() }

// load sends n requests from each of workers goroutines, body(worker, i)
// with key(worker), and returns every result.
func (c *client) load(url string, workers, n int, key func(w int) string, body func(w, i int) string, header ...string) []result {
	var mu sync.Mutex
	var out []result
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				r := c.post(url, key(w), body(w, i), header...)
				mu.Lock()
				out = append(out, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// contractStatus is the status of each of the gateway's own answers.
var contractStatus = map[string]int{
	"invalid_api_key":          401,
	"request_too_large":        413,
	"invalid_request":          422,
	"rate_limited":             429,
	"budget_exceeded":          402,
	"guardrails_blocked":       400,
	"guardrails_unavailable":   503,
	"rate_limiter_unavailable": 503,
	"breaker_open":             529,
	"invalid_path":             400,
}

// upstreamError checks that r is the gateway's answer for an upstream that
// could not be reached: status (502 or 504) and the contract's detail.
func upstreamError(r result, status int) error {
	want := map[int]string{502: `{"detail":"upstream_unavailable"}`, 504: `{"detail":"upstream_timeout"}`}[status]
	if r.err != nil || r.status != status || r.header.Get("X-Gateway-Reject") != "upstream_error" ||
		r.header.Get("Content-Type") != "application/json" || string(r.body) != want {
		return fmt.Errorf("%v %q %s, want %d upstream_error %s", r, r.header.Get("X-Gateway-Reject"), r.body, status, want)
	}
	return nil
}

// contractAnswer checks that r is the gateway's own answer for reason:
// status, X-Gateway-Reject, a JSON body with a detail, and a whole-second
// retry-after where the contract owes one.
func contractAnswer(r result, reason string) error {
	if r.err != nil {
		return fmt.Errorf("no answer: %v", r.err)
	}
	if got := r.header.Get("X-Gateway-Reject"); got != reason || r.status != contractStatus[reason] {
		return fmt.Errorf("%d %q, want %d %q: %.200s", r.status, got, contractStatus[reason], reason, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		return fmt.Errorf("%s: content-type %q", reason, ct)
	}
	var body struct {
		Detail any `json:"detail"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil || body.Detail == nil {
		return fmt.Errorf("%s: body %q is not {\"detail\": ...}", reason, r.body)
	}
	switch reason {
	case "rate_limited", "guardrails_unavailable", "rate_limiter_unavailable", "breaker_open":
		if secs, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || secs < 1 {
			return fmt.Errorf("%s: retry-after %q", reason, r.header.Get("Retry-After"))
		}
	}
	return nil
}

// wellFormed checks that r is an answer at all: the upstream's (any
// status, no X-Gateway-Reject) or one of the contract's.
func wellFormed(r result) error {
	if r.err != nil {
		return fmt.Errorf("no answer: %v", r.err)
	}
	if reason := r.header.Get("X-Gateway-Reject"); reason != "" {
		return contractAnswer(r, reason)
	}
	return nil
}

// baseline is the process's goroutines (less the fault proxies') and live
// heap at a moment the test considers normal.
type baseline struct {
	goroutines int
	heap       uint64
}

// Slack allowed over a baseline once a fault has cleared: goroutines that
// come and go in any idle server (timers, connection closes in flight, and
// the two goroutines of each idle keep-alive connection that
// reverse_proxy's and go-redis's pools may keep or open again after a
// fault: on a loaded 2-core machine a dozen of those were seen), and some
// heap for caches that fill in the meantime. A leak under a fault is
// hundreds or thousands of goroutines, far above it.
const (
	goroutineSlack = 40
	heapSlack      = 16 << 20
)

func takeBaseline(proxies ...*faultproxy.Proxy) baseline {
	return baseline{goroutines: goroutines(proxies), heap: liveHeap()}
}

func goroutines(proxies []*faultproxy.Proxy) int {
	n := runtime.NumGoroutine()
	for _, p := range proxies {
		n -= p.Goroutines()
	}
	return n
}

func liveHeap() uint64 {
	// Two collections: sync.Pool keeps its buffers through the first.
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// settle waits (up to 15s) until goroutines and heap are back within the
// slack of b, and fails the test if they do not get there.
func (b baseline) settle(t *testing.T, proxies ...*faultproxy.Proxy) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		g, h := goroutines(proxies), liveHeap()
		if g <= b.goroutines+goroutineSlack && h <= b.heap+heapSlack {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Errorf("not back to baseline: %d goroutines (baseline %d + %d), heap %d MiB (baseline %d MiB + %d)\n%s",
				g, b.goroutines, goroutineSlack, h>>20, b.heap>>20, heapSlack>>20, buf[:runtime.Stack(buf, true)])
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitLog polls the gateway log until n entries with message msg are in it.
// abandon posts an evaluation as key and gives up once ready says the
// request got where the test wants it (at the upstream, at the guardrails
// service), as a client that goes away would. It reports whether the client
// got an answer all the same.
func abandon(t *testing.T, url, key, body string, ready func() bool) (answered bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/systemone", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitFor(t, ready, 10*time.Second)
	cancel()
	return <-done == nil
}

// waitFor polls cond until it holds, failing the test after within.
func waitFor(t *testing.T, cond func() bool, within time.Duration) {
	t.Helper()
	wait.Within(t, within, "the condition", func() error {
		if !cond() {
			return errors.New("not met")
		}
		return nil
	})
}

func waitLog(t *testing.T, log func() []map[string]any, msg string, n int, within time.Duration) {
	t.Helper()
	wait.Within(t, within, fmt.Sprintf("%d %q log entries", n, msg), func() error {
		if got := countLog(log(), msg); got < n {
			return fmt.Errorf("%d of them", got)
		}
		return nil
	})
}

func countLog(entries []map[string]any, msg string) int {
	n := 0
	for _, e := range entries {
		if e["msg"] == msg {
			n++
		}
	}
	return n
}
