package handlers

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/systemone/systemone-gateway/policy/breaker"
	"github.com/systemone/systemone-gateway/policy/limits"
	"github.com/systemone/systemone-gateway/policy/route"
)

// metrics are the gateway's Prometheus collectors, registered on Caddy's
// metrics registry (served by the `metrics` handler and the admin
// endpoint). The counters of requests, verdicts, rejections, tokens and
// cost have an `org` label: empty unless per_org_metrics is on, and then
// bounded (see Handler.orgLabel).
type metrics struct {
	requests        *prometheus.CounterVec
	guardrails      *prometheus.CounterVec
	limitRejections *prometheus.CounterVec
	breakerState    prometheus.Collector // the breaker package's: it knows which models have a breaker
	inputTokens     *prometheus.CounterVec
	cost            *prometheus.CounterVec
	routes          *prometheus.CounterVec
	limiterState    prometheus.Collector
	budgetSpent     *prometheus.GaugeVec
	cacheRequests   *prometheus.CounterVec
	cacheWaiting    prometheus.Gauge
	overhead        prometheus.Histogram
	reviewLost      prometheus.Collector // the route package's: its queue writer counts
	escalations     *prometheus.CounterVec
}

// otherLabel stands for every value past a label's bound: orgs that
// per_org_metrics does not name, models past maxModelLabels.
const otherLabel = "other"

// maxModelLabels bounds the model label of systemone_routes_total: the
// first versions the upstream answered with get their own, later ones are
// "other". maxModelLabelLen bounds one: a longer name is "other" too.
const (
	maxModelLabels   = 100
	maxModelLabelLen = 128
)

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
		routes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "routes_total",
			Help: "Routed 200 answers by the concrete model version that answered (at most 100, then other), route and reason.",
		}, []string{"model", "route", "reason"}),
		limiterState: limits.Collector(),
		cacheRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "cache_requests_total",
			Help: "Evaluation requests that reached the upstream step with the answer cache on, by result: hit (answered from the cache) or miss (forwarded).",
		}, []string{"result"}),
		cacheWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "cache_waiting",
			Help: "Evaluation requests waiting for the answer to an identical request (same org and body) that is at the upstream.",
		}),
		overhead: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "gateway_overhead_seconds",
			Help:    "The gateway's own time per evaluation request: its time in the handler less the time it waited for the upstream and the guardrails service.",
			Buckets: overheadBuckets,
		}),
		reviewLost: route.LostEntriesCollector(),
		escalations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "escalations_total",
			Help: "Answers asked again of an escalate block's second version, by first and second version and outcome (auto, human, refused, failed, timeout, breaker_open).",
		}, []string{"from", "to", "outcome"}),
	}
})

// overheadBuckets resolve the gateway's own time per request from 5 µs (a
// request refused in process) to 100 ms (a Redis that answers slowly).
var overheadBuckets = []float64{5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 100e-3}

