package handlers

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/policy/route"
)

// BenchmarkRecord measures a finished request's record: its metrics and
// its log entry, encoded as in production (JSON, to io.Discard), for an
// exchange as a small request through limits, breaker and route leaves
// it.
func BenchmarkRecord(b *testing.B) {
	h := benchGateway(b)
	req, err := evaluation.ParseRequest([]byte(`{"state":"s","questions":{"late":{"type":"noul","instructions":"Late?"}}}`))
	if err != nil {
		b.Fatal(err)
	}
	d := h.limiter.Admit(context.Background(), "key-0123456789abcdef", req.EstimatedTokens)
	r := route.Decision{Route: route.RouteAuto, Reason: "confident", Model: "service-1.0.0", HasMinConfidence: true, MinConfidence: 0.93}
	x := &exchange{start: time.Now(), now: time.Now, span: trace.SpanFromContext(context.Background()), org: "key-0123456789abcdef", req: req,
		status: 200, forwarded: true, limits: &d, route: &r, model: "service-1.0.0", usage: 31, hasUsage: true,
		requestID: "req_0123456789abcdef01234567", upstream: 2 * time.Millisecond}
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		h.record(x)
	}
}
