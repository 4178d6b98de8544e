// Package handlers holds the systemone HTTP handler: the edge of the
// evaluation service. It reads and inspects each evaluation request, runs the
// policies in order, hands the unchanged request to the next handler
// (reverse_proxy), and reads the upstream's answer on its way back.
package handlers

import (
	"bytes"
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/internal/redispool"
	"github.com/systemone/systemone-gateway/policy/breaker"
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
	// trusted as the organization id. Default none: the org comes from the key.
	OrgHeader string `json:"org_header,omitempty"`
	// OrgKeys is a JSON file mapping the hex SHA-256 of API keys to org ids,
	// so several keys share one organization's buckets. Default none: each
	// key is an organization named by its fingerprint.
	OrgKeys string `json:"org_keys,omitempty"`
	// UnknownKeys is "own" (default: a key missing from org_keys is an org
	// of its own) or "reject" (401 at the edge).
	UnknownKeys string `json:"unknown_keys,omitempty"`
	// Limits are the per-organization token buckets.
	Limits *limits.Config `json:"limits,omitempty"`
	// Guardrails checks every evaluation request's state before forwarding.
	Guardrails *guardrails.Config `json:"guardrails,omitempty"`
	// Breaker opens per model on a run of upstream overloads.
	Breaker *breaker.Config `json:"breaker,omitempty"`
	// Route stamps X-Route from confidence thresholds pinned to versions.
	Route *route.Config `json:"route,omitempty"`
	// PerOrgMetrics labels the Prometheus metrics with the org id. Default
	// off: org ids are unbounded, and so would the metrics' cardinality be.
	PerOrgMetrics bool `json:"per_org_metrics,omitempty"`

	logger     *zap.Logger
	identity   *identity.Resolver
	limiter    *limits.Limiter
	guardrails *guardrails.Checker
	breakers   *breaker.Set
	router     *route.Router
	metrics    *metrics
	// ownedPrefixes are the header namespaces of the policies that are on.
	ownedPrefixes []string
	redis         redis.UniversalClient
	release       func() error
	now           func() time.Time
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.systemone",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision applies defaults, replaces placeholders in the string options,
// and acquires the shared state (Redis client, buckets, breakers) that
// outlives a config reload.
func (h *Handler) Provision(ctx caddy.Context) error {
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
	h.identity, err = identity.New(repl.ReplaceAll(h.OrgHeader, ""), repl.ReplaceAll(h.OrgKeys, ""), h.UnknownKeys)
	if err != nil {
		return err
	}
	keyPrefix := limits.DefaultKeyPrefix
	if h.Limits != nil {
		cfg := *h.Limits
		cfg.Redis = replaceAll(repl, cfg.Redis)
		if cfg.KeyPrefix = repl.ReplaceAll(cfg.KeyPrefix, ""); cfg.KeyPrefix != "" {
			keyPrefix = cfg.KeyPrefix
		}
		if len(cfg.Orgs) > 0 {
			cfg.Orgs = make(map[string]limits.Override, len(h.Limits.Orgs))
			for org, o := range h.Limits.Orgs {
				cfg.Orgs[repl.ReplaceAll(org, "")] = o
			}
		}
		if h.limiter, err = limits.New(cfg, h.logger.Named("limits")); err != nil {
			return fmt.Errorf("limits: %v", err)
		}
		if len(cfg.Redis) > 0 {
			// The guardrails cache and the review queue share the
			// limiter's Redis: the pool hands out the same client.
			if h.redis, h.release, err = redispool.Acquire(cfg.Redis); err != nil {
				return fmt.Errorf("limits: %v", err)
			}
		}
	}
	if h.Breaker != nil {
		if h.breakers, err = breaker.New(*h.Breaker, h.logger.Named("breaker")); err != nil {
			return fmt.Errorf("breaker: %v", err)
		}
	}
	if h.Guardrails != nil {
		cfg := *h.Guardrails
		cfg.URL = repl.ReplaceAll(cfg.URL, "")
		cfg.APIKey = repl.ReplaceAll(cfg.APIKey, "")
		cfg.Model = repl.ReplaceAll(cfg.Model, "")
		if h.guardrails, err = guardrails.New(cfg, h.redis, keyPrefix, h.logger.Named("guardrails")); err != nil {
			return fmt.Errorf("guardrails: %v", err)
		}
	}
	if h.Route != nil {
		cfg := *h.Route
		cfg.Pins = make([]route.Pin, len(h.Route.Pins))
		for i, pin := range h.Route.Pins {
			pin.Version = repl.ReplaceAll(pin.Version, "")
			if len(pin.Questions) > 0 {
				questions := make(map[string]float64, len(pin.Questions))
				for id, t := range pin.Questions {
					questions[repl.ReplaceAll(id, "")] = t
				}
				pin.Questions = questions
			}
			cfg.Pins[i] = pin
		}
		if cfg.Queue != nil {
			queue := *cfg.Queue
			queue.Stream = repl.ReplaceAll(queue.Stream, "")
			cfg.Queue = &queue
			if h.redis == nil {
				return fmt.Errorf("route: queue needs limits with redis")
			}
		}
		if h.router, err = route.New(cfg, h.redis, h.logger.Named("route")); err != nil {
			return fmt.Errorf("route: %v", err)
		}
	}
	h.ownedPrefixes = []string{prefixGateway}
	if h.router != nil {
		h.ownedPrefixes = append(h.ownedPrefixes, prefixRoute)
	}
	if h.guardrails != nil {
		h.ownedPrefixes = append(h.ownedPrefixes, prefixGuardrails)
	}
	if h.limiter != nil {
		h.ownedPrefixes = append(h.ownedPrefixes, prefixRateLimit)
	}
	return nil
}

func replaceAll(repl *caddy.Replacer, values []string) []string {
	out := make([]string, 0, len(values))
	for _, v := range values {
		out = append(out, strings.Fields(repl.ReplaceAll(v, ""))...)
	}
	return out
}

// Validate checks the settings that Provision does not already reject.
func (h *Handler) Validate() error {
	if h.MaxBody < 0 {
		return fmt.Errorf("max_body must not be negative")
	}
	return nil
}

// Cleanup releases the shared state this config held; state still used by
// a newer config (buckets, breakers, the Redis client) lives on.
func (h *Handler) Cleanup() error {
	if h.router != nil {
		h.router.Close()
	}
	if h.breakers != nil {
		h.breakers.Close()
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
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if isEvaluation(r) {
		return h.serveEvaluation(w, r, next)
	}
	key, ok := identity.BearerKey(r.Header)
	if !ok {
		answer{status: http.StatusUnauthorized, reason: rejectInvalidKey, body: []byte(bodyInvalidKey)}.write(w)
		return nil
	}
	org, ok := h.identity.Org(r, key)
	if !ok {
		answer{status: http.StatusUnauthorized, reason: rejectInvalidKey, body: []byte(bodyInvalidKey)}.write(w)
		return nil
	}
	if h.limiter != nil {
		d := h.limiter.AdmitRequest(r.Context(), org)
		if a, refused := limitAnswer(d); refused {
			a.write(w)
			return nil
		}
	}
	g := &headerGuard{ResponseWriter: w, owned: h.ownedPrefixes}
	err := next.ServeHTTP(g, r)
	g.done()
	return err
}

// isEvaluation reports a POST to .../v1/systemone. The path is cleaned
// first, so that a trailing slash or a dot segment cannot carry an
// evaluation past the checks to an upstream that normalizes paths.
func isEvaluation(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.HasSuffix(path.Clean(r.URL.Path), "/v1/systemone")
}

// buffers recycles request and response buffers across requests.
var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
