package handlers

import (
	"errors"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/systemone/systemone-gateway/policy/breaker"
)

// metrics are the gateway's Prometheus collectors, registered on Caddy's
// metrics registry (served by the `metrics` handler and the admin
// endpoint). Every counter has an `org` label, empty unless per_org_metrics
// is on: org ids are unbounded, and a label per org can swamp Prometheus.
type metrics struct {
	requests        *prometheus.CounterVec
	guardrails      *prometheus.CounterVec
	limitRejections *prometheus.CounterVec
	breakerState    prometheus.Collector // the breaker package's: it knows which models have a breaker
	inputTokens     *prometheus.CounterVec
	cost            *prometheus.CounterVec
	budgetSpent     *prometheus.GaugeVec
}

const namespace = "systemone"

// allMetrics are created once per process and registered on the registry
// of every config Caddy loads (each load has a registry of its own): so
// counters keep counting across reloads.
var allMetrics = sync.OnceValue(func() *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "requests_total",
			Help: "Evaluation requests by outcome (forwarded, or the X-Gateway-Reject reason), upstream status and route.",
		}, []string{"outcome", "status", "route", "org"}),
		guardrails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "guardrails_verdicts_total",
			Help: "Guardrails verdicts by risk level and the gateway's action.",
		}, []string{"risk", "action", "org"}),
		limitRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "limit_rejections_total",
			Help: "Requests refused by the rate limiter, by bucket (requests, tokens, upstream_hold, budget, unavailable).",
		}, []string{"bucket", "org"}),
		breakerState: breaker.StateCollector(),
		inputTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "input_tokens_total",
			Help: "Input tokens the upstream billed (usage.input_tokens of 200 answers).",
		}, []string{"org"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "cost_yuan_total",
			Help: "Cost of the billed input tokens in yuan (at the limits' price, 0.042 per million by default).",
		}, []string{"org"}),
		budgetSpent: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "budget_spent_yuan",
			Help: "What the organization spent in its budget's current day or month, as this instance last saw it (per_org_metrics only).",
		}, []string{"org"}),
	}
})

// newMetrics registers the collectors on reg; several handlers in one
// config share them.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := *allMetrics()
	var err error
	m.requests, err = register(reg, m.requests)
	if err == nil {
		m.guardrails, err = register(reg, m.guardrails)
	}
	if err == nil {
		m.limitRejections, err = register(reg, m.limitRejections)
	}
	if err == nil {
		m.breakerState, err = register(reg, m.breakerState)
	}
	if err == nil {
		m.inputTokens, err = register(reg, m.inputTokens)
	}
	if err == nil {
		m.cost, err = register(reg, m.cost)
	}
	if err == nil {
		m.budgetSpent, err = register(reg, m.budgetSpent)
	}
	return &m, err
}

// register registers c, or returns the collector already registered under
// its name.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

// observe counts one finished evaluation request.
func (m *metrics) observe(x *exchange, org string) {
	outcome := "forwarded"
	if x.reject != "" {
		outcome = x.reject
	}
	routeName := ""
	if x.route != nil {
		routeName = x.route.Route
	}
	m.requests.WithLabelValues(outcome, strconv.Itoa(x.status), routeName, org).Inc()
	if v := x.verdict; v != nil {
		m.guardrails.WithLabelValues(v.Risk, v.Action, org).Inc()
	}
	switch x.reject {
	case rejectRateLimited, rejectBudgetExceeded:
		m.limitRejections.WithLabelValues(x.limits.Bucket, org).Inc()
	case rejectLimiterDown:
		m.limitRejections.WithLabelValues("unavailable", org).Inc()
	}
	if x.hasUsage {
		m.inputTokens.WithLabelValues(org).Add(float64(x.usage))
		m.cost.WithLabelValues(org).Add(x.costYuan())
	}
	if spent, ok := x.budgetSpent(); ok && org != "" {
		m.budgetSpent.WithLabelValues(org).Set(spent)
	}
}
