// Package handlers holds the systemone HTTP handler: the edge of the
// evaluation service. It reads and inspects each evaluation request, runs the
// policies in order, hands the unchanged request to the next handler
// (reverse_proxy), and reads the upstream's answer on its way back.
package handlers

import (
	"fmt"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/internal/drain"
	"github.com/systemone/systemone-gateway/internal/keyprefix"
	"github.com/systemone/systemone-gateway/internal/redispool"
	"github.com/systemone/systemone-gateway/policy/breaker"
	"github.com/systemone/systemone-gateway/policy/cache"
	"github.com/systemone/systemone-gateway/policy/guardrails"
	"github.com/systemone/systemone-gateway/policy/identity"
	"github.com/systemone/systemone-gateway/policy/limits"
	"github.com/systemone/systemone-gateway/policy/route"
)

// DefaultMaxBody is the largest evaluation request body accepted: 4 MiB.
const DefaultMaxBody = 4 << 20

// maxResponseBuffer bounds how much of a 200 answer the gateway holds back
// to read (and, decompressed, how much it decodes). Larger answers stream
// through unread and are routed to a human as unreadable.
const maxResponseBuffer = 8 << 20

// Handler is the `systemone` directive: an HTTP middleware placed before
// reverse_proxy. Every policy is optional: a nil block turns it off.
type Handler struct {
	// MaxBody is the largest evaluation request body, in bytes; larger ones
	// get 413 request_too_large. Default 4 MiB.
	MaxBody int64 `json:"max_body,omitempty"`
	// OrgHeader names a request header, set by a preceding handler, that is
	// trusted as the organization id. Default none: the org comes from the
	// key. It must be a valid header name and not one that carries
	// credentials (Authorization, Proxy-Authorization, Cookie, Set-Cookie).
	OrgHeader string `json:"org_header,omitempty"`
	// OrgKeys is a JSON file mapping the hex SHA-256 of API keys to org ids,
	// so several keys share one organization's buckets. Default none: each
	// key is an organization named by its fingerprint. A regular file of at
	// most 16 MiB.
	OrgKeys string `json:"org_keys,omitempty"`
	// UnknownKeys is "own" (default: a key missing from org_keys is an org
	// of its own) or "reject" (401 at the edge, whatever OrgHeader says).
	UnknownKeys string `json:"unknown_keys,omitempty"`
	// Redis lists the redis:// or rediss:// URLs of the one store of shared
	// state: token buckets, budgets, the verdict cache, the review queue. One URL is a
	// single server; several are the seed nodes of a Redis Cluster. Default
	// none: state is kept in process and the review queue is unavailable.
	Redis []string `json:"redis,omitempty"`
	// KeyPrefix starts every key the gateway keeps state in (the review
	// stream is named exactly as `queue` says). Default "systemone:".
	KeyPrefix string `json:"key_prefix,omitempty"`
	// Limits are the per-organization token buckets and spend budgets.
	Limits *limits.Config `json:"limits,omitempty"`
	// Guardrails checks every evaluation request's state before forwarding.
	Guardrails *guardrails.Config `json:"guardrails,omitempty"`
	// Breaker opens per model on a run of upstream overloads.
	Breaker *breaker.Config `json:"breaker,omitempty"`
	// Route stamps X-Route from confidence thresholds pinned to versions.
	Route *route.Config `json:"route,omitempty"`
	// Cache answers an org's byte-identical evaluation request from the
	// upstream's earlier 200, from a concrete version only. Default off.
	Cache *cache.Config `json:"cache,omitempty"`
	// PerOrgMetrics labels the Prometheus metrics with the org id. Only the
	// orgs the config names get a label of their own (the org_keys file's,
	// the limits block's `org`s and MetricsOrgs); every other org is
	// "other", so that clients cannot grow the number of series. Default
	// off: the org label is empty.
	PerOrgMetrics bool `json:"per_org_metrics,omitempty"`
	// MetricsOrgs names more orgs that get a label of their own with
	// per_org_metrics, such as orgs an org_header names. Default none.
	MetricsOrgs []string `json:"metrics_orgs,omitempty"`

	logger     *zap.Logger
	identity   *identity.Resolver
	limiter    *limits.Limiter
	guardrails *guardrails.Checker
	breakers   *breaker.Set
	router     *route.Router
	cache      *cache.Cache
	metrics    *metrics
	namedOrgs  map[string]bool // the orgs with a metrics label of their own
	// ownedPrefixes are the header namespaces of the policies that are on.
	ownedPrefixes []string
	redis         redis.UniversalClient
	release       func() error
	now           func() time.Time
	// gate holds the shared state for the requests still in this config
	// after a reload has retired it (see Cleanup).
	gate *drain.Gate
	// config names the loaded config, for its readiness endpoint (Health).
	config <-chan struct{}
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.systemone",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision applies defaults, acquires the shared state that outlives a
// config reload (the Redis client, buckets, breakers) and hands each policy
// what it uses of it. Each policy package resolves the placeholders of its
// own options.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.gate = new(drain.Gate)
	h.logger = ctx.Logger()
	h.now = time.Now
	if h.MaxBody == 0 {
		h.MaxBody = DefaultMaxBody
	}
	repl := caddy.NewReplacer()
	var err error
	if h.metrics, err = newMetrics(ctx.GetMetricsRegistry()); err != nil {
		return fmt.Errorf("registering metrics: %v", err)
	}
	h.identity, err = identity.New(h.OrgHeader, h.OrgKeys, h.UnknownKeys)
	if err != nil {
		return err
	}
	prefix, err := keyprefix.Resolve(repl, h.KeyPrefix)
	if err != nil {
		return err
	}
	if len(h.Redis) > 0 {
		if h.redis, h.release, err = redispool.Acquire(replaceAll(repl, h.Redis)); err != nil {
			return fmt.Errorf("redis: %v", err)
		}
	}
	if h.Limits != nil {
		if h.limiter, err = limits.New(*h.Limits, h.redis, prefix, h.logger.Named("limits")); err != nil {
			return fmt.Errorf("limits: %v", err)
		}
	}
	if h.Breaker != nil {
		if h.breakers, err = breaker.New(*h.Breaker, h.logger.Named("breaker")); err != nil {
			return fmt.Errorf("breaker: %v", err)
		}
	}
	if h.Guardrails != nil {
		if h.guardrails, err = guardrails.New(*h.Guardrails, h.redis, prefix, h.logger.Named("guardrails")); err != nil {
			return fmt.Errorf("guardrails: %v", err)
		}
	}
	if h.Cache != nil {
		if h.cache, err = cache.New(*h.Cache, h.redis, prefix, h.logger.Named("cache"), h.metrics.cacheWaiting); err != nil {
			return fmt.Errorf("cache: %v", err)
		}
	}
	if h.Route != nil {
		if h.router, err = route.New(*h.Route, h.redis, prefix, h.logger.Named("route")); err != nil {
			return fmt.Errorf("route: %v", err)
		}
	}
	h.namedOrgs = h.namedOrgSet(repl)
	h.ownedPrefixes = []string{prefixGateway}
	if h.router != nil {
		h.ownedPrefixes = append(h.ownedPrefixes, prefixRoute)
	}
	if h.guardrails != nil {
		h.ownedPrefixes = append(h.ownedPrefixes, prefixGuardrails)
	}
	if h.limiter != nil {
		h.ownedPrefixes = append(h.ownedPrefixes, prefixRateLimit, prefixBudget)
	}
	h.register(ctx)
	return nil
}

