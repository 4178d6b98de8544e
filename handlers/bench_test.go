package handlers

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/systemone/systemone-gateway/bench/payload"
	"github.com/systemone/systemone-gateway/policy/breaker"
	"github.com/systemone/systemone-gateway/policy/limits"
	"github.com/systemone/systemone-gateway/policy/route"
	"github.com/systemone/systemone-gateway/simulator"
)

// benchGateway is the gateway the in-process benchmarks measure: in-process
// limits far above the load, the breaker and routing, and its request log
// encoded as in production (to io.Discard).
func benchGateway(tb testing.TB) *Handler {
	tb.Helper()
	high := int64(10_000_000)
	noul, choice, score := 0.8, 0.6, 0.5
	h := &Handler{
		Limits:  &limits.Config{RequestsPerMinute: &high, TokensPerSecond: &high, TokenBurst: &high},
		Breaker: &breaker.Config{},
		Route:   &route.Config{Pins: []route.Pin{{Version: "service-1.0.0", Noul: &noul, Choice: &choice, Score: &score}}},
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	tb.Cleanup(cancel)
	if err := h.Provision(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = h.Cleanup() })
	h.logger = zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zapcore.InfoLevel))
	return h
}

// upstream is a stand-in for reverse_proxy: it reads the request body as
// the transport would and writes the simulator's canned answer to it. The
// answer bills no input tokens, so that the settlement refunds what the
// admission charged: a benchmark sends more tokens per second than any
// bucket holds, and every request must still pay for the whole check.
func upstream(tb testing.TB, p payload.Payload) caddyhttp.Handler {
	tb.Helper()
	zero := int64(0)
	sim, err := simulator.New(simulator.Handler{RequestsPerMinute: &zero, TokensPerSecond: &zero, MaxTokens: &zero, MaxQuestionTokens: &zero})
	if err != nil {
		tb.Fatal(err)
	}
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/v1/systemone", bytes.NewReader(p.Body))
	r.Header.Set("Authorization", "Bearer bench")
	sim.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		tb.Fatalf("simulator answered %d: %s", rec.Code, rec.Body)
	}
	answer := regexp.MustCompile(`"input_tokens":[0-9]+`).ReplaceAll(rec.Body.Bytes(), []byte(`"input_tokens":0`))
	length := strconv.Itoa(len(answer))
	return caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		h["Content-Length"] = []string{length}
		h["X-Request-Id"] = []string{"req_0123456789abcdef01234567"}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(answer)
		return nil
	})
}

// discardWriter is a response writer that keeps nothing but the status.
type discardWriter struct {
	header http.Header
	status int
}

func (d *discardWriter) Header() http.Header         { return d.header }
func (d *discardWriter) WriteHeader(status int)      { d.status = status }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// newRequest prepares an evaluation request as Caddy's server does.
func newRequest(body []byte, key string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/systemone", bytes.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+key)
	r.Header.Set("Content-Type", "application/json")
	return caddyhttp.PrepareRequest(r, caddy.NewReplacer(), nil, &caddyhttp.Server{})
}

// BenchmarkServeEvaluation measures the gateway's handler on each
// benchmark payload: next (the upstream stand-in) alone, then the same
// request through ServeHTTP with limits, breaker and route. The difference
// between the two is the gateway's cost: time, bytes and allocations per
// request.
func BenchmarkServeEvaluation(b *testing.B) {
	h := benchGateway(b)
	for _, p := range payload.All() {
		next := upstream(b, p)
		b.Run(p.Name+"/next_only", func(b *testing.B) {
			w := &discardWriter{header: make(http.Header)}
			b.SetBytes(int64(len(p.Body)))
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				clear(w.header)
				if err := next.ServeHTTP(w, newRequest(p.Body, "bench")); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(p.Name+"/gateway", func(b *testing.B) {
			w := &discardWriter{header: make(http.Header)}
			b.SetBytes(int64(len(p.Body)))
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				clear(w.header)
				if err := h.ServeHTTP(w, newRequest(p.Body, "bench"), next); err != nil || w.status != http.StatusOK {
					b.Fatalf("status %d, error %v", w.status, err)
				}
			}
		})
	}
}

// reportCPU starts counting the process's CPU time (user and system, the
// collector's included) and returns the function that reports it per
// operation as cpu-ns/op: on a machine other processes share, wall time
// per operation moves with their load, CPU time much less.
func reportCPU(b *testing.B) func() {
	start := processCPU()
	return func() { b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op") }
}

// processCPU is the CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestAllocationsPerRequest holds the gateway to issue 7's budget: the
// bytes it allocates per evaluation request, beyond what preparing the
// request and the upstream stand-in allocate, are at most twice the body
// plus a small constant.
func TestAllocationsPerRequest(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops pooled buffers at random and adds its own allocations")
	}
	const constant = 32 << 10
	h := benchGateway(t)
	for _, p := range payload.All() {
		next := upstream(t, p)
		w := &discardWriter{header: make(http.Header)}
		perRequest := func(serve func(r *http.Request)) float64 {
			const n = 50
			serve(newRequest(p.Body, "warm-up")) // pools, the org's bucket, the breaker
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range n {
				clear(w.header)
				serve(newRequest(p.Body, "bench"))
			}
			runtime.ReadMemStats(&after)
			return float64(after.TotalAlloc-before.TotalAlloc) / n
		}
		bare := perRequest(func(r *http.Request) { _ = next.ServeHTTP(w, r) })
		gateway := perRequest(func(r *http.Request) {
			if err := h.ServeHTTP(w, r, next); err != nil || w.status != http.StatusOK {
				t.Fatalf("%s: status %d, error %v", p.Name, w.status, err)
			}
		})
		added := gateway - bare
		t.Logf("%s: body %d bytes, gateway allocates %.0f bytes per request (%.2fx the body)", p.Name, len(p.Body), added, added/float64(len(p.Body)))
		if limit := 2*float64(len(p.Body)) + constant; added > limit {
			t.Errorf("%s: the gateway allocates %.0f bytes per request, over 2x the %d-byte body + %d", p.Name, added, len(p.Body), constant)
		}
	}
}
