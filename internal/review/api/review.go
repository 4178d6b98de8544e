// Package api is the `systemone_review` Caddy handler: the review API and
// page over the gateway's review stream. People read the entries the
// `systemone` handler queued (answers routed to a human and those drawn by
// the audit), label each question, and export the labels for
// `systemone-gateway calibrate`. Labels live in Redis apart from the stream,
// so they outlive its MAXLEN trimming.
package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/systemone/systemone-gateway/internal/drain"
	"github.com/systemone/systemone-gateway/internal/keyprefix"
	"github.com/systemone/systemone-gateway/internal/redispool"
	"github.com/systemone/systemone-gateway/internal/review/calibrate"
)

// DefaultKeyPrefix is the key prefix KeyPrefix defaults to, the same as the
// `systemone` handler's.
const DefaultKeyPrefix = keyprefix.Default

// storeTimeout bounds each Redis round trip of a request; a person is
// waiting, but a Redis that needs longer than this is in trouble.
const storeTimeout = 5 * time.Second

func init() {
	caddy.RegisterModule(Handler{})
	httpcaddyfile.RegisterHandlerDirective("systemone_review", parseCaddyfile)
	// Like `systemone`: no `order` line needed. It answers everything under
	// its mount, so in a route of its own its place only matters next to
	// reverse_proxy.
	httpcaddyfile.RegisterDirectiveOrder("systemone_review", httpcaddyfile.Before, "reverse_proxy")
}

// Handler is the `systemone_review` directive: a terminal handler that
// serves the review API and page. It answers every request under its mount
// (404 for unknown paths) and never calls the next handler. Paths are read
// relative to the mount: put it under `handle_path /review/*`, which strips
// the prefix. It has no authentication of its own: protect it with
// `basic_auth` or `forward_auth`.
type Handler struct {
	// Redis is the gateway's Redis: one redis:// or rediss:// URL, or the
	// seed nodes of a Redis Cluster. Required.
	Redis []string `json:"redis,omitempty"`
	// KeyPrefix starts every key the handler keeps labels in. Default
	// "systemone:", the gateway's.
	KeyPrefix string `json:"key_prefix,omitempty"`
	// Stream is the review stream the gateway's `queue` writes to, named
	// exactly as there. Required.
	Stream string `json:"stream,omitempty"`
	// Monitor watches the guarantee live (see Monitor). Default off.
	Monitor *Monitor `json:"monitor,omitempty"`
	// CorrectWithin is the correction window: an audited entry is
	// evidence (for /progress and the monitor) once all its audited
	// questions are labelled, or it is passed, and its newest label is
	// this old; a correction after it is counted as late. 0 takes labels
	// as final at once. Default 24h (calibrate.DefaultCorrectWithin).
	CorrectWithin *caddy.Duration `json:"correct_within,omitempty"`
	// MaxQuestions is the most questions of one group an entry can hold,
	// fixed in advance: /progress and the monitor weigh each entry's
	// evidence against it, and refuse (and count) an entry above it.
	// Default 5 (calibrate.DefaultMaxQuestions).
	MaxQuestions int `json:"max_questions,omitempty"`

	logger  *zap.Logger
	monitor *guaranteeMonitor // nil without Monitor
	store   *store
	labels  *prometheus.CounterVec
	release func() error
	// gate holds the Redis client for the requests still in this config
	// after a reload has retired it (see Cleanup).
	gate *drain.Gate
	// now is the clock of label timestamps and of the monitor; nil is
	// time.Now.
	now func() time.Time
	// maxScan and listStep bound a filtered page's scan (0 is
	// defaultMaxScan, defaultListStep).
	maxScan  int
	listStep int64
}

// clock returns the handler's clock.
func (h *Handler) clock() func() time.Time {
	if h.now == nil {
		return time.Now
	}
	return h.now
}

// correctWithin returns CorrectWithin, defaulted.
func (h *Handler) correctWithin() time.Duration {
	if h.CorrectWithin == nil {
		return calibrate.DefaultCorrectWithin
	}
	return time.Duration(*h.CorrectWithin)
}

// maxQuestions returns MaxQuestions, defaulted.
func (h *Handler) maxQuestions() int { return cmp.Or(h.MaxQuestions, calibrate.DefaultMaxQuestions) }

