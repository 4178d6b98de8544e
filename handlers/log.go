package handlers

import (
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// record counts a finished evaluation request in the metrics, puts it on
// its trace and writes its one log entry. Every field of the contract is
// present in every entry (empty or null when it does not apply), so log
// queries never need to test for a field's existence. It holds no key, no Authorization value and no
// request text.
func (h *Handler) record(x *exchange) {
	breakerState := x.breakerState
	if breakerState == "" && h.breakers != nil && x.req != nil {
		breakerState = h.breakers.State(x.req.ModelOrDefault())
	}
	h.metrics.observe(x, h.orgLabel(x.org))
	x.annotate(breakerState)

	ce := h.logger.Check(zapcore.InfoLevel, "systemone request")
	if ce == nil {
		return
	}
	var (
		modelRequested, routeName, routeReason string
		minConfidence                          *float64
		risk, action, categories               string
		guardrailsMS                           *float64
		estimated                              *int64
		tokensInput                            *int64
		cost                                   *float64
		upstreamMS                             *float64
	)
	if x.req != nil {
		modelRequested = x.req.ModelOrDefault()
		estimated = &x.req.EstimatedTokens
	}
	if x.route != nil {
		routeName, routeReason = x.route.Route, x.route.Reason
		if x.route.HasMinConfidence {
			minConfidence = &x.route.MinConfidence
		}
	}
	if v := x.verdict; v != nil {
		risk, action, categories = v.Risk, v.Action, strings.Join(v.Categories, ",")
		guardrailsMS = millis(v.Elapsed)
	}
	if x.hasUsage {
		tokensInput = &x.usage
		c := x.costYuan()
		cost = &c
	}
	if x.forwarded {
		upstreamMS = millis(x.upstream)
	}
	// Why reverse_proxy could not reach the upstream (a dial or read
	// error: addresses, never content), beside the 502/504 it became.
	var upstreamError string
	if x.upstreamErr != nil {
		upstreamError = x.upstreamErr.Error()
	}
	ce.Write(
		zap.String("org", x.org),
		zap.String("model_requested", modelRequested),
		zap.String("model", x.model),
		zap.Int("status", x.status),
		zap.String("reject", x.reject),
		zap.String("route", routeName),
		zap.String("route_reason", routeReason),
		zap.Float64p("min_confidence", minConfidence),
		zap.String("guardrails_risk", risk),
		zap.String("guardrails_action", action),
		zap.String("guardrails_categories", categories),
		zap.Float64p("guardrails_ms", guardrailsMS),
		zap.Int64p("tokens_estimated", estimated),
		zap.Int64p("tokens_input", tokensInput),
		zap.Float64p("cost_yuan", cost),
		zap.String("breaker_state", breakerState),
		zap.Float64p("upstream_ms", upstreamMS),
		zap.Float64p("total_ms", millis(h.now().Sub(x.start))),
		zap.String("request_id", x.requestID),
		zap.String("upstream_error", upstreamError),
		zap.Inline(budgetLog{x}),
	)
}

// millis is a duration in milliseconds with microsecond precision.
func millis(d time.Duration) *float64 {
	ms := float64(d.Microseconds()) / 1000
	return &ms
}
