package handlers

import (
	"net/http"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/systemone/systemone-gateway/evaluation"
	"github.com/systemone/systemone-gateway/policy/limits"
)

// settle ends the request's admission: the token bucket learns the real
// count, the budget is charged what the upstream billed and the reservation
// is released (see billedTokens). A 200 whose usage could not be read is
// charged its estimate, and logged: the upstream billed it, for an amount
// the gateway can only guess.
func (h *Handler) settle(x *exchange, d limits.Decision) {
	billed := x.billedTokens()
	if billed > 0 && !x.hasUsage && d.Allowed {
		if ce := h.logger.Check(zapcore.WarnLevel, "no usage in the upstream's 200; charged the estimate"); ce != nil {
			ce.Write(zap.String("org", capped(x.org)), zap.Int64("tokens_estimated", billed), zap.String("request_id", capped(x.requestID)))
		}
	}
	h.limiter.Settle(d, billed)
}

// billedTokens is what the request finally costs the org's token bucket
// and budget: what the upstream billed. That is the upstream's usage for a
// 200 that reported it, the estimate for a 200 that did not (or that the
// client left before it was read), also for a 200 that a parallel
// guardrails verdict kept from the client (the upstream billed it all the
// same, and an org must not spend unbounded through refused requests);
// nothing for anything else (the upstream bills only success), nor for a
// 200 that broke off mid-body.
func (x *exchange) billedTokens() int64 {
	switch {
	case x.req == nil || x.upstreamStatus != http.StatusOK || x.status == http.StatusBadGateway:
		return 0
	case x.hasUsage:
		return x.usage
	default:
		return x.req.EstimatedTokens
	}
}

// readUsage reads the usage of a 200 that will not reach the client.
func (x *exchange) readUsage(header http.Header, raw []byte) {
	if raw == nil {
		return
	}
	if text, err := decodeBody(header, raw, maxResponseBuffer); err == nil {
		if resp, _ := evaluation.ParseResponse(text); resp != nil {
			x.usage, x.hasUsage = resp.InputTokens, resp.HasUsage
		}
	}
}

// addBudgetHeaders adds the X-Budget-* headers of a 200 about to go to the
// client, once its usage is read: the remaining budget after its real cost.
// (The upstream status is not recorded yet, so billedTokens cannot say.)
func (x *exchange) addBudgetHeaders() {
	if x.limits == nil || x.limits.Budget.Limit == 0 || x.req == nil || x.cache == cacheHit {
		return // a hit is billed nothing: addHeaders said so
	}
	tokens := x.req.EstimatedTokens
	if x.hasUsage {
		tokens = x.usage
	}
	x.limits.Budget.AddHeaders(&x.hdr, x.limits.Cost(tokens))
}

// costYuan is what the upstream's usage cost, at the limits' price (0.042
// yuan per million input tokens unless `price` says otherwise).
func (x *exchange) costYuan() float64 { return x.costOf(x.usage) }

// costOf is what tokens input tokens cost at the limits' price.
func (x *exchange) costOf(tokens int64) float64 {
	var d limits.Decision
	if x.limits != nil {
		d = *x.limits
	}
	return float64(tokens) * d.Price().Float() / 1e6
}

// budgetLog is the log entry's budget_remaining_yuan, present when a budget
// applies to the org: what is left once the request is charged (rounded
// down to 6 decimals, as X-Budget-Remaining), null when unknown (Redis
// failed with on_store_error allow or deny).
type budgetLog struct{ x *exchange }

// MarshalLogObject implements zapcore.ObjectMarshaler.
func (b budgetLog) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	x := b.x
	if x.limits == nil || x.limits.Budget.Limit == 0 {
		return nil
	}
	if left, ok := x.limits.Budget.Remaining(x.limits.Cost(x.billedTokens())); ok {
		enc.AddFloat64("budget_remaining_yuan", left.Truncate6().Float())
	} else {
		return enc.AddReflected("budget_remaining_yuan", nil)
	}
	return nil
}

// budgetSpent is the org's spend in the period as this instance last saw
// it (at the request's admission, plus the request's own cost), for the
// spend gauge; ok is false when no budget applies or it is unknown.
func (x *exchange) budgetSpent() (yuan float64, ok bool) {
	if x.limits == nil || x.limits.Budget.Limit == 0 || x.limits.Budget.Spent < 0 {
		return 0, false
	}
	return (x.limits.Budget.Spent + x.limits.Cost(x.billedTokens())).Float(), true
}
