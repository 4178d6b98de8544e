package handlers

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/policy/route"
)

// The GenAI view of an evaluation call follows the OpenTelemetry semantic
// conventions for generative AI at GenAISemconvVersion: the last release
// of the semantic conventions that defines them itself (later releases
// moved them to a repository of their own), and the one whose constants
// go.opentelemetry.io/otel ships as semconv/v1.41.0. The handler's spans
// carry its schema URL.
const GenAISemconvVersion = "1.41.0"

// genAISchemaURL is the schema URL of GenAISemconvVersion.
const genAISchemaURL = semconv.SchemaURL

const (
	// GenAIProvider is gen_ai.provider.name: the evaluation service. The
	// conventions name no value for it, so it is named after the product.
	GenAIProvider = "systemone"
	// GenAIOperation is gen_ai.operation.name: "chat", the predefined
	// value that applies. A judge call is one model call over a
	// conversation (the request's state, as messages) that generates the
	// model's answers; the conventions ask for a predefined value where one
	// applies, and a tool that groups GenAI spans by operation then counts
	// the judge's calls with the other chat calls.
	GenAIOperation = "chat"
	// EventEvaluationResult is the span event, one per judged answer, that
	// says how the gateway routed it.
	EventEvaluationResult = "gen_ai.evaluation.result"
	// EvaluationName is the event's gen_ai.evaluation.name: the evaluation
	// is the routing of the answer by its confidence, so its label is the
	// route (auto or human) and its score the confidence.
	EvaluationName = "systemone.route"
)

// Attributes of an evaluation result event besides the conventions' own:
// the facts of the question's route, under the names the rest of the
// handler's telemetry uses. The question id is the client's identifier,
// cut to 256 bytes as in the log; the event never holds an answer.
const (
	attrQuestionID   = "systemone.question.id"
	attrQuestionType = "systemone.question.type"
	attrConfidence   = "systemone.confidence"
	attrThreshold    = "systemone.threshold"
	attrCertificate  = "systemone.certificate"
)

// genAIUsage sums the token usage of the upstream calls of one evaluation.
type genAIUsage struct {
	input, output       int64
	hasInput, hasOutput bool
}

func (u *genAIUsage) add(input int64, hasInput bool, output int64, hasOutput bool) {
	if hasInput {
		u.input, u.hasInput = u.input+input, true
	}
	if hasOutput {
		u.output, u.hasOutput = u.output+output, true
	}
}

func (u genAIUsage) attributes(attrs []attribute.KeyValue) []attribute.KeyValue {
	if u.hasInput {
		attrs = append(attrs, semconv.GenAIUsageInputTokens(int(u.input)))
	}
	if u.hasOutput {
		attrs = append(attrs, semconv.GenAIUsageOutputTokens(int(u.output)))
	}
	return attrs
}

// upstreamCall is the span of one call to the evaluation service: the
// client's request forwarded, or a request the gateway makes itself (such
// as an escalation's second call), each a span of its own. Its zero value
// (an untraced request) does nothing.
type upstreamCall struct {
	span trace.Span
	x    *exchange
}

// startUpstreamCall starts the span of a call to the upstream asking for
// model, a child of the request's span: a CLIENT span named
// "chat <model>", as the conventions name inference spans.
func startUpstreamCall(ctx context.Context, x *exchange, model string) upstreamCall {
	if !x.span.IsRecording() {
		return upstreamCall{}
	}
	model = capped(model)
	_, span := x.tracer().Start(ctx,
		GenAIOperation+" "+model,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			semconv.GenAIOperationNameKey.String(GenAIOperation),
			semconv.GenAIProviderNameKey.String(GenAIProvider),
			semconv.GenAIRequestModel(model),
		))
	return upstreamCall{span: span, x: x}
}

// callResult is what one upstream call came back with.
type callResult struct {
	status    int                  // the upstream's status; 0 when it did not answer
	requestID string               // its x-request-id
	resp      *evaluation.Response // its 200 as read; nil when unread
	// input tokens when resp is nil but the usage was read (a 200 a
	// parallel guardrails verdict kept from the client)
	input    int64
	hasInput bool
	failure  string // why no answer came back whole: upstream_unavailable, upstream_timeout, incomplete_response, client_closed
}

