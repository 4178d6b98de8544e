package handlers_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/systemone/systemone-gateway/internal/gatewaytest"
	"github.com/systemone/systemone-gateway/simulator"
)

const smallBody = `{"state":"The parcel arrived two days late.","questions":{"late":{"type":"noul","instructions":"Was the delivery late?"}}}`

// site returns a Caddyfile site on a free port: systemone with the given
// block contents, in front of upstream.
func site(t *testing.T, upstream, block string) (sites, url string) {
	port := gatewaytest.FreePort(t)
	sites = fmt.Sprintf(":%d {\n\tsystemone {\n%s\n\t}\n\treverse_proxy %s\n}\n", port, block, upstream)
	return sites, fmt.Sprintf("http://127.0.0.1:%d", port)
}

func newSimulator(t *testing.T, cfg simulator.Handler) *gatewaytest.Upstream {
	t.Helper()
	h, err := simulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return gatewaytest.NewUpstream(t, h)
}

func post(t *testing.T, url, key, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", url+"/v1/systemone", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return do(t, req)
}

// resetByReload reports a connection closed before any answer.
func resetByReload(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

func do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	for attempt := 1; err != nil && resetByReload(err) && req.GetBody != nil && attempt <= 3; attempt++ {
		// Right after a `caddy reload`, a connection the old listener had
		// accepted but not read is reset (Caddy and Linux SO_REUSEPORT; see
		// docs/operations.md#reloads): no handler saw the request,
		// so it is sent again on a new connection.
		req.Body, _ = req.GetBody()
		resp, err = (&http.Transport{DisableCompression: true}).RoundTrip(req)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// The gateway in front of the simulator answers like the simulator.
func TestEvaluationThroughGateway(t *testing.T) {
	sim := newSimulator(t, simulator.Handler{})
	sites, url := site(t, sim.Addr(), "")
	g := gatewaytest.Load(t, sites)

	resp, body := post(t, url, "k1", smallBody)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var answer struct {
		Model   string                    `json:"model"`
		Answers map[string]map[string]any `json:"answers"`
		Usage   struct {
			InputTokens int `json:"input_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		t.Fatal(err)
	}
	if answer.Model != "service-1.0.0" || answer.Answers["late"]["type"] != "noul" || answer.Usage.InputTokens <= 0 {
		t.Errorf("answer %s", body)
	}
	if resp.Header.Get("X-Request-Id") == "" {
		t.Error("x-request-id lost")
	}

	entries := g.Entries()
	if len(entries) != 1 {
		t.Fatalf("%d log entries, want 1", len(entries))
	}
	e := entries[0]
	for _, field := range []string{"org", "model_requested", "model", "status", "reject", "route", "route_reason", "min_confidence",
		"guardrails_risk", "guardrails_action", "guardrails_categories", "guardrails_ms", "tokens_estimated", "tokens_input",
		"cost_yuan", "breaker_state", "upstream_ms", "total_ms", "request_id"} {
		if _, ok := e[field]; !ok {
			t.Errorf("log entry lacks %q", field)
		}
	}
	if e["logger"] != "http.handlers.systemone" || e["level"] != "info" {
		t.Errorf("logger %v level %v", e["logger"], e["level"])
	}
	if e["model_requested"] != "service-latest" || e["model"] != "service-1.0.0" || e["status"] != float64(200) ||
		e["request_id"] != resp.Header.Get("X-Request-Id") || e["tokens_input"] != float64(answer.Usage.InputTokens) {
		t.Errorf("log entry %v", e)
	}
	if cost := e["cost_yuan"].(float64); cost != float64(answer.Usage.InputTokens)*0.042/1e6 {
		t.Errorf("cost_yuan %v for %d tokens", cost, answer.Usage.InputTokens)
	}
	if org := e["org"].(string); !strings.HasPrefix(org, "key-") {
		t.Errorf("org %q, want the key's fingerprint", org)
	}
}

// What the upstream sends reaches the client byte for byte; what the client
// sends reaches the upstream byte for byte.
func TestTransparency(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"model":"service-1.0.0","answers":{"late":{"type":"noul","noul":0.97}},"usage":{"input_tokens":12,"output_tokens":1}}`))
	_ = zw.Close()
	for _, tc := range []struct {
		name   string
		status int
		header map[string]string
		body   []byte
	}{
		{"plain 200", 200, map[string]string{"Content-Type": "application/json", "X-Request-Id": "req_1", "X-Service-Model-Ms": "12", "X-Custom": "a, b"}, []byte(`{"model":"service-1.0.0","answers":{"late":{"type":"noul","noul":0.97}},"usage":{"input_tokens":12,"output_tokens":1}}`)},
		{"gzip 200", 200, map[string]string{"Content-Type": "application/json", "Content-Encoding": "gzip", "Vary": "Accept-Encoding"}, gz.Bytes()},
		{"not json 200", 200, map[string]string{"Content-Type": "text/plain"}, []byte("not json at all")},
		{"402", 402, map[string]string{"Content-Type": "application/json"}, []byte(`{"detail":"insufficient_balance"}`)},
		{"500 empty", 500, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := gatewaytest.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write(tc.body)
			}))
			sites, url := site(t, up.Addr(), "")
			gatewaytest.Load(t, sites)

			reqBody := `{"state":{"a":[1,2.50,"x"]},  "questions":{"late":{"type":"noul","instructions":null}} ,"extra":true}`
			req, _ := http.NewRequest("POST", url+"/v1/systemone?trace=1&x=%20y", strings.NewReader(reqBody))
			req.Header.Set("Authorization", "Bearer secret-key")
			req.Header.Set("Content-Type", "application/json; charset=utf-8")
			req.Header.Set("X-Client-Thing", "v1")
			req.Header.Set("Accept-Encoding", "gzip")
			resp, body := do(t, req)

			if resp.StatusCode != tc.status || !bytes.Equal(body, tc.body) {
				t.Errorf("client got %d %q, upstream sent %d %q", resp.StatusCode, body, tc.status, tc.body)
			}
			for k, v := range tc.header {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("header %s: %q, upstream sent %q", k, got, v)
				}
			}
			seen := up.Last()
			if seen.Method != "POST" || seen.Path != "/v1/systemone" || seen.RawQuery != "trace=1&x=%20y" || string(seen.Body) != reqBody {
				t.Errorf("upstream got %s %s?%s %q", seen.Method, seen.Path, seen.RawQuery, seen.Body)
			}
			for _, k := range []string{"Authorization", "Content-Type", "X-Client-Thing", "Accept-Encoding"} {
				if seen.Header.Get(k) != req.Header.Get(k) {
					t.Errorf("upstream header %s: %q, client sent %q", k, seen.Header.Get(k), req.Header.Get(k))
				}
			}
		})
	}
}

