package handlers

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/systemone/systemone-gateway/evaluation"
)

// Every call to the upstream for one evaluation is a span of its own under
// the request's span, the second one (an escalation's, asking another
// version) included, and the request's span carries the usage of both.
func TestUpstreamCallsEachAChildSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, server := tp.Tracer("test").Start(context.Background(), "gateway", trace.WithSpanKind(trace.SpanKindServer))
	x := &exchange{span: server, req: &evaluation.Request{Model: "service-1.0.0"}, model: "service-1.0.0", status: 200}

	first := startUpstreamCall(ctx, x, "service-1.0.0")
	first.end(callResult{status: 200, requestID: "req-a", resp: &evaluation.Response{
		Model: "service-1.0.0", InputTokens: 120, HasUsage: true, OutputTokens: 6, HasOutputTokens: true,
	}})
	second := startUpstreamCall(ctx, x, "service-2.0.0")
	second.end(callResult{status: 200, requestID: "req-b", resp: &evaluation.Response{
		Model: "service-2.0.0", InputTokens: 80, HasUsage: true, OutputTokens: 3, HasOutputTokens: true,
	}})
	third := startUpstreamCall(ctx, x, "service-2.0.0")
	third.end(callResult{failure: "upstream_timeout"})
	x.annotateGenAI()
	server.End()

	ended := rec.Ended()
	if len(ended) != 4 {
		t.Fatalf("%d spans ended, want 3 calls and the request's", len(ended))
	}
	attrs := func(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
		out := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes() {
			out[kv.Key] = kv.Value
		}
		return out
	}
	for i, want := range []struct {
		name, model, errType string
		input                int64
	}{
		{"chat service-1.0.0", "service-1.0.0", "", 120},
		{"chat service-2.0.0", "service-2.0.0", "", 80},
		{"chat service-2.0.0", "", "upstream_timeout", 0},
	} {
		s := ended[i]
		a := attrs(s)
		if s.Name() != want.name || s.SpanKind() != trace.SpanKindClient || s.Parent().SpanID() != server.SpanContext().SpanID() {
			t.Errorf("call %d: span %q of kind %v under %v; want %q, a CLIENT child of the request's span", i, s.Name(), s.SpanKind(), s.Parent().SpanID(), want.name)
		}
		if a["gen_ai.response.model"].AsString() != want.model || a["gen_ai.usage.input_tokens"].AsInt64() != want.input || a["error.type"].AsString() != want.errType {
			t.Errorf("call %d: attributes %v", i, a)
		}
		if a["gen_ai.provider.name"].AsString() != GenAIProvider || a["gen_ai.operation.name"].AsString() != GenAIOperation {
			t.Errorf("call %d: provider or operation missing: %v", i, a)
		}
	}
	a := attrs(ended[3])
	if a["gen_ai.usage.input_tokens"].AsInt64() != 200 || a["gen_ai.usage.output_tokens"].AsInt64() != 9 {
		t.Errorf("the request's span: usage %v, %v; want the sum of its calls, 200 and 9", a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"])
	}
}

// An untraced request starts no span and pays nothing for its calls.
func TestUpstreamCallUntraced(t *testing.T) {
	x := &exchange{span: noSpan}
	call := startUpstreamCall(context.Background(), x, "service-1.0.0")
	call.end(callResult{status: 200, resp: &evaluation.Response{InputTokens: 5, HasUsage: true}})
	if call.span != nil || x.genAI.hasInput {
		t.Errorf("an untraced call started a span or counted usage: %+v", x.genAI)
	}
	x.annotateGenAI()
}
