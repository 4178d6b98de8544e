// Package caddyfile registers the `systemone` Caddyfile directive, orders it
// before reverse_proxy, and parses it into the handler's JSON config.
package caddyfile

import (
	"math"
	"slices"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"

	"github.com/systemone/systemone-gateway/handlers"
	"github.com/systemone/systemone-gateway/policy/breaker"
	"github.com/systemone/systemone-gateway/policy/guardrails"
	"github.com/systemone/systemone-gateway/policy/limits"
	"github.com/systemone/systemone-gateway/policy/route"
)

// Register adds the directive and its place in Caddy's handler order, so a
// Caddyfile needs no `order` line.
func Register() {
	httpcaddyfile.RegisterHandlerDirective("systemone", parse)
	httpcaddyfile.RegisterDirectiveOrder("systemone", httpcaddyfile.Before, "reverse_proxy")
}

func parse(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	handler := new(handlers.Handler)
	if err := Unmarshal(h.Dispenser, handler); err != nil {
		return nil, err
	}
	return handler, nil
}

// Unmarshal parses a `systemone` directive:
//
//	systemone {
//		max_body     <size>
//		org_header   <header>
//		org_keys     <file>
//		unknown_keys own|reject
//		per_org_metrics
//		limits {
//			redis               <url> [<url>...]
//			key_prefix          <prefix>
//			requests_per_minute <n>
//			tokens_per_second   <n>
//			token_burst         <n>
//			org <id> {
//				requests_per_minute <n>
//				tokens_per_second   <n>
//				token_burst         <n>
//			}
//			on_store_error      local|allow|deny
//			store_timeout       <duration>
//		}
//		guardrails <base_url> {
//			api_key        <key>
//			model          <name>
//			timeout        <duration>
//			block          <level>...
//			review         <level>...
//			block_category <category>...
//			on_error       block|allow
//			cache          <duration>
//			mode           sequential|parallel
//		}
//		breaker {
//			failures  <n>
//			open_for  <duration>
//			half_open <n>
//		}
//		route {
//			pin <version> {
//				noul     <threshold>
//				choice   <threshold>
//				score    <threshold>
//				question <id> <threshold>
//			}
//			unpinned human|auto
//			queue <stream> [maxlen <n>] [include_content]
//		}
//	}
//
// Every block is optional; a missing block turns its policy off. Numbers,
// sizes and durations may be placeholders such as {env.NAME}, resolved when
// the Caddyfile is adapted; strings (URLs, keys, file names) keep their
// placeholders until the config is provisioned, so a secret given as
// {env.NAME} never appears in the adapted JSON.
func Unmarshal(d *caddyfile.Dispenser, h *handlers.Handler) error {
	d.Next() // the directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	if err := block(d, func(name string) (err error) {
		switch name {
		case "max_body":
			var size uint64
			if size, err = sizeArg(d); err == nil {
				if size == 0 || size > math.MaxInt64 {
					return d.Errf("max_body must be a positive size")
				}
				h.MaxBody = int64(size)
			}
		case "org_header":
			h.OrgHeader, err = stringArg(d)
		case "org_keys":
			h.OrgKeys, err = stringArg(d)
		case "unknown_keys":
			h.UnknownKeys, err = oneOf(d, "own", "reject")
		case "per_org_metrics":
			if d.NextArg() {
				return d.ArgErr()
			}
			h.PerOrgMetrics = true
		case "limits":
			h.Limits, err = parseLimits(d)
		case "guardrails":
			h.Guardrails, err = parseGuardrails(d)
		case "breaker":
			h.Breaker, err = parseBreaker(d)
		case "route":
			h.Route, err = parseRoute(d)
		default:
			return d.Errf("unknown subdirective %q", name)
		}
		return err
	}); err != nil {
		return err
	}
	if h.UnknownKeys == "reject" && h.OrgKeys == "" {
		return d.Err("unknown_keys reject needs org_keys")
	}
	return nil
}

func parseLimits(d *caddyfile.Dispenser) (*limits.Config, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	cfg := new(limits.Config)
	if err := block(d, func(name string) (err error) {
		switch name {
		case "redis":
			cfg.Redis = d.RemainingArgs()
			if len(cfg.Redis) == 0 {
				return d.ArgErr()
			}
		case "key_prefix":
			cfg.KeyPrefix, err = stringArg(d)
		case "requests_per_minute":
			cfg.RequestsPerMinute, err = countArg(d)
		case "tokens_per_second":
			cfg.TokensPerSecond, err = countArg(d)
		case "token_burst":
			cfg.TokenBurst, err = countArg(d)
		case "org":
			err = parseOrg(d, cfg)
		case "on_store_error":
			cfg.OnStoreError, err = oneOf(d, "local", "allow", "deny")
		case "store_timeout":
			cfg.StoreTimeout, err = durationArg(d)
		default:
			return d.Errf("unknown limits subdirective %q", name)
		}
		return err
	}, "org"); err != nil {
		return nil, err
	}
	return cfg, nil
}