// The gateway's own answers: 401, 413 and 422, never forwarded.
func TestEdgeAnswers(t *testing.T) {
	sim := newSimulator(t, simulator.Handler{})
	sites, url := site(t, sim.Addr(), "\t\tmax_body 64KiB")
	g := gatewaytest.Load(t, sites)

	check := func(name string, resp *http.Response, body []byte, status int, reason string) map[string]any {
		t.Helper()
		if resp.StatusCode != status || resp.Header.Get("X-Gateway-Reject") != reason {
			t.Errorf("%s: %d %q, want %d %q: %s", name, resp.StatusCode, resp.Header.Get("X-Gateway-Reject"), status, reason, body)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: content-type %q", name, ct)
		}
		var parsed map[string]any
		if err := json.Unmarshal(body, &parsed); err != nil {
			t.Errorf("%s: body not JSON: %s", name, body)
		}
		return parsed
	}

	resp, body := post(t, url, "", smallBody)
	if d := check("no key", resp, body, 401, "invalid_api_key"); d["detail"] != "invalid_api_key" {
		t.Errorf("no key: %s", body)
	}
	resp, body = post(t, url, "", smallBody, "Authorization", "Basic abc")
	check("basic auth", resp, body, 401, "invalid_api_key")
	req, _ := http.NewRequest("GET", url+"/v1/models", nil)
	resp, body = do(t, req)
	check("models without key", resp, body, 401, "invalid_api_key")

	resp, body = post(t, url, "k", `{"state":"`+strings.Repeat("x", 64<<10)+`","questions":{}}`)
	if d := check("too large", resp, body, 413, "request_too_large"); d["detail"] != "request_too_large" {
		t.Errorf("too large: %s", body)
	}
	// A body over max_body without a Content-Length is cut off as well.
	req, _ = http.NewRequest("POST", url+"/v1/systemone", io.MultiReader(strings.NewReader(`{"state":"`), strings.NewReader(strings.Repeat("y", 10<<20))))
	req.Header.Set("Authorization", "Bearer k")
	resp, body = do(t, req)
	check("chunked 10 MB", resp, body, 413, "request_too_large")

	for name, bad := range map[string]string{
		"empty":         "",
		"truncated":     `{"state":"s","questions":{"q":{"type":"noul"`,
		"wrong types":   `{"state":5,"questions":[]}`,
		"invalid utf-8": "{\"state\":\"\xff\",\"questions\":{}}",
		"bad type":      `{"state":"s","questions":{"q":{"type":"yesno","instructions":"x"}}}`,
		"one tier":      `{"state":"s","questions":{"q":{"type":"score","instructions":"x","criteria":["a"]}}}`,
	} {
		resp, body := post(t, url, "k", bad)
		d := check(name, resp, body, 422, "invalid_request")
		if _, isList := d["detail"].([]any); !isList {
			t.Errorf("%s: detail is not a list: %s", name, body)
		}
	}
	resp, body = post(t, url, "k", `{"state":"s","questions":{"q":{"type":"choice","instructions":"x","criteria":{`+options(256)+`}}}}`)
	if d := check("256 options", resp, body, 422, "invalid_request"); d["detail"] != "Too many choices. Must have at most 255 choices." {
		t.Errorf("256 options: %s", body)
	}

	if n := sim.Calls(); n != 0 {
		t.Errorf("%d rejected requests reached the upstream", n)
	}
	for _, e := range g.Entries() {
		if e["reject"] == "" || e["status"] == float64(200) {
			t.Errorf("log entry for a rejected request: %v", e)
		}
	}
	if n := len(g.Entries()); n != 11 {
		t.Errorf("%d evaluation log entries, want 11 (the GET is not logged)", n)
	}

	// The same gateway forwards a request the upstream accepts, including
	// the nulls client libraries send.
	resp, body = post(t, url, "k", `{"state":"s","questions":{"q":{"type":"noul","instructions":null},"s":{"type":"score","instructions":"x","criteria":[null,"hi"]},"c":{"type":"choice","instructions":"x","criteria":{"a":null,"b":"B"}}}}`)
	if resp.StatusCode != 200 {
		t.Errorf("tolerated nulls: %d %s", resp.StatusCode, body)
	}
}