// DefaultKeyPrefix is the key prefix KeyPrefix defaults to (the same for
// systemone_review; package keyprefix has the rule both follow).
const DefaultKeyPrefix = keyprefix.Default

func replaceAll(repl *caddy.Replacer, values []string) []string {
	out := make([]string, 0, len(values))
	for _, v := range values {
		out = append(out, strings.Fields(repl.ReplaceAll(v, ""))...)
	}
	return out
}

// Validate checks the handler's own settings as written, before
// placeholders are resolved; each policy's block is checked by its package.
// Its error texts are the ones the Caddyfile reports.
func (h *Handler) Validate() error {
	if h.MaxBody < 0 {
		return fmt.Errorf("max_body must not be negative")
	}
	if err := identity.Validate(h.OrgHeader, h.OrgKeys, h.UnknownKeys); err != nil {
		return err
	}
	if len(h.MetricsOrgs) > 0 && !h.PerOrgMetrics {
		return fmt.Errorf("metrics_orgs needs per_org_metrics")
	}
	// Placeholders known now ({env.*}) are resolved for the check; the
	// value is checked again once resolved in Provision.
	if _, err := keyprefix.Resolve(caddy.NewReplacer(), h.KeyPrefix); err != nil {
		return err
	}
	if len(h.Redis) > 0 && !strings.Contains(strings.Join(h.Redis, ""), "{") {
		// With placeholders the URLs are checked when they are resolved.
		if err := redispool.Validate(h.Redis); err != nil {
			return fmt.Errorf("redis: %v", err)
		}
	}
	return nil
}