// end ends the call's span with what came back, and adds the call's usage
// to the request's.
func (c upstreamCall) end(res callResult) {
	if c.span == nil {
		return
	}
	defer c.span.End()
	attrs := make([]attribute.KeyValue, 0, 8)
	if res.status != 0 {
		attrs = append(attrs, semconv.HTTPResponseStatusCode(res.status))
	}
	if res.requestID != "" {
		attrs = append(attrs, semconv.GenAIResponseID(capped(res.requestID)))
	}
	var usage genAIUsage
	if r := res.resp; r != nil {
		if r.Model != "" {
			attrs = append(attrs, semconv.GenAIResponseModel(capped(r.Model)))
		}
		usage.add(r.InputTokens, r.HasUsage, r.OutputTokens, r.HasOutputTokens)
	} else {
		usage.add(res.input, res.hasInput, 0, false)
	}
	attrs = usage.attributes(attrs)
	c.x.genAI.add(usage.input, usage.hasInput, usage.output, usage.hasOutput)
	errType := res.failure
	if errType == "" && res.status >= 400 {
		errType = strconv.Itoa(res.status)
	}
	if errType != "" {
		attrs = append(attrs, semconv.ErrorTypeKey.String(errType))
		c.span.SetStatus(codes.Error, errType)
	}
	c.span.SetAttributes(attrs...)
}

// annotateGenAI puts the conventions' attributes of the evaluation call on
// the request's span, with the usage summed over its upstream calls (none
// for an answer from the cache, which used no tokens), and adds one
// EventEvaluationResult event per routed question, in the request's order.
func (x *exchange) annotateGenAI() {
	if !x.span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs,
		semconv.GenAIOperationNameKey.String(GenAIOperation),
		semconv.GenAIProviderNameKey.String(GenAIProvider))
	if x.req != nil {
		attrs = append(attrs, semconv.GenAIRequestModel(capped(x.req.ModelOrDefault())))
	}
	if x.model != "" {
		attrs = append(attrs, semconv.GenAIResponseModel(capped(x.model)))
	}
	if x.requestID != "" {
		attrs = append(attrs, semconv.GenAIResponseID(capped(x.requestID)))
	}
	attrs = x.genAI.attributes(attrs)
	switch {
	case x.reject != "":
		attrs = append(attrs, semconv.ErrorTypeKey.String(x.reject))
	case x.status >= 400:
		attrs = append(attrs, semconv.ErrorTypeKey.String(strconv.Itoa(x.status)))
	}
	x.span.SetAttributes(attrs...)
	if x.route == nil {
		return
	}
	for _, q := range x.route.Questions {
		x.span.AddEvent(EventEvaluationResult, trace.WithAttributes(x.evaluationResult(q)...))
	}
}

// evaluationResult is the attributes of one question's result event.
func (x *exchange) evaluationResult(q route.QuestionRoute) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 12)
	attrs = append(attrs,
		semconv.GenAIEvaluationName(EvaluationName),
		semconv.GenAIEvaluationScoreLabel(q.Route),
		semconv.GenAIEvaluationExplanation(q.Reason),
		attribute.String(attrQuestionID, capped(q.ID)),
		attribute.String(attrQuestionType, q.Type),
		attribute.String(attrRoute, q.Route),
		attribute.String(attrRouteReason, q.Reason),
	)
	if q.HasConfidence {
		attrs = append(attrs, semconv.GenAIEvaluationScoreValue(q.Confidence), attribute.Float64(attrConfidence, q.Confidence))
	}
	if q.HasThreshold {
		attrs = append(attrs, attribute.Float64(attrThreshold, q.Threshold))
	}
	if q.Route == route.RouteAuto && q.Certificate != "" {
		attrs = append(attrs, attribute.String(attrCertificate, q.Certificate))
	}
	if x.requestID != "" {
		attrs = append(attrs, semconv.GenAIResponseID(capped(x.requestID)))
	}
	return attrs
}

// callResult is what the forwarded call came back with, once next returned
// err: its status, answer and usage as read, or why none came back whole.
func (x *exchange) callResult(rec *interceptor, err error) callResult {
	res := callResult{status: rec.upstreamStatus, requestID: x.requestID, resp: x.resp}
	if x.resp == nil && x.hasUsage {
		res.input, res.hasInput = x.usage, true
	}
	switch {
	case rec.clientGone || err != nil && errorStatus(err) == statusClientClosed:
		res.failure = "client_closed"
	case rec.brokeOff || errors.Is(err, errIncompleteResponse):
		res.failure = "incomplete_response"
	case err != nil && rec.upstreamStatus == 0 && errorStatus(err) == http.StatusGatewayTimeout:
		res.failure = "upstream_timeout"
	case err != nil && rec.upstreamStatus == 0:
		res.failure = "upstream_unavailable"
	}
	return res
}