func options(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"o%d":null`, i)
	}
	return strings.Join(parts, ",")
}

// Anything but an evaluation call goes through with only the org check.
func TestOtherRequestsPassThrough(t *testing.T) {
	sim := newSimulator(t, simulator.Handler{})
	sites, url := site(t, sim.Addr(), "")
	gatewaytest.Load(t, sites)
	req, _ := http.NewRequest("GET", url+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer k")
	resp, body := do(t, req)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "service-latest") {
		t.Errorf("models: %d %s", resp.StatusCode, body)
	}
	req, _ = http.NewRequest("POST", url+"/v1/guardrails", strings.NewReader(`{"model":"Service-Guardrails-Text","messages":[{"role":"user","content":"hello"}]}`))
	req.Header.Set("Authorization", "Bearer k")
	resp, body = do(t, req)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "overall_risk_level") {
		t.Errorf("guardrails: %d %s", resp.StatusCode, body)
	}
}

// A gzip-encoded request is inspected decompressed, bounded by max_body,
// and forwarded byte for byte as it came.
func TestGzipRequestBody(t *testing.T) {
	up := gatewaytest.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"model":"service-1.0.0","answers":{"late":{"type":"noul","noul":0.9}},"usage":{"input_tokens":5,"output_tokens":1}}`))
	}))
	sites, url := site(t, up.Addr(), "\t\tmax_body 64KiB")
	gatewaytest.Load(t, sites)
	gz := func(s string) string {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write([]byte(s))
		_ = zw.Close()
		return b.String()
	}

	valid := gz(smallBody)
	resp, body := post(t, url, "k", valid, "Content-Encoding", "gzip")
	if resp.StatusCode != 200 {
		t.Fatalf("gzip request: %d %s", resp.StatusCode, body)
	}
	if seen := up.Last(); string(seen.Body) != valid || seen.Header.Get("Content-Encoding") != "gzip" {
		t.Error("the upstream did not get the compressed bytes as sent")
	}
	resp, _ = post(t, url, "k", gz(`{"state":"s"}`), "Content-Encoding", "gzip")
	if resp.StatusCode != 422 {
		t.Errorf("invalid gzip-encoded request: %d, want 422", resp.StatusCode)
	}
	// 10 MB of spaces compress to a few KiB: the decompressed size is bounded.
	bomb := gz(`{"state":"s","questions":{}` + strings.Repeat(" ", 10<<20) + `}`)
	resp, _ = post(t, url, "k", bomb, "Content-Encoding", "gzip")
	if resp.StatusCode != 413 || resp.Header.Get("X-Gateway-Reject") != "request_too_large" {
		t.Errorf("gzip bomb: %d %q, want 413", resp.StatusCode, resp.Header.Get("X-Gateway-Reject"))
	}
	resp, _ = post(t, url, "k", "not gzip at all", "Content-Encoding", "gzip")
	if resp.StatusCode != 422 {
		t.Errorf("corrupt gzip: %d, want 422", resp.StatusCode)
	}
	if n := up.Calls(); n != 1 {
		t.Errorf("%d upstream calls, want 1", n)
	}
}

