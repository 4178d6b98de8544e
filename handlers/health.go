package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/redis/go-redis/v9"
)

// DefaultHealthTimeout bounds the readiness check's Redis PINGs.
const DefaultHealthTimeout = time.Second

// Health is the `systemone_health` directive: a readiness endpoint for a
// load balancer or an orchestrator's probe. It answers 200 when the
// `systemone` handlers of its config can serve as configured, and 503
// naming what is wrong otherwise, with a JSON body
//
//	{"ready": true|false, "checks": {"redis": "...", "alarms": "...", "breakers": {"<model>": "open"|"half-open"}}}
//
// The checks, over every `systemone` handler of the same config:
//   - redis: "ok" when each Redis the handlers use answers a PING (every
//     node of a Redis Cluster) within Timeout; "off" when none is
//     configured; else why not. Not ready otherwise.
//   - alarms: with `on_alarm human`, "ok" while the latest read of the
//     guarantee alarm set succeeded; "off" without it; else "never read"
//     (every question routes human) or "stale" (the last set read stays
//     in force), with why. Not ready otherwise.
//   - breakers: the models whose breaker is open or half-open. Reported,
//     never a reason to be unready: an overloaded upstream is overloaded
//     for every gateway in front of it, and taking them all out of a load
//     balancer would turn 529s into connection errors.
//
// It answers every request it is given and calls no next handler: mount it
// on a path of its own (`systemone_health /healthz`), ahead of `systemone`
// (the directive order does so), so a probe needs no API key.
type Health struct {
	// Timeout bounds the Redis check. Default 1s.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	config <-chan struct{} // identifies the config it belongs to (see liveHandlers)
}

// CaddyModule returns the Caddy module information.
func (Health) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.systemone_health",
		New: func() caddy.Module { return new(Health) },
	}
}

// Provision notes which config the endpoint belongs to.
func (h *Health) Provision(ctx caddy.Context) error {
	h.config = ctx.Done()
	if h.Timeout == 0 {
		h.Timeout = caddy.Duration(DefaultHealthTimeout)
	}
	return nil
}

// Validate checks the timeout.
func (h *Health) Validate() error {
	if h.Timeout < 0 {
		return fmt.Errorf("systemone_health: timeout %v: must not be negative", time.Duration(h.Timeout))
	}
	return nil
}

// Readiness is the body of a readiness answer.
type Readiness struct {
	Ready  bool            `json:"ready"`
	Checks ReadinessChecks `json:"checks"`
}

// ReadinessChecks are the checks of a readiness answer (see Health).
type ReadinessChecks struct {
	Redis    string            `json:"redis"`
	Alarms   string            `json:"alarms"`
	Breakers map[string]string `json:"breakers"`
}

// Values of a readiness check.
const (
	checkOK  = "ok"
	checkOff = "off"
)

// ServeHTTP answers the readiness of the config's systemone handlers.
func (h *Health) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(h.Timeout))
	defer cancel()
	report := readiness(ctx, liveHandlers(h.config))
	status := http.StatusOK
	if !report.Ready {
		status = http.StatusServiceUnavailable
	}
	body, _ := json.Marshal(report)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
	return nil
}

// readiness checks handlers: each Redis client once, each router's alarm
// watch, and the breakers. The first problem found in a check is its value.
func readiness(ctx context.Context, handlers []*Handler) Readiness {
	checks := ReadinessChecks{Redis: checkOff, Alarms: checkOff, Breakers: map[string]string{}}
	pinged := map[redis.UniversalClient]bool{}
	for _, h := range handlers {
		if h.redis != nil && !pinged[h.redis] {
			pinged[h.redis] = true
			problem := ""
			if err := ping(ctx, h.redis); err != nil {
				problem = "unreachable: " + err.Error()
			}
			note(&checks.Redis, problem)
		}
		if watched, problem := h.router.AlarmStatus(); watched {
			note(&checks.Alarms, problem)
		}
		for model, state := range h.breakers.NotClosed() {
			checks.Breakers[model] = state
		}
	}
	return Readiness{Ready: passed(checks.Redis) && passed(checks.Alarms), Checks: checks}
}

// note records the outcome of one check of something configured: its
// first problem, or "ok" while none was found.
func note(check *string, problem string) {
	switch {
	case problem != "" && passed(*check):
		*check = problem
	case *check == checkOff:
		*check = checkOK
	}
}

// passed reports a check with nothing wrong: ok, or off.
func passed(check string) bool { return check == checkOK || check == checkOff }

// ping asks the Redis of c to answer a PING: the server, or every node of
// a cluster.
func ping(ctx context.Context, c redis.UniversalClient) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
			return node.Ping(ctx).Err()
		})
	}
	return c.Ping(ctx).Err()
}

// live holds the provisioned systemone handlers by the config they belong
// to, named by its context's Done channel (one per loaded config), so that
// a readiness endpoint reports on its own config's handlers: during a
// reload the old config's are not the ones that will serve.
var live = struct {
	sync.Mutex
	byConfig map[<-chan struct{}][]*Handler
}{byConfig: map[<-chan struct{}][]*Handler{}}

// register adds a provisioned handler to its config's list.
func (h *Handler) register(ctx caddy.Context) {
	h.config = ctx.Done()
	live.Lock()
	defer live.Unlock()
	live.byConfig[h.config] = append(live.byConfig[h.config], h)
}

// unregister drops a handler whose config is being unloaded.
func (h *Handler) unregister() {
	live.Lock()
	defer live.Unlock()
	list := live.byConfig[h.config]
	for i, other := range list {
		if other == h {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(live.byConfig, h.config)
		return
	}
	live.byConfig[h.config] = list
}

// liveHandlers returns the provisioned handlers of a config.
func liveHandlers(config <-chan struct{}) []*Handler {
	live.Lock()
	defer live.Unlock()
	return append([]*Handler(nil), live.byConfig[config]...)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Health)(nil)
	_ caddy.Validator             = (*Health)(nil)
	_ caddyhttp.MiddlewareHandler = (*Health)(nil)
)
