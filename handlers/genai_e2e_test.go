package handlers_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/systemone/systemone-gateway/handlers"
	"github.com/systemone/systemone-gateway/internal/gatewaytest"
)

// With Caddy's `tracing`, an evaluation call's span carries the GenAI
// semantic conventions' attributes (v1.41.0), each upstream call is a
// CLIENT child span named "chat <model>" with that call's models and
// usage, and each judged answer is one gen_ai.evaluation.result event with
// its question id, route, reason, confidence and certificate id; nothing
// exported holds the key, the Authorization value or the request's text.
func TestGenAITraces(t *testing.T) {
	rcv := exportTo(t)

	const (
		key          = "genai-secret-key-91c2"
		state        = "genai secret state: the courier was rude"
		instructions = "genai secret instructions: judge the tone"
	)
	eval := unlimitedSimulator(t)
	port := gatewaytest.FreePort(t)
	gatewaytest.Load(t, fmt.Sprintf(`:%d {
	tracing {
		span gateway
	}
	systemone {
		cache
		route {
			pin service-1.0.0 {
				noul   0.9 cert 0123456789abcdef
				choice 0.8 cert fedcba9876543210
			}
		}
	}
	reverse_proxy %s
}
`, port, eval.Addr()))
	url := fmt.Sprintf("http://127.0.0.1:%d", port)

	body, _ := json.Marshal(map[string]any{
		"state": state,
		"questions": map[string]any{
			"late": map[string]any{"type": "noul", "instructions": instructions},
			"tone": map[string]any{"type": "choice", "instructions": instructions, "criteria": map[string]any{"rude": nil, "polite": nil}},
		},
	})
	// The same questions asking for the concrete version, whose answer the
	// cache stores.
	var concrete map[string]any
	_ = json.Unmarshal(body, &concrete)
	concrete["model"] = "service-1.0.0"
	concreteBody, _ := json.Marshal(concrete)
	traced := map[string]string{} // case -> the trace id sent
	sendBody := func(name, key string, body []byte, header ...string) (*http.Response, []byte) {
		t.Helper()
		traceID := randomHex(16)
		traced[name] = traceID
		return post(t, url, key, string(body), append(header, "Traceparent", "00-"+traceID+"-"+randomHex(8)+"-01")...)
	}
	send := func(name, key string, header ...string) (*http.Response, []byte) {
		t.Helper()
		return sendBody(name, key, body, header...)
	}
	resp, answer := send("routed", key, "X-Simulator-Confidence", `{"late":0.99,"tone":0.3}`)
	if resp.StatusCode != 200 || resp.Header.Get("X-Route-Questions") != "late=auto, tone=human" {
		t.Fatalf("routed: %d %q %s", resp.StatusCode, resp.Header.Get("X-Route-Questions"), answer)
	}
	requestID := resp.Header.Get("X-Request-Id")
	var usage struct {
		Usage struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(answer, &usage); err != nil || usage.Usage.InputTokens == 0 || usage.Usage.OutputTokens == 0 || requestID == "" {
		t.Fatalf("routed: usage %+v, request id %q: %v", usage, requestID, err)
	}
	if resp, _ := send("overloaded", key, "X-Simulator-Overloaded", "1"); resp.StatusCode != 529 {
		t.Fatalf("overloaded: %d", resp.StatusCode)
	}
	if resp, _ := send("refused", ""); resp.StatusCode != 401 {
		t.Fatalf("refused: %d", resp.StatusCode)
	}
	confidences := []string{"X-Simulator-Confidence", `{"late":0.99,"tone":0.3}`}
	if resp, b := sendBody("stored", key, concreteBody, confidences...); resp.StatusCode != 200 || resp.Header.Get("X-Cache") != "miss" {
		t.Fatalf("stored: %d %q %s", resp.StatusCode, resp.Header.Get("X-Cache"), b)
	}
	if resp, b := sendBody("hit", key, concreteBody, confidences...); resp.StatusCode != 200 || resp.Header.Get("X-Cache") != "hit" {
		t.Fatalf("hit: %d %q %s", resp.StatusCode, resp.Header.Get("X-Cache"), b)
	}

	// The server span of a case, and its children by name.
	server := func(spans []span, name string) (span, bool) {
		for _, s := range spans {
			if s.traceID == traced[name] && s.kind == tracepb.Span_SPAN_KIND_SERVER {
				return s, true
			}
		}
		return span{}, false
	}
	children := childSpans
	const (
		call         = handlers.GenAIOperation + " service-latest"
		concreteCall = handlers.GenAIOperation + " service-1.0.0"
	)
	callOf := map[string]string{"routed": call, "overloaded": call, "stored": concreteCall} // the others made none
	spans := rcv.waitSpans(t, func(spans []span) bool {
		for name := range traced {
			s, ok := server(spans, name)
			if !ok || callOf[name] != "" && children(spans, s)[callOf[name]].name == "" {
				return false
			}
		}
		return true
	}, 10*time.Second)

	check := func(what string, attrs, want map[string]string) {
		t.Helper()
		checkAttrs(t, what, attrs, want)
	}
	in, out := strconv.FormatInt(usage.Usage.InputTokens, 10), strconv.FormatInt(usage.Usage.OutputTokens, 10)

	routed, _ := server(spans, "routed")
	check("routed: the server span", routed.attrs, map[string]string{
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "systemone",
		"gen_ai.request.model": "service-latest", "gen_ai.response.model": "service-1.0.0",
		"gen_ai.usage.input_tokens": in, "gen_ai.usage.output_tokens": out,
		"gen_ai.response.id": requestID, "error.type": "",
	})
	upstream := children(spans, routed)[call]
	if upstream.kind != tracepb.Span_SPAN_KIND_CLIENT || upstream.errorStatus {
		t.Errorf("routed: the upstream call's span is of kind %v, error %v; want a CLIENT span without error", upstream.kind, upstream.errorStatus)
	}
	if want := "https://opentelemetry.io/schemas/" + handlers.GenAISemconvVersion; upstream.schemaURL != want {
		t.Errorf("routed: the upstream call's scope has schema URL %q, want %q", upstream.schemaURL, want)
	}
	check("routed: the upstream call's span", upstream.attrs, map[string]string{
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "systemone",
		"gen_ai.request.model": "service-latest", "gen_ai.response.model": "service-1.0.0",
		"gen_ai.usage.input_tokens": in, "gen_ai.usage.output_tokens": out,
		"gen_ai.response.id": requestID, "http.response.status_code": "200", "error.type": "",
	})
	if len(routed.events) != 2 {
		t.Fatalf("routed: %d events on the server span, want one per question: %+v", len(routed.events), routed.events)
	}
	for i, want := range []map[string]string{
		{
			"systemone.question.id": "late", "systemone.question.type": "noul",
			"systemone.route": "auto", "systemone.route_reason": "confident",
			"systemone.confidence": "0.98", "systemone.threshold": "0.9", "systemone.certificate": "0123456789abcdef",
			"gen_ai.evaluation.score.label": "auto", "gen_ai.evaluation.explanation": "confident",
			"gen_ai.evaluation.score.value": "0.98",
		},
		{
			"systemone.question.id": "tone", "systemone.question.type": "choice",
			"systemone.route": "human", "systemone.route_reason": "low_confidence",
			"systemone.confidence": "0.3", "systemone.threshold": "0.8", "systemone.certificate": "",
			"gen_ai.evaluation.score.label": "human", "gen_ai.evaluation.explanation": "low_confidence",
			"gen_ai.evaluation.score.value": "0.3",
		},
	} {
		ev := routed.events[i]
		if ev.name != "gen_ai.evaluation.result" {
			t.Errorf("routed: event %d is named %q", i, ev.name)
		}
		want["gen_ai.evaluation.name"] = "systemone.route"
		want["gen_ai.response.id"] = requestID
		check(fmt.Sprintf("routed: event %d", i), ev.attrs, want)
	}

	overloaded, _ := server(spans, "overloaded")
	check("overloaded: the server span", overloaded.attrs, map[string]string{
		"gen_ai.operation.name": "chat", "gen_ai.request.model": "service-latest", "error.type": "529",
		"gen_ai.usage.input_tokens": "", "gen_ai.response.model": "",
	})
	failed := children(spans, overloaded)[call]
	check("overloaded: the upstream call's span", failed.attrs, map[string]string{
		"http.response.status_code": "529", "error.type": "529", "gen_ai.usage.input_tokens": "",
	})
	if !failed.errorStatus || len(overloaded.events) != 0 {
		t.Errorf("overloaded: the call's span has error status %v; the server span %d events, want none", failed.errorStatus, len(overloaded.events))
	}

	refused, _ := server(spans, "refused")
	check("refused: the server span", refused.attrs, map[string]string{
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "systemone", "error.type": "invalid_api_key",
		"gen_ai.request.model": "",
	})
	if kids := children(spans, refused); len(kids) != 0 || len(refused.events) != 0 {
		t.Errorf("refused: %d child spans, %d events; want none (no upstream call, nothing judged)", len(kids), len(refused.events))
	}

	// An answer from the cache is routed and judged afresh, but made no
	// upstream call and used no tokens.
	hit, _ := server(spans, "hit")
	check("hit: the server span", hit.attrs, map[string]string{
		"gen_ai.operation.name": "chat", "gen_ai.request.model": "service-1.0.0", "gen_ai.response.model": "service-1.0.0",
		"gen_ai.usage.input_tokens": "", "gen_ai.usage.output_tokens": "", "systemone.cache": "hit",
	})
	if kids := children(spans, hit); len(hit.events) != 2 || kids[concreteCall].name != "" {
		t.Errorf("hit: %d events, want 2; child spans %v, want no upstream call", len(hit.events), kids)
	}
	stored, _ := server(spans, "stored")
	if kids := children(spans, stored); kids[concreteCall].name == "" || stored.attrs["gen_ai.usage.input_tokens"] == "" {
		t.Errorf("stored: child spans %v, usage %q; want the upstream call and its usage", kids, stored.attrs["gen_ai.usage.input_tokens"])
	}

	// No key, Authorization value or content anywhere in what was exported.
	all := rcv.exported()
	for _, secret := range []string{key, "Bearer", "genai secret", "courier", "judge the tone", "polite"} {
		if strings.Contains(all, secret) {
			t.Errorf("an exported span, event or resource holds %q", secret)
		}
	}
}

// checkAttrs checks a span's or event's attributes against want: "" for
// absent, "*" for present with any value, else the value.
func checkAttrs(t *testing.T, what string, attrs, want map[string]string) {
	t.Helper()
	for k, v := range want {
		got, ok := attrs[k]
		switch {
		case v == "" && ok:
			t.Errorf("%s has %s = %q", what, k, got)
		case v != "" && !ok:
			t.Errorf("%s lacks %s (has %v)", what, k, attrs)
		case v != "" && v != "*" && got != v:
			t.Errorf("%s: %s = %q, want %q", what, k, got, v)
		}
	}
}
