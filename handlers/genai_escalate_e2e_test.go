package handlers_test

import (
	"fmt"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/systemone/systemone-gateway/handlers"
	"github.com/systemone/systemone-gateway/internal/gatewaytest"
)

// An escalation's second call is an upstream call of its own: a CLIENT
// child span "chat <second version>" of the evaluation's span, beside the
// first call's, with that call's models, usage, response id and status,
// or the error it ended with; the evaluation's span sums both calls'
// usage.
func TestGenAITracesEscalation(t *testing.T) {
	rcv := exportTo(t)
	up := escalatingUpstream(t, map[string]map[string]float64{
		firstVersion:  {"sure": 0.99, "unsure": 0.5},
		secondVersion: {"unsure": 0.95},
	})
	port := gatewaytest.FreePort(t)
	gatewaytest.Load(t, fmt.Sprintf(":%d {\n\ttracing {\n\t\tspan gateway\n\t}\n\tsystemone {\n%s\t}\n\treverse_proxy %s\n}\n",
		port, escalateRoute(""), up.Addr()))
	url := fmt.Sprintf("http://127.0.0.1:%d", port)

	traced := map[string]string{}
	send := func(name string, header ...string) {
		t.Helper()
		traceID := randomHex(16)
		traced[name] = traceID
		resp, raw := post(t, url, "k", escalateBody("sure", "unsure"), append(header, "Traceparent", "00-"+traceID+"-"+randomHex(8)+"-01")...)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", name, resp.StatusCode, raw)
		}
	}
	send("escalated")
	send("failed", "X-Test-Second", "500")
	send("timeout", "X-Test-Second", "slow")

	first, second := handlers.GenAIOperation+" "+firstVersion, handlers.GenAIOperation+" "+secondVersion
	server := func(spans []span, name string) span {
		for _, s := range spans {
			if s.traceID == traced[name] && s.kind == tracepb.Span_SPAN_KIND_SERVER {
				return s
			}
		}
		return span{}
	}
	spans := rcv.waitSpans(t, func(spans []span) bool {
		for name := range traced {
			kids := childSpans(spans, server(spans, name))
			if kids[first].name == "" || kids[second].name == "" {
				return false
			}
		}
		return true
	}, 10*time.Second)

	check := func(what string, attrs, want map[string]string) {
		t.Helper()
		checkAttrs(t, what, attrs, want)
	}
	escalated := server(spans, "escalated")
	check("escalated: the evaluation span", escalated.attrs, map[string]string{
		"gen_ai.request.model": firstVersion, "gen_ai.response.model": firstVersion,
		"gen_ai.usage.input_tokens": "140", "gen_ai.usage.output_tokens": "7", "error.type": "",
	})
	kids := childSpans(spans, escalated)
	check("escalated: the first call", kids[first].attrs, map[string]string{
		"gen_ai.request.model": firstVersion, "gen_ai.response.model": firstVersion, "gen_ai.response.id": "req-" + firstVersion,
		"gen_ai.usage.input_tokens": "100", "gen_ai.usage.output_tokens": "5", "http.response.status_code": "200",
	})
	call := kids[second]
	check("escalated: the second call", call.attrs, map[string]string{
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "systemone",
		"gen_ai.request.model": secondVersion, "gen_ai.response.model": secondVersion, "gen_ai.response.id": "req-" + secondVersion,
		"gen_ai.usage.input_tokens": "40", "gen_ai.usage.output_tokens": "2", "http.response.status_code": "200", "error.type": "",
	})
	if call.kind != tracepb.Span_SPAN_KIND_CLIENT || call.errorStatus {
		t.Errorf("escalated: the second call's span is of kind %v, error %v; want a CLIENT span without error", call.kind, call.errorStatus)
	}

	failed := childSpans(spans, server(spans, "failed"))[second]
	check("failed: the second call", failed.attrs, map[string]string{
		"gen_ai.request.model": secondVersion, "http.response.status_code": "500", "error.type": "500",
		"gen_ai.response.model": "", "gen_ai.usage.input_tokens": "",
	})
	timedOut := childSpans(spans, server(spans, "timeout"))[second]
	check("timeout: the second call", timedOut.attrs, map[string]string{
		"gen_ai.request.model": secondVersion, "error.type": "upstream_timeout", "http.response.status_code": "",
	})
	if !failed.errorStatus || !timedOut.errorStatus {
		t.Errorf("failed and timed-out second calls: error status %v, %v; want both", failed.errorStatus, timedOut.errorStatus)
	}
	check("timeout: the evaluation span", server(spans, "timeout").attrs, map[string]string{
		"gen_ai.usage.input_tokens": "100", "error.type": "",
	})
}
