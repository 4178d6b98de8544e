package handlers_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/systemone/systemone-gateway/internal/faultproxy"
	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/internal/wait"
	"github.com/systemone/systemone-gateway/simulator"
)

// TestFaultsUpstream: the evaluation upstream overloaded, slow, hung, down,
// resetting, or answering bombs. Expected: the client always gets a whole
// answer — the upstream's bytes unchanged, or a status the gateway or Caddy
// gives (502, 504, or the contract's 529) — never a dropped connection while
// the gateway still held the response back; memory stays bounded; an answer
// the gateway cannot read routes to a human.
func TestFaultsUpstream(t *testing.T) {
	t.Run("upstream 529 storm, then recovery", func(t *testing.T) {
		// Expected: the upstream's 529s pass through until `failures` in a
		// row open the breaker; then the gateway answers 529 breaker_open
		// itself and the upstream sees at most one probe per open_for.
		// Once the upstream recovers, the next probe closes the breaker.
		// Bound: recovery within open_for + 5s.
		var overloaded atomic.Bool
		overloaded.Store(true)
		sim := mustSimulator(t, simulator.Handler{RequestsPerMinute: int64p(0), TokensPerSecond: int64p(0)})
		up := gatewaytest.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if overloaded.Load() {
				r.Header.Set("X-Simulator-Overloaded", "1")
			}
			sim.ServeHTTP(w, r)
		}))
		sites, url := site(t, up.Addr(), "\t\tbreaker {\n\t\t\tfailures 3\n\t\t\topen_for 500ms\n\t\t}\n"+routeBlock)
		g := gatewaytest.Load(t, sites)
		c := newClient(t)

		start := time.Now()
		storm := c.load(url, 8, 10, func(int) string { return "storm" }, func(int, int) string { return smallBody })
		elapsed := time.Since(start)
		var own int
		for _, r := range storm {
			if r.err != nil || r.status != 529 {
				t.Fatalf("during the storm: %v, want 529", r)
			}
			if r.header.Get("X-Gateway-Reject") != "" {
				if err := contractAnswer(r, "breaker_open"); err != nil {
					t.Error(err)
				}
				own++
			} else if !bytes.Contains(r.body, []byte(`"overloaded"`)) {
				t.Errorf("the upstream's 529 changed: %s", r.body)
			}
		}
		// Up to 8 requests were on their way when the breaker opened; then
		// one probe per 500ms at most.
		probes := int64(elapsed/(500*time.Millisecond)) + 1
		if n := up.Calls(); n > 3+8+probes || own == 0 {
			t.Errorf("%d upstream calls and %d gateway 529s in a storm of %d requests over %v", n, own, len(storm), elapsed)
		}

		overloaded.Store(false)
		deadline := time.Now().Add(5500 * time.Millisecond)
		for {
			r := c.post(url, "storm", smallBody)
			if r.status == 200 {
				if r.header.Get("X-Route") == "" {
					t.Errorf("recovered answer without X-Route: %v", r.header)
				}
				break
			}
			if err := wellFormed(r); err != nil || r.status != 529 {
				t.Fatalf("while recovering: %v", r)
			}
			if time.Now().After(deadline) {
				t.Fatal("the breaker did not close within open_for + 5s of the upstream's recovery")
			}
			time.Sleep(50 * time.Millisecond)
		}
		for _, r := range c.load(url, 4, 5, func(int) string { return "storm" }, func(int, int) string { return smallBody }) {
			if r.status != 200 {
				t.Errorf("after recovery: %v", r)
			}
		}
		if opened, closed := countLog(g.Log(), "circuit breaker opened"), countLog(g.Log(), "circuit breaker closed"); opened < 1 || closed != 1 {
			t.Errorf("%d breaker open and %d close entries, want at least one open and one close", opened, closed)
		}
	})

	t.Run("upstream slow (300ms per answer)", func(t *testing.T) {
		// Expected: the answer, unchanged and routed, late by the
		// upstream's latency only. Bound: latency + 1s.
		sim := unlimitedSimulator(t)
		proxy := faultproxy.Start(t, sim.Addr())
		proxy.Latency(0, 300*time.Millisecond)
		sites, url := site(t, proxy.Addr(), routeBlock+breakerBlock)
		gatewaytest.Load(t, sites)
		c := newClient(t)
		for _, r := range c.load(url, 8, 2, func(w int) string { return fmt.Sprint("slow-", w) }, func(int, int) string { return smallBody }) {
			if r.status != 200 || r.header.Get("X-Route") != "auto" || r.elapsed > 1300*time.Millisecond || r.elapsed < 300*time.Millisecond {
				t.Errorf("%v %v, want a routed 200 after 300ms..1.3s", r, r.header)
			}
		}
	})

	// A reverse_proxy that bounds the wait for the upstream's header.
	boundedProxy := func(addr string) string {
		return addr + " {\n\t\ttransport http {\n\t\t\tresponse_header_timeout 300ms\n\t\t}\n\t}"
	}
	for _, f := range []struct {
		name   string
		start  func(*faultproxy.Proxy)
		status int
	}{
		// Expected: 504 upstream_timeout for an upstream that does not
		// answer within reverse_proxy's response_header_timeout; 502
		// upstream_unavailable for one that is down or resets, in the
		// product's {"detail"} style. Each counts as a breaker failure; the
		// org's tokens are refunded. Bound: response_header_timeout + 1s.
		{"upstream hung (black-holed)", (*faultproxy.Proxy).BlackHole, 504},
		{"upstream slower than response_header_timeout", func(p *faultproxy.Proxy) { p.Latency(0, 2*time.Second) }, 504},
		{"upstream down (connection refused)", (*faultproxy.Proxy).Refuse, 502},
		{"upstream resets before answering", (*faultproxy.Proxy).Reset, 502},
	} {
		t.Run(f.name, func(t *testing.T) {
			sim := unlimitedSimulator(t)
			proxy := faultproxy.Start(t, sim.Addr())
			sites, url := site(t, boundedProxy(proxy.Addr()), "\t\tbreaker {\n\t\t\tfailures 3\n\t\t\topen_for 1m\n\t\t}\n\t\tlimits\n")
			g := gatewaytest.Load(t, sites)
			c := newClient(t)
			if r := c.post(url, "hung", smallBody); r.status != 200 {
				t.Fatalf("before the fault: %v", r)
			}
			c.closeIdle()
			base := takeBaseline(proxy)
			f.start(proxy)
			for i := 0; i < 3; i++ {
				r := c.post(url, "hung", smallBody)
				if err := upstreamError(r, f.status); err != nil || r.elapsed > 1300*time.Millisecond || r.header.Get("X-RateLimit-Limit-Requests") == "" {
					t.Errorf("%v (%v), want %d with the gateway's headers within 1.3s", r, err, f.status)
				}
			}
			if r := c.post(url, "hung", smallBody); contractAnswer(r, "breaker_open") != nil {
				t.Errorf("after 3 failures: %v, want the breaker open", r)
			}
			for _, e := range g.Entries()[1:4] {
				if e["status"] != float64(f.status) || e["reject"] != "upstream_error" || e["upstream_error"] == "" {
					t.Errorf("log entry %v, want %d upstream_error with the reason", e, f.status)
				}
			}
			if n := countLog(g.Log(), "circuit breaker opened"); n != 1 {
				t.Errorf("%d \"circuit breaker opened\" entries, want 1", n)
			}
			proxy.Pass()
			c.closeIdle()
			base.settle(t, proxy)
		})
	}

	t.Run("upstream breaks off mid-body (closes or resets)", func(t *testing.T) {
		// Expected: while the gateway holds the 200 back to read it, a body
		// that breaks off never reaches the client: 502, as for an upstream
		// that failed before answering, counted by the breaker, with none of
		// the broken response's headers. Bound: at once.
		var rst atomic.Bool
		up := gatewaytest.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "5000")
			w.Header().Set("X-Upstream-Marker", "broken")
			w.WriteHeader(200)
			_, _ = io.WriteString(w, `{"model":"service-1.0.0","answers":{"late":{"type":"noul",`)
			breakConn(w, rst.Load())
		}))
		sites, url := site(t, up.Addr(), "\t\tbreaker {\n\t\t\tfailures 2\n\t\t}\n\t\tlimits\n"+routeBlock)
		gatewaytest.Load(t, sites)
		c := newClient(t)
		for i := 0; i < 2; i++ {
			rst.Store(i == 1)
			r := c.post(url, "reset", smallBody)
			if upstreamError(r, 502) != nil || r.header.Get("X-Upstream-Marker") != "" || r.header.Get("X-Route") != "" ||
				r.header.Get("X-RateLimit-Limit-Requests") == "" {
				t.Errorf("%v %v, want a 502 with only the gateway's headers", r, r.header)
			}
		}
		if r := c.post(url, "reset", smallBody); contractAnswer(r, "breaker_open") != nil {
			t.Errorf("after 2 broken answers: %v, want the breaker open", r)
		}
	})

	t.Run("client gives up while the gateway holds the answer", func(t *testing.T) {
		// Expected: a client that goes away between the upstream's header
		// and its body is the client's doing, not the upstream's: logged
		// 499, not counted by the breaker (three of them leave it closed
		// for every org), and billed, since the upstream billed the 200.
		release := make(chan struct{})
		up := gatewaytest.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(200)
			_, _ = io.WriteString(w, `{"model":"service-1.0.0",`)
			if r.Header.Get("Authorization") == "Bearer gone" {
				_ = http.NewResponseController(w).Flush()
				<-release // the rest of the answer comes after the client left
			}
			_, _ = io.WriteString(w, `"answers":{"late":{"type":"noul","noul":0.9}},"usage":{"input_tokens":5}}`)
		}))
		t.Cleanup(func() { close(release) })
		sites, url := site(t, up.Addr(), "\t\tbreaker {\n\t\t\tfailures 3\n\t\t}\n\t\tlimits\n"+routeBlock)
		g := gatewaytest.Load(t, sites)
		for i := range 3 {
			if abandon(t, url, "gone", smallBody, func() bool { return up.Calls() == int64(i+1) }) {
				t.Fatal("the client got an answer it gave up on")
			}
			waitLog(t, g.Log, "systemone request", i+1, wait.Bound)
		}
		for _, e := range g.Entries() {
			if e["status"] != float64(499) || e["reject"] != "" || e["breaker_state"] != "closed" {
				t.Errorf("log entry %v, want 499 with the breaker closed", e)
			}
		}
		if r := newClient(t).post(url, "other", smallBody); r.status == 529 {
			t.Errorf("three clients that gave up opened the breaker: %v", r)
		}
	})

	t.Run("upstream breaks off mid-body after streaming began", func(t *testing.T) {
		// Expected: a 200 over the 8 MiB the gateway reads streams through;
		// once the client has part of it, a break must reach the client as a
		// broken response, never as a complete one.
		up := gatewaytest.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", fmt.Sprint(20<<20))
			w.WriteHeader(200)
			_, _ = w.Write(bytes.Repeat([]byte(" "), 10<<20))
			breakConn(w, false)
		}))
		sites, url := site(t, up.Addr(), routeBlock+"\t\tlimits\n\t\tbreaker\n")
		g := gatewaytest.Load(t, sites)
		r := newClient(t).post(url, "stream", smallBody)
		if r.err == nil {
			t.Errorf("%d and %d bytes of a 20 MiB body that broke off at 10 MiB, read without error", r.status, len(r.body))
		}
		// It is the upstream's failure: logged as 502, not billed, and
		// counted by the breaker.
		waitLog(t, g.Log, "systemone request", 1, wait.Bound)
		if e := g.Entries()[0]; e["status"] != float64(502) || e["breaker_state"] != "closed" {
			t.Errorf("log entry %v, want status 502", e)
		}
	})

	t.Run("upstream gzip bomb", func(t *testing.T) {
		// Expected: the compressed bytes reach the client unchanged; the
		// gateway decodes at most 8 MiB to read them, gives up, and routes
		// to a human as unreadable. Bound: under 48 MiB allocated per
		// request for a body that decompresses to 64 MiB (decoding 8 MiB
		// with io.ReadAll allocates about five times that, as it grows).
		bomb := gzipBomb(`{"model":"service-1.0.0","answers":{"late":{"type":"noul","noul":0.9,"pad":"`, 64)
		up := gatewaytest.NewUpstream(t, answering(200, string(bomb), "Content-Type", "application/json", "Content-Encoding", "gzip"))
		sites, url := site(t, up.Addr(), routeBlock)
		gatewaytest.Load(t, sites)
		c := newClient(t)
		c.post(url, "bomb", smallBody, "Accept-Encoding", "gzip")
		allocated := allocatedBy(func() {
			for _, r := range c.load(url, 4, 1, func(int) string { return "bomb" }, func(int, int) string { return smallBody }, "Accept-Encoding", "gzip") {
				if r.status != 200 || !bytes.Equal(r.body, bomb) || r.header.Get("Content-Encoding") != "gzip" ||
					r.header.Get("X-Route") != "human" || r.header.Get("X-Route-Reason") != "unreadable_response" {
					t.Errorf("%d, %d bytes (sent %d), %v", r.status, len(r.body), len(bomb), r.header)
				}
			}
		})
		if perRequest := allocated / 4; perRequest > 48<<20 {
			t.Errorf("%d MiB allocated per gzip bomb, want under 48 MiB", perRequest>>20)
		}
	})

	t.Run("upstream huge response (64 MiB)", func(t *testing.T) {
		// Expected: every byte reaches the client unchanged; the gateway
		// holds back at most 8 MiB, then streams, and routes to a human as
		// unreadable. Bound: under 40 MiB allocated per request (growing
		// the 8 MiB buffer from empty allocates about twice that).
		huge := bytes.Repeat([]byte(`{"pad":"0123456789abcdef"},`), (64<<20)/27)
		sum := sha256.Sum256(huge)
		up := gatewaytest.NewUpstream(t, answering(200, string(huge), "Content-Type", "application/json"))
		sites, url := site(t, up.Addr(), routeBlock)
		gatewaytest.Load(t, sites)
		tr := &http.Transport{DisableCompression: true}
		defer tr.CloseIdleConnections()
		fetch := func() {
			req, _ := http.NewRequest("POST", url+"/v1/systemone", strings.NewReader(smallBody))
			req.Header.Set("Authorization", "Bearer huge")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			h := sha256.New()
			n, err := io.Copy(h, resp.Body)
			if err != nil || n != int64(len(huge)) || !bytes.Equal(h.Sum(nil), sum[:]) ||
				resp.Header.Get("X-Route") != "human" || resp.Header.Get("X-Route-Reason") != "unreadable_response" {
				t.Errorf("%d bytes (sent %d), %v, %v", n, len(huge), err, resp.Header)
			}
		}
		fetch()
		if perRequest := allocatedBy(fetch); perRequest > 40<<20 {
			t.Errorf("%d MiB allocated for a 64 MiB response, want under 40 MiB", perRequest>>20)
		}
	})

	t.Run("upstream 200 that is not an answer", func(t *testing.T) {
		// Expected: passed through unchanged, routed to a human.
		for _, body := range []string{"<html>maintenance</html>", `{"model":"service-1.0.0","answers":{}}`, `{"model":`, ""} {
			up := gatewaytest.NewUpstream(t, answering(200, body))
			sites, url := site(t, up.Addr(), routeBlock)
			gatewaytest.Load(t, sites)
			r := newClient(t).post(url, "garbage", smallBody)
			if r.status != 200 || string(r.body) != body || r.header.Get("X-Route") != "human" || r.header.Get("X-Route-Reason") != "unreadable_response" {
				t.Errorf("%q: %v %v", body, r, r.header)
			}
		}
	})
}

// breakConn ends the response's connection mid-body: closed after what
// was written (FIN), or reset (RST, which may also discard what the peer
// has not read yet).
func breakConn(w http.ResponseWriter, rst bool) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	_ = buf.Flush()
	if rst {
		_ = conn.(*net.TCPConn).SetLinger(0)
	}
	_ = conn.Close()
}

// gzipBomb is a gzip stream of prefix and then n MiB of the letter a, as
// repeated gzip members (one valid stream), quick to build.
func gzipBomb(prefix string, n int) []byte {
	member := func(data []byte) []byte {
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		_, _ = zw.Write(data)
		_ = zw.Close()
		return b.Bytes()
	}
	out := member([]byte(prefix))
	mib := member(bytes.Repeat([]byte("a"), 1<<20))
	for i := 0; i < n; i++ {
		out = append(out, mib...)
	}
	return out
}

// allocatedBy is the bytes the process allocated while f ran.
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
