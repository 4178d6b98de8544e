package handlers

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/systemone/systemone-gateway/policy/breaker"
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
	total := h.now().Sub(x.start)
	overhead := max(total-x.waited, 0)
	h.metrics.observe(x, h.orgLabel(x.org), overhead)
	x.annotate(breakerState)
	x.annotateGenAI()

	if ce := h.logger.Check(zapcore.InfoLevel, "systemone request"); ce != nil {
		// The exchange itself is the entry, one inline object in a field
		// array of its own: the logger's encoder (Caddy's configured
		// one) is handed the values directly, each encoded once, with
		// nothing allocated to carry them.
		x.log = logEntry{breakerState: breakerState, total: total, overhead: overhead}
		x.logField[0] = zap.Inline(x)
		ce.Write(x.logField[:]...)
	}
}

// logEntry is what a request's log entry reports beside the exchange.
type logEntry struct {
	breakerState string
	// total is the request's time in the handler; overhead is the part of
	// it the gateway worked, not waiting for the upstream or the
	// guardrails service.
	total, overhead time.Duration
}

// MarshalLogObject implements zapcore.ObjectMarshaler: the fields of the
// request's log entry, in the contract's order.
func (x *exchange) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	e := &x.log
	var modelRequested, routeName, routeReason, routeCertificates string
	if x.req != nil {
		modelRequested = x.req.ModelOrDefault()
	}
	if x.route != nil {
		routeName, routeReason, routeCertificates = x.route.Route, x.route.Reason, x.route.Certificates()
	}
	enc.AddString("org", capped(x.org))
	enc.AddString("model_requested", capped(modelRequested))
	enc.AddString("model", capped(x.model))
	enc.AddInt("status", x.status)
	enc.AddString("reject", x.reject)
	enc.AddString("route", routeName)
	enc.AddString("route_reason", routeReason)
	// The certificates of the thresholds that routed questions auto, so
	// that an auditor can tell from the log why an answer was trusted.
	enc.AddString("route_certificates", routeCertificates)
	addFloatOrNull(enc, "min_confidence", x.route != nil && x.route.HasMinConfidence, func() float64 { return x.route.MinConfidence })
	var risk, action, categories string
	if v := x.verdict; v != nil {
		risk, action = v.Risk, v.Action
		if len(v.Categories) > 0 {
			categories = strings.Join(v.Categories, ",")
		}
	}
	enc.AddString("guardrails_risk", risk)
	enc.AddString("guardrails_action", action)
	enc.AddString("guardrails_categories", categories)
	addFloatOrNull(enc, "guardrails_ms", x.verdict != nil, func() float64 { return millis(x.verdict.Elapsed) })
	if x.req != nil {
		enc.AddInt64("tokens_estimated", x.req.EstimatedTokens)
	} else {
		addNull(enc, "tokens_estimated")
	}
	// With an escalation, both calls' tokens: the usage the client's
	// body reports, and what the org was charged.
	tokens := x.usage + x.esc.usage
	if x.hasUsage {
		enc.AddInt64("tokens_input", tokens)
	} else {
		addNull(enc, "tokens_input")
	}
	addFloatOrNull(enc, "cost_yuan", x.hasUsage, func() float64 { return x.costOf(tokens) })
	enc.AddString("breaker_state", e.breakerState)
	addFloatOrNull(enc, "upstream_ms", x.forwarded, func() float64 { return millis(x.upstream) })
	enc.AddFloat64("total_ms", millis(e.total))
	enc.AddFloat64("overhead_ms", millis(e.overhead))
	enc.AddString("request_id", capped(x.requestID))
	enc.AddString("cache", x.cache)
	// Why reverse_proxy could not reach the upstream (a dial or read
	// error: addresses, never content), beside the 502/504 it became.
	var upstreamError string
	if x.upstreamErr != nil {
		upstreamError = x.upstreamErr.Error()
	}
	enc.AddString("upstream_error", upstreamError)
	enc.AddString("escalation", x.esc.outcome)
	return budgetLog{x}.MarshalLogObject(enc)
}

// maxLoggedString bounds, in bytes, each string of a log entry or span that
// a client or the upstream chooses (the requested model, the org from
// org_header, the upstream's model and request id): 256, as the longest
// model name that gets a breaker. A 3 MB model name must not make a 3 MB
// log line.
const maxLoggedString = breaker.MaxModelLen

// capped is s cut to maxLoggedString bytes at a character boundary, and
// marked as cut with the length it had: "<first bytes>…(truncated, 3000000
// bytes)". A string within the bound is returned as it is.
func capped(s string) string {
	if len(s) <= maxLoggedString {
		return s
	}
	cut := maxLoggedString
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(truncated, " + strconv.Itoa(len(s)) + " bytes)"
}

// addFloatOrNull adds the value of f when ok, else null.
func addFloatOrNull(enc zapcore.ObjectEncoder, key string, ok bool, f func() float64) {
	if ok {
		enc.AddFloat64(key, f())
		return
	}
	addNull(enc, key)
}

// addNull adds key with a null value.
func addNull(enc zapcore.ObjectEncoder, key string) {
	_ = enc.AddReflected(key, nil)
}

// millis is a duration in milliseconds with microsecond precision.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
