package review

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	handler := new(Handler)
	if err := handler.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	return handler, nil
}

// UnmarshalCaddyfile parses a `systemone_review` directive:
//
//	systemone_review {
//		redis      <url> [<url>...]
//		key_prefix <prefix>
//		stream     <name>
//		monitor    <target> [alpha <a>]
//	}
//
// redis and stream are required (Provision says so, after placeholders are
// resolved); key_prefix defaults to "systemone:". monitor watches the
// guarantee live (see Monitor): target in (0, 1), alpha in (0, 1), default
// 0.05; default off. Its numbers accept placeholders known at adapt time,
// such as {env.NAME}.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for d.NextBlock(0) {
		name := d.Val()
		if seen[name] {
			return d.Errf("duplicate %s", name)
		}
		seen[name] = true
		switch name {
		case "redis":
			h.Redis = d.RemainingArgs()
			if len(h.Redis) == 0 {
				return d.ArgErr()
			}
		case "key_prefix", "stream":
			if !d.NextArg() {
				return d.ArgErr()
			}
			v := d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
			if v == "" {
				return d.Errf("%s: empty", name)
			}
			if name == "stream" {
				h.Stream = v
			} else {
				h.KeyPrefix = v
			}
		case "monitor":
			m, err := parseMonitor(d)
			if err != nil {
				return err
			}
			h.Monitor = m
		default:
			return d.Errf("unknown subdirective %q (want redis, key_prefix, stream or monitor)", name)
		}
		if d.NextBlock(1) {
			return d.Errf("%s takes no block", name)
		}
	}
	return nil
}

// parseMonitor parses `monitor <target> [alpha <a>]`.
func parseMonitor(d *caddyfile.Dispenser) (*Monitor, error) {
	number := func(what string) (float64, error) {
		if !d.NextArg() {
			return 0, d.ArgErr()
		}
		v := caddy.NewReplacer().ReplaceAll(d.Val(), "")
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, d.Errf("monitor %s %q is not a number", what, v)
		}
		return f, nil
	}
	m := new(Monitor)
	var err error
	if m.Target, err = number("target"); err != nil {
		return nil, err
	}
	if d.NextArg() {
		if d.Val() != "alpha" {
			return nil, d.Errf("monitor takes a target, then alpha <a>, not %q", d.Val())
		}
		if m.Alpha, err = number("alpha"); err != nil {
			return nil, err
		}
		if !(m.Alpha > 0 && m.Alpha < 1) { // 0 would read as the default
			return nil, d.Errf("monitor alpha %v is outside (0, 1)", m.Alpha)
		}
		if d.NextArg() {
			return nil, d.ArgErr()
		}
	}
	if err := m.params().Validate(); err != nil {
		return nil, d.Err(err.Error())
	}
	return m, nil
}

var _ caddyfile.Unmarshaler = (*Handler)(nil)