// Cleanup releases the shared state this config held; state still used by
// a newer config (buckets, breakers, the Redis client) lives on. Caddy calls
// it on a reload while the old servers still finish their requests, so the
// release waits for the last request in this handler: their settlements,
// holds and review entries go out through queues that are still open. What
// the release finds wrong is logged, since Cleanup has returned by then.
func (h *Handler) Cleanup() error {
	h.unregister()
	h.gate.Retire(func() {
		if err := h.releaseShared(); err != nil {
			h.logger.Error("releasing the config's shared state", zap.Error(err))
		}
	})
	return nil
}

func (h *Handler) releaseShared() error {
	if h.router != nil {
		h.router.Close()
	}
	if h.breakers != nil {
		h.breakers.Close()
	}
	if h.cache != nil {
		_ = h.cache.Close()
	}
	if h.limiter != nil {
		_ = h.limiter.Close()
	}
	if h.release != nil {
		return h.release()
	}
	return nil
}

// ServeHTTP authenticates the request, then inspects evaluation calls in
// full and lets everything else through with only the org's request bucket.
// What it decides is in the request's placeholders and trace as it goes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if !h.gate.Enter() {
		// Rare: a connection the old server was still reading when the
		// reload began. Its policies send their writes at once instead
		// of queueing them, on a Redis client that may be closed.
		h.logger.Warn("request reached a config already released by a reload")
	}
	defer h.gate.Exit()
	x := &exchange{start: h.now(), now: h.now, span: trace.SpanFromContext(r.Context()), replay: route.IsReplay(r.Header)}
	providePlaceholders(r, x)
	if !validPath(r.URL.Path) {
		defer x.annotate("")
		return x.refuse(w, answer{status: http.StatusBadRequest, reason: rejectInvalidPath, body: []byte(bodyInvalidPath)})
	}
	if isEvaluation(r) {
		return h.serveEvaluation(w, r, next, x)
	}
	defer x.annotate("")
	key, ok := identity.BearerKey(r.Header)
	if ok {
		x.org, ok = h.identity.Org(r, key)
	}
	if !ok {
		return x.refuse(w, answer{status: http.StatusUnauthorized, reason: rejectInvalidKey, body: []byte(bodyInvalidKey)})
	}
	if h.limiter != nil {
		d := h.admit(r.Context(), x, false, 0)
		if a, refused := limitAnswer(d); refused {
			h.metrics.limitRejected(d, h.orgLabel(x.org))
			return x.refuse(w, a)
		}
	}
	g := &headerGuard{ResponseWriter: w, owned: h.ownedPrefixes}
	err := next.ServeHTTP(g, r)
	g.done()
	if err != nil && !g.wrote && errorStatus(err) != statusClientClosed {
		// The upstream could not be reached: the product's answer, not
		// Caddy's empty one.
		return x.refuse(w, upstreamFailure(err))
	}
	return err
}

// validPath reports whether a decoded request path is free of control
// characters. The gateway decides which policies apply from the path, and
// the upstream's router must read it the same way; with control characters
// it may not: Starlette matches `^/v1/systemone$` against the decoded path,
// and Python's `$` matches before a trailing newline, so
// /v1/systemone%0A would reach the evaluation endpoint as an "other"
// request, past every policy. Everything else an upstream router could
// normalise into the evaluation path is normalised here first (see
// isEvaluation); a control character has no business in a path at all.
func validPath(p string) bool {
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// isEvaluation reports a POST to .../v1/systemone. The path is the decoded
// one (%2F is a slash) and is cleaned first, so that a trailing slash, a
// doubled slash or a dot segment cannot carry an evaluation past the checks
// to an upstream that normalizes paths (Starlette redirects a trailing
// slash; uvicorn decodes %2F).
func isEvaluation(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.HasSuffix(path.Clean(r.URL.Path), "/v1/systemone")
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
