package handlers

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/systemone/systemone-gateway/policy/guardrails"
)

// The spans the handler adds, as children of the server span that Caddy's
// `tracing` directive starts. Without `tracing` (or for a request its
// sampler left out) the handler starts none and pays one context lookup.
const (
	// SpanAdmission is the one admission of a request by the limiter (a
	// Redis round trip with `redis`).
	SpanAdmission = "systemone.admission"
	// SpanGuardrails is the guardrails check: a call to the service, or a
	// cached verdict.
	SpanGuardrails = "systemone.guardrails"
	// SpanReadAnswer is the reading of the upstream's answer: decoding,
	// routing, queueing for review.
	SpanReadAnswer = "systemone.read_answer"
)

// tracerName is the instrumentation scope of the handler's spans.
const tracerName = "github.com/systemone/systemone-gateway/handlers"

// noSpan is the span of an untraced request: every method does nothing.
var noSpan trace.Span = noop.Span{}

// startSpan starts a child of the request's span (x.span, read from the
// request's context once) when that span records, from the tracer provider
// Caddy's tracing module gave it; otherwise it returns ctx and noSpan,
// without walking the request's context again (a walk of every value Caddy
// and the handlers put there, per span). The handler depends on the
// OpenTelemetry API only: the SDK and exporter are Caddy's.
func startSpan(ctx context.Context, x *exchange, name string) (context.Context, trace.Span) {
	if !x.span.IsRecording() {
		return ctx, noSpan
	}
	return x.tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
}

// tracer is the handler's tracer, from the provider of the request's span.
// Its scope carries the schema URL of the GenAI conventions the spans
// follow (GenAISemconvVersion).
func (x *exchange) tracer() trace.Tracer {
	return x.span.TracerProvider().Tracer(tracerName, trace.WithSchemaURL(genAISchemaURL))
}

// Attribute keys. None holds an API key, an Authorization value or request
// content: ids, reasons, counts and the upstream's model name only.
const (
	attrOrg              = "systemone.org"
	attrReject           = "systemone.reject"
	attrModelRequested   = "systemone.model_requested"
	attrModel            = "systemone.model"
	attrRoute            = "systemone.route"
	attrRouteReason      = "systemone.route_reason"
	attrTokensEstimated  = "systemone.tokens_estimated"
	attrTokensInput      = "systemone.tokens_input"
	attrCostYuan         = "systemone.cost_yuan"
	attrBreakerState     = "systemone.breaker_state"
	attrRequestID        = "systemone.request_id"
	attrCache            = "systemone.cache"
	attrGuardrailsRisk   = "systemone.guardrails.risk"
	attrGuardrailsAction = "systemone.guardrails.action"
	attrGuardrailsCats   = "systemone.guardrails.categories"
	attrGuardrailsCached = "systemone.guardrails.cached"
	attrGuardrailsError  = "systemone.guardrails.error"
	attrLimitsKind       = "systemone.limits.kind"
	attrLimitsAllowed    = "systemone.limits.allowed"
	attrLimitsBucket     = "systemone.limits.bucket"
	attrLimitsRequests   = "systemone.limits.remaining_requests"
	attrLimitsTokens     = "systemone.limits.remaining_tokens"
	attrLimitsCharged    = "systemone.limits.tokens_charged"
	attrUpstreamStatus   = "systemone.upstream.status"
	attrResponseBytes    = "systemone.response.bytes"
	attrResponseRead     = "systemone.response.readable"
)

// endGuardrails ends a SpanGuardrails span with its verdict. A failed check
// is an error span whose description names the kind of failure only.
func endGuardrails(span trace.Span, v guardrails.Verdict) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String(attrGuardrailsRisk, v.Risk),
		attribute.String(attrGuardrailsAction, v.Action),
		attribute.Bool(attrGuardrailsCached, v.Cached),
	}
	if len(v.Categories) > 0 {
		attrs = append(attrs, attribute.StringSlice(attrGuardrailsCats, v.Categories))
	}
	if v.Err != nil {
		kind := "failed"
		if errors.Is(v.Err, guardrails.ErrTimeout) {
			kind = "timeout"
		}
		attrs = append(attrs, attribute.String(attrGuardrailsError, kind))
		span.SetStatus(codes.Error, "guardrails check "+kind)
	}
	span.SetAttributes(attrs...)
}

// endReadAnswer ends a SpanReadAnswer span with what the reading found.
func endReadAnswer(span trace.Span, x *exchange, status, bodyBytes int, readable bool) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{attribute.Int(attrUpstreamStatus, status)}
	if status == 200 {
		attrs = append(attrs, attribute.Int(attrResponseBytes, bodyBytes), attribute.Bool(attrResponseRead, readable))
	}
	if x.model != "" {
		attrs = append(attrs, attribute.String(attrModel, capped(x.model)))
	}
	if x.route != nil {
		attrs = append(attrs, attribute.String(attrRoute, x.route.Route), attribute.String(attrRouteReason, x.route.Reason))
	}
	if x.hasUsage {
		attrs = append(attrs, attribute.Int64(attrTokensInput, x.usage))
	}
	span.SetAttributes(attrs...)
}

// annotate puts what the gateway decided on the request's server span, once
// the request is done: the same facts as its log entry, without the timings
// (the spans have them).
func (x *exchange) annotate(breakerState string) {
	if !x.span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 14)
	add := func(key, value string) {
		if value != "" {
			attrs = append(attrs, attribute.String(key, capped(value)))
		}
	}
	add(attrOrg, x.org)
	add(attrReject, x.reject)
	add(attrModel, x.model)
	add(attrBreakerState, breakerState)
	add(attrRequestID, x.requestID)
	add(attrCache, x.cache)
	if x.req != nil {
		add(attrModelRequested, x.req.ModelOrDefault())
		attrs = append(attrs, attribute.Int64(attrTokensEstimated, x.req.EstimatedTokens))
	}
	if x.route != nil {
		add(attrRoute, x.route.Route)
		add(attrRouteReason, x.route.Reason)
	}
	if v := x.verdict; v != nil {
		add(attrGuardrailsRisk, v.Risk)
		add(attrGuardrailsAction, v.Action)
	}
	if x.hasUsage {
		attrs = append(attrs, attribute.Int64(attrTokensInput, x.usage), attribute.Float64(attrCostYuan, x.costYuan()))
	}
	x.span.SetAttributes(attrs...)
}