// scanBounds returns maxScan and listStep, defaulted.
func (h *Handler) scanBounds() (int, int64) {
	return cmp.Or(h.maxScan, defaultMaxScan), cmp.Or(h.listStep, defaultListStep)
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.systemone_review",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision resolves placeholders, applies defaults, registers the metric
// and acquires the shared Redis client.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.gate = new(drain.Gate)
	h.logger = ctx.Logger()
	repl := caddy.NewReplacer()
	var urls []string
	for _, u := range h.Redis {
		// A placeholder may hold several URLs, as with `systemone`.
		urls = append(urls, strings.Fields(repl.ReplaceAll(u, ""))...)
	}
	stream := repl.ReplaceAll(h.Stream, "")
	prefix, prefixErr := keyprefix.Resolve(repl, h.KeyPrefix)
	if len(urls) == 0 {
		return errors.New("redis: required (the gateway's Redis)")
	}
	if stream == "" {
		return errors.New("stream: required (the gateway's review stream)")
	}
	if prefixErr != nil {
		return prefixErr
	}
	if err := redispool.Validate(urls); err != nil {
		return fmt.Errorf("redis: %v", err)
	}
	var err error
	if h.labels, err = registerLabels(ctx.GetMetricsRegistry()); err != nil {
		return fmt.Errorf("registering metrics: %v", err)
	}
	// A client of its own: a page load waiting on a slow read must never
	// hold a connection the gateway's admissions wait for.
	client, release, err := redispool.AcquireFor("review", urls)
	if err != nil {
		return fmt.Errorf("redis: %v", err)
	}
	h.release = release
	h.store = newStore(client, prefix, stream)
	if h.Monitor != nil {
		if err := h.startMonitor(ctx.GetMetricsRegistry()); err != nil {
			return fmt.Errorf("monitor: %v", err)
		}
	}
	return nil
}

// Cleanup releases this config's hold on the shared Redis client once its
// last request is out: on a reload, Caddy calls it while the old servers
// still finish their requests, and a label being written must not meet a
// closed client.
func (h *Handler) Cleanup() error {
	if h.monitor != nil {
		h.monitor.close()
	}
	h.gate.Retire(func() {
		if h.release == nil {
			return
		}
		if err := h.release(); err != nil {
			h.logger.Error("releasing the Redis client", zap.Error(err))
		}
	})
	return nil
}

// ServeHTTP routes by the path under the mount. Every answer is written
// here, errors included, as `{"detail": ...}`: the handler is terminal.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	h.gate.Enter() // a request after the release may meet a closed client: store_unavailable
	defer h.gate.Exit()
	p := r.URL.Path
	switch {
	case p == "/" || p == "":
		if allow(w, r, http.MethodGet) {
			h.servePage(w, r)
		}
	case p == "/review.js" || p == "/guarantee.js" || p == "/review.css":
		if allow(w, r, http.MethodGet) {
			serveAsset(w, r, p[1:])
		}
	case p == "/items":
		if allow(w, r, http.MethodGet) {
			h.listItems(w, r)
		}
	case p == "/labels":
		if allow(w, r, http.MethodGet) {
			h.exportLabels(w, r)
		}
	case p == "/progress":
		if allow(w, r, http.MethodGet) {
			h.serveProgress(w, r)
		}
	case p == "/guarantee" || strings.HasPrefix(p, "/guarantee/"):
		h.serveGuarantee(w, r)
	case strings.HasPrefix(p, "/items/"):
		rest := p[len("/items/"):]
		if id, ok := strings.CutSuffix(rest, "/labels"); ok && id != "" && !strings.Contains(id, "/") {
			if allow(w, r, http.MethodPut) {
				h.putLabels(w, r, id)
			}
			return nil
		}
		if rest == "" || strings.Contains(rest, "/") {
			writeDetail(w, http.StatusNotFound, "not_found")
			return nil
		}
		if allow(w, r, http.MethodGet) {
			h.getItem(w, r, rest)
		}
	default:
		writeDetail(w, http.StatusNotFound, "not_found")
	}
	return nil
}

// allow answers 405 when r's method is not method (GET also allows HEAD),
// and reports whether the request may go on.
func allow(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method || method == http.MethodGet && r.Method == http.MethodHead {
		return true
	}
	allowed := method
	if method == http.MethodGet {
		allowed = "GET, HEAD"
	}
	w.Header().Set("Allow", allowed)
	writeDetail(w, http.StatusMethodNotAllowed, "method_not_allowed")
	return false
}

// storeFailed answers a Redis failure: 503, like the gateway's own
// rate_limiter_unavailable, with the error in the log only.
func (h *Handler) storeFailed(w http.ResponseWriter, op string, err error) {
	if errors.Is(err, context.Canceled) {
		// The client left; nobody reads the answer.
		return
	}
	if ce := h.logger.Check(zap.WarnLevel, "review store failed"); ce != nil {
		ce.Write(zap.String("op", op), zap.String("stream", h.store.stream), zap.Error(err))
	}
	w.Header().Set("Retry-After", "1")
	writeDetail(w, http.StatusServiceUnavailable, "store_unavailable")
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