// Headers in a namespace whose policy is off are the upstream's and pass
// unchanged; X-Gateway-* is always the gateway's alone.
func TestUpstreamHeadersOfPoliciesOff(t *testing.T) {
	up := gatewaytest.NewUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Route", "upstream-route")
		w.Header().Set("X-Routing-Hint", "kept")
		w.Header().Set("X-Guardrails-Risk", "upstream")
		w.Header().Set("X-RateLimit-Limit-Requests", "7")
		w.Header().Set("X-Gateway-Reject", "forged")
		_, _ = w.Write([]byte(`{"model":"service-1.0.0","answers":{"late":{"type":"noul","noul":0.9}},"usage":{"input_tokens":5}}`))
	}))
	sites, url := site(t, up.Addr(), "\t\troute\n")
	gatewaytest.Load(t, sites)
	resp, _ := post(t, url, "k", smallBody)
	if resp.Header.Get("X-Guardrails-Risk") != "upstream" || resp.Header.Get("X-RateLimit-Limit-Requests") != "7" || resp.Header.Get("X-Routing-Hint") != "kept" {
		t.Errorf("upstream headers of policies that are off were changed: %v", resp.Header)
	}
	if resp.Header.Get("X-Gateway-Reject") != "" || resp.Header.Get("X-Route") != "human" || len(resp.Header.Values("X-Route")) != 1 {
		t.Errorf("gateway namespaces: %v", resp.Header)
	}
}

// Path variants of the evaluation endpoint get the evaluation's checks.
func TestEvaluationPathVariants(t *testing.T) {
	sim := newSimulator(t, simulator.Handler{})
	sites, url := site(t, sim.Addr(), "")
	gatewaytest.Load(t, sites)
	for _, p := range []string{"/v1/systemone/", "/v1/./systemone", "/x/../v1/systemone", "/prefix/v1/systemone"} {
		req, _ := http.NewRequest("POST", url+p, strings.NewReader(`{"state":"s"}`))
		req.Header.Set("Authorization", "Bearer k")
		req.URL.Opaque = p // sent as written, not cleaned by the client
		resp, _ := do(t, req)
		if resp.StatusCode != 422 || resp.Header.Get("X-Gateway-Reject") != "invalid_request" {
			t.Errorf("%s: %d %q, want the edge's 422", p, resp.StatusCode, resp.Header.Get("X-Gateway-Reject"))
		}
	}
	if n := sim.Calls(); n != 0 {
		t.Errorf("%d invalid requests reached the upstream", n)
	}
}
