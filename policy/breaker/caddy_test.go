package breaker

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

// probeHandler is a test-only middleware that guards the real reverse_proxy
// with probeSet the way the gateway's handler does, and reports every
// classified outcome on probeOutcomes.
type probeHandler struct{}

var (
	probeSet      *Set
	probeOutcomes chan Outcome
)

func init() { caddy.RegisterModule(probeHandler{}) }

func (probeHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.breaker_test_probe",
		New: func() caddy.Module { return new(probeHandler) },
	}
}

func (probeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	model := r.Header.Get("X-Model")
	ticket, rej := probeSet.Allow(model)
	if rej != nil {
		w.Header().Set("Retry-After", strconv.Itoa(int(rej.RetryAfter/time.Second)))
		w.WriteHeader(529)
		return nil
	}
	defer ticket.Cancel()
	rec := &statusRecorder{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}}
	err := next.ServeHTTP(rec, r)
	ticket.Done(rec.status, err)
	probeOutcomes <- Classify(rec.status, err)
	return err
}

type statusRecorder struct {
	*caddyhttp.ResponseWriterWrapper
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriterWrapper.WriteHeader(status)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestThroughCaddyReverseProxy runs the breaker around Caddy's real
// reverse_proxy and a real upstream on loopback, so that Classify is checked
// against what reverse_proxy really reports: upstream statuses, a refused
// connection, a client that goes away.
func TestThroughCaddyReverseProxy(t *testing.T) {
	var upstreamStatus, upstreamHits atomic.Int64
	arrived := make(chan struct{}, 1)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamHits.Add(1)
		if r.URL.Path == "/hang" {
			arrived <- struct{}{}
			<-r.Context().Done()
			return
		}
		w.WriteHeader(int(upstreamStatus.Load()))
		io.WriteString(w, `{"detail":"from upstream"}`)
	}))
	defer upstream.Close()

	var err error
	probeSet, err = New(Config{Failures: 3, OpenFor: caddy.Duration(time.Minute)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer probeSet.Close()
	probeOutcomes = make(chan Outcome, 16)

	gateway := freePort(t)
	refused := freePort(t) // nothing listens there any more
	cfg := fmt.Sprintf(`{
		"admin": {"disabled": true, "config": {"persist": false}},
		"logging": {"logs": {"default": {"writer": {"output": "discard"}}}},
		"apps": {"http": {"servers": {"gateway": {
			"listen": ["127.0.0.1:%d"],
			"automatic_https": {"disable": true},
			"routes": [
				{"match": [{"path": ["/down"]}], "terminal": true, "handle": [
					{"handler": "breaker_test_probe"},
					{"handler": "reverse_proxy", "upstreams": [{"dial": "127.0.0.1:%d"}]}
				]},
				{"handle": [
					{"handler": "breaker_test_probe"},
					{"handler": "reverse_proxy", "upstreams": [{"dial": %q}]}
				]}
			]
		}}}}
	}`, gateway, refused, upstream.Listener.Addr().String())
	if err := caddy.Load([]byte(cfg), true); err != nil {
		t.Fatalf("loading caddy: %v", err)
	}
	defer caddy.Stop()

	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	send := func(ctx context.Context, path string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d%s", gateway, path), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Model", "m")
		resp, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	expect := func(path string, upstreamAnswers, wantStatus int, want Outcome) {
		t.Helper()
		upstreamStatus.Store(int64(upstreamAnswers))
		resp, err := send(context.Background(), path)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		if resp.StatusCode != wantStatus {
			t.Fatalf("POST %s: status %d, want %d", path, resp.StatusCode, wantStatus)
		}
		if got := <-probeOutcomes; got != want {
			t.Fatalf("POST %s (upstream %d): outcome %v, want %v", path, upstreamAnswers, got, want)
		}
	}

	for range 5 {
		expect("/", 429, 429, Success)
	}
	expect("/", 529, 529, Failure)
	expect("/down", 0, 502, Failure)

	// A client that goes away while the upstream works.
	ctx, cancel := context.WithCancel(context.Background())
	sent := make(chan error, 1)
	go func() {
		_, err := send(ctx, "/hang")
		sent <- err
	}()
	<-arrived
	cancel()
	if err := <-sent; err == nil {
		t.Fatal("cancelled request succeeded")
	}
	if got := <-probeOutcomes; got != Excluded {
		t.Fatalf("client cancellation: outcome %v, want excluded", got)
	}
	if got := probeSet.State("m"); got != "closed" {
		t.Fatalf("state %q after 2 failures and a cancellation, want closed", got)
	}

	expect("/", 503, 503, Failure)
	if got := probeSet.State("m"); got != "open" {
		t.Fatalf("state %q after the third failure, want open", got)
	}

	hits := upstreamHits.Load()
	for range 10 {
		resp, err := send(context.Background(), "/")
		if err != nil {
			t.Fatal(err)
		}
		retryAfter, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != 529 || retryAfter < 59 || retryAfter > 60 {
			t.Fatalf("while open: status %d, retry-after %q; want 529, 60", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	if got := upstreamHits.Load() - hits; got != 0 {
		t.Errorf("upstream reached %d times while open, want 0", got)
	}
	if n := len(probeOutcomes); n != 0 {
		t.Errorf("%d outcomes reported for rejected requests, want 0", n)
	}
}
