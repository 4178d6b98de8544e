package handlers

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/systemone/systemone-gateway/policy/limits"
)

// Kinds of admission, in systemone.limits.kind.
const (
	admitEvaluation = "evaluation" // both buckets: a request to be forwarded
	admitRequest    = "request"    // the requests bucket only
)

// admit runs the request's one admission inside a SpanAdmission span:
// Admit, with its estimated tokens, for an evaluation to be forwarded; else
// AdmitRequest.
func (h *Handler) admit(ctx context.Context, x *exchange, forward bool, estimated int64) limits.Decision {
	org := x.org
	ctx, span := startSpan(ctx, x, SpanAdmission)
	defer span.End()
	var d limits.Decision
	kind := admitRequest
	if forward {
		kind = admitEvaluation
		d = h.limiter.Admit(ctx, org, estimated)
	} else {
		d = h.limiter.AdmitRequest(ctx, org)
	}
	if !span.IsRecording() {
		return d
	}
	attrs := []attribute.KeyValue{attribute.String(attrLimitsKind, kind), attribute.Bool(attrLimitsAllowed, d.Allowed)}
	if !d.Allowed && d.Bucket != "" {
		attrs = append(attrs, attribute.String(attrLimitsBucket, d.Bucket))
	}
	if d.Requests.Limit > 0 && d.Requests.Remaining >= 0 {
		attrs = append(attrs, attribute.Int64(attrLimitsRequests, d.Requests.Remaining))
	}
	if d.Tokens.Limit > 0 && d.Tokens.Remaining >= 0 {
		attrs = append(attrs, attribute.Int64(attrLimitsTokens, d.Tokens.Remaining))
	}
	if d.Charged > 0 {
		attrs = append(attrs, attribute.Int64(attrLimitsCharged, d.Charged))
	}
	span.SetAttributes(attrs...)
	if d.Unavailable {
		span.SetStatus(codes.Error, "rate limiter unavailable")
	}
	return d
}

// limitAnswer is the answer for a refused admission, if it was refused.
func limitAnswer(d limits.Decision) (answer, bool) {
	switch {
	case d.Unavailable:
		return answer{status: http.StatusServiceUnavailable, reason: rejectLimiterDown, body: []byte(bodyLimiterDown), retryAfter: defaultRetryAfterShort}, true
	case d.Allowed:
	case d.Bucket == limits.BucketBudget:
		// Final until the period resets (X-Budget-Reset says when): no
		// retry-after, as the upstream's own 402 has none.
		return answer{status: http.StatusPaymentRequired, reason: rejectBudgetExceeded, body: detailBody(d.Message)}, true
	default:
		return answer{status: http.StatusTooManyRequests, reason: rejectRateLimited, body: detailBody(d.Message), retryAfter: d.RetryAfter}, true
	}
	return answer{}, false
}