// routeModels bounds the model label of systemone_routes_total for the
// process, as the counter lives as long as the process.
var routeModels = newBoundedLabel(maxModelLabels, maxModelLabelLen)

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
		m.routes, err = register(reg, m.routes)
	}
	if err == nil {
		m.limiterState, err = register(reg, m.limiterState)
	}
	if err == nil {
		m.budgetSpent, err = register(reg, m.budgetSpent)
	}
	if err == nil {
		m.cacheRequests, err = register(reg, m.cacheRequests)
	}
	if err == nil {
		m.cacheWaiting, err = register(reg, m.cacheWaiting)
	}
	if err == nil {
		m.overhead, err = register(reg, m.overhead)
	}
	if err == nil {
		m.reviewLost, err = register(reg, m.reviewLost)
	}
	if err == nil {
		m.escalations, err = register(reg, m.escalations)
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

// limitRejected counts a request the limiter refused (an evaluation or
// any other request), by the bucket that refused it.
func (m *metrics) limitRejected(d limits.Decision, org string) {
	bucket := d.Bucket
	if d.Unavailable {
		bucket = "unavailable"
	}
	m.limitRejections.WithLabelValues(bucket, org).Inc()
}

// observe counts one finished evaluation request.
func (m *metrics) observe(x *exchange, org string, overhead time.Duration) {
	m.overhead.Observe(overhead.Seconds())
	outcome := "forwarded"
	switch {
	case x.reject != "":
		outcome = x.reject
	case x.cache == cacheHit:
		outcome = "cached" // answered without the upstream
	}
	routeName := ""
	if x.route != nil {
		routeName = x.route.Route
	}
	m.requests.WithLabelValues(outcome, statusLabel(x.status), routeName, org).Inc()
	if v := x.verdict; v != nil {
		m.guardrails.WithLabelValues(v.Risk, v.Action, org).Inc()
	}
	switch x.reject {
	case rejectRateLimited, rejectBudgetExceeded, rejectLimiterDown:
		m.limitRejected(*x.limits, org)
	}
	if x.hasUsage {
		m.inputTokens.WithLabelValues(org).Add(float64(x.usage))
		m.cost.WithLabelValues(org).Add(x.costYuan())
	}
	if t := x.esc.usage; t > 0 { // an escalation's second call, billed to the org too
		m.inputTokens.WithLabelValues(org).Add(float64(t))
		m.cost.WithLabelValues(org).Add(x.costOf(t))
	}
	if spent, ok := x.budgetSpent(); ok && org != "" {
		m.budgetSpent.WithLabelValues(org).Set(spent)
	}
	if d := x.route; d != nil {
		m.routes.WithLabelValues(routeModels.label(d.Model), d.Route, d.Reason).Inc()
	}
	if x.cache != "" {
		m.cacheRequests.WithLabelValues(x.cache).Inc()
	}
}

// statusLabels are the statuses 100 to 599 in decimal, so that labelling a
// request's status allocates nothing.
var statusLabels = func() (s [500]string) {
	for i := range s {
		s[i] = strconv.Itoa(100 + i)
	}
	return s
}()

// statusLabel is status in decimal.
func statusLabel(status int) string {
	if status >= 100 && status < 600 {
		return statusLabels[status-100]
	}
	return strconv.Itoa(status)
}

// orgLabel is the org label of a request's metrics. Without
// per_org_metrics it is empty. With it, an org gets a label of its own only
// when the config names it: a value of the org_keys file, an `org` of the
// limits block, or an org listed after per_org_metrics; every other org is
// "other". So the number of series is bounded by the config, never by the
// keys clients send (a fingerprint org per random key) or by an org_header
// value. A request with no org (401) has an empty label.
func (h *Handler) orgLabel(org string) string {
	switch {
	case !h.PerOrgMetrics || org == "":
		return ""
	case h.namedOrgs[org]:
		return org
	default:
		return otherLabel
	}
}

// namedOrgs are the orgs the config names, as orgLabel reads them: the
// org_keys file's, the limits block's and MetricsOrgs, placeholders
// resolved. Nil without per_org_metrics.
func (h *Handler) namedOrgSet(repl *caddy.Replacer) map[string]bool {
	if !h.PerOrgMetrics {
		return nil
	}
	named := make(map[string]bool)
	for _, org := range h.identity.Orgs() {
		named[org] = true
	}
	if h.Limits != nil {
		for org := range h.Limits.Orgs {
			named[repl.ReplaceAll(org, "")] = true
		}
	}
	for _, org := range h.MetricsOrgs {
		named[repl.ReplaceAll(org, "")] = true
	}
	return named
}

// boundedLabel admits the first max distinct values of a label (each at most
// maxLen bytes) and maps every later one to otherLabel. It never forgets a
// value: a counter's series cannot be dropped without losing its count.
type boundedLabel struct {
	mu     sync.RWMutex
	seen   map[string]struct{}
	max    int
	maxLen int
}

func newBoundedLabel(max, maxLen int) *boundedLabel {
	return &boundedLabel{seen: make(map[string]struct{}), max: max, maxLen: maxLen}
}

// label returns v, or otherLabel when v is past the bound.
func (b *boundedLabel) label(v string) string {
	b.mu.RLock()
	_, ok := b.seen[v]
	b.mu.RUnlock()
	if ok {
		return v
	}
	if len(v) > b.maxLen {
		return otherLabel
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.seen[v]; ok {
		return v
	}
	if len(b.seen) >= b.max {
		return otherLabel
	}
	b.seen[v] = struct{}{}
	return v
}