func parseOrg(d *caddyfile.Dispenser, cfg *limits.Config) error {
	id, err := stringArg(d)
	if err != nil {
		return err
	}
	if _, dup := cfg.Orgs[id]; dup {
		return d.Errf("duplicate org %q", id)
	}
	var o limits.Override
	if err := block(d, func(name string) (err error) {
		switch name {
		case "requests_per_minute":
			o.RequestsPerMinute, err = countArg(d)
		case "tokens_per_second":
			o.TokensPerSecond, err = countArg(d)
		case "token_burst":
			o.TokenBurst, err = countArg(d)
		default:
			return d.Errf("unknown org subdirective %q", name)
		}
		return err
	}); err != nil {
		return err
	}
	if o == (limits.Override{}) {
		return d.Errf("org %q overrides nothing", id)
	}
	if cfg.Orgs == nil {
		cfg.Orgs = map[string]limits.Override{}
	}
	cfg.Orgs[id] = o
	return nil
}

// Contract names of guardrails levels and categories.
var (
	levels     = []string{"none", "low", "medium", "high"}
	categories = []string{
		"political_sensitive", "national_image", "violent_crime", "prompt_attack",
		"political_general", "minor_harm", "illegal_crime", "pornography",
		"discrimination", "abuse", "privacy", "commercial_violation", "other",
	}
)

func parseGuardrails(d *caddyfile.Dispenser) (*guardrails.Config, error) {
	cfg := new(guardrails.Config)
	if !d.NextArg() {
		return nil, d.Err("guardrails needs the service's base URL")
	}
	cfg.URL = d.Val()
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	if err := block(d, func(name string) (err error) {
		switch name {
		case "api_key":
			cfg.APIKey, err = stringArg(d)
		case "model":
			cfg.Model, err = stringArg(d)
		case "timeout":
			cfg.Timeout, err = durationArg(d)
		case "block":
			cfg.Block, err = listOf(d, levels)
		case "review":
			cfg.Review, err = listOf(d, levels)
		case "block_category":
			cfg.BlockCategory, err = listOf(d, categories)
		case "on_error":
			cfg.OnError, err = oneOf(d, "block", "allow")
		case "cache":
			cfg.Cache, err = durationArg(d)
		case "mode":
			cfg.Mode, err = oneOf(d, "sequential", "parallel")
		default:
			return d.Errf("unknown guardrails subdirective %q", name)
		}
		return err
	}); err != nil {
		return nil, err
	}
	if cfg.APIKey == "" {
		return nil, d.Err("guardrails needs api_key")
	}
	for _, level := range cfg.Block {
		if slices.Contains(cfg.Review, level) {
			return nil, d.Errf("guardrails level %q is in both block and review", level)
		}
	}
	return cfg, nil
}

func parseBreaker(d *caddyfile.Dispenser) (*breaker.Config, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	cfg := new(breaker.Config)
	if err := block(d, func(name string) (err error) {
		var n *int64
		switch name {
		case "failures":
			if n, err = positiveArg(d); err == nil {
				cfg.Failures = uint32(*n)
			}
		case "open_for":
			cfg.OpenFor, err = durationArg(d)
		case "half_open":
			if n, err = positiveArg(d); err == nil {
				cfg.HalfOpen = uint32(*n)
			}
		default:
			return d.Errf("unknown breaker subdirective %q", name)
		}
		return err
	}); err != nil {
		return nil, err
	}
	return cfg, nil
}

func parseRoute(d *caddyfile.Dispenser) (*route.Config, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	cfg := new(route.Config)
	if err := block(d, func(name string) (err error) {
		switch name {
		case "pin":
			err = parsePin(d, cfg)
		case "unpinned":
			cfg.Unpinned, err = oneOf(d, "human", "auto")
		case "queue":
			cfg.Queue, err = parseQueue(d)
		default:
			return d.Errf("unknown route subdirective %q", name)
		}
		return err
	}, "pin"); err != nil {
		return nil, err
	}
	return cfg, nil
}

func parsePin(d *caddyfile.Dispenser, cfg *route.Config) error {
	version, err := stringArg(d)
	if err != nil {
		return err
	}
	for _, p := range cfg.Pins {
		if p.Version == version {
			return d.Errf("version %q is pinned twice", version)
		}
	}
	pin := route.Pin{Version: version}
	if err := block(d, func(name string) (err error) {
		switch name {
		case "noul":
			pin.Noul, err = thresholdArg(d)
		case "choice":
			pin.Choice, err = thresholdArg(d)
		case "score":
			pin.Score, err = thresholdArg(d)
		case "question":
			var id string
			var t *float64
			if id, err = stringArg(d); err != nil {
				return err
			}
			if t, err = thresholdArg(d); err != nil {
				return err
			}
			if _, dup := pin.Questions[id]; dup {
				return d.Errf("question %q has two thresholds in pin %q", id, version)
			}
			if pin.Questions == nil {
				pin.Questions = map[string]float64{}
			}
			pin.Questions[id] = *t
		default:
			return d.Errf("unknown pin subdirective %q", name)
		}
		return err
	}, "question"); err != nil {
		return err
	}
	cfg.Pins = append(cfg.Pins, pin)
	return nil
}

func parseQueue(d *caddyfile.Dispenser) (*route.Queue, error) {
	stream, err := stringArg(d)
	if err != nil {
		return nil, err
	}
	q := &route.Queue{Stream: stream}
	for d.NextArg() {
		switch d.Val() {
		case "maxlen":
			if q.MaxLen != 0 {
				return nil, d.Err("duplicate maxlen")
			}
			v, err := resolvedArg(d)
			if err != nil {
				return nil, err
			}
			if q.MaxLen, err = strconv.ParseInt(v, 10, 64); err != nil || q.MaxLen < 1 {
				return nil, d.Errf("maxlen %q is not a whole number >= 1", v)
			}
		case "include_content":
			q.IncludeContent = true
		default:
			return nil, d.Errf("queue takes a stream, then maxlen <n> and include_content, not %q", d.Val())
		}
	}
	return q, nil
}

// block calls fn with the name of each subdirective in the block at the
// dispenser's nesting, refusing one given twice unless it is repeatable.
func block(d *caddyfile.Dispenser, fn func(name string) error, repeatable ...string) error {
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if seen[name] && !slices.Contains(repeatable, name) {
			return d.Errf("duplicate %s", name)
		}
		seen[name] = true
		if err := fn(name); err != nil {
			return err
		}
	}
	return nil
}

// stringArg reads exactly one argument, kept verbatim (placeholders included).
func stringArg(d *caddyfile.Dispenser) (string, error) {
	if !d.NextArg() {
		return "", d.ArgErr()
	}
	v := d.Val()
	if v == "" {
		return "", d.Errf("%s must not be empty", lastDirective(d))
	}
	return v, nil
}

// lastDirective names the subdirective whose argument is being read.
func lastDirective(d *caddyfile.Dispenser) string {
	d.Prev()
	name := d.Val()
	d.Next()
	return name
}

// resolvedArg reads one argument with placeholders such as {env.NAME}
// replaced, for values that must be parsed now.
func resolvedArg(d *caddyfile.Dispenser) (string, error) {
	if !d.NextArg() {
		return "", d.ArgErr()
	}
	return caddy.NewReplacer().ReplaceAll(d.Val(), ""), nil
}

func oneOf(d *caddyfile.Dispenser, allowed ...string) (string, error) {
	v, err := resolvedArg(d)
	if err != nil {
		return "", err
	}
	if !slices.Contains(allowed, v) {
		return "", d.Errf("%q is not one of %v", v, allowed)
	}
	if d.NextArg() {
		return "", d.ArgErr()
	}
	return v, nil
}

// listOf reads one or more arguments, each one of allowed.
func listOf(d *caddyfile.Dispenser, allowed []string) ([]string, error) {
	var out []string
	for d.NextArg() {
		v := caddy.NewReplacer().ReplaceAll(d.Val(), "")
		if !slices.Contains(allowed, v) {
			return nil, d.Errf("%q is not one of %v", v, allowed)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, d.ArgErr()
	}
	return out, nil
}

// countArg reads a non-negative whole number (0 turns a bucket off).
func countArg(d *caddyfile.Dispenser) (*int64, error) {
	v, err := resolvedArg(d)
	if err != nil {
		return nil, err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return nil, d.Errf("%q is not a whole number >= 0", v)
	}
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	return &n, nil
}

func positiveArg(d *caddyfile.Dispenser) (*int64, error) {
	n, err := countArg(d)
	if err != nil {
		return nil, err
	}
	if *n == 0 || *n > math.MaxUint32 {
		return nil, d.Errf("%d is not a whole number from 1 to %d", *n, uint32(math.MaxUint32))
	}
	return n, nil
}

func thresholdArg(d *caddyfile.Dispenser) (*float64, error) {
	v, err := resolvedArg(d)
	if err != nil {
		return nil, err
	}
	t, err := strconv.ParseFloat(v, 64)
	if err != nil || !(t >= 0 && t <= 1) {
		return nil, d.Errf("threshold %q is not a number from 0 to 1", v)
	}
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	return &t, nil
}

func durationArg(d *caddyfile.Dispenser) (caddy.Duration, error) {
	v, err := resolvedArg(d)
	if err != nil {
		return 0, err
	}
	dur, err := caddy.ParseDuration(v)
	if err != nil || dur <= 0 {
		return 0, d.Errf("%q is not a positive duration", v)
	}
	if d.NextArg() {
		return 0, d.ArgErr()
	}
	return caddy.Duration(dur), nil
}

func sizeArg(d *caddyfile.Dispenser) (uint64, error) {
	v, err := resolvedArg(d)
	if err != nil {
		return 0, err
	}
	size, err := humanize.ParseBytes(v)
	if err != nil {
		return 0, d.Errf("%q is not a size (such as 4MiB or 512KB)", v)
	}
	if d.NextArg() {
		return 0, d.ArgErr()
	}
	return size, nil
}
